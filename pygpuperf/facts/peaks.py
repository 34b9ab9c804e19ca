"""What the hardware could do at most, from the device's own facts: the physics guard.

A measurement above its theoretical peak (multiprocessors x clock x per-clock rate, memory clock
x bus width, the PCIe link's rate) is a probe bug, never a record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pygpuperf.facts.datasheets import datasheet_fact, datasheet_for, datasheet_value
from pygpuperf.facts.links import pcie_gbps

# A figure this far above its peak is above it, not rounding.
PEAK_MARGIN = 1.02

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


@dataclass(frozen=True)
class Peak:
    value: float
    unit: str
    source: str  # how it was computed


def per_clock_rate(arch: str, kind: str) -> int | None:
    """FLOP (or OP) per clock per multiprocessor of `kind` ("tensor.fp16", "cuda.fp32", ...) on `arch`."""
    return _PER_SM_PER_CLOCK.get(arch, {}).get(kind)


def arch_key(device_meta: dict[str, Any]) -> str | None:
    """The _PER_SM_PER_CLOCK key of a device: its compute capability, or for an AMD part the
    gfx target its datasheet entry names (torch reports CDNA parts as 9.x, which would read as Hopper)."""
    name = device_meta.get("name", "") or ""
    if name.startswith("AMD"):
        return datasheet_fact(datasheet_for(name), "compute_capability")
    return device_meta.get("compute_capability")


# A library GEMM's figure is bounded by the instruction rate of the precision it runs in.
_LIBRARY_UNIT = {"fp16": "tensor.fp16", "fp16acc16": "tensor.fp16", "bf16": "tensor.bf16", "tf32": "tensor.tf32",
                 "fp8": "tensor.fp8", "int8": "tensor.int8", "fp32": "cuda.fp32"}


def theoretical_peak(measurement_name: str, device_meta: dict[str, Any],
                     params: dict[str, Any] | None = None) -> Peak | None:
    """Upper bound from the device's own facts (clocks, bus width, SMs, PCIe link; on a CPU its cores,
    SIMD width and maximum clock), or None if unknown. `params` tell a sweep point's level."""
    parts = measurement_name.split(".")
    if parts[:3] == ["memory", "size", "sweep"] and (params or {}).get("level") == "hbm":
        return theoretical_peak("memory.hbm", device_meta)
    if parts[:2] == ["compute", "library"] and len(parts) >= 3 and parts[2] in _LIBRARY_UNIT:
        return theoretical_peak(f"compute.{_LIBRARY_UNIT[parts[2]]}", device_meta)
    if parts[:2] == ["compute", "simd"] and len(parts) >= 3:
        return _cpu_peak(parts[2], device_meta)
    if parts[:2] == ["transfer", "bidir"]:
        one_way = theoretical_peak("transfer.h2d", device_meta)
        return Peak(2 * one_way.value, one_way.unit, one_way.source + ", both directions") if one_way else None
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
        # A host link that is not PCIe (a superchip's chip-to-chip link) is faster than the PCIe NVML reports.
        host_link = datasheet_value(datasheet_for(str(device_meta.get("name", ""))), f"transfer.{parts[1]}.pinned")
        if rate and host_link and host_link > rate * PEAK_MARGIN:
            return Peak(host_link, "GB/s", "the datasheet's host link, faster than the PCIe link")
        if rate:
            return Peak(rate, "GB/s", f"PCIe gen {gen} x{width}")
    return None


def _cpu_peak(dtype: str, device_meta: dict[str, Any]) -> Peak | None:
    """cores x FLOP per cycle per core x maximum clock, with two FMA pipes of the widest SIMD the CPU
    reports: an upper limit whatever the core's real pipe count."""
    cores, mhz = device_meta.get("cores"), device_meta.get("cpu_clock_max_mhz")
    lanes_bits = device_meta.get("simd_bits")
    if not (cores and mhz and lanes_bits) or dtype not in ("fp32", "fp64"):
        return None
    lanes = lanes_bits // (32 if dtype == "fp32" else 64)
    per_cycle = 2 * 2 * lanes  # two FMA pipes x 2 FLOP x lanes
    return Peak(cores * per_cycle * mhz * 1e6 / 1e12, "TFLOP/s",
                f"{cores} cores x {per_cycle} FLOP/cycle ({lanes_bits}-bit SIMD, two FMA pipes) x {mhz:.0f} MHz")
