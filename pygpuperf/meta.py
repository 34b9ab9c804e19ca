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
        )
        facts.update(telemetry.static_facts(device))
    elif device.type == "cpu":
        facts.update(name=cpu_model() or "cpu", cores=os.cpu_count(), memory_bytes=host_memory_bytes(),
                     threads=torch.get_num_threads())
        facts.update(hierarchy.cpu_cache_facts())  # the sizes the sweep's knees are checked against
    else:
        from pygpuperf.device import device_name

        facts.update(name=device_name(device))
    return facts


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
