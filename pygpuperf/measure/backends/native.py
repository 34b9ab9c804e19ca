"""The native backend: probes compiled into the C++/CUDA extension."""

from __future__ import annotations

import torch

from pygpuperf.measure import native
from pygpuperf.measure import pairs
from pygpuperf.measure.backends.base import Backend
from pygpuperf.measure.probe import RunSettings
from pygpuperf.core.results import Measurement

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
        if not device_type:
            return []
        names: list[str] = []
        for name in native.list_probes(device_type):
            # GPU-pair probes become one name per ordered pair (none with a single GPU).
            names += pairs.expand(name, torch.cuda.device_count()) if pairs.is_pair_base(name) else [name]
        return names

    def describe(self, name: str, device: torch.device) -> str:
        base, _, _ = pairs.split(name) or (name, 0, 0)
        return native.describe_probe(self._device_type(device) or device.type, base)

    def waiver(self, name: str, device: torch.device) -> str | None:
        if self._device_type(device) is None:
            return f"no native {device.type} probes in this build"
        pair = pairs.split(name)
        if pair is None:
            return native.probe_waiver(name, device)
        base, src, dst = pair
        reason = native.probe_waiver(base, self._initiator(device, src))
        if reason:
            return reason
        if not self._pair_variants(base, device, src, dst, quick=False):
            return f"device {src} cannot run {base} towards device {dst}"
        return None

    def variants(self, name: str, device: torch.device, quick: bool = False) -> list[str]:
        pair = pairs.split(name)
        if pair is None:
            return native.probe_variants(name, device, quick)
        base, src, dst = pair
        return self._pair_variants(base, device, src, dst, quick)

    @staticmethod
    def _initiator(device: torch.device, index: int) -> torch.device:
        return torch.device(device.type, index)

    def _pair_variants(self, base: str, device: torch.device, src: int, dst: int, quick: bool) -> list[str]:
        """The sizes the native probe offers for this pair (its variants are '<dst>/<size>')."""
        sizes = []
        for variant in native.probe_variants(base, self._initiator(device, src), quick):
            peer, size = pairs.parse_native_variant(variant)
            if peer == dst:
                sizes.append(size)
        return sizes

    def measure(self, name: str, device: torch.device, settings: RunSettings, variant: str = "") -> Measurement:
        probe_name, probe_device, probe_variant = name, device, variant
        pair = pairs.split(name)
        if pair is not None:
            probe_name, src, dst = pair
            probe_device = self._initiator(device, src)
            probe_variant = pairs.native_variant(dst, variant)
        run = native.run_probe(
            probe_name,
            probe_device,
            variant=probe_variant,
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
