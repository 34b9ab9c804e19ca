"""The default suite's ceilings against the full search's (from the two runs' terminal tables), and the
fleet command's figures against roofline --quick on the same GPU.

    python benchmarks/answer_checks.py DEFAULT_STDOUT FULL_STDOUT FLEET.json QUICK_RESULTS.json
    python benchmarks/answer_checks.py ceilings DEFAULT_RESULTS.json FULL_RESULTS.json

Run on one card, back to back: `python -m pygpuperf.roofline` and `python -m pygpuperf.roofline --full`, each
with its terminal table kept (DEFAULT_STDOUT, FULL_STDOUT) and its results.json; for the first form also the
fleet command on that GPU (its fleet.json) and `python -m pygpuperf.roofline --quick` (QUICK_RESULTS.json).

ceilings: every machine-model ceiling of the two runs side by side, each marked by whether the default's plan
for it differs from the full search's (a trimmed variant search or sweep) or is the same (then any
difference is the card's run-to-run spread).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from pygpuperf.core import documents


def table(path: Path) -> dict[tuple[str, str], float]:
    """(probe, backend) -> median, from a roofline summary table."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) >= 5 and re.fullmatch(r"[a-z]+\.[a-z0-9_.]+", cells[0]):
            try:
                out[(cells[0], cells[1])] = float(cells[2].replace(",", ""))
            except ValueError:
                continue
    return out


_TRIMMED = ("memory.hbm.", "transfer.")  # the default's plan differs from the full search's for these sources


def ceilings(default_path: Path, full_path: Path) -> int:
    default = json.loads(default_path.read_text(encoding="utf-8"))["machine_model"]
    full = json.loads(full_path.read_text(encoding="utf-8"))["machine_model"]
    rows = []
    for table_name in ("compute", "memory", "links", "latency"):
        for key, ceiling in default.get(table_name, {}).items():
            other = full.get(table_name, {}).get(key)
            if isinstance(ceiling, dict) and isinstance(other, dict) and other.get("value"):
                plan = "trimmed" if str(ceiling.get("source", "")).startswith(_TRIMMED) else "same plan"
                rows.append((table_name, key, plan, ceiling["value"], other["value"], ceiling["value"] / other["value"] - 1))
    for plan in ("trimmed", "same plan"):
        chosen = [r for r in rows if r[2] == plan]
        print(f"{plan}: {sum(abs(r[5]) <= 0.01 for r in chosen)} of {len(chosen)} ceilings within 1 %")
        for table_name, key, _, d, f, r in sorted(chosen, key=lambda r: -abs(r[5])):
            print(f"  {table_name:8s} {key:26s} default {d:10,.1f} full {f:10,.1f} {100 * r:+6.2f}%")
    return 0


def main() -> int:
    if sys.argv[1] == "ceilings":
        return ceilings(Path(sys.argv[2]), Path(sys.argv[3]))
    default, full = table(Path(sys.argv[1])), table(Path(sys.argv[2]))
    rows = sorted(((default[k] / full[k] - 1, k) for k in set(default) & set(full) if full[k]), key=lambda r: -abs(r[0]))
    within = sum(abs(r) <= 0.01 for r, _ in rows)
    print(f"default vs full search: {within} of {len(rows)} figures within 1 %; the others:")
    for r, (name, backend) in rows:
        if abs(r) > 0.01:
            print(f"  {name:32s} {backend:12s} default {default[(name, backend)]:10,.1f} full {full[(name, backend)]:10,.1f} "
                  f"{100 * r:+6.1f}%")
    fleet = json.loads(Path(sys.argv[3]).read_text(encoding="utf-8"))["ranks"][0]["figures"]
    quick = documents.load_results(Path(sys.argv[4]))
    print("fleet (one GPU) vs roofline --quick, same GPU:")
    for name, f in fleet.items():
        q = quick.best(name) if f.get("status") == "ok" else None
        if q is not None:
            print(f"  {name:32s} fleet {f['value']:10,.1f} quick {q.value:10,.1f} {100 * (f['value'] / q.value - 1):+6.1f}%"
                  f"  CV {100 * (f.get('cv') or 0):.2f}% / {100 * q.stats.cv:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
