"""The backend interface: a named set of probes that can measure on some devices.

Three implementations: ``native`` (the C++/CUDA extension), ``portable`` (torch ops on any
torch device) and ``collectives`` (torch.distributed across processes). Every Measurement
names the backend that made it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from pygpuperf.core.results import Measurement
from pygpuperf.measure.probe import RunSettings


class Backend(ABC):
    #: e.g. "native-cuda", "native-cpu", "torch-cuda"; set per device by `backend_name`.
    family: str

    def backend_name(self, device: torch.device) -> str:
        return f"{self.family}-{device.type}"

    @abstractmethod
    def probe_names(self, device: torch.device) -> list[str]:
        """Stable measurement names this backend can attempt on `device`'s type."""

    @abstractmethod
    def describe(self, name: str, device: torch.device) -> str:
        """One-line description of a probe."""

    @abstractmethod
    def waiver(self, name: str, device: torch.device) -> str | None:
        """Why `name` cannot run on `device`, or None when it can."""

    def variants(self, name: str, device: torch.device, quick: bool = False) -> list[str]:
        """Implementation variants measured under `name` ([""] for a probe with one)."""
        return [""]

    @abstractmethod
    def measure(self, name: str, device: torch.device, settings: RunSettings, variant: str = "") -> Measurement:
        """Run one probe (one variant): warm-up, timed samples, verification. Raises on failure."""

    #: Probes that run together in one go (one set of processes for every collective): the suite hands
    #: a run of consecutive planned probes of such a backend to :meth:`measure_together`.
    together = False

    def by_default(self, name: str, device: torch.device) -> bool:
        """Whether `name` runs when no probe is named (collectives only where several GPUs are)."""
        return True

    def measure_together(self, names: list[str], device: torch.device, settings: RunSettings,
                         into: list[Measurement]) -> None:
        """Measure `names` in one go, appending each measurement to `into` as it is kept (so a stop
        keeps what was done). The default measures them one by one."""
        for name in names:
            into.append(self.measure(name, device, settings))


def memory_level(device: torch.device) -> str:
    """Name of the device's main memory in measurement names: 'dram' on a CPU, 'hbm' on an accelerator."""
    return "dram" if device.type == "cpu" else "hbm"
