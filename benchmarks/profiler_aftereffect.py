"""Does a step run slower after the explainer's profiler has traced it? For each workload named, in a fresh
process per setting of TEARDOWN_CUPTI (unset, then "1"): the step timed without the profiler three times,
the explainer's capture (trace.capture_step, as `explain` runs it), then timed three times more. A rise
after the capture that a process with no capture (the control) does not show is the profiler's.

    python benchmarks/profiler_aftereffect.py OUT.json NAME [NAME ...]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys


def _one(name: str, capture: bool) -> dict:
    import torch

    from pygpuperf.explain import trace
    from pygpuperf.explain.explainer import measure_throughput
    from pygpuperf.workloads import WORKLOADS

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    workload = WORKLOADS[name]
    with workload.build(device) as built:
        samples = int(getattr(built, "samples_per_step", 1) or 1)

        def timed() -> float:
            return measure_throughput(built.step, device, samples).step_us.median / 1e3

        before = [timed() for _ in range(3)]
        if capture:
            trace.capture_step(built.step, device, steps=3, warmup=1, accesses=True)
        after = [timed() for _ in range(3)]
    return {"workload": name, "capture": capture, "teardown_cupti": os.environ.get("TEARDOWN_CUPTI"),
            "before_ms": before, "after_ms": after,
            "after_over_before": statistics.median(after) / statistics.median(before)}


def main() -> None:
    if sys.argv[1] == "--child":
        print(json.dumps(_one(sys.argv[2], sys.argv[3] == "capture")))
        return
    out, names = sys.argv[1], sys.argv[2:]
    rows = []
    for name in names:
        for capture, teardown in ((False, None), (True, None), (True, "1")):
            env = {k: v for k, v in os.environ.items() if k != "TEARDOWN_CUPTI"}
            if teardown is not None:
                env["TEARDOWN_CUPTI"] = teardown
            done = subprocess.run([sys.executable, __file__, "--child", name, "capture" if capture else "none"],
                                  env=env, capture_output=True, text=True, timeout=300)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            row = json.loads(lines[-1]) if lines else {"workload": name, "capture": capture,
                                                       "teardown_cupti": teardown, "error": done.stderr[-400:]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
