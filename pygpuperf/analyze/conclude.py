"""From measurements to conclusions: findings and the workload's place on the roofline."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Sequence

from pygpuperf.analyze import diagnostics
from pygpuperf.analyze import hierarchy
from pygpuperf.analyze import transfers
from pygpuperf.core.units import format_bytes
from pygpuperf.core.results import (NOISY_CV, Ceiling, Finding, MachineModel, Measurement, Results, WorkloadResult,
                                    best_per_backend, is_series_point, lower_is_better)
from pygpuperf.analyze.machine_model import build_machine_model
from pygpuperf.facts import peaks
from pygpuperf.facts.nvml import held_clock_reasons

# Native and portable figures for the same name disagree beyond this factor -> a finding.
BACKEND_AGREEMENT_FACTOR = 2.0
# torch may beat a native probe by at most this factor (noise) before it is called out.
NATIVE_MARGIN = 1.01


# The precision key a workload's precision label is held against ("fp16-amp": AMP with fp16 tensors,
# which accumulate in fp32); plain fp32 runs on the vector units.
_WORKLOAD_PRECISION = {"fp16-amp": "fp16.acc32", "bf16-amp": "bf16.acc32", "tf32": "tf32.acc32"}


# verify_detail of a figure the physics guard took out of the machine model.
PHYSICS_GUARD = "physics guard: "
# Families whose figures set ceilings; a guard without a peak for one says so.
_CEILING_FAMILIES = ("compute", "memory", "transfer", "collective")


def guard_physics(measurements: Sequence[Measurement], device_meta: dict[str, Any]) -> list[str]:
    """Mark every figure above its theoretical peak as failed (in place), so that it never becomes a
    ceiling; returns the ceiling-setting names no peak is known for (the guard cannot check them)."""
    unchecked: set[str] = set()
    for m in measurements:
        if m.status != "ok" or not math.isfinite(m.value) or m.name.split(".")[0] not in _CEILING_FAMILIES:
            continue
        peak = peaks.theoretical_peak(m.name, device_meta, m.params)
        if peak is None:
            unchecked.add(m.name)
        elif m.value > peak.value * peaks.PEAK_MARGIN and m.verified:
            m.verified = False
            m.verify_detail = (f"{PHYSICS_GUARD}{m.value:,.4g} {m.unit} is above the theoretical peak "
                               f"{peak.value:,.4g} {peak.unit} ({peak.source})")
    return sorted(unchecked)


def findings_for(measurements: list[Measurement], device_meta: dict[str, Any]) -> list[Finding]:
    findings: list[Finding] = []
    by_name: dict[str, list[Measurement]] = defaultdict(list)
    throttled: dict[str, dict[str, Measurement]] = defaultdict(dict)
    for m in measurements:
        by_name[m.name].append(m)
        if m.status == "error":
            findings.append(Finding("warning", f"The {m.name} probe failed on {m.backend}, so it has no figure.",
                                    {"probe": m.name, "error": m.reason},
                                    "Re-run with --probes " + m.name + " to reproduce; report it if it persists."))
            continue
        # A figure derived from sweep points is wrong only because a point was: that point says so.
        if (m.status == "ok" and not m.verified and hierarchy.DERIVED_FROM not in m.params
                and not m.verify_detail.startswith(PHYSICS_GUARD)):  # the peak finding below names those
            findings.append(Finding("error", f"The {m.name} probe computed a wrong result on {m.backend}, "
                                    "so its figure is not used.",
                                    {"probe": m.name, "detail": m.verify_detail},
                                    "Treat the device or the build as suspect; run the GPU tests."))
        if m.status != "ok" or not math.isfinite(m.value):
            continue
        peak = peaks.theoretical_peak(m.name, device_meta, m.params)
        if peak is not None and m.value > peak.value * peaks.PEAK_MARGIN:
            findings.append(Finding("error", f"{m.name} measured above its theoretical peak, which means a probe bug, "
                                    "not a fast card; it sets no ceiling.",
                                    {"measured": m.value, "peak": peak.value, "unit": m.unit, "peak_source": peak.source,
                                     "backend": m.backend},
                                    "Do not trust this figure; check the probe's byte or FLOP accounting."))
        if m.telemetry:
            for reason in held_clock_reasons(m.telemetry.throttle_reasons):
                throttled[reason].setdefault(f"{m.name} ({m.backend})", m)  # once per probe, not per variant
    noisy = {f"{m.name} ({m.backend})": round(m.stats.cv, 3) for m, _ in best_per_backend(measurements)
             if m.noisy and not is_series_point(m.name)}
    if noisy:
        worst = max(noisy.values())
        findings.append(Finding(
            "warning", f"{len(noisy)} measurement(s) vary by more than {100 * NOISY_CV:.0f}% between samples (CV up to "
            f"{100 * worst:.0f}%), too much to support a verdict on their own: {', '.join(list(noisy)[:8])}"
            + (" ..." if len(noisy) > 8 else "") + ".",
            {"cv": noisy, "threshold": NOISY_CV},
            "Something else ran on the device or host, or its clocks moved: run again on an idle machine (more "
            "--samples narrow the median, not the spread). A quieter measurement of the same roof sets the ceiling "
            "wherever there is one."))
    for reason, hit in throttled.items():
        findings.append(Finding(
            "warning", f"Clocks were held back by {reason.replace('_', ' ')} while {len(hit)} probe(s) ran: "
            f"{', '.join(hit)}.",
            {"reason": reason, "sm_clock_mhz": {label: m.telemetry.median_sm_clock_mhz() for label, m in hit.items()}},
            "Those figures are what the card sustains under its limits; check cooling and power limits "
            "before comparing them with another card."))
    for name, group in by_name.items():
        usable = [m for m, _ in best_per_backend(group) if m.usable]
        if len(usable) >= 2 and not lower_is_better(name):
            lo, hi = min(usable, key=lambda m: m.value), max(usable, key=lambda m: m.value)
            if hi.value > BACKEND_AGREEMENT_FACTOR * lo.value:
                findings.append(Finding("warning", f"Two backends disagree on {name} by {hi.value / lo.value:.1f}x.",
                                        {hi.backend: hi.value, lo.backend: lo.value, "unit": hi.unit},
                                        "The lower one leaves performance on the table or the higher one miscounts."))
            elif hi.backend.startswith("torch") and hi.value > NATIVE_MARGIN * lo.value:
                # Native kernels exist to set the ceiling; torch beating one means it leaves bandwidth unused.
                findings.append(Finding("warning", f"torch beats the native {name} probe by "
                                        f"{100 * (hi.value / lo.value - 1):.1f}%, so that probe is not yet a ceiling.",
                                        {hi.backend: hi.value, lo.backend: lo.value, "unit": hi.unit},
                                        "The machine model uses the higher figure; the native probe needs tuning."))
    return findings


def hierarchy_findings(measurements: list[Measurement], device_meta: dict[str, Any]) -> list[Finding]:
    """Cache capacities found by the sweep against the sizes the device reports.

    A warning per level whose knee lies more than 10 % outside what the device reports; one
    info finding listing the levels that agree, one listing those with no reference size.
    """
    findings: list[Finding] = []
    agreeing: dict[str, dict[str, Any]] = {}
    unreferenced: dict[str, dict[str, Any]] = {}
    for check in hierarchy.capacity_checks(measurements, device_meta):
        where = " per worker" if check.scope == "per worker" else ""
        label = f"{check.level.upper()} {hierarchy.describe_capacity(check)}{where} ({check.backend})"
        facts = {"detected_bytes": check.detected_bytes,
                 "detected_between_bytes": [check.detected_low_bytes, check.detected_high_bytes],
                 "expected_bytes": check.expected_bytes, "expected_source": check.expected_source,
                 "scope": check.scope, "bandwidth_gbps": check.bandwidth_gbps, "backend": check.backend,
                 "mode": check.mode, **check.evidence}
        if check.differs():
            diff = check.relative_difference or 0.0
            findings.append(Finding(
                "warning",
                f"The sweep puts the {check.level.upper()} cache at {hierarchy.describe_capacity(check)}"
                f"{where}, {abs(diff):.0%} {'above' if diff > 0 else 'below'} the "
                f"{format_bytes(check.expected_bytes or 0)} the device reports.",
                facts,
                "Less usable cache than reported means part of it is reserved, shared with other work or lost "
                "to conflicts; more means a neighbouring level (a victim cache, another core's cache) holds the "
                "rest. Size working sets to the measured figure."))
        elif check.expected_bytes:
            agreeing[label] = facts
        else:
            unreferenced[label] = facts
    if agreeing:
        findings.append(Finding("info", "The sweep's cache knees agree with the reported sizes: "
                                + ", ".join(agreeing) + ".", agreeing, ""))
    if unreferenced:
        findings.append(Finding("info", "The sweep found cache knees with no reported size to compare: "
                                + ", ".join(unreferenced) + ".", unreferenced, ""))
    return findings


# FP32-accumulate at or below this fraction of FP16-accumulate is the half-rate design of
# consumer parts; at or above SAME_RATE it is full rate.
HALF_RATE_RATIO = 0.6
SAME_RATE_RATIO = 0.9
# A compute ceiling below this share of SMs x clock x per-SM rate is worth a finding.
ARCH_LIMIT_SHARE = 0.8
# Median SM clock below this share of its maximum during a compute probe is worth a finding.
CLOCK_SHARE = 0.95


def annotate_rates_per_clock(measurements: list[Measurement], device_meta: dict[str, Any]) -> None:
    """Add FLOP (or OP) per clock per multiprocessor at the clock measured during each compute probe."""
    sms = device_meta.get("multiprocessor_count")
    for m in measurements:
        mhz = m.telemetry.median_sm_clock_mhz() if m.telemetry else None
        if sms and mhz and m.usable and m.name.startswith("compute."):
            m.params["flop_per_clock_per_sm"] = round(m.value * 1e12 / (sms * mhz * 1e6), 1)
            m.params["measured_sm_clock_mhz"] = round(mhz)


def compute_findings(measurements: list[Measurement], device_meta: dict[str, Any]) -> list[Finding]:
    """Accumulate-rate ratios, ceilings far below the architecture's limit, clocks below max."""
    best = {m.name: m for m, _ in best_per_backend(measurements) if m.usable and m.name.startswith("compute.")
            and not is_series_point(m.name) and m.backend.startswith("native")}
    findings: list[Finding] = []
    for dtype in sorted({n.split(".")[2] for n in best if n.startswith("compute.tensor.")}):
        acc32, acc16 = best.get(f"compute.tensor.{dtype}.acc32"), best.get(f"compute.tensor.{dtype}.acc16")
        if not (acc32 and acc16):
            continue
        ratio = acc32.value / acc16.value
        evidence = {"acc32": acc32.value, "acc16": acc16.value, "ratio": round(ratio, 3), "unit": acc32.unit}
        if ratio <= HALF_RATE_RATIO:
            findings.append(Finding(
                "warning",
                f"{dtype.upper()} tensor math with FP32 accumulation runs at {100 * ratio:.0f}% of the FP16-accumulate "
                f"rate on this card ({acc32.value:,.0f} vs {acc16.value:,.0f} {acc32.unit}), the half-rate design of "
                "consumer (GeForce-style) parts: AMP training, which accumulates in FP32, gets half the headline rate.",
                evidence,
                "bf16 only accumulates in FP32, so it runs at the same half rate; torch's allow_fp16_accumulation "
                "reaches only library matmuls, not AMP convolutions. Compare cards at their FP32-accumulate rate."))
        elif ratio >= SAME_RATE_RATIO:
            findings.append(Finding(
                "info", f"{dtype.upper()} tensor math runs at the same rate with FP32 and FP16 accumulation "
                f"(ratio {ratio:.2f}), as on data-center and professional parts.", evidence, ""))
    for name, m in best.items():
        peak = peaks.theoretical_peak(name, device_meta)
        if peak is not None and m.value < ARCH_LIMIT_SHARE * peak.value:
            findings.append(Finding(
                "warning", f"{name} reaches {100 * m.value / peak.value:.0f}% of what the architecture allows "
                f"({m.value:,.0f} of {peak.value:,.0f} {m.unit}).",
                {"measured": m.value, "limit": peak.value, "limit_source": peak.source,
                 "variant": m.params.get("variant", ""), "sm_clock_mhz": m.telemetry.median_sm_clock_mhz()
                 if m.telemetry else None},
                "Check the clocks below; otherwise the probe's instruction mix is not at the unit's issue rate."))
    max_mhz = device_meta.get("sm_clock_max_mhz")
    slow = {name: m for name, m in best.items()
            if max_mhz and m.telemetry and (m.telemetry.median_sm_clock_mhz() or max_mhz) < CLOCK_SHARE * max_mhz}
    if slow:
        clocks = {name: m.telemetry.median_sm_clock_mhz() for name, m in slow.items()}
        reasons = sorted({r for m in slow.values() for r in m.telemetry.throttle_reasons})
        findings.append(Finding(
            "warning", f"{len(slow)} compute probe(s) ran below {100 * CLOCK_SHARE:.0f}% of the {max_mhz} MHz maximum "
            f"SM clock (lowest median {min(clocks.values()):,.0f} MHz; reasons: {', '.join(reasons) or 'none given'}).",
            {"sm_clock_mhz": clocks, "sm_clock_max_mhz": max_mhz, "reasons": reasons},
            "These ceilings are what the card sustains at its power and thermal limits, not at its boost clock."))
    return findings


def place_workload(workload: WorkloadResult, model: MachineModel,
                   kernel_bound_us: float | None = None) -> WorkloadResult:
    """Fill the roofline placement of a workload from the machine model (in place).

    With `kernel_bound_us`, the sum of the kernel-time model's bounds over the explained step's kernels
    (pygpuperf.analyze.kernel_time: fixed costs, waves, reuse-aware bytes), what the roofline allows is
    the step's FLOPs over that time; without it, the step's counted intensity against the roofs."""
    label = str(workload.params.get("precision", "fp32"))

    def ceiling(prefer_library: bool) -> tuple[str, Ceiling] | None:
        return (model.matrix_ceiling(_WORKLOAD_PRECISION[label], prefer_library=prefer_library)
                if label in _WORKLOAD_PRECISION else model.vector_ceiling("fp32", prefer_library=prefer_library))

    # The library's figure first: a model's GEMMs and convolutions run through cuBLAS/cuDNN/oneDNN. A step
    # that outruns it (a convolution library beating the GEMM probe's shapes) shows it is no ceiling there:
    # the units' own figure is, where it is higher.
    library, units = ceiling(True), ceiling(False)
    outrun = (library is not None and units is not None and workload.achieved_tflops > library[1].value
              and units[1].value > library[1].value)
    found = units if outrun else library
    workload.notes = [n for n in workload.notes if n != LIBRARY_OUTRUN_NOTE] + ([LIBRARY_OUTRUN_NOTE] if outrun else [])
    if found is not None:
        workload.compute_ceiling = found[0]
    workload.memory_ceiling = model.dram_key()
    # The note says which way the figure below was placed: a workload placed again loses an earlier one.
    workload.notes = [n for n in workload.notes if n != KERNEL_MODEL_NOTE]
    if workload.compute_ceiling and workload.memory_ceiling and math.isfinite(workload.intensity):
        compute = model.compute[workload.compute_ceiling].value
        if kernel_bound_us is not None and kernel_bound_us > 0:
            workload.attainable_tflops = min(compute, workload.flops_per_step / (kernel_bound_us * 1e-6) / 1e12)
            workload.notes.append(KERNEL_MODEL_NOTE)
        else:
            memory_roof = workload.intensity * model.memory[workload.memory_ceiling].value * 1e9 / 1e12
            workload.attainable_tflops = min(compute, memory_roof)
        workload.fraction_of_attainable = workload.achieved_tflops / workload.attainable_tflops
    return workload


LIBRARY_OUTRUN_NOTE = ("compute_ceiling: the units' own figure, not the library's: the step ran faster than the "
                       "library's measured rate")
KERNEL_MODEL_NOTE = ("attainable_tflops: the step's FLOPs over the sum of the bounds the kernel-time model gives its "
                     "kernels or ops (fixed cost each, waves, bytes by the cache level that serves them)")


def workload_findings(workload: WorkloadResult, model: MachineModel) -> list[Finding]:
    if workload.fraction_of_attainable is None:
        return []
    bound = "memory" if workload.attainable_tflops < model.compute[workload.compute_ceiling].value else "compute"
    pct = 100 * workload.fraction_of_attainable
    evidence = {
        "achieved_tflops": workload.achieved_tflops,
        "attainable_tflops": workload.attainable_tflops,
        "intensity_flop_per_byte": workload.intensity,
        "compute_ceiling": workload.compute_ceiling,
        "memory_ceiling": workload.memory_ceiling,
    }
    gaps = "framework time between ops" if workload.device.startswith("cpu") else "launch gaps"
    units = "ops" if workload.device.startswith("cpu") else "kernels"
    if KERNEL_MODEL_NOTE in workload.notes:
        title = (f"{workload.name} reaches {pct:.0f}% of what its {units}' bounds allow on the measured roofline "
                 f"({workload.intensity:.1f} FLOP/B counted).")
    else:
        title = (f"{workload.name} reaches {pct:.0f}% of what the measured roofline allows at its intensity "
                 f"({workload.intensity:.1f} FLOP/B, {bound}-bound by counted work).")
    severity = "info" if pct >= 30 else "warning"
    suggestion = (f"Most of the step is not matmul/conv arithmetic at full rate: look at elementwise and "
                  f"normalization {units}, {gaps} and data layout (the explained step below says which)."
                  if pct < 30 else "")
    if LIBRARY_OUTRUN_NOTE in workload.notes:
        suggestion = " ".join(filter(None, (suggestion, (
            f"The step ran faster than the library's measured rate, so it is placed against "
            f"{workload.compute_ceiling}: the library probe's shapes run slower than this step's ops."))))
    return [Finding(severity, title, evidence, suggestion)]


def conclude(results: Results, device: str) -> None:
    """Measurements -> machine model -> findings, in place: the cache levels read off the
    sweeps' plateaus, per-clock rates, the model's ceilings, the workloads' place on them,
    then every finding."""
    meta = results.meta["device"]
    results.measurements += hierarchy.derive_cache_measurements(results.measurements, meta)
    annotate_rates_per_clock(results.measurements, meta)
    unchecked = guard_physics(results.measurements, meta)
    results.machine_model = build_machine_model(device, results.measurements)
    results.machine_model.fill_capacity(meta)
    results.findings = (findings_for(results.measurements, meta) + hierarchy_findings(results.measurements, meta)
                        + compute_findings(results.measurements, meta)
                        + intensity_sweep_findings(results.measurements, results.machine_model)
                        + diagnostics.datasheet_findings(results.measurements, results.machine_model, meta)
                        + transfers.transfer_findings(results.measurements, results.meta.get("links")))
    if unchecked:
        families = sorted({".".join(n.split(".")[:2]) for n in unchecked})
        results.findings.append(Finding(
            "info", f"No theoretical peak is known here for {len(unchecked)} figure(s) ({', '.join(families)}), so "
            "the physics guard could not check them against one.",
            {"unchecked": unchecked[:40]},
            "Nothing to do; where the device reports its clocks, bus width and links, the guard checks them."))
    missing = results.meta.get("extension", {}).get("error")
    if missing:
        results.findings.insert(0, Finding(
            "warning", "The native extension did not load, so only torch-level figures were measured.",
            {"import_error": missing},
            "Build it with: pip install --no-build-isolation -e . (a non-editable install must be run from "
            "outside the source tree, whose pygpuperf folder has no compiled extension)."))
    for w in results.workloads:
        conclude_workload(results, w)


def conclude_workload(results: Results, workload: WorkloadResult, kernel_bound_us: float | None = None) -> None:
    """One workload of `results` (already concluded) placed on its machine model (`kernel_bound_us`: see
    place_workload), with its findings."""
    assert results.machine_model is not None
    place_workload(workload, results.machine_model, kernel_bound_us)
    results.findings += workload_findings(workload, results.machine_model)


# A sweep plateau and a ceiling agree when they are within this share of each other.
SWEEP_AGREEMENT = 0.10


def intensity_sweep_findings(measurements: list[Measurement], model: MachineModel) -> list[Finding]:
    """The mixbench-style sweep against the ceilings, per precision: its compute-bound end against
    the peak probe, its memory-bound end against the main-memory roof, and the ridge point the two
    ends imply against the model's."""
    series: dict[str, list[tuple[float, Measurement]]] = defaultdict(list)
    for m in measurements:
        intensity = m.quantities.flop_per_byte
        if m.name == "compute.sweep" and m.usable and m.flops > 0 and intensity:
            series[str(m.params.get("variant", "")).split(".", 1)[0]].append((intensity, m))
    dram = model.dram_key()
    # The sweep reads and writes every byte once, so a copy stream is its memory roof.
    copies = [m for m in measurements if dram and m.name == f"memory.{dram}.copy" and m.usable]
    memory_gbs = max((m.value for m in copies), default=model.memory[dram].value if dram else 0.0)
    findings: list[Finding] = []
    for precision, points in sorted(series.items()):
        points.sort(key=lambda point: point[0])
        if len(points) < 3 or dram is None:
            continue
        top = max(m.value for _, m in points)  # TFLOP/s at the compute-bound end
        bandwidth = max(m.value / intensity * 1e3 for intensity, m in points)  # GB/s, memory-bound end
        measured_ridge = top * 1e3 / bandwidth
        ceiling = model.compute.get(f"cuda.{precision}")
        if ceiling is None:
            continue
        ridge = ceiling.value * 1e3 / memory_gbs
        evidence = {"precision": precision, "sweep_tflops": round(top, 2), "sweep_gbs": round(bandwidth),
                    "sweep_ridge_flop_per_byte": round(measured_ridge, 1), f"{dram}_copy_gbs": round(memory_gbs),
                    "peak_probe_tflops": round(ceiling.value, 2), "model_ridge_flop_per_byte": round(ridge, 1)}
        if top > ceiling.value * (1 + SWEEP_AGREEMENT):
            findings.append(Finding(
                "warning", f"The {precision} intensity sweep reaches {top:,.1f} TFLOP/s, above the {ceiling.value:,.1f} "
                f"of the compute.cuda.{precision} peak probe: the peak kernel is not at the unit's issue rate, so the "
                f"roof is higher than the table says.", evidence,
                "Treat the sweep's figure as the compute roof for this precision; the peak probe needs tuning."))
        elif top < ceiling.value * (1 - SWEEP_AGREEMENT) or bandwidth < memory_gbs * (1 - SWEEP_AGREEMENT):
            findings.append(Finding(
                "warning", f"The {precision} intensity sweep stays below the ceilings ({top:,.1f} TFLOP/s of "
                f"{ceiling.value:,.1f}, {bandwidth:,.0f} GB/s of {memory_gbs:,.0f}), so the roofline's corner is "
                "not where the ceilings put it.", evidence,
                "Mixed kernels lose rate to latency between loads and math; expect real kernels near the sweep."))
        else:
            findings.append(Finding(
                "info", f"The {precision} intensity sweep turns compute-bound at {measured_ridge:,.1f} FLOP/B, where the "
                f"ceilings put the ridge ({ridge:,.1f} FLOP/B against the copy roof): the roofline holds for "
                "mixed kernels.", evidence, ""))
    return findings


def collective_findings(measurements: Sequence[Measurement]) -> list[Finding]:
    """Collective measurements that were wrong or failed, as findings."""
    findings = []
    wrong = [m for m in measurements if m.status == "ok" and not m.verified]
    if wrong:
        findings.append(Finding(
            "error", f"{len(wrong)} collective measurement(s) delivered a wrong result, so their figures are not used.",
            {f"{m.name} {m.quantities.size_bytes} B": m.verify_detail for m in wrong},
            "Treat the interconnect, the driver or the communication library as suspect; rerun to see if it repeats."))
    failed = [m for m in measurements if m.status == "error"]
    if failed:
        findings.append(Finding("warning", f"{len(failed)} collective measurement(s) failed, so they have no figure.",
                                {m.name: m.reason for m in failed},
                                "Rerun with --max-size below the size that failed, or with fewer processes."))
    return findings
