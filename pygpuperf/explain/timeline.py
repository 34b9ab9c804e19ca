"""A step's wall time split into kernel busy time and idle time by cause.

Busy is the union of kernel intervals over all streams (two overlapping kernels count
once). Every idle gap between busy intervals is split at the launch call of the kernel
that ends it:
- before the launch call started, the device waited for the host: host-bound, or sync
  when a host synchronization overlaps the gap (the host was held waiting on the device,
  so it had queued nothing ahead and the wait until it launched again is the sync's cost);
- from the launch call to the kernel's start, the work had been issued but had not landed:
  launch gap (launch latency exposed, typically between short back-to-back kernels).
A gap after the last kernel of the step has no next kernel: host-bound, or sync when a
synchronization overlaps it. A kernel of unknown launch time leaves its whole gap to the
host side. The parts add up to wall - busy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from pygpuperf.explain.model import Idle, KernelRecord, Timeline


@dataclass
class Gap:
    """One idle interval of the device inside a step, split by cause."""

    start_us: float
    end_us: float
    host_bound_us: float = 0.0
    launch_gap_us: float = 0.0
    sync_us: float = 0.0
    next_kernel: str = ""  # the kernel that ended the gap ("" at the step end)

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


def _busy(records: Iterable[KernelRecord], start: float, end: float) -> list[tuple[float, float, float | None, str]]:
    """Union of kernel intervals clipped to [start, end): (begin, end, launch, name) per interval,
    where launch/name belong to the kernel that opens it (the earliest launch among ties)."""
    spans = []
    for r in records:
        lo, hi = max(r.start_us, start), min(r.end_us, end)
        if hi > lo:
            spans.append((lo, hi, r.launch_us, r.name))
    spans.sort(key=lambda s: (s[0], s[2] if s[2] is not None else float("inf")))
    merged: list[list] = []
    for lo, hi, launch, name in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi, launch, name])
    return [(lo, hi, launch, name) for lo, hi, launch, name in merged]


def _overlaps(a: float, b: float, intervals: Sequence[tuple[float, float]]) -> bool:
    return any(s < b and e > a for s, e in intervals)


def gaps(
    records: Sequence[KernelRecord],
    step_start_us: float,
    step_end_us: float,
    syncs: Sequence[tuple[float, float]] = (),
) -> list[Gap]:
    """The device's idle intervals in [step_start_us, step_end_us), each split by cause."""
    out: list[Gap] = []
    cursor = step_start_us
    for lo, hi, launch, name in _busy(records, step_start_us, step_end_us):
        if lo > cursor:
            out.append(_split(cursor, lo, launch, name, syncs))
        cursor = max(cursor, hi)
    if step_end_us > cursor:
        out.append(_split(cursor, step_end_us, None, "", syncs))
    return out


def _split(g0: float, g1: float, launch: float | None, name: str, syncs: Sequence[tuple[float, float]]) -> Gap:
    gap = Gap(g0, g1, next_kernel=name)
    host = g1 - g0 if launch is None else min(max(launch - g0, 0.0), g1 - g0)
    gap.launch_gap_us = (g1 - g0) - host
    if _overlaps(g0, g1, syncs):
        gap.sync_us = host
    else:
        gap.host_bound_us = host
    return gap


def timeline(
    records: Sequence[KernelRecord],
    step_start_us: float,
    step_end_us: float,
    syncs: Sequence[tuple[float, float]] = (),
) -> Timeline:
    """Busy time (kernel union over streams) and idle time by cause for one step window.

    `syncs` are host intervals spent in device synchronization (StepTrace.syncs).
    """
    wall = step_end_us - step_start_us
    busy = sum(hi - lo for lo, hi, _, _ in _busy(records, step_start_us, step_end_us))
    idle = Idle()
    for gap in gaps(records, step_start_us, step_end_us, syncs):
        idle.host_bound_us += gap.host_bound_us
        idle.launch_gap_us += gap.launch_gap_us
        idle.sync_us += gap.sync_us
    return Timeline(wall_us=wall, busy_us=busy, idle=idle)


def remove_profiler_overhead(line: Timeline, unprofiled_wall_us: float) -> Timeline:
    """`line` with the profiler's cost taken off its idle time, so its wall is the step timed without it.

    The profiler slows the host (it records every op), not the kernels, so the difference
    between the profiled and the unprofiled step comes off host-bound idle first, then launch
    gaps, then synchronization. A profiled step no slower than the unprofiled one is kept as is;
    an overhead larger than all idle time takes all of it.
    """
    overhead = line.wall_us - unprofiled_wall_us
    if overhead <= 0:
        return line
    idle = replace(line.idle)
    left = overhead
    for attr in ("host_bound_us", "launch_gap_us", "sync_us"):
        taken = min(getattr(idle, attr), left)
        setattr(idle, attr, getattr(idle, attr) - taken)
        left -= taken
    removed = overhead - left
    return Timeline(wall_us=line.wall_us - removed, busy_us=line.busy_us, idle=idle,
                    profiler_overhead_us=line.profiler_overhead_us + removed)
