"""What the hardware could do at most: datasheet figures and theoretical peaks.

* Datasheet values (data/datasheets.json, validated against data/datasheets.schema.json)
  give the '% of datasheet' column; every value and fact there names its source document.
* Theoretical peaks, computed from the device itself, are the physics guard:
  a measurement above one is a probe bug, never a record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import jsonschema

# Dense FLOP (or integer OP) per clock per multiprocessor (SM, or CU on AMD), keyed by CUDA
# compute capability or AMD gfx target, for the fastest accumulate type of each input;
# vendor peak rate / (multiprocessors x boost clock). Physics guard only: a measurement above
# multiprocessors x max clock x this is a probe bug. AMD parts need their own keys because
# torch reports gfx90a as compute capability 9.0, Hopper's.
_PER_SM_PER_CLOCK: dict[str, dict[str, int]] = {
    "7.0": {"tensor.fp16": 1024, "cuda.fp32": 128, "cuda.fp16x2": 256, "cuda.fp64": 64},
    "7.5": {"tensor.fp16": 1024, "tensor.int8": 2048, "cuda.fp32": 128, "cuda.fp16x2": 256, "cuda.fp64": 4},
    "8.0": {"tensor.fp16": 2048, "tensor.bf16": 2048, "tensor.tf32": 1024, "tensor.int8": 4096,
            "cuda.fp32": 128, "cuda.fp16x2": 512, "cuda.bf16x2": 512, "cuda.fp64": 64},
    "8.6": {"tensor.fp16": 1024, "tensor.bf16": 1024, "tensor.tf32": 512, "tensor.int8": 2048,
            "cuda.fp32": 256, "cuda.fp16x2": 256, "cuda.bf16x2": 256, "cuda.fp64": 4},
    "8.9": {"tensor.fp16": 1024, "tensor.bf16": 1024, "tensor.tf32": 512, "tensor.fp8": 2048,
            "tensor.int8": 2048, "cuda.fp32": 256, "cuda.fp16x2": 256, "cuda.bf16x2": 256, "cuda.fp64": 4},
    "9.0": {"tensor.fp16": 4096, "tensor.bf16": 4096, "tensor.tf32": 2048, "tensor.fp8": 8192,
            "tensor.int8": 8192, "cuda.fp32": 256, "cuda.fp16x2": 512, "cuda.bf16x2": 512, "cuda.fp64": 128},
    # CDNA 2 (MI250X): matrix cores per CU; FP32 counts packed FP32, which doubles the vector rate.
    "gfx90a": {"tensor.fp16": 1024, "tensor.bf16": 1024, "tensor.int8": 1024, "cuda.fp32": 256, "cuda.fp64": 128},
    # CDNA 3 (MI300X).
    "gfx942": {"tensor.fp16": 2048, "tensor.bf16": 2048, "tensor.tf32": 1024, "tensor.fp8": 4096,
               "tensor.int8": 4096, "cuda.fp32": 256, "cuda.fp64": 128},
}

# Usable PCIe payload rate per lane and direction (GB/s) by generation, after line encoding.
_PCIE_GBPS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

MAX_DATASHEET_BYTES = 4 * 1024 * 1024


class DatasheetError(ValueError):
    """The datasheet table cannot be used; the message says where and why."""


@dataclass(frozen=True)
class Peak:
    value: float
    unit: str
    source: str  # how it was computed


def per_clock_rate(arch: str, kind: str) -> int | None:
    """FLOP (or OP) per clock per multiprocessor of `kind` ("tensor.fp16", "cuda.fp32", ...) on `arch`."""
    return _PER_SM_PER_CLOCK.get(arch, {}).get(kind)


def pcie_gbps(generation: int, width: int) -> float | None:
    """Payload rate of a PCIe link per direction, GB/s."""
    rate = _PCIE_GBPS_PER_LANE.get(generation) if isinstance(generation, (int, float)) else None
    return rate * width if rate and width else None


@lru_cache(maxsize=1)
def datasheets_schema() -> dict[str, Any]:
    text = resources.files("pygpuperf").joinpath("data/datasheets.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def validate_datasheets(doc: Any, origin: str = "datasheets.json") -> None:
    """Raise DatasheetError unless `doc` is a valid datasheet table whose every source id resolves
    and whose card keys and match prefixes are unambiguous."""
    validator = jsonschema.Draft202012Validator(datasheets_schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(doc))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise DatasheetError(f"{origin}: not a valid datasheet table at {where}: {error.message[:300]}")
    sources = doc["sources"]
    keys: set[str] = set()
    prefixes: dict[str, str] = {}
    for card in doc["cards"]:
        key = card["key"]
        if key in keys:
            raise DatasheetError(f"{origin}: card key {key!r} appears twice")
        keys.add(key)
        for table in ("facts", "values"):
            for name, entry in card[table].items():
                if entry["source"] not in sources:
                    raise DatasheetError(f"{origin}: {key} {table}/{name} cites source {entry['source']!r}, "
                                         "which the sources table does not list")
        for prefix in card["match"]:
            for other, owner in prefixes.items():
                if owner != key and (prefix.startswith(other) or other.startswith(prefix)):
                    raise DatasheetError(f"{origin}: match prefix {prefix!r} of {key} overlaps {other!r} of {owner}")
            prefixes[prefix] = key


def parse_datasheets(text: str, origin: str = "datasheets.json") -> dict[str, Any]:
    """Parse and validate a datasheet table (plain JSON; nothing in it is executed)."""
    if len(text) > MAX_DATASHEET_BYTES:
        raise DatasheetError(f"{origin}: {len(text)} characters is larger than a datasheet table can be")
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise DatasheetError(f"{origin}: not valid JSON: {str(exc)[:200]}") from None
    validate_datasheets(doc, origin)
    return doc


def _reject_constant(name: str) -> None:
    raise ValueError(f"non-standard JSON constant {name}")


@lru_cache(maxsize=1)
def datasheet_document() -> dict[str, Any]:
    """The validated datasheet table shipped with pygpuperf."""
    text = resources.files("pygpuperf").joinpath("data/datasheets.json").read_text(encoding="utf-8")
    return parse_datasheets(text, "pygpuperf/data/datasheets.json")


def _datasheets() -> list[dict[str, Any]]:
    return datasheet_document()["cards"]


def datasheet_for(device_name: str) -> dict[str, Any] | None:
    """The datasheet entry whose match list names this device, or None for an unknown card."""
    for card in _datasheets():
        if any(device_name.startswith(m) for m in card["match"]) and not any(
                device_name.startswith(x) for x in card.get("exclude", ())):
            return card
    return None


def datasheet_value(card: dict[str, Any] | None, measurement_name: str) -> float | None:
    """Datasheet figure for a measurement; memory levels match on 'memory.<level>'."""
    if card is None:
        return None
    values = card["values"]
    if measurement_name in values:
        return float(values[measurement_name]["value"])
    parts = measurement_name.split(".")
    if parts[0] == "memory" and len(parts) >= 2:
        key = ".".join(parts[:2])
        if key in values:
            return float(values[key]["value"])
    return None


def datasheet_fact(card: dict[str, Any] | None, name: str) -> Any | None:
    """A fact of a card ("memory_type", "boost_clock_mhz", ...), or None where the table has none."""
    if card is None or name not in card["facts"]:
        return None
    return card["facts"][name]["value"]


def datasheet_source(source_id: str) -> dict[str, str]:
    """The document a source id names: publisher, title, version, url."""
    return datasheet_document()["sources"][source_id]


def arch_key(device_meta: dict[str, Any]) -> str | None:
    """The _PER_SM_PER_CLOCK key of a device: its compute capability, or for an AMD part the
    gfx target its datasheet entry names (torch reports CDNA parts as 9.x, which would read as Hopper)."""
    name = device_meta.get("name", "") or ""
    if name.startswith("AMD"):
        return datasheet_fact(datasheet_for(name), "compute_capability")
    return device_meta.get("compute_capability")


def theoretical_peak(measurement_name: str, device_meta: dict[str, Any]) -> Peak | None:
    """Upper bound from the device's own facts (clocks, bus width, SMs), or None if unknown."""
    parts = measurement_name.split(".")
    if parts[:2] == ["memory", "hbm"]:
        mhz, bits = device_meta.get("mem_clock_max_mhz"), device_meta.get("memory_bus_width_bits")
        if mhz and bits:
            return Peak(mhz * 1e6 * 2 * bits / 8 / 1e9, "GB/s", f"memory clock {mhz} MHz x 2 x {bits}-bit bus")
    if parts[0] == "compute" and len(parts) >= 3 and parts[1] in ("tensor", "cuda"):
        arch = arch_key(device_meta)
        sms, mhz = device_meta.get("multiprocessor_count"), device_meta.get("sm_clock_max_mhz")
        if arch and sms and mhz:
            per_sm = per_clock_rate(arch, f"{parts[1]}.{parts[2]}")
            if per_sm:
                return Peak(
                    per_sm * sms * mhz * 1e6 / 1e12,
                    "TFLOP/s",
                    f"{per_sm} FLOP/clk/SM x {sms} SMs x {mhz} MHz",
                )
    if parts[0] == "transfer" and len(parts) >= 2 and parts[1] in ("h2d", "d2h"):
        gen, width = device_meta.get("pcie_generation_max"), device_meta.get("pcie_width_max")
        rate = pcie_gbps(gen, width) if gen and width else None
        if rate:
            return Peak(rate, "GB/s", f"PCIe gen {gen} x{width}")
    return None
