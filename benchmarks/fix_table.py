"""Predicted against measured for every fix --try-fixes measured, from explain.json files.

    python benchmarks/fix_table.py OUT.json EXPLAIN.json [EXPLAIN.json ...]

A fix's error is |predicted - measured| step time as a share of the measured change (baseline -
measured); the goal is at most 25 %. Fixes measured at another batch are compared per sample.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(path: Path) -> list[dict]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    workload = doc.get("settings", {}).get("workload") or path.parent.name
    out = []
    for fix in doc.get("fixes") or []:
        row = {"workload": workload, "fix": fix["name"], "status": fix["status"], "reason": fix.get("reason", "")}
        base, measured, predicted = fix.get("baseline_step_us"), fix.get("measured_step_us"), fix.get("predicted_step_us")
        if fix["status"] == "measured" and base and measured:
            scale = (fix.get("baseline_samples_per_step") or 1) / (fix.get("samples_per_step") or 1)
            measured, predicted = measured * scale, (predicted * scale if predicted is not None else None)
            change = base - measured
            row.update(baseline_ms=base / 1e3, measured_ms=measured / 1e3, predicted_ms=None if predicted is None
                       else predicted / 1e3, measured_change_ms=change / 1e3)
            if predicted is not None and abs(change) > 0:
                row["error_share_of_change"] = abs(predicted - measured) / abs(change)
        out.append(row)
    return out


def main() -> int:
    out = Path(sys.argv[1])
    table = [r for p in sys.argv[2:] for r in rows(Path(p))]
    out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    scored = [r for r in table if "error_share_of_change" in r]
    for r in table:
        if "measured_ms" in r:
            print(f"{r['workload']:28s} {r['fix']:22s} {r['baseline_ms']:9.2f} -> {r['measured_ms']:9.2f} ms measured, "
                  + (f"{r['predicted_ms']:9.2f} predicted, error {100 * r['error_share_of_change']:.0f}% of the change"
                     if "error_share_of_change" in r else "no prediction"))
        else:
            print(f"{r['workload']:28s} {r['fix']:22s} {r['status']}: {r['reason'][:90]}")
    within = sum(r["error_share_of_change"] <= 0.25 for r in scored)
    print(f"{len(scored)} fix x workload pairs with a prediction; {within} within 25 % of the measured change")
    return 0


if __name__ == "__main__":
    sys.exit(main())
