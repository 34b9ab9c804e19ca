"""Wall time and result of every planned probe variant of the default suite (or `--quick`), to see
where the main command's time goes and which variant wins each probe.

    python benchmarks/probe_times.py OUT.json [--quick] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from pygpuperf.measure import suite
from pygpuperf.cli import roofline


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    # The settings the main command runs the suite with (the default's sample limits included).
    settings = roofline._settings(roofline.build_parser().parse_args(["--quick"] if args.quick else []))
    rows = []
    for probe in suite.plan(device, "all", quick=args.quick):
        start = time.monotonic()
        m = suite.run_one(probe, device, settings)
        rows.append({"name": probe.name, "backend": m.backend, "variant": probe.variant, "wall_s": time.monotonic() - start,
                     "value": m.value, "unit": m.unit, "cv": m.stats.cv if m.status == "ok" else None,
                     "status": m.status, "verified": m.verified, "params": m.params})
        args.out.write_text(json.dumps(rows, indent=1, default=str) + "\n", encoding="utf-8")
    total = sum(r["wall_s"] for r in rows)
    print(f"{len(rows)} variants, {total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
