"""Named-cause coverage of recorded explain.json files, explained again by the current code.

    python benchmarks/cause_coverage.py OUT.json EXPLAIN.json [...] --machine-model RESULTS.json

For each step: the share of its wall time held by the ideal, a named cause or an idle cause (goal >= 95 %),
the share in kernels no rule bounds (goal < 2 %), and the findings or cause advice that name a mechanism
the step does not use (goal 0): channels_last without a convolution; cuDNN, tensor cores, CUDA or the
GPU on a CPU. EXPLAIN.json may be compressed (.json.xz); benchmarks/tables.py calls :func:`row` and :func:`summary`
on the reference profiles.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from pygpuperf import diagnose
from pygpuperf.core import documents
from pygpuperf.explain.classify import has_convolutions
from pygpuperf.explain.words import kind_of, CPU
from pygpuperf.core.vocabulary import Part

from reference import indexed, load_profile

_NOT_ON_CPU = re.compile(r"cuDNN|tensor core|CUDA|GPU", re.I)


def foreign_mechanisms(texts: list[str], convolutions: bool, cpu: bool) -> list[str]:
    """The texts that advise a mechanism the step does not have."""
    out = []
    for text in texts:
        if not convolutions and "channels_last" in text:
            out.append(text)
        elif cpu and _NOT_ON_CPU.search(text):
            out.append(text)
    return out


def row(path: Path, model, step: str | None = None) -> dict:
    """One step's coverage, explained again on `model`; `step` names it (default: its folder's name)."""
    e = load_profile(path)
    records, line = e.median.kernels, e.median.timeline
    diagnosis = diagnose.explain_again(e, model)
    found = diagnosis.findings
    wall = line.wall_us
    rest = sum(split["rest_us"] for split in diagnosis.causes.by_part.values())
    texts = [f.title + " " + f.suggestion for f in found] + [c.title + " " + c.advice for c in diagnosis.causes.items]
    foreign = foreign_mechanisms(texts, has_convolutions(records), kind_of(e.device) == CPU)
    entry = indexed(path)
    step = step or (entry["configuration"] if entry else path.parent.name)
    return {"step": step, "workload": e.settings.get("workload", ""), "wall_ms": wall / 1e3,
            "named_share": 1 - rest / wall if wall else None,
            "no_rule_share": e.median.waterfall.parts.get(Part.OTHER, 0.0) / wall if wall else None,
            "foreign_mechanisms": [t[:200] for t in foreign]}


def summary(rows: list[dict]) -> dict:
    named = [r["named_share"] for r in rows if r["named_share"] is not None]
    return {"steps": len(rows), "named_min": min(named, default=None), "named_max": max(named, default=None),
            "no_rule_max": max((r["no_rule_share"] for r in rows if r["no_rule_share"] is not None), default=None),
            "foreign": sum(len(r["foreign_mechanisms"]) for r in rows)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("explains", type=Path, nargs="+")
    parser.add_argument("--machine-model", type=Path, required=True)
    args = parser.parse_args()
    model = documents.load_results(args.machine_model).machine_model
    rows = [row(p, model) for p in args.explains]
    args.out.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    for r in rows:
        print(f"{r['step'][:60]:62s} named {100 * r['named_share']:5.1f}%  no rule {100 * r['no_rule_share']:4.1f}%  "
              f"foreign advice {len(r['foreign_mechanisms'])}")
    s = summary(rows)
    print(f"{s['steps']} steps: named {100 * s['named_min']:.1f}-{100 * s['named_max']:.1f}%, no rule at most "
          f"{100 * s['no_rule_max']:.1f}%, {s['foreign']} findings naming a mechanism the step does not use")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
