"""The tool's step time against the same step in a plain loop, as a user runs it: no sync per step, one
sync at the end, wall clock. For every workload named (default: every built-in one that runs here).

    python benchmarks/plain_loop.py OUT.json [--device cuda] [--loop-steps 30] [--repeats 3] [NAME ...]

Each workload is built once and warmed up; then three timings alternate `--repeats` times: the tool's
(explainer.measure_throughput: device events, no host sync between steps, the telemetry thread
sampling), the same events without the telemetry thread, and the plain loop. The medians are
compared; a ratio above 1 means the tool reports a slower step than the loop. Each repeat keeps the
mean of the tool's steps too, to set against the median (a loop's wall clock gives a mean).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from pygpuperf.core.timing import synchronize
from pygpuperf.explain.explainer import measure_throughput
from pygpuperf.workloads import WORKLOADS
from pygpuperf.workloads.base import time_steps


def plain_loop_seconds(step, device: torch.device, steps: int) -> float:
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    return (time.perf_counter() - start) / steps


def compare(name: str, device: torch.device, loop_steps: int, repeats: int) -> dict:
    workload = WORKLOADS[name]
    why = workload.unavailable()
    if why:
        return {"workload": name, "skipped": why}
    with workload.build(device) as built:
        warmup, _ = workload.default_steps(device)
        for _ in range(warmup):
            built.step()
        tool, tool_mean, quiet, loop = [], [], [], []
        for _ in range(repeats):
            timed = measure_throughput(built.step, device, built.samples_per_step, warmup=0)
            tool.append(timed.step_us.median / 1e6)
            tool_mean.append(timed.step_us.mean / 1e6)
            quiet.append(statistics.median(time_steps(built.step, device, 0, loop_steps)))
            loop.append(plain_loop_seconds(built.step, device, loop_steps))
    t, q, p = statistics.median(tool), statistics.median(quiet), statistics.median(loop)
    return {"workload": name, "samples_per_step": built.samples_per_step, "tool_step_s": t, "loop_step_s": p,
            "ratio_tool_to_loop": t / p, "events_without_telemetry_s": q, "ratio_events_to_loop": q / p,
            "tool_mean_step_s": statistics.median(tool_mean), "ratio_tool_mean_to_loop": statistics.median(tool_mean) / p,
            "tool_repeats_s": tool, "tool_mean_repeats_s": tool_mean, "events_repeats_s": quiet, "loop_repeats_s": loop,
            "loop_cv": statistics.pstdev(loop) / p if p else None}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("names", nargs="*")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--loop-steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
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
