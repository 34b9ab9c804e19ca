"""The default suite's ceilings against the full search's (from the two runs' terminal tables), and the
fleet command's figures against roofline --quick on the same GPU.

    python benchmarks/answer_checks.py DEFAULT_STDOUT FULL_STDOUT FLEET.json QUICK_RESULTS.json
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


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


def best(results: dict) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for m in results["measurements"]:
        if m["status"] == "ok" and m["verified"]:
            lower = m["unit"] == "ns"
            old = out.get(m["name"])
            if old is None or (m["value"] < old["value"] if lower else m["value"] > old["value"]):
                out[m["name"]] = m
    return out


def main() -> int:
    default, full = table(Path(sys.argv[1])), table(Path(sys.argv[2]))
    rows = sorted(((default[k] / full[k] - 1, k) for k in set(default) & set(full) if full[k]), key=lambda r: -abs(r[0]))
    within = sum(abs(r) <= 0.01 for r, _ in rows)
    print(f"default vs full search: {within} of {len(rows)} figures within 1 %; the others:")
    for r, (name, backend) in rows:
        if abs(r) > 0.01:
            print(f"  {name:32s} {backend:12s} default {default[(name, backend)]:10,.1f} full {full[(name, backend)]:10,.1f} "
                  f"{100 * r:+6.1f}%")
    fleet = json.loads(Path(sys.argv[3]).read_text(encoding="utf-8"))["ranks"][0]["figures"]
    quick = best(json.loads(Path(sys.argv[4]).read_text(encoding="utf-8")))
    print("fleet (one GPU) vs roofline --quick, same GPU:")
    for name, f in fleet.items():
        if f.get("status") == "ok" and name in quick:
            q = quick[name]
            print(f"  {name:32s} fleet {f['value']:10,.1f} quick {q['value']:10,.1f} {100 * (f['value'] / q['value'] - 1):+6.1f}%"
                  f"  CV {100 * (f.get('cv') or 0):.2f}% / {100 * q['stats']['cv']:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
