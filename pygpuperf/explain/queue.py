"""The step replayed as a host queue feeding a device queue (a max-plus model of the launches).

The host does its own work between launch calls and waits at each synchronization until the device
has run everything launched before it; the device runs kernels in launch order, each no earlier than
its launch landed (the launch latency after the call) and than the previous kernel's end plus the
back-to-back gap. Steps follow one another as in a loop that does not synchronize per step, so the
host may run ahead of the device across steps; the step time is the device's period in steady state.

The profiled host is slower than the unprofiled one (the profiler records every op), so its work
is scaled to replay the step as timed without the profiler. On a step the host paces, the scale is the
one that replays the step's time (on a step that syncs, no more than the host's own time per step, with
the rest of the step's time in its syncs' return). On a device-bound step the host's pace does not show in the step's
time; its scale is then the host's own time per step over the profiled host's work, at most what still
replays the step as timed. That time is taken at the step's batch, each step called after the device
drained, where the step has no sync of its own (gpt-100m on an H200: 30.0 ms a step at batch 16, 22.6 at
batch 1), else from the step at batch 1, where the device's work is small beside the host's. Where the
optimizer's step was timed too, its launches take their own scale: the profiler's cost is per recorded op, and it
slows an optimizer's Python over its parameters less than a forward's or backward's many small ops. A fix
that changes what the kernels cost, or that adds or removes a synchronization, is the same replay with
those changes; where the host's launches hide a device saving, or a synchronization exposes the host's
work, the replay sees it where a sum over kernels does not.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from pygpuperf.explain.model import KernelRecord

STEPS = 4  # steps replayed; the period is taken between the last two
_FIT_TOLERANCE = 0.01  # a step within 1 % of its device-only replay is device-bound: its host's pace is not seen
_MAX_SCALE = 2.0  # the unprofiled host no slower than twice the profiled one
_MIN_LAUNCHED = 0.9  # the share of kernels with a launch time the replay needs
# A host-paced step's median kernel starts within this many launch latencies of its launch call; a host far
# ahead of the device is held back by the launch queue, and its launch times then follow the device. A step
# that syncs drains the device each time: after the sync its host paces the launches, however far ahead of
# its kernels it ran before.
_HOST_PACED_LEAD = 10.0


@dataclass(frozen=True)
class Event:
    """A host event of the step: a kernel launch (`kernel`, its index), a synchronization (`sync`), or the
    host's work after its last launch (neither)."""

    work_us: float  # the host's own work before it, since the previous event, as profiled
    kernel: int | None = None
    sync: bool = False
    wait_us: float = 0.0  # a sync: from the device's last end to the host going on, as profiled
    optimizer: bool = False  # a launch of the optimizer's step: its work is paced by the optimizer's own scale


@dataclass(frozen=True)
class HostQueue:
    """The step's host events in order, the device's terms and the host's scale."""

    events: tuple[Event, ...]
    latency_us: float  # launch call to kernel start on an idle device
    gap_us: float  # device idle between two back-to-back kernels
    lead_us: float  # the median kernel's start after its launch call, as profiled
    scale: float = 1.0  # unprofiled over profiled host work
    optimizer_ratio: float = 1.0  # the optimizer's events' scale over the others'

    def period_us(self, durations: Sequence[float], scale: float | None = None,
                  without_syncs: frozenset[int] = frozenset(), sync_before: int | None = None) -> float:
        """The step's steady-state time with kernel i taking durations[i] (its exclusive time), the syncs at
        the events `without_syncs` left out and, with `sync_before`, a sync added before that event's host
        work (the host waits, then does the work the event's launch comes after)."""
        s = self.scale if scale is None else scale
        host = device = 0.0
        ends: list[float] = []
        for _ in range(STEPS):
            for n, ev in enumerate(self.events):
                if n == sync_before:
                    host = max(host, device + self._return_us())
                host += ev.work_us * s * (self.optimizer_ratio if ev.optimizer else 1.0)
                if ev.sync:
                    if n not in without_syncs:  # wait for the device to drain, then go on
                        host = max(host, device + ev.wait_us)
                elif ev.kernel is not None:
                    d = durations[ev.kernel]
                    start = max(host + self.latency_us, device + (self.gap_us if d > 0 else 0.0))
                    device = start + d
            ends.append(max(device, host))
        return ends[-1] - ends[-2]

    def _return_us(self) -> float:
        waits = [ev.wait_us for ev in self.events if ev.sync]
        return statistics.median(waits) if waits else self.latency_us

    def host_work_us(self) -> float:
        """The host's own work per step, as profiled."""
        return sum(ev.work_us for ev in self.events)

    def fitted(self, durations: Sequence[float], wall_us: float, host_us: float | None = None) -> HostQueue | None:
        """This queue with the host's scale that replays the step as timed without the profiler (`wall_us`),
        where the host's pace shows in it; None for a device-bound step (its host's work is hidden, and
        its profiled launch times follow the device where the launch queue held the host back), unless it
        syncs (fp16's loss scaling: gpt-100m's fix back to bf16 from a profile whose host ran 24 ms ahead of
        its kernels before the sync, 70.21 ms predicted so fitted against 70.12 measured, 71.89 otherwise).
        A step that syncs shows its host only in the stretch after each sync, so one scale fitted to that
        stretch can give the host more work per step than it has: at most `host_us` (the host's own time
        per step, timed without the profiler), and what that leaves of the step's time goes to the syncs'
        return (:meth:`_returning_later`). Unbounded, NCHW ResNet-50 AMP's 2.8 ms above its kernels gave its
        host 48.0 ms a step where it was timed at 31.4: its channels_last fix was predicted host-bound, at
        55.46 ms against 44.26 measured."""
        ahead = self.lead_us > _HOST_PACED_LEAD * max(self.latency_us, 1.0)
        syncs = any(ev.sync for ev in self.events)
        if self.host_work_us() <= 0 or wall_us <= self.period_us(durations, 0.0) * (1 + _FIT_TOLERANCE) or \
                (ahead and not syncs):
            return None
        if not syncs or not host_us:
            return self._scaled_within(durations, wall_us, _MAX_SCALE)
        most = min(_MAX_SCALE, host_us / self.host_work_us())
        return self._scaled_within(durations, wall_us, most)._returning_later(durations, wall_us)

    def paced(self, durations: Sequence[float], wall_us: float, host_us: float,
              optimizer_us: float | None = None) -> HostQueue | None:
        """This queue with the host's scale of a device-bound step, whose pace the profile hides: the host's
        work per step is `host_us` (timed without the profiler: at the step's batch, each step after a drain,
        or the step at batch 1, where the device's work is small beside the host's), `optimizer_us` of it in the optimizer's step where that was timed (its
        events then take their own scale), at most what still replays the step within its time as timed
        (`wall_us`). None where the device alone does not replay it."""
        work, limit = self.host_work_us(), wall_us * (1 + _FIT_TOLERANCE)
        if work <= 0 or host_us <= 0 or self.period_us(durations, 0.0) > limit:
            return None
        paced, scale = self, host_us / work
        in_optimizer = sum(ev.work_us for ev in self.events if ev.optimizer)
        if optimizer_us and 0 < in_optimizer < work and optimizer_us < host_us:
            scale = (host_us - optimizer_us) / (work - in_optimizer)
            paced = replace(self, optimizer_ratio=optimizer_us / in_optimizer / scale)
        return paced._scaled_within(durations, limit, min(scale, _MAX_SCALE))

    def _returning_later(self, durations: Sequence[float], wall_us: float) -> HostQueue:
        """This queue with each sync's return delayed alike by what replays the step in `wall_us` (bisected;
        as it is where the replay takes that long already): the host's work after a sync, beyond its scale
        (on an H200, gpt-100m's fp16 step after the scaler's sync: the optimizer's first kernel 1.08 ms late,
        its next forward's attention kernels 70-260 µs behind their launches)."""
        def later(extra_us: float) -> HostQueue:
            return replace(self, events=tuple(replace(ev, wait_us=ev.wait_us + extra_us) if ev.sync else ev
                                              for ev in self.events))
        short = wall_us - self.period_us(durations)
        if short <= 0:
            return self
        # a step's syncs return later by at most what the replay falls short
        return later(_largest_within(lambda extra: later(extra).period_us(durations) <= wall_us, short))

    def _scaled_within(self, durations: Sequence[float], limit_us: float, most: float) -> HostQueue:
        """This queue at the largest host scale up to `most` whose replay takes at most `limit_us` (bisected)."""
        return replace(self, scale=_largest_within(lambda scale: self.period_us(durations, scale) <= limit_us, most))


def _largest_within(fits: Callable[[float], bool], most: float) -> float:
    """The largest x in [0, most] for which `fits(x)` holds, `fits` holding below any x where it holds (bisected)."""
    if fits(most):
        return most
    lo, hi = 0.0, most
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def build(records: Sequence[KernelRecord], window_us: tuple[float, float] | None,
          syncs: Sequence[tuple[float, float]], gap_us: float) -> HostQueue | None:
    """The step's host queue (scale 1) from its profiled kernels (with their launch times), its window
    and its host syncs; None when too few kernels have a launch time."""
    launched = sorted((i for i, r in enumerate(records) if r.launch_us is not None),
                      key=lambda i: records[i].launch_us)
    if not records or len(launched) < _MIN_LAUNCHED * len(records):
        return None
    first = records[launched[0]].launch_us
    start = min(window_us[0], first) if window_us else first  # a host ahead launched before its window
    timeline = sorted([(records[i].launch_us, 1, i) for i in launched] + [(a, 0, b) for a, b in syncs])
    events: list[Event] = []
    cursor = start
    for t, is_launch, payload in timeline:
        work = max(t - cursor, 0.0)
        if is_launch:
            events.append(Event(work, kernel=payload, optimizer=records[payload].phase == "optimizer"))
            cursor = max(cursor, t)
        else:  # a sync from t to payload: the host goes on `wait` after the device ran what came before
            drained = max((r.end_us for r in records if r.launch_us is not None and r.launch_us < t), default=t)
            events.append(Event(work, sync=True, wait_us=max(payload - max(drained, t), 0.0)))
            cursor = max(cursor, payload)
    last_end = max(r.end_us for r in records)
    if window_us and window_us[1] > last_end + gap_us:  # the window ends at the next step's host start
        events.append(Event(max(window_us[1] - cursor, 0.0)))
    leads = [records[i].start_us - records[i].launch_us for i in launched]
    # The previous step's kernels end by this step's window start (windows tile the device's time): a first
    # launch before it was queued behind them.
    before = window_us[0] if window_us else float("-inf")
    prior_end = list(itertools.accumulate((records[i].end_us for i in launched[:-1]), max, initial=before))
    # launched while the device was idle: the launch latency alone
    idle = [lead for lead, i, end in zip(leads, launched, prior_end) if records[i].launch_us > end]
    latency = statistics.median(idle) if idle else gap_us
    return HostQueue(tuple(events), max(latency, 0.0), gap_us, statistics.median(leads))
