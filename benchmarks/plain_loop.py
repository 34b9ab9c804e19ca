"""The tool's step time against the same step in a plain loop, as a user runs it: no sync per step, one
sync at the end, wall clock. For every workload named (default: every built-in one that runs here).

    python benchmarks/plain_loop.py OUT.json [--device cuda] [--loop-steps 20] [--repeats 5] [NAME ...]

Each workload is built once and warmed up; then the tool's timing (explainer.measure_throughput:
device events, no host sync between steps, the telemetry thread sampling) and the plain loop, the same
number of steps each, alternate `--repeats` times, in the order tool-loop, loop-tool, ... so that a
drift of the host or the card favours neither. Each repeat gives one paired ratio, tool over loop (above
1: the tool reports a slower step); the result is their median with a bootstrap 90 % interval. Host-bound
steps (fp16 loss scaling syncs every step) vary by several per cent between windows of a few dozen steps,
so those need more repeats than device-bound ones to settle a 3 % question. benchmarks/tables.py summarizes
the recorded rows again with :func:`summarize`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from pygpuperf.core.timing import synchronize
from pygpuperf.explain.explainer import measure_throughput
from pygpuperf.workloads import WORKLOADS

GOAL = 0.03  # the tool within 3 % of the loop


def plain_loop_seconds(step, device: torch.device, steps: int) -> float:
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    return (time.perf_counter() - start) / steps


def interval(ratios: list[float], level: float = 0.90, draws: int = 2000) -> tuple[float, float]:
    """Bootstrap interval of the median of `ratios`."""
    rng = np.random.default_rng(0)
    medians = np.median(rng.choice(np.asarray(ratios), size=(draws, len(ratios))), axis=1)
    tail = (1 - level) / 2
    return float(np.quantile(medians, tail)), float(np.quantile(medians, 1 - tail))


def summarize(row: dict) -> dict:
    """A recorded row's ratio and interval, computed again from its paired repeats where it kept them."""
    tools, loops = row.get("tool_repeats_s"), row.get("loop_repeats_s")
    if not tools or not loops or len(tools) != len(loops):
        return dict(row)
    ratios = [t / p for t, p in zip(tools, loops)]
    ratio = statistics.median(ratios)
    return dict(row, ratio_tool_to_loop=ratio, ratio_interval_90=list(interval(ratios)),
                within_goal=abs(ratio - 1) <= GOAL)


def compare(name: str, device: torch.device, loop_steps: int, repeats: int) -> dict:
    workload = WORKLOADS[name]
    why = workload.unavailable()
    if why:
        return {"workload": name, "skipped": why}
    with workload.build(device) as built:
        warmup, _ = workload.default_steps(device)
        for _ in range(warmup):
            built.step()

        means: list[float] = []  # the tool's mean step too: a loop's wall clock gives a mean, the tool a median

        def tool() -> float:
            step = measure_throughput(built.step, device, built.samples_per_step, warmup=0, steps=loop_steps).step_us
            means.append(step.mean / 1e6)
            return step.median / 1e6

        def loop() -> float:
            return plain_loop_seconds(built.step, device, loop_steps)

        tools, loops = [], []
        for i in range(repeats):
            if i % 2 == 0:
                tools.append(tool())
                loops.append(loop())
            else:
                loops.append(loop())
                tools.append(tool())
    ratios = [t / p for t, p in zip(tools, loops)]
    ratio = statistics.median(ratios)
    lo, hi = interval(ratios)
    p = statistics.median(loops)
    return {"workload": name, "samples_per_step": built.samples_per_step, "tool_step_s": statistics.median(tools),
            "loop_step_s": p, "ratio_tool_to_loop": ratio, "ratio_interval_90": [lo, hi],
            "within_goal": abs(ratio - 1) <= GOAL, "repeats": repeats, "steps_per_timing": loop_steps,
            "ratio_tool_mean_to_loop": statistics.median(mean / loop_s for mean, loop_s in zip(means, loops)),
            "loop_cv": statistics.pstdev(loops) / p if p else None,
            "tool_repeats_s": tools, "loop_repeats_s": loops}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("names", nargs="*")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--loop-steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_intermixed_args()
    device = torch.device(args.device)
    names = args.names or sorted(WORKLOADS)
    rows = []
    for name in names:
        try:
            row = compare(name, device, args.loop_steps, args.repeats)
        except Exception as exc:  # one workload's failure is reported, the rest still run
            row = {"workload": name, "error": f"{type(exc).__name__}: {exc}"[:300]}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if not k.endswith("repeats_s")}), flush=True)
        args.out.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
