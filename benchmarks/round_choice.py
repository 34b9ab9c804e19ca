"""Which of a library timing's spaced rounds predicts the step? A profiled step's convolution shapes timed at its
batch and at twice it in ROUNDS rounds, each behind another spacer (as --try-fixes times them), every round kept;
the batch fix predicted from the fastest round of each variant and from the median one; then the workload's step
at both batches timed in alternating windows, each in fresh memory, as the fix's windows are.

    python benchmarks/round_choice.py EXPLAIN.json OUT.json --machine-model RESULTS.json [--rounds 6] [--windows 8]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
from pathlib import Path

import torch

from pygpuperf.core import documents
from pygpuperf.explain import convs, dtype_timing, explainer, fixes
from pygpuperf.explain.compare import load_explanation
from pygpuperf.workloads import WORKLOADS
from pygpuperf.workloads.recipe import release_device_memory


def _picked(rounds: list[list[convs.ConvTiming]], pick) -> list[convs.ConvTiming]:
    """One timing per shape, each variant's time `pick`ed over the rounds."""
    out = []
    for timings in zip(*rounds):
        first = copy.deepcopy(timings[0])
        first.us = {k: pick([t.us[k] for t in timings if k in t.us]) for k in first.us}
        out.append(first)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("explain", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--machine-model", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--windows", type=int, default=8)
    args = parser.parse_args()
    device = torch.device("cuda")
    model = documents.load_results(args.machine_model).machine_model
    e = load_explanation(args.explain)
    explainer.explain_again(e, model)
    records = e.median.kernels
    dtype = convs.step_dtype(records)
    samples = e.throughput.samples_per_step
    rounds = []
    for n in range(args.rounds):
        release_device_memory(device)
        with fixes._spacer(device, n * fixes.ROUND_SPACER_BYTES):
            base = convs.time_step_convs(records, True, device, dtypes=[dtype], scale=1.0)
            doubled = convs.time_step_convs(records, True, device, dtypes=[dtype], scale=2.0)
        rounds.append(dtype_timing.merged(base, doubled))
    predictions = {}
    for name, pick in (("fastest", min), ("median", statistics.median)):
        e.conv_timings = _picked(rounds, pick)
        predictions[name] = fixes.predicted_step(e, model, "batch_size", {"batch_size": str(2 * samples)}, samples)
    windows = {"given": [], "doubled": []}
    workload = WORKLOADS[e.settings["workload"]]
    with workload.build(device) as given, workload.build(device, batch_size=2 * samples) as doubled:
        for i in range(args.windows):
            for side in (("given", "doubled") if i % 2 == 0 else ("doubled", "given")):
                built = given if side == "given" else doubled
                release_device_memory(device)
                timed = explainer.measure_throughput(built.step, device, built.samples_per_step, warmup=2, steps=8)
                windows[side].append(timed.step_us.median)
    given_us, doubled_us = statistics.median(windows["given"]), statistics.median(windows["doubled"])
    change = given_us - doubled_us / 2
    summary = {name: {"predicted_per_batch_us": p / 2, "error_share_of_change": abs(p / 2 - doubled_us / 2) / change}
               for name, p in predictions.items()}
    print(f"given {given_us / 1e3:.2f} ms, doubled {doubled_us / 1e3:.2f} ms ({doubled_us / 2e3:.2f} per batch); "
          + ", ".join(f"{k} rounds predict {v['predicted_per_batch_us'] / 1e3:.2f} "
                      f"({100 * v['error_share_of_change']:.0f} %)" for k, v in summary.items()))
    args.out.write_text(json.dumps({
        "explain": str(args.explain), "rounds": [[t.to_dict() for t in r] for r in rounds],
        "predicted_step_us": predictions, "windows_us": windows, "summary": summary}, indent=1) + "\n",
        encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
