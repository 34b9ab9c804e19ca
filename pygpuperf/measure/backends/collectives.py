"""Collectives as a backend: all_reduce, all_gather, reduce_scatter and broadcast over one process
per GPU (NCCL), or two processes on the CPU (Gloo), each measured at every message size.

They run by default on a host with two or more GPUs, and on a CPU when asked for by name
(``--probes collective``). Every collective of a run shares one set of processes.
"""

from __future__ import annotations

import torch

from pygpuperf.core.results import Measurement
from pygpuperf.measure import collectives
from pygpuperf.measure.backends.base import Backend
from pygpuperf.measure.probe import RunSettings


class CollectiveBackend(Backend):
    family = "torch"
    together = True

    def probe_names(self, device: torch.device) -> list[str]:
        return [f"collective.{op}" for op in collectives.OPS] if device.type in ("cuda", "cpu") else []

    def by_default(self, name: str, device: torch.device) -> bool:
        return device.type == "cuda" and torch.cuda.device_count() >= 2

    def describe(self, name: str, device: torch.device) -> str:
        where = "one process per GPU (NCCL)" if device.type == "cuda" else "2 processes (Gloo)"
        return f"{name.split('.', 1)[1]} through torch.distributed, 8 KiB-1 GiB, nccl-tests busbw; {where}"

    def waiver(self, name: str, device: torch.device) -> str | None:
        if device.type == "cuda" and torch.cuda.device_count() < 2:
            return f"needs two or more CUDA GPUs; {torch.cuda.device_count()} visible"
        return None

    def measure(self, name: str, device: torch.device, settings: RunSettings, variant: str = "") -> Measurement:
        raise RuntimeError(f"{name} measures every message size at once: the suite runs it with measure_together")

    def measure_together(self, names: list[str], device: torch.device, settings: RunSettings,
                         into: list[Measurement]) -> None:
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the ranks allocate their own buffers on every GPU
        ops = [name.split(".", 1)[1] for name in names]
        collectives.run_collectives(device.type, ops=ops, quick=settings.quick, into=into)
