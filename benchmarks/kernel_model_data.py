"""Profiles for the kernel-time model's checks: each workload explained at several batch sizes, in one process.

    python benchmarks/kernel_model_data.py RESULTS.json OUT resnet50-train-amp:1,32,64,128,256,512 gpt-100m-train:1,8,16,32
    python benchmarks/kernel_model_data.py RESULTS.json OUT "resnet50-train-amp+memory_format=nchw,cudnn_benchmark=on:256"

OUT/<name>[+knobs]-bs<N>/explain.json is what `python -m pygpuperf.explain` writes there (with the traced
op calls); OUT/runs.json one row per run: the unprofiled step (median, p5,
p95, CV over 30 steps timed as a training loop runs them, no sync per step) and the profile's
kernel count. Batch 1 is the host floor: the step's host time where the device has little to do.
OUT is the RUNS_DIR of `benchmarks/kernel_model_checks.py batch`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
import traceback
from pathlib import Path

import torch

from pygpuperf import diagnose
from pygpuperf.core import documents
from pygpuperf.workloads import UserWorkload, get_workload


def run(name: str, batch: int, model, out: Path, device: str, knobs: dict[str, str]) -> dict:
    started = time.monotonic()
    workload = UserWorkload(name) if ".py" in name else get_workload(name)
    with workload.build(device, batch, **knobs) as built:
        explained = diagnose.explain_built(built, model, device, steps=3).explanation
        explanation = dataclasses.replace(explained, settings=dict(built.params))
    out.mkdir(parents=True, exist_ok=True)  # explain.json alone: the checks read nothing else
    (out / "explain.json").write_text(json.dumps(explanation.to_dict(), default=str), encoding="utf-8")
    t = explanation.throughput
    step = explanation.median
    return {"name": name, "knobs": knobs, "batch": batch, "step_ms": t.step_us.median / 1e3, "p5_ms": t.step_us.p5 / 1e3,
            "p95_ms": t.step_us.p95 / 1e3, "cv": t.step_us.cv, "steps": t.step_us.n,
            "samples_per_s": t.samples_per_s, "kernels": len(step.kernels),
            "traced_kernels": sum(k.call is not None for k in step.kernels), "calls": len(explanation.calls),
            "peak_memory_gb": (t.peak_memory_bytes or 0) / 1e9, "seconds": time.monotonic() - started}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("results", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("runs", nargs="+", help="NAME:BS,BS,...")
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    model = documents.load_results(args.results).machine_model
    rows = []
    for spec in args.runs:
        head, _, sizes = spec.rpartition(":")  # a user step names its function: file.py:make_step:1,8
        name, _, knob_text = head.partition("+")
        knobs = dict(item.split("=", 1) for item in knob_text.split(",") if item)
        tag = Path(head.split(":")[0]).stem if ".py" in name else head
        tag = tag.replace("+", "_").replace("=", "-").replace(",", "_")
        for batch in (int(b) for b in sizes.split(",")):
            try:
                rows.append(run(name, batch, model, args.out / f"{tag}-bs{batch}", args.device, knobs))
            except Exception as exc:  # one run failing must not lose the others
                rows.append({"name": name, "knobs": knobs, "batch": batch, "error": f"{type(exc).__name__}: {str(exc)[:300]}",
                             "trace": traceback.format_exc()[-2000:]})
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            r = rows[-1]
            print(json.dumps({k: v for k, v in r.items() if k != "trace"}), flush=True)
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "runs.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
