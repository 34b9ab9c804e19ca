"""The native backend: probes compiled into the C++/CUDA extension."""

from __future__ import annotations

import torch

from pygpuperf import native
from pygpuperf.backends.base import Backend, RunSettings
from pygpuperf.results import Measurement

_NATIVE_DEVICE_TYPES = ("cpu", "cuda")


class NativeBackend(Backend):
    family = "native"

    def _device_type(self, device: torch.device) -> str | None:
        if not native.available() or device.type not in _NATIVE_DEVICE_TYPES:
            return None
        # A ROCm torch also says 'cuda'; our kernels are CUDA-only.
        if device.type == "cuda" and (getattr(torch.version, "hip", None) or not native.cuda_built()):
            return None
        return device.type

    def probe_names(self, device: torch.device) -> list[str]:
        device_type = self._device_type(device)
        return native.list_probes(device_type) if device_type else []

    def describe(self, name: str, device: torch.device) -> str:
        return native.describe_probe(self._device_type(device) or device.type, name)

    def waiver(self, name: str, device: torch.device) -> str | None:
        if self._device_type(device) is None:
            return f"no native {device.type} probes in this build"
        return native.probe_waiver(name, device)

    def variants(self, name: str, device: torch.device, quick: bool = False) -> list[str]:
        return native.probe_variants(name, device, quick)

    def measure(self, name: str, device: torch.device, settings: RunSettings, variant: str = "") -> Measurement:
        run = native.run_probe(
            name,
            device,
            variant=variant,
            warmup=settings.warmup,
            samples=settings.samples,
            size_bytes=settings.size_bytes,
            poison_after_runs=settings.poison_after_runs,
        )
        return Measurement.from_samples(
            name,
            sample_seconds=run.sample_seconds,
            bytes_read=run.bytes_read,
            bytes_written=run.bytes_written,
            flops=run.flops,
            operations=run.operations,
            backend=self.backend_name(device),
            device=str(device),
            verified=run.verified,
            verify_detail=run.verify_detail,
            params=run.params,
        )
