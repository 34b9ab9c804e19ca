"""One explained step: capture -> classify -> FLOPs and bytes -> roofline bounds -> timeline -> waterfall.

The step shown is the profiled step with the median wall time; every profiled step's
waterfall is kept so the spread is visible.
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

from pygpuperf.explain import attribution, costs, timeline, trace
from pygpuperf.explain.model import KernelRecord, Timeline, Waterfall
from pygpuperf.results import MachineModel


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

    def to_dict(self) -> dict[str, Any]:
        step = self.median
        return {
            "device": self.device,
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
    for record in step.kernels:
        if not record.op:
            continue
        cost = costs.op_cost(record.op, record.input_shapes, record.dtypes, extra=record.concrete_inputs or None)
        record.flops, record.bytes = cost.flops, cost.bytes
        if cost.formula.startswith(costs.UNKNOWN):
            unknown[record.op] = unknown.get(record.op, 0.0) + record.duration_us
    attribution.distribute_op_costs(step.kernels)
    return unknown


def explain_captured(captured: trace.CapturedSteps, model: MachineModel) -> Explanation:
    """Attribute every captured step against `model` (the measured roofline of the same device)."""
    explained: list[ExplainedStep] = []
    unknown: dict[str, float] = {}
    for step in captured.steps:
        for op, us in _cost_records(step).items():
            unknown[op] = unknown.get(op, 0.0) + us
        attribution.assign_bounds(step.kernels, model)
        line = timeline.timeline(step.kernels, step.start_us, step.end_us, step.syncs)
        explained.append(ExplainedStep(step.index, step.kernels, line, attribution.waterfall(step.kernels, line, model),
                                       attribution.self_check(step.kernels)))
    if not explained:
        raise ValueError("no profiled step was captured")
    walls = [s.timeline.wall_us for s in explained]
    median = explained[walls.index(statistics.median_low(walls))]
    count = len(explained)
    return Explanation(str(captured.device), explained, median, {op: us / count for op, us in unknown.items()})


def explain(step_fn: Callable[[], Any], model: MachineModel, device: torch.device | str = "cuda",
            steps: int = 3, warmup: int = 2, module: torch.nn.Module | None = None,
            trace_path: str | None = None) -> Explanation:
    """Profile `steps` calls of `step_fn` (one training or inference step each) and explain them
    against `model`. `module` adds module paths to the kernels."""
    captured = trace.capture_step(step_fn, torch.device(device), steps=steps, warmup=warmup, model=module,
                                  trace_path=trace_path)
    return explain_captured(captured, model)


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


def summary_lines(explanation: Explanation) -> list[str]:
    """The waterfall in words: ideal, each part, measured, coverage."""
    w = explanation.median.waterfall
    line = explanation.median.timeline
    lines = [f"step {line.wall_us / 1e3:.2f} ms: kernels busy {line.busy_us / 1e3:.2f} ms, idle "
             f"{line.idle.total_us / 1e3:.2f} ms (host-bound {line.idle.host_bound_us / 1e3:.2f}, launch gaps "
             f"{line.idle.launch_gap_us / 1e3:.2f}, sync {line.idle.sync_us / 1e3:.2f})",
             f"  roofline ideal (sum of kernel bounds)  {w.ideal_us / 1e3:9.2f} ms"]
    for part, us in w.parts.items():
        lines.append(f"  + {part:36s} {us / 1e3:9.2f} ms  ({100 * us / w.measured_us:4.1f}%)")
    lines.append(f"  + {attribution.UNEXPLAINED:36s} {w.unexplained_us / 1e3:9.2f} ms")
    lines.append(f"  = measured                             {w.measured_us / 1e3:9.2f} ms   coverage {100 * w.coverage:.1f}%")
    if explanation.median.self_check:
        names = sorted({r.op or r.name for r in explanation.median.self_check})
        lines.append(f"  self-check: {len(explanation.median.self_check)} kernel(s) beat their bound (miscounted work): "
                     + ", ".join(names[:6]))
    return lines
