"""Does the host's pace drift between the moment --try-fixes times it and a fix's windows? A workload as given
and with a fix's knobs, built side by side; in each round, the given step's host time after a drain (the pace a
prediction replays the host's launches at), then a window of the fixed step and one of the given step, each timed
as a user runs it (host perf_counter over a loop, one sync at the end).

    python benchmarks/host_drift.py OUT.json [--workload gpt-100m-train] [--fixed amp=fp16] [--rounds 12]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from pygpuperf.explain import host_clock
from pygpuperf.workloads import WORKLOADS

from plain_loop import plain_loop_seconds  # the sibling script's loop, as a user runs it

WARMUP = 5
DRAINED_STEPS = 6  # the host's own time per step: each step called after the device drained
WINDOW_STEPS = 10


def _window(step, device: torch.device) -> float:
    """µs per step over a loop of WINDOW_STEPS, one sync at the end."""
    return plain_loop_seconds(step, device, WINDOW_STEPS) * 1e6


def _pearson(x: list[float], y: list[float]) -> float | None:
    try:
        return statistics.correlation(x, y)
    except statistics.StatisticsError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="gpt-100m-train")
    parser.add_argument("--fixed", nargs="*", default=["amp=fp16"], help="the fix's knobs, NAME=VALUE")
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("host_drift.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    knobs = dict(p.split("=", 1) for p in args.fixed)
    rounds = []
    with WORKLOADS[args.workload].build(device) as given, WORKLOADS[args.workload].build(device, **knobs) as fixed:
        for step in (given.step, fixed.step):
            for _ in range(WARMUP):
                step()
        for n in range(args.rounds):
            host, clock = host_clock.host_after_drain(given.step, device, DRAINED_STEPS, warmup=0)
            rounds.append({"round": n, "given_host_after_drain_us": statistics.median(host),
                           "given_optimizer_us": clock.median_us(), "fixed_window_us": _window(fixed.step, device),
                           "given_window_us": _window(given.step, device)})
    host = [r["given_host_after_drain_us"] for r in rounds]
    extra = [r["fixed_window_us"] - r["given_window_us"] for r in rounds]
    summary = {"host_after_drain_us": [min(host), statistics.median(host), max(host)],
               "fixed_minus_given_us": [min(extra), statistics.median(extra), max(extra)],
               "pearson_host_vs_extra": _pearson(host, extra),
               "pearson_host_vs_fixed": _pearson(host, [r["fixed_window_us"] for r in rounds])}
    print(f"{args.workload} {knobs}: the given step's host after a drain {min(host) / 1e3:.2f}-{max(host) / 1e3:.2f}"
          f" ms, fixed minus given {min(extra) / 1e3:+.2f} to {max(extra) / 1e3:+.2f} ms, "
          f"r = {summary['pearson_host_vs_extra']}")
    args.out.write_text(json.dumps({"workload": args.workload, "knobs": knobs, "timer": "host perf_counter",
                                    "rounds": rounds, "summary": summary}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
