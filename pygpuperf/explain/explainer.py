"""One explained step: capture -> classify -> FLOPs and bytes -> roofline bounds -> timeline -> waterfall.

The step shown is the profiled step with the median wall time; every profiled step's
waterfall is kept so the spread is visible. Throughput is timed without the profiler first
(:class:`Throughput`); the profiled steps' timelines then have the profiler's overhead taken
off their idle time, so the waterfall adds up to the step a user really gets.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Any, Callable

import torch

from pygpuperf.analyze.kernel_time import card_terms
from pygpuperf.facts import nvml
from pygpuperf.explain import accesses, attribution, costs, timeline, trace, words
from pygpuperf.explain.model import CallAccesses, ExplainedStep, Explanation, KernelRecord, Throughput
from pygpuperf.core.vocabulary import KernelClass
from pygpuperf.core.results import MachineModel, Stats
from pygpuperf.core.vocabulary import Part


def measure_throughput(step_fn: Callable[[], Any], device: torch.device | str, samples_per_step: int,
                       warmup: int | None = None, steps: int | None = None) -> Throughput:
    """Time `steps` calls of `step_fn` after `warmup` (defaults: 10 and 30 on accelerators, 3 and 5 on a CPU)."""
    from pygpuperf.workloads.base import default_steps, time_steps_with_memory

    device = torch.device(device)
    default_warmup, default_count = default_steps(device)
    for _ in range(default_warmup if warmup is None else warmup):
        step_fn()
    count = default_count if steps is None else steps
    with nvml.sampling(device) as sampler:  # the device's energy over the timed steps, where it reports one
        timed = time_steps_with_memory(step_fn, device, count)
    telemetry = sampler.telemetry if sampler.active else None
    energy = telemetry.energy_j if telemetry is not None else None
    reasons = nvml.held_clock_reasons(telemetry.throttle_reasons) if telemetry else []
    return Throughput(Stats.of([x * 1e6 for x in timed.seconds]), samples_per_step, timed.peak_memory_bytes,
                      timed.resident_memory_bytes, energy / count if energy is not None and count else None,
                      telemetry.median_sm_clock_mhz() if telemetry else None,
                      telemetry.mean_power_w() if telemetry else None, reasons)


def _cost_records(step: trace.StepTrace, fixed_us: float = 0.0) -> dict[str, float]:
    """Give each kernel its op's FLOPs and bytes, then split them among the op's kernels.
    Returns the kernel time of ops no formula knows."""
    unknown: dict[str, float] = {}
    per_call: dict[Any, costs.OpCost] = {}  # the kernels of one op call share its cost
    for record in step.kernels:
        if not record.op:
            continue
        list_item = costs.kernel_element_bytes(record.name)
        key = (record.op_call_id, record.op, list_item) if record.op_call_id is not None else id(record)
        if key not in per_call:
            per_call[key] = costs.op_cost(record.op, record.input_shapes, record.dtypes,
                                          extra=record.concrete_inputs or None, input_strides=record.input_strides,
                                          list_item=list_item)
        cost = per_call[key]
        record.flops, record.bytes = cost.flops, cost.bytes
        if cost.formula.startswith(costs.UNKNOWN):
            unknown[record.op] = unknown.get(record.op, 0.0) + record.duration_us
    attribution.distribute_op_costs(step.kernels, fixed_us=fixed_us)
    return unknown


def bytes_from_traced_calls(records: Sequence[KernelRecord], calls: Sequence[CallAccesses],
                            fixed_us: float = 0.0) -> int:
    """Give the data-moving kernels of a traced call whose op's shapes the profiler did not record (a long
    tensor list of a _foreach_ op arrives as empty shapes: every kernel of the call has no bytes) the bytes
    the call read and wrote, split among them as :func:`attribution.distribute_op_costs` splits an op's
    (in place). Returns how many kernels."""
    by_index = {c.index: c for c in calls}
    of_call: dict[int, list[KernelRecord]] = {}
    for r in records:
        if r.call in by_index and r.op:
            of_call.setdefault(r.call, []).append(r)
    filled = 0
    for call, kernels in of_call.items():
        if any(r.bytes > 0 or r.flops > 0 for r in kernels) or not all(
                r.kernel_class in (KernelClass.MEMORY_BOUND, KernelClass.LAYOUT) for r in kernels):
            continue  # the call was costed from its shapes, or it does math
        total = float(sum(a.nbytes for a in by_index[call].accesses))
        for r in kernels:
            r.bytes = total
        attribution.distribute_op_costs(kernels, group_key=lambda r: r.call, fixed_us=fixed_us)
        filled += len(kernels)
    return filled


def explain_captured(captured: trace.CapturedSteps, model: MachineModel,
                     throughput: Throughput | None = None, settings: dict[str, str] | None = None) -> Explanation:
    """Attribute every captured step against `model` (the measured roofline of the same device). With
    `throughput`, each step's profiler overhead comes off its idle time
    (:func:`pygpuperf.explain.timeline.remove_profiler_overhead`). The diagnosis (causes and findings) is
    :func:`pygpuperf.diagnose.diagnose`'s."""
    explained: list[ExplainedStep] = []
    unknown: dict[str, float] = {}
    for step in captured.steps:
        if captured.access_step is not None:
            tied = accesses.attach(step.kernels, captured.access_step.kernels, captured.access_step.kernel_calls,
                                   captured.calls)
            for record, call in zip(step.kernels, tied.kernel_calls):
                record.call = call
        for op, us in _cost_records(step, card_terms(model).fixed_us).items():
            unknown[op] = unknown.get(op, 0.0) + us
        bytes_from_traced_calls(step.kernels, captured.calls, card_terms(model).fixed_us)
        attribution.assign_bounds(step.kernels, model, captured.calls)
        line = timeline.timeline(step.kernels, step.start_us, step.end_us, step.syncs)
        if throughput is not None:
            line = timeline.remove_profiler_overhead(line, throughput.step_us.median)
        explained.append(ExplainedStep(step.index, step.kernels, line,
                                       attribution.waterfall(step.kernels, line, model, captured.calls),
                                       attribution.self_check(step.kernels), (step.start_us, step.end_us),
                                       list(step.syncs)))
    if not explained:
        raise ValueError("no profiled step was captured")
    walls = [s.timeline.wall_us for s in explained]
    median = explained[walls.index(statistics.median_low(walls))]
    count = len(explained)
    return Explanation(str(captured.device), explained, median, {op: us / count for op, us in unknown.items()},
                       throughput, dict(settings or {}), calls=list(captured.calls))


def explain_again(explanation: Explanation, model: MachineModel) -> Explanation:
    """A recorded explanation's median step costed and bounded again on `model` by the current code (as
    :func:`explain_captured` does a captured one): its bytes, bounds and waterfall."""
    step = explanation.median
    bytes_from_traced_calls(step.kernels, explanation.calls, card_terms(model).fixed_us)
    attribution.assign_bounds(step.kernels, model, explanation.calls)
    step.waterfall = attribution.waterfall(step.kernels, step.timeline, model, explanation.calls)
    return explanation


def quick_machine_model(device: torch.device | str) -> MachineModel:
    """A machine model from a quick run of the memory and compute probes on `device` (some seconds)."""
    from pygpuperf.analyze import conclude
    from pygpuperf.measure import meta
    from pygpuperf.measure import suite
    from pygpuperf.measure.probe import RunSettings
    from pygpuperf.core.results import Results

    device = torch.device(device)
    results = Results(meta=meta.collect(device, ["pygpuperf.explain"]))
    settings = RunSettings(warmup=1, samples=5, quick=True)
    suite.run(suite.plan(device, "all", ["memory", "compute"], quick=True), device, settings, results.measurements)
    conclude.conclude(results, str(device))
    assert results.machine_model is not None
    return results.machine_model


def explain(step_fn: Callable[[], Any], model: MachineModel | None = None, device: torch.device | str = "cuda",
            steps: int = 3, warmup: int = 2, module: torch.nn.Module | None = None,
            trace_path: str | None = None, *, samples_per_step: int = 1, timed_steps: int | None = None,
            throughput: Throughput | None = None, settings: dict[str, str] | None = None) -> Explanation:
    """Time `step_fn` (one training or inference step per call) without the profiler, then profile
    `steps` calls and explain them against `model` (None: a quick probe run on `device` now).

    `module` adds module paths to the kernels; `samples_per_step` (the batch) turns step time
    into throughput; `timed_steps` 0 skips the unprofiled timing, and a given `throughput`
    replaces it (a step already timed elsewhere).
    """
    device = torch.device(device)
    if model is None:
        model = quick_machine_model(device)
    if throughput is None and timed_steps != 0:
        throughput = measure_throughput(step_fn, device, samples_per_step, steps=timed_steps)
        warmup = min(warmup, 1)  # already warm
    captured = trace.capture_step(step_fn, device, steps=steps, warmup=warmup, model=module, trace_path=trace_path,
                                  accesses=True, resident=accesses.resident_storages([module]) if module else None)
    return explain_captured(captured, model, throughput, settings)


def explain_built(built: Any, model: MachineModel | None, device: torch.device | str, steps: int = 3,
                  throughput: Throughput | None = None) -> Explanation:
    """:func:`explain` of a :class:`~pygpuperf.workloads.BuiltWorkload` (its step, batch and first module)."""
    modules = getattr(built, "modules", None) or ()
    return explain(built.step, model, device, steps=steps, module=modules[0] if modules else None,
                   samples_per_step=int(getattr(built, "samples_per_step", 1) or 1), throughput=throughput,
                   settings=dict(getattr(built, "params", {}) or {}))


def explanation_summary(explanation: Explanation, path: str) -> dict[str, Any]:
    """What a results.json workload entry keeps of its explanation: the waterfall, idle split and
    coverage of the median step, and where the full explain.json is."""
    step = explanation.median
    return {"explain_json": path, "step_us": step.timeline.wall_us, "busy_us": step.timeline.busy_us,
            "idle_us": dataclasses.asdict(step.timeline.idle), "ideal_us": step.waterfall.ideal_us,
            "parts_us": dict(step.waterfall.parts), "unexplained_us": step.waterfall.unexplained_us,
            "coverage": step.waterfall.coverage, "self_check_kernels": len(step.self_check),
            "kernels": len(step.kernels)}


def summary_lines(explanation: Explanation) -> list[str]:
    """The waterfall in words: ideal, each part, measured, coverage."""
    w = explanation.median.waterfall
    line = explanation.median.timeline
    kind = words.kind_of(explanation.device)
    lines = []
    if explanation.throughput is not None:
        t = explanation.throughput
        lines.append(f"throughput {t.samples_per_s:,.0f} samples/s: step {t.step_us.median / 1e3:.2f} ms "
                     f"(p5 {t.step_us.p5 / 1e3:.2f}, p95 {t.step_us.p95 / 1e3:.2f}, CV {100 * t.step_us.cv:.1f}%, "
                     f"{t.step_us.n} steps without the profiler)")
        lines.append(f"energy {t.joules_per_sample:.3g} J per sample ({t.energy_j_per_step / (t.step_us.median * 1e-6):,.0f} W "
                     "average device power)" if t.joules_per_sample is not None
                     else "energy: not available (the device reports no energy counter or power)")
        if t.sm_clock_mhz is not None:
            held = f", held below its top by {', '.join(r.replace('_', ' ') for r in t.clock_reasons)}" \
                if t.clock_reasons else ""
            lines.append(f"clock {t.sm_clock_mhz:,.0f} MHz (median over the timed steps{held})")
    if line.profiler_overhead_us > 0:
        lines.append(f"profiled step {(line.wall_us + line.profiler_overhead_us) / 1e3:.2f} ms: "
                     f"{line.profiler_overhead_us / 1e3:.2f} ms of profiler overhead taken off idle time")
    if kind == words.GPU:
        lines.append(f"step {line.wall_us / 1e3:.2f} ms: kernels busy {line.busy_us / 1e3:.2f} ms, idle "
                     f"{line.idle.total_us / 1e3:.2f} ms (host-bound {line.idle.host_bound_us / 1e3:.2f}, launch gaps "
                     f"{line.idle.launch_gap_us / 1e3:.2f}, sync {line.idle.sync_us / 1e3:.2f})")
    else:
        lines.append(f"step {line.wall_us / 1e3:.2f} ms: ops busy {line.busy_us / 1e3:.2f} ms, framework time "
                     f"between ops {line.idle.total_us / 1e3:.2f} ms")
    ideal = f"roofline ideal (sum of {'kernel' if kind == words.GPU else 'op'} bounds)"
    lines.append(f"  {ideal:38s}{w.ideal_us / 1e3:9.2f} ms")
    for part, us in w.parts.items():
        if words.shown(part, kind):
            lines.append(f"  + {words.label(part, kind):36s} {us / 1e3:9.2f} ms  ({100 * us / w.measured_us:4.1f}%)")
    lines.append(f"  + {words.label(Part.UNEXPLAINED, kind):36s} {w.unexplained_us / 1e3:9.2f} ms")
    lines.append(f"  = measured                             {w.measured_us / 1e3:9.2f} ms   coverage {100 * w.coverage:.1f}%")
    if explanation.median.self_check:
        names = sorted({r.op or r.name for r in explanation.median.self_check})
        lines.append(f"  self-check: {len(explanation.median.self_check)} {'kernel' if kind == words.GPU else 'op'}(s) "
                     "beat their bound (miscounted work): "
                     + ", ".join(names[:6]))
    return lines
