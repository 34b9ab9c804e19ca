"""The `meta` block of results.json: versions, device facts, host facts."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
from functools import lru_cache
from typing import Any

import torch

import pygpuperf
from pygpuperf import hierarchy, native, telemetry
from pygpuperf.results import COUNTING_CONVENTION


@lru_cache(maxsize=1)
def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def host_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


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
        facts.update({k: v for k, v in telemetry.static_facts(device).items() if v is not None or k not in facts})
    elif device.type == "cpu":
        facts.update(name=cpu_model() or "cpu", cores=os.cpu_count(), memory_bytes=host_memory_bytes(),
                     threads=torch.get_num_threads())
        facts.update(hierarchy.cpu_cache_facts())  # the sizes the sweep's knees are checked against
    else:
        from pygpuperf.device import device_name

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


def collect(device: torch.device, argv: list[str] | None = None) -> dict[str, Any]:
    versions = {
        "pygpuperf": pygpuperf.__version__,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "python": platform.python_version(),
    }
    dev = device_facts(device)
    if "driver_version" in dev:
        versions["driver"] = dev.pop("driver_version")
    return {
        "versions": versions,
        "extension": native.build_info() if native.available() else {"error": native.IMPORT_ERROR},
        "device": dev,
        "host": {
            "hostname": socket.gethostname(),
            "cpu_model": cpu_model(),
            "cpu_cores": os.cpu_count(),
            "memory_bytes": host_memory_bytes(),
            "os": platform.platform(),
        },
        "time_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "counting": COUNTING_CONVENTION,
        "argv": argv or [],
        "interrupted": False,
    }
