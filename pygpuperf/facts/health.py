"""Health facts of one device for fleet validation: identity, memory errors, links, clocks and power.

NVML (nvidia-ml-py) is the source on NVIDIA GPUs. Every fact a card, its driver or another vendor's
device does not expose is None ("not available"), never an exception. Keys are vendor-neutral.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import torch

from pygpuperf.facts import links, nvml
from pygpuperf.facts.nvml import constant as _constant, query as _query, text as _text

# NVLink error counters by the nvidia-ml-py constant of each, under neutral names.
_LINK_COUNTERS = (("NVML_NVLINK_ERROR_DL_REPLAY", "replay"), ("NVML_NVLINK_ERROR_DL_RECOVERY", "recovery"),
                  ("NVML_NVLINK_ERROR_DL_CRC_FLIT", "crc_flit"), ("NVML_NVLINK_ERROR_DL_CRC_DATA", "crc_data"))
# Environment variable naming the host a rank reports (in Kubernetes a pod's hostname is not its node's).
NODE_NAME_VARIABLE = "PYGPUPERF_NODE_NAME"


def host_name() -> str:
    """The host a rank runs on: $PYGPUPERF_NODE_NAME where set, else the machine's host name."""
    return (os.environ.get(NODE_NAME_VARIABLE) or "").strip()[:200] or socket.gethostname()


def empty_rank_health(reason: str) -> dict[str, Any]:
    """A rank document's health with nothing known: every fact and the ECC change over the suite unknown."""
    return {**empty_health(reason), "ecc_errors_during_suite": {"corrected": None, "uncorrected": None}}


def empty_health(reason: str) -> dict[str, Any]:
    """Every health fact as "not available", with the reason."""
    return {
        "source": None,
        "reason": reason,
        "name": None,
        "uuid": None,
        "serial": None,
        "pci_bus_id": None,
        "numa_node": None,
        "driver_version": None,
        "ecc_enabled": None,
        "ecc_errors": {"volatile_corrected": None, "volatile_uncorrected": None,
                       "aggregate_corrected": None, "aggregate_uncorrected": None},
        "retired_pages": {"single_bit": None, "double_bit": None, "pending": None},
        "row_remapping": {"corrected_rows": None, "uncorrected_rows": None, "pending": None, "failed": None},
        "pcie": {"generation": None, "width": None, "generation_max": None, "width_max": None},
        "gpu_links": {"total": None, "active": None, "down": None, "errors": None},
        "clock_event_reasons": None,
        "power_limit_w": None,
        "power_limit_default_w": None,
        "temperature_c": None,
        "sm_clock_mhz": None,
        "sm_clock_max_mhz": None,
        "mig_enabled": None,
    }


def _count(value: Any) -> int | None:
    return None if value is None else int(value)


def _ecc(n, h) -> dict[str, int | None]:
    out = {}
    for scope, counter in (("volatile", "NVML_VOLATILE_ECC"), ("aggregate", "NVML_AGGREGATE_ECC")):
        for kind, error in (("corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
                            ("uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED")):
            out[f"{scope}_{kind}"] = _count(_query(getattr(n, "nvmlDeviceGetTotalEccErrors", None), h,
                                                   _constant(n, error), _constant(n, counter)))
    return out


def _retired(n, h) -> dict[str, Any]:
    fn = getattr(n, "nvmlDeviceGetRetiredPages", None)
    single = _query(fn, h, _constant(n, "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"))
    double = _query(fn, h, _constant(n, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"))
    pending = _query(getattr(n, "nvmlDeviceGetRetiredPagesPendingStatus", None), h)
    return {"single_bit": None if single is None else len(single), "double_bit": None if double is None else len(double),
            "pending": None if pending is None else bool(pending)}


def _remapping(n, h) -> dict[str, Any]:
    rows = _query(getattr(n, "nvmlDeviceGetRemappedRows", None), h)
    if rows is None:  # cards before row remapping (pre-A100) retire pages instead
        return {"corrected_rows": None, "uncorrected_rows": None, "pending": None, "failed": None}
    corrected, uncorrected, pending, failed = rows
    return {"corrected_rows": int(corrected), "uncorrected_rows": int(uncorrected), "pending": bool(pending),
            "failed": bool(failed)}


def _gpu_links(n, h) -> dict[str, Any]:
    total = active = 0
    errors: dict[str, int] = {}
    for link, up in links.each_link(n, h):
        total += 1
        if not up:
            continue
        active += 1
        for constant, name in _LINK_COUNTERS:
            if _constant(n, constant) is None:  # a counter this nvidia-ml-py does not know
                continue
            value = _query(getattr(n, "nvmlDeviceGetNvLinkErrorCounter", None), h, link, _constant(n, constant))
            if value is not None:
                errors[name] = errors.get(name, 0) + int(value)
    if total == 0:
        return {"total": 0, "active": 0, "down": 0, "errors": None}
    return {"total": total, "active": active, "down": total - active, "errors": errors or None}


def device_health(device: torch.device) -> dict[str, Any]:
    """Health facts of `device` (see :func:`empty_health` for the keys); None where not available."""
    if device.type != "cuda":
        return empty_health(f"no device health facts for {device.type} devices")
    h = nvml.nvml_handle(device)
    if h is None:
        reason = ("NVML (nvidia-ml-py) is not installed" if nvml.pynvml is None
                  else "the device is not one NVML manages (NVML reports on NVIDIA GPUs only)")
        return empty_health(reason)
    n = nvml.pynvml
    facts = nvml.static_facts(device)
    pci = _query(n.nvmlDeviceGetPciInfo, h)
    bus_id = links.normalize_bus_id(getattr(pci, "busId", None))
    reasons_fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        n, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    mask = _query(reasons_fn, h)
    name = _query(n.nvmlDeviceGetName, h)
    health = empty_health("")
    health.update(
        source="nvml",
        reason=None,
        name=_text(name),
        uuid=facts.get("uuid"),
        serial=facts.get("serial"),
        pci_bus_id=bus_id,
        numa_node=links.numa_node(bus_id),
        driver_version=_text(facts.get("driver_version")),
        ecc_enabled=facts.get("ecc_enabled"),
        ecc_errors=_ecc(n, h),
        retired_pages=_retired(n, h),
        row_remapping=_remapping(n, h),
        pcie={"generation": facts.get("pcie_generation"), "width": facts.get("pcie_width"),
              "generation_max": facts.get("pcie_generation_max"), "width_max": facts.get("pcie_width_max")},
        gpu_links=_gpu_links(n, h),
        clock_event_reasons=None if mask is None else nvml.throttle_reason_names(mask),
        power_limit_w=facts.get("power_limit_w"),
        power_limit_default_w=facts.get("power_limit_default_w"),
        temperature_c=_query(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU),
        sm_clock_mhz=facts.get("sm_clock_mhz"),
        sm_clock_max_mhz=facts.get("sm_clock_max_mhz"),
        mig_enabled=facts.get("mig_enabled"),
    )
    return health


