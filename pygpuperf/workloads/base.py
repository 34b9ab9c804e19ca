"""The workload interface and the one loop that times a workload's steps."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from pygpuperf.core.timing import sample_seconds, synchronize
from pygpuperf.core.results import Stats, WorkloadResult
from pygpuperf.workloads.accounting import BYTES_NOTE, FLOPS_NOTE, count_step
from pygpuperf.workloads.knobs import KnobSpec


@dataclass
class BuiltWorkload:
    """A ready-to-run workload: one call of `step` is one training (or inference) step.

    `count_step`, where given, is the same step run eagerly: what FLOPs and bytes are counted
    from when `step` replays a CUDA graph or runs compiled code, which dispatch modes cannot see
    into. `modules` are the models the step runs (uncompiled), for inspection. `close()` (or
    leaving a ``with`` block) undoes what building changed outside the workload, such as
    torch's global flags; it runs once.
    """

    step: Callable[[], Any]
    samples_per_step: int
    params: dict[str, str]
    notes: list[str] = field(default_factory=list)
    count_step: Callable[[], Any] | None = None
    modules: tuple[torch.nn.Module, ...] = ()
    on_close: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        """Run the close callbacks, last added first; later calls do nothing."""
        errors: list[BaseException] = []
        while self.on_close:
            try:
                self.on_close.pop()()
            except BaseException as exc:  # the rest still run
                errors.append(exc)
        if errors:
            raise errors[0]

    def __enter__(self) -> "BuiltWorkload":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Workload(ABC):
    """A real model run that can be placed on the measured roofline."""

    name: str
    description: str

    @abstractmethod
    def build(self, device: torch.device, batch_size: int | None = None, **knobs: Any) -> BuiltWorkload:
        """Create model, data and optimizer on `device`; batch_size None takes the workload's default."""

    def unavailable(self) -> str | None:
        """Why this workload cannot run here (a package it needs is missing), with the fix; None: it can."""
        return None

    def knob_specs(self) -> tuple[KnobSpec, ...]:
        """The knobs `build` takes (batch_size among them), for a CLI to expose; none by default."""
        return ()

    def default_steps(self, device: torch.device) -> tuple[int, int]:
        """(warm-up steps, timed steps): few on a CPU, where each step takes long."""
        return default_steps(device)


def default_steps(device: torch.device) -> tuple[int, int]:
    """(warm-up steps, timed steps) for timing a step on `device`: few on a CPU, where each step takes long."""
    return (3, 5) if device.type == "cpu" else (10, 30)


def time_steps(step: Callable[[], Any], device: torch.device, warmup: int, steps: int) -> list[float]:
    """Seconds of each of `steps` calls of `step` after `warmup` untimed ones, through the one timing
    loop (core.timing.sample_seconds): device events on 'cuda' with no host sync between steps and no
    spin, as a training loop runs them; the wall clock elsewhere."""
    return sample_seconds(step, device, warmup, steps)


@dataclass
class TimedSteps:
    seconds: list[float]
    peak_memory_bytes: float | None = None  # allocator peak during the steps (CUDA only)
    resident_memory_bytes: float | None = None  # allocated before them: weights, optimizer state, data


def time_steps_with_memory(step: Callable[[], Any], device: torch.device, steps: int) -> TimedSteps:
    """:func:`time_steps` of an already warm step, with the memory it holds between steps and at its peak."""
    synchronize(device)
    resident = None
    if device.type == "cuda":
        resident = float(torch.cuda.memory_allocated(device))
        torch.cuda.reset_peak_memory_stats(device)
    seconds = time_steps(step, device, 0, steps)
    peak = float(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None
    return TimedSteps(seconds, peak, resident)


def run_workload(
    workload: Workload,
    device: torch.device | str,
    batch_size: int | None = None,
    warmup: int | None = None,
    steps: int | None = None,
    *,
    knobs: Mapping[str, Any] | None = None,
) -> WorkloadResult:
    """Build `workload`, warm it up while counting one steady-state step, then time `steps` steps.

    Step times come from device events on 'cuda' and from the wall clock with the
    device synchronized around each step elsewhere. The roofline placement fields
    of the result are left None: they depend on the machine model. `knobs` go to
    ``workload.build``; the built workload is closed (global flags restored) on return.
    """
    _check_counts(warmup, steps)  # before the build: a bad count costs no model
    device = torch.device(device)
    with workload.build(device, batch_size, **dict(knobs or {})) as built:
        return time_built(workload, built, device, warmup, steps)


def _check_counts(warmup: int | None, steps: int | None) -> None:
    if steps is not None and steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if warmup is not None and warmup < 0:
        raise ValueError(f"warmup must be non-negative, got {warmup}")


def time_built(workload: Workload, built: BuiltWorkload, device: torch.device | str, warmup: int | None = None,
               steps: int | None = None) -> WorkloadResult:
    """:func:`run_workload` on a workload already built (left open, for a caller that profiles it next)."""
    device = torch.device(device)
    default_warmup, default_steps = workload.default_steps(device)
    warmup = default_warmup if warmup is None else warmup
    steps = default_steps if steps is None else steps
    _check_counts(warmup, steps)
    # The first step differs from the rest (optimizer state is created), so count the second one.
    # Counting runs the step under dispatch modes (slow): once, outside timing, where it also
    # serves as one more warm-up step (early steps pay for allocation and page faults).
    if warmup > 0:
        built.step()
    flops, nbytes = count_step(built.count_step or built.step)
    for _ in range(max(warmup - 1, 0)):
        built.step()
    timed = time_steps_with_memory(built.step, device, steps)
    step_time = Stats.of(timed.seconds)

    params = dict(built.params)
    params["warmup_steps"] = str(warmup)
    params["timed_steps"] = str(steps)
    achieved = flops / step_time.median / 1e12
    intensity = flops / nbytes if nbytes > 0 else math.inf
    return WorkloadResult(
        name=workload.name,
        device=str(device),
        params=params,
        step_time=step_time,
        samples_per_second=built.samples_per_step / step_time.median,
        flops_per_step=flops,
        bytes_per_step=nbytes,
        achieved_tflops=achieved,
        intensity=intensity,
        notes=[*built.notes, FLOPS_NOTE, BYTES_NOTE],
        peak_memory_bytes=timed.peak_memory_bytes,
        resident_memory_bytes=timed.resident_memory_bytes,
    )
