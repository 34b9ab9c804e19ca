"""Facts of the device a run characterizes: what torch and NVML say of it, and its identity."""

from __future__ import annotations

import os
from typing import Any

import torch

from pygpuperf.facts import cpu, nvml
from pygpuperf.facts.device import device_name


def device_facts(device: torch.device) -> dict[str, Any]:
    facts: dict[str, Any] = {"type": device.type, "index": device.index}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        facts.update(
            name=p.name,
            compute_capability=f"{p.major}.{p.minor}",
            multiprocessor_count=p.multi_processor_count,
            l2_cache_bytes=getattr(p, "L2_cache_size", None),
            memory_bytes=p.total_memory,
            uuid=_torch_uuid(p),
            pci_bus_id=_pci_bus_id(p),
        )
        facts.update({k: v for k, v in nvml.static_facts(device).items() if v is not None or k not in facts})
    elif device.type == "cpu":
        facts.update(name=cpu.cpu_model() or "cpu", cores=os.cpu_count(), memory_bytes=cpu.host_memory_bytes(),
                     threads=torch.get_num_threads())
        facts.update(cpu.cpu_cache_facts())  # the sizes the sweep's knees are checked against
        facts.update(cpu.cpu_simd_facts())  # the physics guard's limit on SIMD figures
    else:
        facts.update(name=device_name(device))
    return facts


def _torch_uuid(props: Any) -> str | None:
    """The device UUID torch reports (NVML's form, GPU-xxxxxxxx-...), where it reports one."""
    value = getattr(props, "uuid", None)
    if value is None:
        return None
    text = str(value)
    return text if text.startswith("GPU-") else f"GPU-{text}"


def _pci_bus_id(props: Any) -> str | None:
    """domain:bus:device.0 as sysfs writes it, e.g. 0000:1a:00.0."""
    try:
        return f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    except AttributeError:
        return None


def device_identity(facts: dict[str, Any]) -> str:
    """A short label that tells identical cards apart: the UUID's first 8 hex digits, else the
    PCI bus id; "" where neither is known (a CPU)."""
    uuid = str(facts.get("uuid") or "")
    if uuid:
        return uuid.removeprefix("GPU-").replace("-", "")[:8].lower()
    bus = str(facts.get("pci_bus_id") or "")
    return bus.replace(":", "").replace(".", "") if bus else ""
