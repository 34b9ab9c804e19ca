"""One explained step: capture -> classify -> FLOPs and bytes -> roofline bounds -> timeline -> waterfall.

The step shown is the profiled step with the median wall time; every profiled step's
waterfall is kept so the spread is visible. Throughput is timed without the profiler first
(:class:`Throughput`); the profiled steps' timelines then have the profiler's overhead taken
off their idle time, so the waterfall adds up to the step a user really gets.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from pygpuperf.explain import attribution, costs, timeline, trace, words
from pygpuperf.explain.model import KernelRecord, Timeline, Waterfall
from pygpuperf.results import Finding, MachineModel, Stats


@dataclass
class Throughput:
    """Steps timed without the profiler (device events after warm-up; wall clock off CUDA)."""

    step_us: Stats  # microseconds per step
    samples_per_step: int
    peak_memory_bytes: float | None = None  # allocator peak during the timed steps
    resident_memory_bytes: float | None = None  # held between steps: weights, optimizer state, data

    @property
    def samples_per_s(self) -> float:
        return self.samples_per_step / (self.step_us.median * 1e-6)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "samples_per_s": self.samples_per_s}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Throughput":
        return Throughput(Stats(**d["step_us"]), int(d["samples_per_step"]), d.get("peak_memory_bytes"),
                          d.get("resident_memory_bytes"))


def fitting_batch(batch: int, peak: float | None, resident: float | None, capacity: float | None) -> int | None:
    """The largest batch whose memory fits `capacity` when memory = resident + per-sample x batch
    (activations grow with the batch; weights, optimizer state and data buffers do not): 0 when
    the resident part alone does not fit; None without the figures to tell."""
    if not peak or not resident or not capacity or peak <= resident:
        return None
    return max(0, int((capacity - resident) // ((peak - resident) / batch)))


def measure_throughput(step_fn: Callable[[], Any], device: torch.device | str, samples_per_step: int,
                       warmup: int | None = None, steps: int | None = None) -> Throughput:
    """Time `steps` calls of `step_fn` after `warmup` (defaults: 10 and 30 on accelerators, 3 and 5 on a CPU)."""
    from pygpuperf.workloads.base import default_steps, time_steps_with_memory

    device = torch.device(device)
    default_warmup, default_count = default_steps(device)
    for _ in range(default_warmup if warmup is None else warmup):
        step_fn()
    timed = time_steps_with_memory(step_fn, device, default_count if steps is None else steps)
    return Throughput(Stats.of([x * 1e6 for x in timed.seconds]), samples_per_step, timed.peak_memory_bytes,
                      timed.resident_memory_bytes)


@dataclass
class ExplainedStep:
    index: int
    kernels: list[KernelRecord]
    timeline: Timeline
    waterfall: Waterfall
    self_check: list[KernelRecord]  # kernels faster than their bound: miscounted work


@dataclass
class Explanation:
    device: str
    steps: list[ExplainedStep]
    median: ExplainedStep  # the step with the median wall time
    unknown_ops: dict[str, float] = field(default_factory=dict)  # op -> kernel time (us) with no cost formula
    throughput: Throughput | None = None  # timed without the profiler
    settings: dict[str, str] = field(default_factory=dict)  # the workload's params: batch, knobs, flags
    findings: list[Finding] = field(default_factory=list)  # pygpuperf.explain.findings, once computed

    def to_dict(self) -> dict[str, Any]:
        step = self.median
        return {
            "device": self.device,
            "settings": self.settings,
            "throughput": self.throughput.to_dict() if self.throughput else None,
            "findings": [dataclasses.asdict(f) for f in self.findings],
            "median_step": step.index,
            "step_wall_us": [s.timeline.wall_us for s in self.steps],
            "timeline": dataclasses.asdict(step.timeline),
            "waterfall": dataclasses.asdict(step.waterfall),
            "self_check": [r.name for r in step.self_check],
            "unknown_ops_us": self.unknown_ops,
            "kernels": [dataclasses.asdict(r) for r in step.kernels],
        }


def _cost_records(step: trace.StepTrace) -> dict[str, float]:
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
    attribution.distribute_op_costs(step.kernels)
    return unknown


def explain_captured(captured: trace.CapturedSteps, model: MachineModel,
                     throughput: Throughput | None = None, settings: dict[str, str] | None = None) -> Explanation:
    """Attribute every captured step against `model` (the measured roofline of the same device),
    with its findings (pygpuperf.explain.findings; `settings`, the workload's params, enable those
    that depend on a switch). With `throughput`, each step's profiler overhead comes off its idle
    time (:func:`pygpuperf.explain.timeline.remove_profiler_overhead`)."""
    explained: list[ExplainedStep] = []
    unknown: dict[str, float] = {}
    for step in captured.steps:
        for op, us in _cost_records(step).items():
            unknown[op] = unknown.get(op, 0.0) + us
        attribution.assign_bounds(step.kernels, model)
        line = timeline.timeline(step.kernels, step.start_us, step.end_us, step.syncs)
        if throughput is not None:
            line = timeline.remove_profiler_overhead(line, throughput.step_us.median)
        explained.append(ExplainedStep(step.index, step.kernels, line, attribution.waterfall(step.kernels, line, model),
                                       attribution.self_check(step.kernels)))
    if not explained:
        raise ValueError("no profiled step was captured")
    walls = [s.timeline.wall_us for s in explained]
    median = explained[walls.index(statistics.median_low(walls))]
    count = len(explained)
    explanation = Explanation(str(captured.device), explained, median, {op: us / count for op, us in unknown.items()},
                              throughput, dict(settings or {}))
    from pygpuperf.explain import findings  # findings reads Explanation from here

    explanation.findings = findings.explain_findings(explanation, explanation.settings, model)
    return explanation


def quick_machine_model(device: torch.device | str) -> MachineModel:
    """A machine model from a quick run of the memory and compute probes on `device` (some seconds)."""
    from pygpuperf import analysis, meta, suite
    from pygpuperf.backends.base import RunSettings
    from pygpuperf.results import Results

    device = torch.device(device)
    results = Results(meta=meta.collect(device, ["pygpuperf.explain"]))
    settings = RunSettings(warmup=1, samples=5, quick=True)
    suite.run(suite.plan(device, "all", ["memory", "compute"], quick=True), device, settings, results.measurements)
    analysis.conclude(results, str(device))
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
    captured = trace.capture_step(step_fn, device, steps=steps, warmup=warmup, model=module, trace_path=trace_path)
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


def write_outputs(explanation: Explanation, out: Path) -> list[Path]:
    """explain.json (median step, waterfall, timeline, kernels) and kernels.csv."""
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "explain.json"
    json_path.write_text(json.dumps(explanation.to_dict(), indent=1, default=str), encoding="utf-8")
    csv_path = out / "kernels.csv"
    columns = [f.name for f in dataclasses.fields(KernelRecord)]
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for record in explanation.median.kernels:
            writer.writerow({k: json.dumps(v) if isinstance(v, (list, dict)) else v
                             for k, v in dataclasses.asdict(record).items()})
    return [json_path, csv_path]


def write_explained(explanation: Explanation, settings: dict[str, str], model: MachineModel | Any, out: Path,
                    echo: Callable[[str], None] = print, echo_findings: bool = True) -> list[Path]:
    """Find what the step says (pygpuperf.explain.findings) and write everything about it into `out`:
    explain.json (settings and findings included), kernels.csv, findings.json, waterfall.png/.svg,
    kernel_roofline.png/.svg and explain.html. `model` is the machine model or the Results holding it;
    `echo` gets the waterfall (and, with `echo_findings`, the findings) as text."""
    from pygpuperf.explain import findings
    from pygpuperf.report.explain_html import write_explain_report

    machine = getattr(model, "machine_model", model)
    explanation.settings = dict(settings)
    explanation.findings = findings.explain_findings(explanation, settings, machine)
    echo("\n".join(summary_lines(explanation) + (findings.finding_lines(explanation.findings) if echo_findings else [])))
    paths = write_outputs(explanation, out)
    paths += write_explain_report(explanation, out, model)
    path = out / "findings.json"
    path.write_text(json.dumps([dataclasses.asdict(f) for f in explanation.findings], indent=1, default=str),
                    encoding="utf-8")
    return [*paths, path]


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
    lines.append(f"  + {words.label(attribution.UNEXPLAINED, kind):36s} {w.unexplained_us / 1e3:9.2f} ms")
    lines.append(f"  = measured                             {w.measured_us / 1e3:9.2f} ms   coverage {100 * w.coverage:.1f}%")
    if explanation.median.self_check:
        names = sorted({r.op or r.name for r in explanation.median.self_check})
        lines.append(f"  self-check: {len(explanation.median.self_check)} {'kernel' if kind == words.GPU else 'op'}(s) "
                     "beat their bound (miscounted work): "
                     + ", ".join(names[:6]))
    return lines
