"""The host's own time per step, without the profiler: is the step at batch 1 the host's pace at the step's batch?

    python benchmarks/host_pace.py OUT.json WORKLOAD [--knobs NAME=VALUE ...] [--batches 1 16]

For each batch: the step in a loop as a user runs it (host perf_counter over the loop, one sync at the end:
the slower of host and device), and each step called after the device drained, timed on the host until
the call returns (the host's own work, where the step has no sync of its own and its launches fit the
launch queue), with the optimizer's step inside it (explain.host_clock). Medians and CVs over
SAMPLES steps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from pygpuperf.explain import host_clock
from pygpuperf.workloads import WORKLOADS

WARMUP = 5
SAMPLES = 15
LOOP_STEPS = 20


def _stats(values: list[float]) -> dict:
    return {"median_us": statistics.median(values), "cv": statistics.pstdev(values) / statistics.fmean(values),
            "n": len(values)}


def pace(step, device: torch.device) -> dict:
    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize(device)
    loops = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(LOOP_STEPS):
            step()
        torch.cuda.synchronize(device)
        loops.append((time.perf_counter() - start) / LOOP_STEPS * 1e6)
    host, clock = host_clock.host_after_drain(step, device, SAMPLES, warmup=0)
    return {"loop_step": _stats(loops), "host_after_drain": _stats(host), "optimizer_us": clock.median_us(),
            "backward_us": clock.backward_median_us()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--knobs", nargs="*", default=[])
    parser.add_argument("--batches", nargs="+", type=int, default=[1])
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("host_pace.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    knobs = dict(p.split("=", 1) for p in args.knobs)
    doc: dict = {"workload": args.workload, "knobs": knobs, "timer": "host perf_counter", "batches": {}}
    for batch in args.batches:
        with WORKLOADS[args.workload].build(device, batch_size=batch, **knobs) as built:
            doc["batches"][str(batch)] = pace(built.step, device)
        row = doc["batches"][str(batch)]
        print(f"{args.workload} {knobs} batch {batch}: loop {row['loop_step']['median_us'] / 1e3:.2f} ms/step, "
              f"host after a drain {row['host_after_drain']['median_us'] / 1e3:.2f} ms "
              f"(CV {row['host_after_drain']['cv']:.1%}), optimizer {(row['optimizer_us'] or 0) / 1e3:.2f} ms")
    args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
