"""Findings that need the card's datasheet or its board settings.

pygpuperf.analyze.conclude judges measurements against each other and against the architecture's
per-clock limits (half-rate accumulate, clock events, figures above the theoretical peak,
ceilings below 80 % of what SMs x clock allow). These judge them against the vendor's
figures and the board's configuration instead: memory bandwidth and tensor ceilings below
the datasheet (tensor ones at the clock they actually ran at), a lowered power limit, MIG,
ECC and what it costs, and a card the table does not know.

Board facts come from the run's meta (pygpuperf.facts.nvml.static_facts collects power_limit_w,
power_limit_default_w, ecc_enabled and mig_enabled through NVML).
"""

from __future__ import annotations

from typing import Any

from pygpuperf.facts import datasheets
from pygpuperf.core.results import Finding, MachineModel, Measurement, best_of
from pygpuperf.analyze.machine_model import build_machine_model

# Best memory stream below this share of the datasheet bandwidth -> a finding.
BANDWIDTH_SHARE = 0.85
# Tensor ceiling below this share of the datasheet rate at the clock it ran at -> a finding.
TENSOR_SHARE = 0.8
# A power limit this far below the default is a setting, not rounding.
POWER_LIMIT_SHARE = 0.99
# What in-band ECC costs GDDR memory in bandwidth.
GDDR_ECC_COST = "6-12 %"


def _memory_kind(memory_type: str | None) -> str | None:
    if not memory_type:
        return None
    return "hbm" if memory_type.upper().startswith("HBM") else "gddr" if memory_type.upper().startswith("GDDR") else None


def _ecc_finding(ecc: bool, memory_type: str | None) -> Finding:
    kind = _memory_kind(memory_type)
    evidence = {"ecc_enabled": ecc, "memory_type": memory_type}
    if kind == "hbm" and ecc:
        return Finding("info", f"ECC is on at no bandwidth cost: {memory_type} carries the check bits in side-band, "
                       "so the memory ceilings are the full rate.", evidence, "")
    if kind == "hbm":
        return Finding("info", f"ECC is off, which gains nothing here: {memory_type} carries the check bits in "
                       "side-band, so ECC would cost no bandwidth.", evidence,
                       "Turn it on (nvidia-smi -e 1, then reset the GPU or reboot) so memory bit errors are "
                       "corrected instead of silently corrupting results.")
    if kind == "gddr" and ecc:
        return Finding("info", f"ECC is on: {memory_type} stores the check bits in-band, which costs some "
                       f"{GDDR_ECC_COST} of memory bandwidth (and a little capacity) against the datasheet figure.",
                       evidence, "Keep it on where a flipped bit matters (long training runs); turn it off "
                       "(nvidia-smi -e 0, then reboot) only where the bandwidth matters more.")
    if kind == "gddr":
        return Finding("info", f"ECC is off, so the full {memory_type} bandwidth is available, but memory bit errors "
                       "go undetected.", evidence, "")
    return Finding("info", f"ECC is {'on' if ecc else 'off'}; what it costs depends on the memory: nothing on HBM "
                   f"(side-band check bits), some {GDDR_ECC_COST} of bandwidth on GDDR (in-band).", evidence, "")


def _power_finding(device_meta: dict[str, Any], card: dict[str, Any] | None) -> Finding | None:
    limit, default = device_meta.get("power_limit_w"), device_meta.get("power_limit_default_w")
    if not (limit and default) or limit >= POWER_LIMIT_SHARE * default:
        return None
    return Finding(
        "warning", f"The power limit is set to {limit:.0f} W, {100 * (1 - limit / default):.0f}% below the card's "
        f"default {default:.0f} W, so clocks and compute ceilings sit below what the card delivers as shipped.",
        {"power_limit_w": limit, "power_limit_default_w": default, "datasheet_tdp_w": datasheets.datasheet_fact(card, "tdp_w")},
        f"Raise it with nvidia-smi -pl {default:.0f} (as root), or compare this card only with others at the "
        "same limit.")


def _mig_finding(device_meta: dict[str, Any], card: dict[str, Any] | None) -> Finding:
    sms, card_sms = device_meta.get("multiprocessor_count"), datasheets.datasheet_fact(card, "multiprocessors")
    seen = f" ({sms} of {card_sms} SMs)" if sms and card_sms else ""
    return Finding(
        "warning", f"MIG is on, so the probes ran on one GPU instance{seen}, a slice of the card's compute and "
        "memory bandwidth: whole-card datasheet comparisons are skipped.",
        {"mig_enabled": True, "multiprocessor_count": sms, "datasheet_multiprocessors": card_sms},
        "Disable MIG (nvidia-smi -mig 0, as root, with no processes on the GPU) to characterize the whole card.")


def _median_clock(measurements: list[Measurement], name: str, backend: str) -> float | None:
    """Median SM clock during the best run of the measurement that set a ceiling."""
    best = best_of([m for m in measurements if m.name == name and m.backend == backend])
    return best.telemetry.median_sm_clock_mhz() if best is not None and best.telemetry else None


def _bandwidth_finding(model: MachineModel, card: dict[str, Any], per_board: int,
                       device_meta: dict[str, Any]) -> Finding | None:
    key = model.dram_key()
    sheet = datasheets.datasheet_value(card, f"memory.{key}") if key else None
    if not sheet:
        return None
    sheet /= per_board
    ceiling = model.memory[key]
    share = ceiling.value / sheet
    if share >= BANDWIDTH_SHARE:
        return None
    memory_type = datasheets.datasheet_fact(card, "memory_type")
    ecc_cost = device_meta.get("ecc_enabled") and _memory_kind(memory_type) == "gddr"
    return Finding(
        "warning", f"Memory bandwidth reaches {100 * share:.0f}% of the datasheet's {sheet:,.0f} GB/s "
        f"({ceiling.value:,.0f} GB/s, best {key} stream).",
        {"measured_gbps": ceiling.value, "datasheet_gbps": sheet, "share": round(share, 3), "measurement": ceiling.source,
         "backend": ceiling.backend, "memory_type": memory_type, "ecc_enabled": device_meta.get("ecc_enabled"),
         "mem_clock_max_mhz": device_meta.get("mem_clock_max_mhz")},
        (f"In-band ECC on {memory_type} explains up to {GDDR_ECC_COST} of it; beyond that, " if ecc_cost else "")
        + "check that the memory clock reaches its maximum under load and that no other process shares the card; "
        "streams usually reach 90-95 % of the datasheet.")


def _tensor_findings(model: MachineModel, card: dict[str, Any], per_board: int,
                     measurements: list[Measurement]) -> list[Finding]:
    reference_mhz = datasheets.datasheet_fact(card, "tensor_clock_mhz") or datasheets.datasheet_fact(card, "boost_clock_mhz")
    findings = []
    for key, ceiling in sorted(model.compute.items()):
        if not key.startswith("tensor."):
            continue
        sheet = datasheets.datasheet_value(card, f"compute.{key}")
        if not sheet:
            continue
        sheet /= per_board
        mhz = _median_clock(measurements, ceiling.source, ceiling.backend)
        # Vendor figures assume the boost clock; a card held below it cannot reach them, one above it may pass them.
        scale = min(1.0, mhz / reference_mhz) if mhz and reference_mhz else 1.0
        expected = sheet * scale
        if ceiling.value >= TENSOR_SHARE * expected:
            continue
        at_clock = (f" even at the {mhz:,.0f} MHz it ran at ({expected:,.0f} {ceiling.unit} expected there)"
                    if scale < 1.0 else "")
        findings.append(Finding(
            "warning", f"{key} reaches {100 * ceiling.value / expected:.0f}% of the datasheet's {sheet:,.0f} "
            f"{ceiling.unit}{at_clock}: {ceiling.value:,.0f} {ceiling.unit}.",
            {"measured": ceiling.value, "datasheet": sheet, "expected_at_clock": expected, "unit": ceiling.unit,
             "sm_clock_mhz": mhz, "datasheet_clock_mhz": reference_mhz, "measurement": ceiling.source,
             "backend": ceiling.backend},
            "The clock does not explain the gap: the probe's instruction shape does not keep the tensor units "
            "busy, or the card is not the one the datasheet describes; compare the library figure and the "
            "per-variant results."))
    return findings


def datasheet_findings(measurements: list[Measurement], machine_model: MachineModel | None,
                       device_meta: dict[str, Any]) -> list[Finding]:
    """Measured ceilings against the card's datasheet, and board settings that change them."""
    if device_meta.get("type") == "cpu":
        return []
    findings: list[Finding] = []
    card = datasheets.datasheet_for(device_meta.get("name", "") or "")
    if card is None:
        findings.append(Finding("info", "This card is not in the datasheet table, so only measured ceilings are shown.",
                                {"device": device_meta.get("name")},
                                "Add it to pygpuperf/data/datasheets.json, every figure with its source, to get "
                                "datasheet comparisons."))
    mig = bool(device_meta.get("mig_enabled"))
    if mig:
        findings.append(_mig_finding(device_meta, card))
    if card is not None and not mig:
        model = machine_model or build_machine_model(device_meta.get("name", ""), measurements)
        per_board = datasheets.datasheet_fact(card, "devices_per_board") or 1
        bandwidth = _bandwidth_finding(model, card, per_board, device_meta)
        findings += ([bandwidth] if bandwidth else []) + _tensor_findings(model, card, per_board, measurements)
    power = _power_finding(device_meta, card)
    if power:
        findings.append(power)
    ecc = device_meta.get("ecc_enabled")
    if isinstance(ecc, bool):
        findings.append(_ecc_finding(ecc, datasheets.datasheet_fact(card, "memory_type")))
    return findings

