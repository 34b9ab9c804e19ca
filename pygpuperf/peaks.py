"""What the hardware could do at most: datasheet figures and theoretical peaks.

* Datasheet values (data/datasheets.json) give the '% of datasheet' column.
* Theoretical peaks, computed from the device itself, are the physics guard:
  a measurement above one is a probe bug, never a record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

# Dense FLOP (or integer OP) per clock per multiprocessor, by compute capability, for the
# fastest accumulate type of each input; vendor peak rate / (SM count x boost clock).
# Physics guard only: a measurement above SMs x max clock x this is a probe bug.
_PER_SM_PER_CLOCK = {
    (7, 0): {"tensor.fp16": 1024, "cuda.fp32": 128, "cuda.fp16x2": 256, "cuda.fp64": 64},
    (7, 5): {"tensor.fp16": 1024, "tensor.int8": 2048, "cuda.fp32": 128, "cuda.fp16x2": 256, "cuda.fp64": 4},
    (8, 0): {"tensor.fp16": 2048, "tensor.bf16": 2048, "tensor.tf32": 1024, "tensor.int8": 4096,
             "cuda.fp32": 128, "cuda.fp16x2": 512, "cuda.bf16x2": 512, "cuda.fp64": 64},
    (8, 6): {"tensor.fp16": 1024, "tensor.bf16": 1024, "tensor.tf32": 512, "tensor.int8": 2048,
             "cuda.fp32": 256, "cuda.fp16x2": 256, "cuda.bf16x2": 256, "cuda.fp64": 4},
    (8, 9): {"tensor.fp16": 1024, "tensor.bf16": 1024, "tensor.tf32": 512, "tensor.fp8": 2048,
             "tensor.int8": 2048, "cuda.fp32": 256, "cuda.fp16x2": 256, "cuda.bf16x2": 256, "cuda.fp64": 4},
    (9, 0): {"tensor.fp16": 4096, "tensor.bf16": 4096, "tensor.tf32": 2048, "tensor.fp8": 8192,
             "tensor.int8": 8192, "cuda.fp32": 256, "cuda.fp16x2": 512, "cuda.bf16x2": 512, "cuda.fp64": 128},
}

# Usable PCIe payload rate per lane and direction (GB/s) by generation, after line encoding.
_PCIE_GBPS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


@dataclass(frozen=True)
class Peak:
    value: float
    unit: str
    source: str  # how it was computed


@lru_cache(maxsize=1)
def _datasheets() -> list[dict[str, Any]]:
    text = resources.files("pygpuperf").joinpath("data/datasheets.json").read_text(encoding="utf-8")
    return json.loads(text)["cards"]


def datasheet_for(device_name: str) -> dict[str, Any] | None:
    """The datasheet entry whose match list names this device, or None for an unknown card."""
    for card in _datasheets():
        if any(device_name.startswith(m) for m in card["match"]):
            return card
    return None


def datasheet_value(card: dict[str, Any] | None, measurement_name: str) -> float | None:
    """Datasheet figure for a measurement; memory levels match on 'memory.<level>'."""
    if card is None:
        return None
    values = card["values"]
    if measurement_name in values:
        return float(values[measurement_name])
    parts = measurement_name.split(".")
    if parts[0] == "memory" and len(parts) >= 2:
        key = ".".join(parts[:2])
        if key in values:
            return float(values[key])
    return None


def theoretical_peak(measurement_name: str, device_meta: dict[str, Any]) -> Peak | None:
    """Upper bound from the device's own facts (clocks, bus width, SMs), or None if unknown."""
    parts = measurement_name.split(".")
    if parts[:2] == ["memory", "hbm"]:
        mhz, bits = device_meta.get("mem_clock_max_mhz"), device_meta.get("memory_bus_width_bits")
        if mhz and bits:
            return Peak(mhz * 1e6 * 2 * bits / 8 / 1e9, "GB/s", f"memory clock {mhz} MHz x 2 x {bits}-bit bus")
    if parts[0] == "compute" and len(parts) >= 3 and parts[1] in ("tensor", "cuda"):
        cc = device_meta.get("compute_capability")
        sms, mhz = device_meta.get("multiprocessor_count"), device_meta.get("sm_clock_max_mhz")
        if cc and sms and mhz:
            major, minor = (int(x) for x in cc.split("."))
            per_sm = _PER_SM_PER_CLOCK.get((major, minor), {}).get(f"{parts[1]}.{parts[2]}")
            if per_sm:
                return Peak(
                    per_sm * sms * mhz * 1e6 / 1e12,
                    "TFLOP/s",
                    f"{per_sm} FLOP/clk/SM x {sms} SMs x {mhz} MHz",
                )
    if parts[0] == "transfer" and parts[1] in ("h2d", "d2h"):
        gen, width = device_meta.get("pcie_generation_max"), device_meta.get("pcie_width_max")
        if gen in _PCIE_GBPS_PER_LANE and width:
            return Peak(_PCIE_GBPS_PER_LANE[gen] * width, "GB/s", f"PCIe gen {gen} x{width}")
    return None
