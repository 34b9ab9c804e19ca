"""Explain every registered workload on one device in one process, and tabulate coverage and self-check.

    python benchmarks/explain_zoo.py RESULTS.json OUT [--budget-s 330] [name ...]

Per workload, OUT/<name>/ gets what `python -m pygpuperf.explain` writes (explain.json,
kernels.csv, findings.json, waterfall and kernel-roofline charts, explain.html); OUT/zoo.json
and OUT/zoo.txt hold one row per workload. Workloads not started within the time budget are
listed as skipped, never guessed.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from pathlib import Path

import torch

from pygpuperf.core import documents
from pygpuperf.explain import explainer
from pygpuperf.workloads import WORKLOADS, get_workload
from pygpuperf.report import explained


def explain_one(name: str, model, out: Path) -> dict:
    started = time.monotonic()
    with get_workload(name).build("cuda") as built:
        explanation = explainer.explain_built(built, model, "cuda", steps=3)
        params = dict(built.params)
    explained.write_explained(explanation, params, model, out, echo=lambda text: None)
    found = explanation.findings
    step = explanation.median
    w = step.waterfall
    t = explanation.throughput
    return {"name": name, "params": params, "samples_per_s": t.samples_per_s, "step_ms": t.step_us.median / 1e3,
            "cv": t.step_us.cv, "peak_memory_gb": (t.peak_memory_bytes or 0) / 1e9,
            "profiler_overhead_ms": step.timeline.profiler_overhead_us / 1e3, "coverage": w.coverage,
            "ideal_ms": w.ideal_us / 1e3, "parts_ms": {k: v / 1e3 for k, v in w.parts.items()},
            "self_check": sorted({f"{r.op} [{r.kernel_class}] {r.name[:70]}" for r in step.self_check}),
            "self_check_kernels": len(step.self_check), "kernels": len(step.kernels),
            "unknown_ops_us": explanation.unknown_ops, "findings": [f.title for f in found],
            "seconds": time.monotonic() - started}


def row_line(r: dict) -> str:
    if "error" in r or "skipped" in r:
        return f"{r['name']:22s} {r.get('error') or r.get('skipped')}"
    parts = sorted(r["parts_ms"].items(), key=lambda kv: -kv[1])[:2]
    return (f"{r['name']:22s} bs {r['params'].get('batch_size', '?'):>4s} {r['samples_per_s']:9,.0f}/s "
            f"step {r['step_ms']:7.2f} ms CV {100 * r['cv']:4.1f}%  coverage {100 * r['coverage']:5.1f}%  "
            f"self-check {r['self_check_kernels']:3d}  {r['seconds']:5.1f} s  largest: "
            + ", ".join(f"{k} {v:.2f} ms" for k, v in parts))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("results", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("names", nargs="*")
    p.add_argument("--budget-s", type=float, default=330.0)
    args = p.parse_args()
    model = documents.load_results(args.results).machine_model
    names = args.names or [n for n in WORKLOADS if n != "resnet18-train-small"]
    started = time.monotonic()
    rows = []
    for name in names:
        if time.monotonic() - started > args.budget_s:
            rows.append({"name": name, "skipped": "time budget spent before it started"})
            continue
        try:
            rows.append(explain_one(name, model, args.out / name))
        except Exception as exc:  # one workload failing must not lose the others
            rows.append({"name": name, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}",
                         "trace": traceback.format_exc()[-2000:]})
        torch.cuda.empty_cache()
        print(row_line(rows[-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "zoo.json").write_text(json.dumps(rows, indent=1, default=str))
    (args.out / "zoo.txt").write_text("\n".join(row_line(r) for r in rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
