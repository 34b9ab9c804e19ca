"""Choosing and validating the device to characterize."""

from __future__ import annotations

import torch

from pygpuperf.core.errors import UsageError
from pygpuperf.facts import cpu


def _accelerator_count(kind: str) -> int:
    module = getattr(torch, kind, None)
    try:
        return module.device_count() if module is not None and module.is_available() else 0
    except Exception:  # a backend compiled in but unusable counts as absent
        return 0


def default_device() -> torch.device:
    """The first GPU (or other accelerator) when there is one, otherwise the CPU."""
    for kind in ("cuda", "xpu"):
        if _accelerator_count(kind):
            return torch.device(kind, 0)
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps", 0)
    return torch.device("cpu")


def resolve_device(spec: str | None) -> torch.device:
    """Parse --device. Raises UsageError for a device that does not exist here."""
    if spec is None:
        return default_device()
    try:
        device = torch.device(spec)
    except (RuntimeError, ValueError):
        raise UsageError(f"unknown device {spec!r}; use cpu, cuda, cuda:N, xpu:N or mps") from None
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type in ("cuda", "xpu"):
        count = _accelerator_count(device.type)
        if count == 0:
            raise UsageError(f"--device {spec}: no {device.type} device is visible to torch here; use --device cpu")
        index = 0 if device.index is None else device.index
        if index >= count:
            raise UsageError(
                f"--device {spec}: this machine has {count} {device.type} device(s), "
                f"{device.type}:0..{device.type}:{count - 1}; pick one of those"
            )
        return torch.device(device.type, index)
    if device.type == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise UsageError(f"--device {spec}: MPS is not available here; use --device cpu")
        return torch.device("mps", 0)
    raise UsageError(f"--device {spec}: pygpuperf runs on cpu, cuda, xpu or mps devices")


def device_slug(device: torch.device) -> str:
    """Filesystem-friendly device label, e.g. 'nvidia-h200' or 'cpu'."""
    name = device_name(device)
    slug = "".join(c.lower() if c.isalnum() else "-" for c in name)
    return "-".join(filter(None, slug.split("-"))) or device.type


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "xpu":
        return torch.xpu.get_device_name(device)
    if device.type == "cpu":
        return cpu.cpu_model() or "cpu"
    return device.type
