"""The host's own time per step, and inside its optimizer steps, without the profiler.

A profiled host's launch times are slower than its own by more in some stretches than in others: the
profiler's cost is per recorded op, so a forward or backward of many small ops is slowed more than an
optimizer's step, whose time goes to Python over its parameters. torch's global optimizer step hooks time
that step wherever the user's code calls it (a GradScaler's step included), and torch.autograd.backward is
wrapped to time the backward calls. The replay paces the optimizer's launches by their own time, and the
backward's with the forward's: paced by the backward calls' time, gpt-100m's fix to fp16 on an H200 was
predicted at 76.99 ms against 74.42 measured (74.38 at the forward's pace), among fp16 steps that ran 73.5-77.1
ms. A step called after the device has drained returns when its last launch is queued: its host time is the
host's own work, where the step has no sync of its own and its launches fit the launch queue.
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
from pygpuperf.explain.model import HostTime
from pygpuperf.trials.record import Trials


class PhaseClock:
    """Seconds spent in optimizer steps and in backward calls during each call of the step functions it wraps."""

    def __init__(self) -> None:
        self.optimizer_s: list[float] = []
        self.backward_s: list[float] = []
        self._in = {"optimizer": 0.0, "backward": 0.0}
        self._entered: float | None = None

    def wrap(self, step: Callable[[], Any]) -> Callable[[], Any]:
        def timed() -> Any:
            self._in = {"optimizer": 0.0, "backward": 0.0}
            out = step()
            self.optimizer_s.append(self._in["optimizer"])
            self.backward_s.append(self._in["backward"])
            return out
        return timed

    def median_us(self) -> float | None:
        """The median step's optimizer time (µs); None where no step ran one."""
        return _median_us(self.optimizer_s)

    def backward_median_us(self) -> float | None:
        """The median step's time in backward calls (µs); None where no step ran one."""
        return _median_us(self.backward_s)

    def _pre(self, *_: Any) -> None:
        self._entered = time.perf_counter()

    def _post(self, *_: Any) -> None:
        if self._entered is not None:
            self._in["optimizer"] += time.perf_counter() - self._entered
            self._entered = None

    def _timed_backward(self, backward: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return backward(*args, **kwargs)
            finally:
                self._in["backward"] += time.perf_counter() - start
        return timed


def _median_us(per_step_s: list[float]) -> float | None:
    return statistics.median(per_step_s) * 1e6 if per_step_s and any(per_step_s) else None


@contextlib.contextmanager
def timing_phases() -> Iterator[PhaseClock]:
    """A clock on every optimizer's step and every backward call (`loss.backward()` goes through
    torch.autograd.backward) while the block runs."""
    clock = PhaseClock()
    hooks = (register_optimizer_step_pre_hook(clock._pre), register_optimizer_step_post_hook(clock._post))
    backward = torch.autograd.backward
    torch.autograd.backward = clock._timed_backward(backward)
    try:
        yield clock
    finally:
        torch.autograd.backward = backward
        for hook in hooks:
            hook.remove()


def host_after_drain(step: Callable[[], Any], device: torch.device, samples: int = 15,
                     warmup: int = 3) -> tuple[list[float], PhaseClock]:
    """(µs of the host's call of `step` after the device drained, for each of `samples` steps after `warmup`;
    the clock of those steps' optimizer and backward time)."""
    timing.synchronize(device)
    for _ in range(warmup):
        step()
    host: list[float] = []
    with timing_phases() as clock:
        timed = clock.wrap(step)
        for _ in range(samples):
            timing.synchronize(device)
            start = time.perf_counter()
            timed()
            host.append((time.perf_counter() - start) * 1e6)
    timing.synchronize(device)
    return host, clock


def host_pace_line(trials: Trials | None) -> str | None:
    """The host's own time per step as --try-fixes timed it (`trials`; None where it timed none)."""
    def part(host: HostTime | None, where: str) -> str | None:
        if host is None or not host.step_us:
            return None
        inside = "".join(f", {us / 1e3:.2f} of it in {what}" for us, what in
                         ((host.optimizer_us, "the optimizer's step"), (host.backward_us, "backward calls")) if us)
        return f"{host.step_us / 1e3:.2f} ms {where}{inside}"
    if trials is None:
        return None
    parts = [p for p in (part(trials.host_at_batch, "at the step's batch, each step after a drain"),
                         part(trials.host_at_batch_one, "at batch 1")) if p]
    return "the host's own time per step, without the profiler: " + "; ".join(parts) if parts else None
