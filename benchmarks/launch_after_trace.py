"""How fast a launch-bound loop runs after each kind of trace, in one process: never traced, after a
kernel-duration timing (core.timing's kernel clock, CUDA activity only), after the explainer's capture
(CPU and CUDA activity, shapes), and after a garbage collection. Each timing releases the tracing library
first, as every timing in the tool does; three windows per phase.

    python benchmarks/launch_after_trace.py OUT.json
"""

from __future__ import annotations

import gc
import json
import statistics
import sys

import torch

from pygpuperf.core.timing import sample_seconds
from pygpuperf.explain import trace
from pygpuperf.explain.explainer import measure_throughput


def main(out: str) -> None:
    device = torch.device("cuda")
    x = torch.rand(1024, device=device) + 0.5

    def step() -> torch.Tensor:
        y = x
        for _ in range(300):  # tiny kernels: the host's launches pace the loop
            y = y * 1.0001
        return y

    def windows() -> list[float]:
        return [measure_throughput(step, device, 1, warmup=5, steps=30).step_us.median for _ in range(3)]

    phases = {"never traced": windows()}
    sample_seconds(lambda: x * 2.0, device, 3, 20, kernel_clock=True)
    phases["after a kernel-duration timing"] = windows()
    trace.capture_step(step, device, steps=2, warmup=1)
    phases["after the explainer's capture"] = windows()
    gc.collect()
    phases["after a garbage collection"] = windows()
    phases["again"] = windows()
    report = {name: {"step_us": us, "median_us": statistics.median(us)} for name, us in phases.items()}
    for name, r in report.items():
        print(f"{name:34s} {r['median_us']:8.0f} us  ({', '.join(f'{u:.0f}' for u in r['step_us'])})")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
