"""The kernel-time model's checks on recorded data (no GPU needed): hardware counters, batch counterfactuals
and the self-check.

    python benchmarks/kernel_model_checks.py counters RESULTS.json EXPLAIN.json NCU.csv
    python benchmarks/kernel_model_checks.py batch RESULTS.json RUNS_DIR NAME SOURCE_BATCH
    python benchmarks/kernel_model_checks.py self-check RESULTS.json EXPLAIN.json [EXPLAIN.json ...]

counters: the model's DRAM and L2 bytes per kernel (analyze.kernel_time: first-touch reads and writes
from DRAM, every byte through L2) against Nsight Compute's dram__bytes_read.sum + dram__bytes_write.sum
and lts__t_bytes.sum of the same step, kernels matched by name in launch order; errors weighted by
kernel time over the kernels that make up 90 % of it, and the model's bound against the measured time.
batch: the step of RUNS_DIR/NAME-bs<SOURCE_BATCH> predicted at every other batch size measured in
RUNS_DIR (predict.predict_batch), against the measured unprofiled steps.
self-check: kernels measured faster than their bound by more than 5 %.
EXPLAIN.json may be compressed (.json.xz). benchmarks/tables.py calls :func:`counters_of` and :func:`batch_rows` on
the reference profiles and the measured values kept beside them (:func:`read_counters`).
"""

from __future__ import annotations

import argparse
import difflib
import io
import json
import re
import sys
from pathlib import Path

import pandas as pd

from pygpuperf.analyze.kernel_time import card_terms
from pygpuperf.core import documents
from pygpuperf.explain import attribution
from pygpuperf.core.vocabulary import KernelClass
from pygpuperf.explain import pricing

from reference import load_profile

_BASE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:<|\()")


def base_name(name: str) -> str:
    """A kernel's function name without namespaces, templates or arguments: how ncu and the profiler agree."""
    head = name.split("(")[0] if name.startswith("void ") or "<" in name else name
    m = _BASE.search(name.replace("void ", "", 1))
    stem = m.group(1) if m else head
    return stem.split("::")[-1]


def read_ncu(path: Path) -> pd.DataFrame:
    """One row per profiled kernel: name, duration_us, dram_bytes, l2_bytes (ncu --csv, one metric a row)."""
    text = "".join(line for line in path.read_text(encoding="utf-8").splitlines(True) if line.startswith('"'))
    rows = pd.read_csv(io.StringIO(text), thousands=",")
    units = set(rows["Metric Unit"])
    if not units <= {"byte", "ns"}:
        raise ValueError(f"{path}: metric units {units}: re-run ncu with --print-units base")
    wide = rows.pivot_table(index=["ID", "Kernel Name"], columns="Metric Name", values="Metric Value",
                            aggfunc="first").reset_index().sort_values("ID")
    return pd.DataFrame({"name": wide["Kernel Name"], "duration_us": wide["gpu__time_duration.sum"] / 1e3,
                         "dram_bytes": wide["dram__bytes_read.sum"] + wide["dram__bytes_write.sum"],
                         "l2_bytes": wide["lts__t_bytes.sum"]}).reset_index(drop=True)


def read_counters(path: Path) -> pd.DataFrame:
    """What :func:`read_ncu` gives, as kept in a (gzip-compressed) CSV: name, duration_us, dram_bytes, l2_bytes."""
    return pd.read_csv(path)


def counters(results: Path, explain: Path, ncu_csv: Path) -> dict:
    out = counters_of(documents.load_results(results).machine_model, explain, read_ncu(ncu_csv))
    return {"explain": str(explain), "ncu": str(ncu_csv), **out}


def counters_of(model, explain: Path, hw: pd.DataFrame) -> dict:
    """The model's bytes per kernel of one step against the counters `hw` of the same step (:func:`read_ncu`)."""
    e = _explanation(explain, model)
    records = sorted((r for r in e.median.kernels if r.kernel_class != KernelClass.MEMCPY), key=lambda r: r.start_us)
    shares = pricing.reuse_shares(e.calls, model, bound=False)  # where the bytes end up, as counters see them
    terms = card_terms(model)
    main = model.dram_key()
    matcher = difflib.SequenceMatcher(None, [base_name(r.name) for r in records], [base_name(n) for n in hw["name"]],
                                      autojunk=False)
    pairs = []
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            record, row = records[block.a + k], hw.iloc[block.b + k]
            timing = pricing.kernel_timing(record, model, shares, terms)
            traffic = dict(timing.traffic) if timing else {}
            pairs.append({"name": record.name[:90], "op": record.op, "class": record.kernel_class,
                          "measured_us": float(row["duration_us"]), "profiled_us": record.duration_us,
                          "bound_us": timing.total_us if timing else None,
                          "model_dram": traffic.get(main, 0.0), "model_l2": traffic.get("l2", 0.0),
                          "ncu_dram": float(row["dram_bytes"]), "ncu_l2": float(row["l2_bytes"])})
    pairs.sort(key=lambda p: -p["measured_us"])
    total = sum(p["measured_us"] for p in pairs)
    top, running = [], 0.0
    for p in pairs:
        if running >= 0.9 * total:
            break
        top.append(p)
        running += p["measured_us"]

    def weighted_error(model_key: str, hw_key: str) -> float:
        weight = sum(p["measured_us"] for p in top if p[hw_key] > 0)
        return sum(p["measured_us"] * abs(p[model_key] / p[hw_key] - 1) for p in top if p[hw_key] > 0) / weight

    within = [p for p in top if p["ncu_dram"] > 0 and abs(p["model_dram"] / p["ncu_dram"] - 1) <= 0.25]
    bounded = [p for p in top if p["bound_us"]]
    return {
        "kernels_profiled": len(records), "kernels_ncu": len(hw),
        "matched": len(pairs), "top_kernels": len(top), "top_share_of_time": running / total if total else 0.0,
        "dram_bytes_error_time_weighted": weighted_error("model_dram", "ncu_dram"),
        "l2_bytes_error_time_weighted": weighted_error("model_l2", "ncu_l2"),
        "dram_within_25pct_time_share": sum(p["measured_us"] for p in within) / running if running else 0.0,
        "step_dram_gb": {"model": sum(p["model_dram"] for p in pairs) / 1e9, "ncu": sum(p["ncu_dram"] for p in pairs) / 1e9},
        "step_l2_gb": {"model": sum(p["model_l2"] for p in pairs) / 1e9, "ncu": sum(p["ncu_l2"] for p in pairs) / 1e9},
        "bound_over_measured_time_weighted": (sum(p["bound_us"] for p in bounded) / sum(p["measured_us"] for p in bounded)
                                              if bounded else None),
        "largest": top[:25],
    }


def _explanation(path: Path, model):
    """A recorded profile with each op's work split among its kernels by time beyond the card's fixed cost."""
    e = load_profile(path)
    attribution.resplit_op_costs(e.median.kernels, card_terms(model).fixed_us)
    return e


def self_check(results: Path, explains: list[Path]) -> list[dict]:
    model = documents.load_results(results).machine_model
    rows = []
    for path in explains:
        e = _explanation(path, model)
        records = e.median.kernels
        attribution.assign_bounds(records, model, e.calls)
        bad = attribution.self_check(records)
        rows.append({"explain": str(path), "kernels": len(records), "violations": len(bad),
                     "worst": [{"name": r.name[:90], "op": r.op, "duration_us": r.duration_us, "bound_us": r.bound_us,
                                "ceiling": r.ceiling} for r in sorted(bad, key=lambda r: r.duration_us / r.bound_us)[:5]]})
    return rows


def batch(results: Path, runs: Path, name: str, source_batch: int) -> list[dict]:
    return batch_rows(documents.load_results(results).machine_model, runs / f"{name}-bs{source_batch}" / "explain.json",
                      [r for r in json.loads((runs / "runs.json").read_text()) if r["name"] == name], source_batch)


def batch_rows(model, explain: Path, runs: list[dict], source_batch: int) -> list[dict]:
    """The step of `explain` (at `source_batch`) predicted at every other batch size of `runs` (the same
    workload's unprofiled steps: batch, step_ms, cv; batch 1 gives the host's time), against those steps."""
    from pygpuperf.predict import predict_batch

    source = _explanation(explain, model)
    measured = {int(r["batch"]): r for r in runs if not r.get("knobs") and "error" not in r}
    host = measured.get(1)
    rows = []
    for size, run in sorted(measured.items()):
        if size in (source_batch, 1):
            continue
        p = predict_batch(source, model, size, host_step_us=host["step_ms"] * 1e3 if host else None)
        rows.append({"batch": size, "measured_ms": run["step_ms"], "measured_cv": run["cv"],
                     "predicted_ms": p.step_us / 1e3, "error": p.step_us / 1e3 / run["step_ms"] - 1,
                     "notes": p.notes})
    return rows


def main() -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="check", required=True)
    c = sub.add_parser("counters")
    c.add_argument("results", type=Path)
    c.add_argument("explain", type=Path)
    c.add_argument("ncu", type=Path)
    b = sub.add_parser("batch")
    b.add_argument("results", type=Path)
    b.add_argument("runs", type=Path)
    b.add_argument("name")
    b.add_argument("source_batch", type=int)
    s = sub.add_parser("self-check")
    s.add_argument("results", type=Path)
    s.add_argument("explain", type=Path, nargs="+")
    args = p.parse_args()
    if args.check == "counters":
        out = counters(args.results, args.explain, args.ncu)
    elif args.check == "batch":
        out = batch(args.results, args.runs, args.name, args.source_batch)
    else:
        out = self_check(args.results, args.explain)
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
