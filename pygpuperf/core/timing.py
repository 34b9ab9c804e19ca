"""Timing work on a device: device events where the device has them, else the wall clock with the
device drained around each sample."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod

import torch


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
