"""Timing work on a device: device events where the device has them, else the wall clock with the
device drained around each sample."""

from __future__ import annotations

import json
import os
import tempfile
import time
from abc import ABC, abstractmethod
from typing import Any, Callable

import torch

# Device cycles of spin per queued sample (torch.cuda._sleep) while the host queues the samples.
SPIN_CYCLES_PER_SAMPLE = 100_000


# Whether a trace has run in this process since the profiler was last released (see release_profiler).
_traced = False


def traced() -> None:
    """Mark that a trace has run: the next :func:`release_profiler` lets go of the tracing library."""
    global _traced
    _traced = True


def release_profiler(device: torch.device) -> None:
    """Have torch's profiler let go of the device's tracing library (CUPTI on CUDA) after a trace (:func:`traced`).
    kineto keeps it attached after a trace, and every later launch pays for it (on an H200, host-bound steps
    ran 30-36 % slower after one trace); an empty session with TEARDOWN_CUPTI=1 ends with it released. A
    later trace attaches it again. The variable is put back as it was."""
    global _traced
    if not _traced or device.type != "cuda" or not torch.cuda.is_available():
        return
    from torch.profiler import ProfilerActivity, profile

    before = os.environ.get("TEARDOWN_CUPTI")
    os.environ["TEARDOWN_CUPTI"] = "1"
    try:
        with profile(activities=[ProfilerActivity.CUDA]):
            pass
        _traced = False
    finally:
        if before is None:
            os.environ.pop("TEARDOWN_CUPTI", None)
        else:
            os.environ["TEARDOWN_CUPTI"] = before


def synchronize(device: torch.device) -> None:
    """Wait until all work queued on `device` has finished (no-op on the CPU)."""
    kind = device.type
    if kind == "cuda":
        torch.cuda.synchronize(device)
    elif kind == "xpu":
        torch.xpu.synchronize(device)
    elif kind == "mps":
        torch.mps.synchronize()
    elif kind != "cpu":
        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None and hasattr(accelerator, "synchronize"):
            accelerator.synchronize(device)


class SampleTimer(ABC):
    """Times `samples` intervals; `seconds()` returns them once the device is idle."""

    @abstractmethod
    def start(self, i: int) -> None: ...

    @abstractmethod
    def stop(self, i: int) -> None: ...

    @abstractmethod
    def seconds(self) -> list[float]: ...


class EventTimer(SampleTimer):
    """Device-side timing with event pairs on the current stream: no host sync between samples."""

    def __init__(self, device: torch.device, samples: int) -> None:
        self._stream = torch.cuda.current_stream(device)
        self._begin = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
        self._end = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]

    def start(self, i: int) -> None:
        self._begin[i].record(self._stream)

    def stop(self, i: int) -> None:
        self._end[i].record(self._stream)

    def seconds(self) -> list[float]:
        self._stream.synchronize()
        return [b.elapsed_time(e) / 1e3 for b, e in zip(self._begin, self._end)]


class WallClockTimer(SampleTimer):
    """Host wall clock with the device drained before and after each sample."""

    def __init__(self, device: torch.device, samples: int) -> None:
        self._device = device
        self._begin = [0.0] * samples
        self._seconds = [0.0] * samples

    def start(self, i: int) -> None:
        synchronize(self._device)
        self._begin[i] = time.perf_counter()

    def stop(self, i: int) -> None:
        synchronize(self._device)
        self._seconds[i] = time.perf_counter() - self._begin[i]

    def seconds(self) -> list[float]:
        return list(self._seconds)


def make_timer(device: torch.device, samples: int) -> SampleTimer:
    """Events where the device has timing events torch exposes ('cuda', also ROCm); wall clock elsewhere."""
    if device.type == "cuda":
        return EventTimer(device, samples)
    return WallClockTimer(device, samples)


class HostClockTimer(SampleTimer):
    """The host's own time to issue each sample, the device not waited on (launch rates)."""

    def __init__(self, device: torch.device, samples: int) -> None:
        self._device = device
        self._begin = [0.0] * samples
        self._seconds = [0.0] * samples

    def start(self, i: int) -> None:
        self._begin[i] = time.perf_counter()

    def stop(self, i: int) -> None:
        self._seconds[i] = time.perf_counter() - self._begin[i]

    def seconds(self) -> list[float]:
        synchronize(self._device)
        return list(self._seconds)


def chrome_trace(profile: Any, path: str | None = None) -> dict[str, Any]:
    """A finished torch.profiler profile as its Chrome trace (the export kineto has kept stable across
    releases), written to `path` and kept there, or through a temporary file."""
    if path is not None:
        profile.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    with tempfile.TemporaryDirectory(prefix="pygpuperf-trace-") as folder:
        return chrome_trace(profile, os.path.join(folder, "trace.json"))


class KernelClockTimer(SampleTimer):
    """The device time of the kernels each sample ran, from the profiler's device activity trace
    (CUPTI on CUDA): each kernel's own start-to-end, without the gaps between kernels that events
    measure. Samples must launch the same number of kernels; their durations are summed per sample."""

    def __init__(self, device: torch.device, samples: int) -> None:
        from torch.profiler import ProfilerActivity, profile

        self._device = device
        self._samples = samples
        self._profile = profile(activities=[ProfilerActivity.CUDA])
        self._profile.__enter__()

    def start(self, i: int) -> None:
        pass

    def stop(self, i: int) -> None:
        pass

    def seconds(self) -> list[float]:
        synchronize(self._device)
        self._profile.__exit__(None, None, None)
        traced()  # the trace leaves the tracing library attached: the next timing releases it
        events = chrome_trace(self._profile).get("traceEvents", [])
        # The chrome trace's "kernel" category: the one spelling kineto has kept across releases.
        kernels = sorted((e for e in events if e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel"),
                         key=lambda e: float(e["ts"]))
        if not kernels or len(kernels) % self._samples:
            raise RuntimeError(f"the profiler saw {len(kernels)} kernels for {self._samples} samples: "
                               "not the same number per sample")
        per = len(kernels) // self._samples
        return [sum(float(e.get("dur", 0.0)) for e in kernels[i * per:(i + 1) * per]) / 1e6
                for i in range(self._samples)]


def sample_seconds(run: Callable[[], Any], device: torch.device, warmup: int, samples: int, *,
                   before_sample: Callable[[], Any] | None = None, spin: bool = False,
                   before_timing: Callable[[], Any] | None = None, spin_cycles: int = SPIN_CYCLES_PER_SAMPLE,
                   host_clock: bool = False, kernel_clock: bool = False) -> list[float]:
    """The one timing loop (pgp::measure's, in Python), every timed thing goes through it: probes,
    collectives, a model's steps.

    `warmup` untimed runs, then `samples` timed ones, each after `before_sample` (untimed: an L2
    flush, a buffer reset, a barrier); device events on CUDA, the wall clock with the device drained
    around each sample elsewhere. `before_timing` runs once between the two (a barrier across ranks).
    With `spin`, the GPU first spins for `spin_cycles` per sample, about as long as the host takes
    to queue each, so the events time the runs back to back on the device rather than the host's
    launch rate; a model's steps are timed without it, as a training loop runs them. `host_clock`
    times what the host spends issuing each sample instead (the device runs on meanwhile);
    `kernel_clock` the kernels' own durations from the profiler (:class:`KernelClockTimer`, CUDA only).
    """
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    if warmup < 0:
        raise ValueError(f"warmup must be non-negative, got {warmup}")
    if not kernel_clock:  # the kernels' own durations do not see the host's launch pace
        release_profiler(device)  # an earlier trace in this process would slow every launch timed here
    for _ in range(warmup):
        if before_sample is not None:
            before_sample()
        run()
    synchronize(device)
    if before_timing is not None:
        before_timing()
    if kernel_clock and device.type != "cuda":
        raise ValueError(f"kernel_clock needs a CUDA device's activity trace, not {device.type}")
    timer = (HostClockTimer(device, samples) if host_clock else KernelClockTimer(device, samples) if kernel_clock
             else make_timer(device, samples))
    if spin and not kernel_clock and device.type == "cuda" and hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(spin_cycles * samples)
    for i in range(samples):
        if before_sample is not None:
            before_sample()
        timer.start(i)
        run()
        timer.stop(i)
    return timer.seconds()
