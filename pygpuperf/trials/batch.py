"""How step time grows with the batch: a fixed cost per step plus a cost per sample, and where it stops fitting.

Step times measured at several batch sizes are fitted (least squares) as

    t(bs) = t_fixed + bs * t_sample

t_fixed is what a step costs whatever its batch (launch overhead, host work the GPU waits
for, per-step kernels such as the optimizer's); t_sample is the GPU's cost of one more
sample. Throughput bs / t(bs) rises toward the asymptote 1 / t_sample, and the share of it
reached is 1 - t_fixed / t(bs): the GPU saturates where t_fixed is a small share of the step.
A host-bound step overlaps host and GPU work (its time is nearer max(host, GPU) than their
sum), so the line is an approximation there; its rms error says how well it holds.

The largest batch that fits is found by growing the batch until a step runs out of memory,
then narrowing the bracket; on a CPU the search stops at a cap, since running out of host
memory swaps or ends the process rather than raising an error.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from pygpuperf.core.timing import synchronize
from pygpuperf.workloads.base import time_steps

# The GPU counts as saturated where the fixed cost is at most this share of the step
# (throughput within 10 % of the asymptote).
SATURATION_FIXED_SHARE = 0.10
# A second, stricter mark: throughput within 5 % of the asymptote.
NEAR_ASYMPTOTE = 0.95
# The memory search grows the batch at most to these sizes.
CPU_BATCH_CAP = 128
GPU_BATCH_CAP = 65536
# After doubling brackets the limit, the bracket is halved this many times (each costs a build and a step).
REFINE_STEPS = 3
# (warm-up steps, timed steps) per batch size.
STEPS = {"cpu": (1, 3), "other": (5, 20)}
# Error texts of allocations that failed on the device (torch raises some as plain RuntimeError).
_OUT_OF_MEMORY_TEXTS = ("out of memory", "cublas_status_alloc_failed", "cudnn_status_alloc_failed",
                        "hipErrorOutOfMemory".lower())
_OUT_OF_MEMORY_TYPES: tuple[type[BaseException], ...] = tuple(
    {t for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)) if t})


def is_out_of_memory(exc: BaseException) -> bool:
    """torch's OutOfMemoryError, or a RuntimeError whose text says an allocation failed."""
    if isinstance(exc, _OUT_OF_MEMORY_TYPES):
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc).lower() for t in _OUT_OF_MEMORY_TEXTS)


# --------------------------------------------------------------------------- the fit


@dataclass
class BatchFit:
    """t(bs) = t_fixed + bs * t_sample, fitted to measured step times."""

    t_fixed_s: float
    t_sample_s: float
    points: int
    rms_relative_error: float  # of the fitted step times: 0.02 = the line passes within ~2 %

    def step_s(self, batch: float) -> float:
        return self.t_fixed_s + batch * self.t_sample_s

    def throughput(self, batch: float) -> float:
        """Samples per second at `batch`, on the line."""
        return batch / self.step_s(batch)

    @property
    def asymptote(self) -> float | None:
        """Samples per second of an unbounded batch: 1 / t_sample (None when t_sample is not positive)."""
        return 1.0 / self.t_sample_s if self.t_sample_s > 0 else None

    def fixed_share(self, batch: float) -> float:
        """t_fixed's share of the step at `batch` (= 1 - throughput / asymptote)."""
        return self.t_fixed_s / self.step_s(batch)

    def batch_for(self, share_of_asymptote: float) -> float | None:
        """The batch where throughput reaches `share_of_asymptote` of 1 / t_sample:
        bs = share * t_fixed / ((1 - share) * t_sample). 0 when t_fixed <= 0 (saturated at
        any batch); None when t_sample <= 0 (no asymptote: the line does not describe the runs)."""
        if not 0 < share_of_asymptote < 1:
            raise ValueError(f"share_of_asymptote must be in (0, 1), got {share_of_asymptote}")
        if self.t_sample_s <= 0:
            return None
        if self.t_fixed_s <= 0:
            return 0.0
        return share_of_asymptote * self.t_fixed_s / ((1 - share_of_asymptote) * self.t_sample_s)

    @property
    def saturation_batch(self) -> float | None:
        """Where t_fixed is SATURATION_FIXED_SHARE of the step."""
        return self.batch_for(1 - SATURATION_FIXED_SHARE)


def fit_batch_times(points: Sequence[tuple[float, float]]) -> BatchFit:
    """Least-squares line through (batch size, step seconds) points; needs two distinct batch sizes."""
    if len({b for b, _ in points}) < 2:
        raise ValueError("the fit needs step times at two or more different batch sizes")
    xs = [float(b) for b, _ in points]
    ys = [float(t) for _, t in points]
    slope, intercept = (float(c) for c in np.polyfit(xs, ys, 1))
    errors = [(intercept + slope * x - y) / y for x, y in zip(xs, ys) if y > 0]
    rms = math.sqrt(statistics.fmean(e * e for e in errors)) if errors else 0.0
    return BatchFit(t_fixed_s=intercept, t_sample_s=slope, points=len(points), rms_relative_error=rms)


def first_saturated(points: Sequence[tuple[int, float]], fit: BatchFit,
                    fixed_share: float = SATURATION_FIXED_SHARE) -> int | None:
    """The smallest measured batch whose measured throughput is within `fixed_share` of the fit's asymptote."""
    asymptote = fit.asymptote
    if asymptote is None:
        return None
    for batch, seconds in sorted(points):
        if seconds > 0 and batch / seconds >= (1 - fixed_share) * asymptote:
            return batch
    return None


# --------------------------------------------------------------------------- measuring


@dataclass
class BatchPoint:
    """Step time at one batch size (median of the timed steps)."""

    batch_size: int
    step_s: float
    samples_per_step: int
    step_times_s: list[float] = field(default_factory=list)

    @property
    def samples_per_s(self) -> float:
        return self.samples_per_step / self.step_s


def _steps(device: torch.device) -> tuple[int, int]:
    return STEPS.get(device.type, STEPS["other"])


def _built_batch(built: Any, requested: int) -> int:
    """The batch a built workload really runs: registered workloads halve it when it does not fit."""
    params = getattr(built, "params", None) or {}
    try:
        return int(params.get("batch_size", requested))
    except (TypeError, ValueError):
        return requested


def release_memory(device: torch.device) -> None:
    """Drop what a failed or finished try left cached, so the next one starts clean."""
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure_batch(build: Callable[[int], Any], batch: int, device: torch.device, warmup: int | None = None,
                  steps: int | None = None) -> BatchPoint:
    """Build at `batch`, time its steps; OutOfMemory-like errors pass through (see :func:`is_out_of_memory`).

    A workload that quietly ran a smaller batch (registered ones halve it on running out of
    memory) raises torch.OutOfMemoryError as well, so it is not timed as the wrong size.
    """
    default_warmup, default_steps = _steps(device)
    warmup = default_warmup if warmup is None else warmup
    steps = default_steps if steps is None else steps
    with build(batch) as built:
        ran = _built_batch(built, batch)
        if ran != batch:
            raise _oom_error(f"batch {batch} did not fit: the workload fell back to {ran}")
        seconds = time_steps(built.step, device, warmup, steps)
        samples = int(getattr(built, "samples_per_step", batch) or batch)
    return BatchPoint(batch, statistics.median(seconds), samples, seconds)


def _oom_error(message: str) -> BaseException:
    kind = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    return kind(message)


# --------------------------------------------------------------------------- the memory limit


@dataclass
class MemoryLimit:
    """The largest batch that ran a step, from growing batches until one ran out of memory."""

    largest_fit: int | None  # None: not even the smallest tried batch fitted
    smallest_failure: int | None  # the smallest batch seen to run out of memory; None if none did
    cap: int
    tried: list[tuple[int, bool]] = field(default_factory=list)  # (batch, fitted) in the order tried

    @property
    def capped(self) -> bool:
        """The search stopped at the cap without running out of memory: the limit is at least the cap."""
        return self.smallest_failure is None and self.largest_fit == self.cap


def batch_cap(device: torch.device | str) -> int:
    """How far the memory search grows the batch by default on `device`."""
    return CPU_BATCH_CAP if torch.device(device).type == "cpu" else GPU_BATCH_CAP


def fits(build: Callable[[int], Any], batch: int, device: torch.device) -> bool:
    """Whether one step at `batch` runs: build, one step, synchronize, close. Only running out of memory
    counts as not fitting; any other error passes through."""
    failed = False
    try:
        with build(batch) as built:
            if _built_batch(built, batch) != batch:
                failed = True  # the workload halved the batch itself: this size ran out of memory
            else:
                built.step()
                synchronize(device)
    except BaseException as exc:  # noqa: BLE001 - only memory errors are kept, the rest re-raised
        if not is_out_of_memory(exc):
            raise
        failed = True
    # Outside the except block, so the traceback's frames (and the tensors they hold) are gone.
    release_memory(device)
    return not failed


def largest_fitting_batch(build: Callable[[int], Any], start: int, device: torch.device | str = "cpu",
                          cap: int | None = None, refine: int = REFINE_STEPS, granularity: int = 8) -> MemoryLimit:
    """Grow the batch from `start` by doubling until a step runs out of memory (or `cap`), then
    halve the bracket `refine` times; below `start` when `start` itself does not fit.

    `build(batch)` returns a context manager (a BuiltWorkload) with ``step()``. Refined sizes
    are multiples of `granularity` where the bracket allows. The cap defaults to
    CPU_BATCH_CAP on a CPU and GPU_BATCH_CAP elsewhere, and is at least `start`.
    """
    device = torch.device(device)
    if start < 1:
        raise ValueError(f"start must be at least 1, got {start}")
    cap = cap if cap is not None else batch_cap(device)
    cap = max(cap, start)  # a batch the caller already ran is never above the cap
    tried: list[tuple[int, bool]] = []

    def attempt(batch: int) -> bool:
        ok = fits(build, batch, device)
        tried.append((batch, ok))
        return ok

    lo: int | None = None
    hi: int | None = None
    batch = start
    if attempt(batch):
        lo = batch
        while lo < cap:
            batch = min(lo * 2, cap)
            if attempt(batch):
                lo = batch
            else:
                hi = batch
                break
    else:
        hi = batch
        while batch > 1:
            batch //= 2
            if attempt(batch):
                lo = batch
                break
            hi = batch
    for _ in range(refine if lo is not None and hi is not None else 0):
        mid = (lo + hi) // 2
        if granularity > 1 and (mid // granularity) * granularity > lo:
            mid = (mid // granularity) * granularity
        if mid <= lo or mid >= hi:
            break
        if attempt(mid):
            lo = mid
        else:
            hi = mid
    return MemoryLimit(largest_fit=lo, smallest_failure=hi, cap=cap, tried=tried)


# --------------------------------------------------------------------------- the sweep


@dataclass
class BatchSweep:
    """Step times over batch sizes, their fit and the memory limit."""

    device: str
    points: list[BatchPoint]
    fit: BatchFit | None
    limit: MemoryLimit | None
    skipped: dict[int, str] = field(default_factory=dict)  # batch -> why it has no step time

    def to_dict(self) -> dict[str, Any]:
        fit = self.fit
        return {
            "device": self.device,
            "points": [{"batch_size": p.batch_size, "step_s": p.step_s, "samples_per_step": p.samples_per_step,
                        "samples_per_s": p.samples_per_s, "step_times_s": p.step_times_s} for p in self.points],
            "fit": None if fit is None else {
                "t_fixed_s": fit.t_fixed_s, "t_sample_s": fit.t_sample_s, "points": fit.points,
                "rms_relative_error": fit.rms_relative_error, "asymptote_samples_per_s": fit.asymptote,
                "saturation_batch": fit.saturation_batch, "near_asymptote_batch": fit.batch_for(NEAR_ASYMPTOTE),
                "first_saturated_measured": first_saturated([(p.batch_size, p.step_s) for p in self.points], fit)},
            "limit": None if self.limit is None else {
                "largest_fit": self.limit.largest_fit, "smallest_failure": self.limit.smallest_failure,
                "cap": self.limit.cap, "capped": self.limit.capped, "tried": self.limit.tried},
            "skipped": {str(k): v for k, v in self.skipped.items()},
        }

    def summary_lines(self) -> list[str]:
        lines = [f"{'batch':>7s} {'step ms':>10s} {'samples/s':>11s} {'fixed share':>12s}"]
        line_holds = self.fit is not None and self.fit.asymptote is not None and self.fit.t_fixed_s >= 0
        for p in self.points:
            share = f"{100 * self.fit.fixed_share(p.batch_size):11.1f}%" if line_holds else f"{'-':>12s}"
            lines.append(f"{p.batch_size:7d} {1e3 * p.step_s:10.2f} {p.samples_per_s:11,.0f} {share}")
        for batch, why in self.skipped.items():
            lines.append(f"{batch:7d} skipped: {why}")
        lines += self._fit_lines() + self._limit_lines()
        return lines

    def _fit_lines(self) -> list[str]:
        fit = self.fit
        if fit is None:
            return ["no fit: step times at two or more batch sizes are needed"]
        lines = [f"t(bs) = {1e3 * fit.t_fixed_s:.2f} ms + bs x {1e3 * fit.t_sample_s:.4f} ms "
                 f"(least squares over {fit.points} batch sizes, rms error {100 * fit.rms_relative_error:.1f}%)"]
        if fit.asymptote is None:
            return lines + ["step time does not grow with the batch here, so the line has no throughput asymptote"]
        saturation, near = fit.saturation_batch, fit.batch_for(NEAR_ASYMPTOTE)
        lines.append(f"asymptotic throughput 1/t_sample = {fit.asymptote:,.0f} samples/s; the fixed cost falls to "
                     f"{100 * SATURATION_FIXED_SHARE:.0f}% of the step (GPU saturated) at batch ~{saturation:,.0f}, "
                     f"throughput is within {100 * (1 - NEAR_ASYMPTOTE):.0f}% of the asymptote at ~{near:,.0f}")
        measured = first_saturated([(p.batch_size, p.step_s) for p in self.points], fit)
        lines.append(f"smallest measured batch within {100 * SATURATION_FIXED_SHARE:.0f}% of the asymptote: "
                     + (str(measured) if measured is not None else "none"))
        return lines

    def _limit_lines(self) -> list[str]:
        limit = self.limit
        if limit is None:
            return []
        if limit.largest_fit is None:
            return [f"no batch fits in memory (batch {limit.smallest_failure} ran out)"]
        if limit.capped:
            return [f"largest batch tried: {limit.largest_fit} fits (the search stops at {limit.cap} on this device)"]
        return [f"largest batch that fits: {limit.largest_fit} ({limit.smallest_failure} ran out of memory; "
                f"{len(limit.tried)} sizes tried)"]


def batch_sweep(build: Callable[[int], Any], batch_sizes: Sequence[int], device: torch.device | str,
                warmup: int | None = None, steps: int | None = None, find_limit: bool = True,
                cap: int | None = None) -> BatchSweep:
    """Time steps at each batch size, fit the line and, with `find_limit`, search the largest batch
    that fits from the largest one that ran. Sizes that run out of memory are skipped, not fatal."""
    device = torch.device(device)
    points: list[BatchPoint] = []
    skipped: dict[int, str] = {}
    for batch in sorted(set(batch_sizes)):
        failure = None
        try:
            points.append(measure_batch(build, batch, device, warmup, steps))
        except BaseException as exc:  # noqa: BLE001 - only memory errors are kept, the rest re-raised
            if not is_out_of_memory(exc):
                raise
            failure = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if failure is not None:
            skipped[batch] = f"out of memory ({failure[:120]})"
            release_memory(device)
    fit = fit_batch_times([(p.batch_size, p.step_s) for p in points]) if len(points) >= 2 else None
    limit = None
    if find_limit:
        start = max((p.batch_size for p in points), default=min(batch_sizes))
        limit = largest_fitting_batch(build, start, device, cap=cap)
    return BatchSweep(str(device), points, fit, limit, skipped)
