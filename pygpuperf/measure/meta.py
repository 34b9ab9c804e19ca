"""The `meta` block of a run's document: versions, the extension's build, device and host facts."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
from typing import Any

import torch

import pygpuperf
from pygpuperf.core.results import COUNTING_CONVENTION
from pygpuperf.facts import cpu
from pygpuperf.facts.host import device_facts
from pygpuperf.measure import native


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
            "cpu_model": cpu.cpu_model(),
            "cpu_cores": os.cpu_count(),
            "memory_bytes": cpu.host_memory_bytes(),
            "os": platform.platform(),
        },
        "time_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "counting": COUNTING_CONVENTION,
        "argv": argv or [],
        "interrupted": False,
    }
