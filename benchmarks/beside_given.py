"""A fix's step timed alone, and in windows that alternate with the step as given, as --try-fixes times it:
does the given build, kept open beside the fix, change what the fix measures?

    python benchmarks/beside_given.py OUT.json WORKLOAD --fix amp=bf16 [--given amp=none] [--windows 8]

Three phases, each `--windows` windows of --try-fixes' own shape (explainer.measure_throughput, two
warm-up steps and fixes.window_steps timed steps): the fixed step alone; the fixed and the given step in
turn (fixes._paired: given, fixed, fixed, given, ...), torch's flags set to each one's before its window;
the fixed step alone again after the given build has closed. Each window's median step is kept, in order.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from pygpuperf.explain import fixes
from pygpuperf.explain.explainer import measure_throughput
from pygpuperf.workloads import WORKLOADS, knobs as knob_specs

WARMUP = fixes.PAIRED["other"][1]  # warm-up steps per window, as --try-fixes takes them


def _knobs(pairs: list[str]) -> dict[str, str]:
    return dict(p.split("=", 1) for p in pairs)


def _windows(step, device, samples, steps: int, count: int) -> list[float]:
    return [measure_throughput(step, device, samples, warmup=WARMUP, steps=steps).step_us.median
            for _ in range(count)]


def _summary(windows: list[float]) -> dict:
    median = statistics.median(windows)
    spread = statistics.pstdev(windows) / statistics.fmean(windows) if len(windows) > 1 else 0.0
    return {"windows_us": windows, "median_us": median, "cv": spread}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--fix", nargs="+", required=True, help="the fix's knobs, NAME=VALUE")
    parser.add_argument("--given", nargs="*", default=[], help="the given step's knobs, NAME=VALUE")
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("beside_given.py: no GPU here; give --device cpu", file=sys.stderr)
        return 2
    workload = WORKLOADS[args.workload]
    doc: dict = {"workload": args.workload, "fix": _knobs(args.fix), "given": _knobs(args.given)}
    with workload.build(device, **_knobs(args.fix)) as fixed:
        fixed_flags = knob_specs.flag_state()
        steps = None
        for _ in range(5):
            fixed.step()
        # The window length --try-fixes gives the step as given: time it once to size the windows.
        with workload.build(device, **_knobs(args.given)) as given:
            given_flags = knob_specs.flag_state()
            given_us = measure_throughput(given.step, device, given.samples_per_step).step_us.median
            steps = fixes.window_steps(device, given_us)
            doc["given_alone_us"], doc["window_steps"] = given_us, steps
            knob_specs.restore_flag_state(fixed_flags)
            doc["fixed_alone_before"] = _summary(_windows(fixed.step, device, fixed.samples_per_step, steps,
                                                          args.windows))
            beside = fixes._paired(measure_throughput, device,
                                   fixes._Given(given.step, given.samples_per_step, given_flags),
                                   fixed.step, fixed.samples_per_step, steps, pairs=args.windows)
            doc["given_beside"], doc["fixed_beside"] = _summary(beside.given), _summary(beside.fixed)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        doc["fixed_alone_after"] = _summary(_windows(fixed.step, device, fixed.samples_per_step, steps,
                                                     args.windows))
    args.out.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    for key in ("fixed_alone_before", "given_beside", "fixed_beside", "fixed_alone_after"):
        s = doc[key]
        print(f"{key:20s} median {s['median_us'] / 1e3:8.2f} ms  CV {100 * s['cv']:5.2f} %  windows "
              + " ".join(f"{w / 1e3:.2f}" for w in s["windows_us"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
