"""The host's own time per step, and inside its optimizer steps, without the profiler.

A profiled host's launch times are slower than its own by more in some stretches than in others: the
profiler's cost is per recorded op, so a forward or backward of many small ops is slowed more than an
optimizer's step, whose time goes to Python over its parameters. torch's global optimizer step hooks time
that step wherever the user's code calls it (a GradScaler's step included). A step called after the device
has drained returns when its last launch is queued: its host time is the host's own work, where the step
has no sync of its own and its launches fit the launch queue.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from pygpuperf.core import timing
from pygpuperf.explain.model import Explanation, HostTime


class OptimizerClock:
    """Seconds spent in optimizer steps during each call of the step functions it wraps."""

    def __init__(self) -> None:
        self.per_step_s: list[float] = []
        self._in_step = 0.0
        self._entered: float | None = None

    def wrap(self, step: Callable[[], Any]) -> Callable[[], Any]:
        def timed() -> Any:
            self._in_step = 0.0
            out = step()
            self.per_step_s.append(self._in_step)
            return out
        return timed

    def median_us(self) -> float | None:
        """The median step's optimizer time (µs); None where no step ran one."""
        if not self.per_step_s or not any(self.per_step_s):
            return None
        return statistics.median(self.per_step_s) * 1e6

    def _pre(self, *_: Any) -> None:
        self._entered = time.perf_counter()

    def _post(self, *_: Any) -> None:
        if self._entered is not None:
            self._in_step += time.perf_counter() - self._entered
            self._entered = None


@contextlib.contextmanager
def timing_optimizers() -> Iterator[OptimizerClock]:
    """A clock on every optimizer's step while the block runs."""
    clock = OptimizerClock()
    hooks = (register_optimizer_step_pre_hook(clock._pre), register_optimizer_step_post_hook(clock._post))
    try:
        yield clock
    finally:
        for hook in hooks:
            hook.remove()


def host_after_drain(step: Callable[[], Any], device: torch.device, samples: int = 15,
                     warmup: int = 3) -> tuple[list[float], float | None]:
    """(µs of the host's call of `step` after the device drained, for each of `samples` steps after `warmup`;
    the median step's µs of that in optimizer steps, None where it ran none)."""
    timing.synchronize(device)
    for _ in range(warmup):
        step()
    host: list[float] = []
    with timing_optimizers() as clock:
        timed = clock.wrap(step)
        for _ in range(samples):
            timing.synchronize(device)
            start = time.perf_counter()
            timed()
            host.append((time.perf_counter() - start) * 1e6)
    timing.synchronize(device)
    return host, clock.median_us()


def host_pace_line(explanation: Explanation) -> str | None:
    """The host's own time per step as --try-fixes timed it (None where it timed none)."""
    def part(host: HostTime | None, where: str) -> str | None:
        if host is None or not host.step_us:
            return None
        inside = f", {host.optimizer_us / 1e3:.2f} of it in the optimizer's step" if host.optimizer_us else ""
        return f"{host.step_us / 1e3:.2f} ms {where}{inside}"
    parts = [p for p in (part(explanation.host_at_batch, "at the step's batch, each step after a drain"),
                         part(explanation.host_at_batch_one, "at batch 1")) if p]
    return "the host's own time per step, without the profiler: " + "; ".join(parts) if parts else None
