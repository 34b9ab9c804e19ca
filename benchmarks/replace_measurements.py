"""A machine model from one run with some probes measured again in a later run on the same card.

    python benchmarks/replace_measurements.py BASE.json LATER.json OUT.json latency.kernel.

Every measurement of BASE whose name starts with one of the prefixes is replaced by LATER's of that
name; the result is concluded again (ceilings, fits, findings) and written as a validated results.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pygpuperf.analyze import conclude
from pygpuperf.core import documents


def main() -> int:
    base_path, later_path, out_path, *prefixes = sys.argv[1:]
    base, later = documents.load_results(base_path), documents.load_results(later_path)
    if base.meta["device"].get("uuid") != later.meta["device"].get("uuid"):
        print("note: the two runs are on different cards of the same kind", file=sys.stderr)
    prefixes = tuple(prefixes)
    base.measurements = ([m for m in base.measurements if not m.name.startswith(prefixes)]
                         + [m for m in later.measurements if m.name.startswith(prefixes)])
    base.meta.setdefault("notes", []).append(f"{', '.join(prefixes)} measured again in {Path(later_path).name}")
    conclude.conclude(base, base.machine_model.device if base.machine_model else str(base.meta["device"]["name"]))
    Path(out_path).write_text(documents.to_json(base), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
