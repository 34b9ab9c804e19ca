"""Which orders of torch profiler sessions record their kernels, and which leave later launches slower. Each
scenario runs in a fresh process: a sequence of sessions, each followed by the kernels it recorded and the
time of a launch-bound loop (300 tiny kernels) timed after it.

    python benchmarks/profiler_sessions.py OUT.json

Sessions: "plain" (profile() around one step, no schedule), "scheduled" (one warm-up step, one active one),
"release" (an empty CUDA-only session with TEARDOWN_CUPTI=1 set for it, the variable put back after).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SCENARIOS = {
    "kept": (None, ["plain", "plain", "scheduled", "plain"]),
    "teardown": ("1", ["plain", "plain", "scheduled", "plain"]),
    "teardown, scheduled first": ("1", ["scheduled", "scheduled", "plain", "scheduled"]),
    "released after": (None, ["scheduled", "plain", "release", "plain", "scheduled", "plain"]),
}


def _child(sessions: list[str]) -> list[dict]:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    x = torch.rand(1024, device="cuda") + 0.5

    def step() -> torch.Tensor:
        y = x
        for _ in range(300):
            y = y * 1.0001
        return y

    def loop_us() -> float:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        seconds = []
        for _ in range(15):
            t = time.perf_counter()
            step()
            torch.cuda.synchronize()
            seconds.append(time.perf_counter() - t)
        return statistics.median(seconds) * 1e6

    def kernels(prof) -> int:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "t.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                events = json.load(f).get("traceEvents", [])
        return sum(1 for e in events if e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel")

    rows = [{"session": "none", "loop_us": loop_us()}]
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    for s in sessions:
        count = None
        if s == "plain":
            with profile(activities=activities) as prof:
                step()
                torch.cuda.synchronize()
            count = kernels(prof)
        elif s == "scheduled":
            with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=1, repeat=1)) as prof:
                for _ in range(2):
                    step()
                    torch.cuda.synchronize()
                    prof.step()
            count = kernels(prof)
        elif s == "release":
            before = os.environ.get("TEARDOWN_CUPTI")
            os.environ["TEARDOWN_CUPTI"] = "1"
            with profile(activities=[ProfilerActivity.CUDA]):
                pass
            if before is None:
                del os.environ["TEARDOWN_CUPTI"]
            else:
                os.environ["TEARDOWN_CUPTI"] = before
        rows.append({"session": s, "kernels": count, "loop_us": loop_us()})
    return rows


def main() -> None:
    if sys.argv[1] == "--child":
        print(json.dumps(_child(sys.argv[2].split(","))))
        return
    out = {}
    for name, (teardown, sessions) in SCENARIOS.items():
        env = {k: v for k, v in os.environ.items() if k != "TEARDOWN_CUPTI"}
        if teardown is not None:
            env["TEARDOWN_CUPTI"] = teardown
        done = subprocess.run([sys.executable, __file__, "--child", ",".join(sessions)], env=env,
                              capture_output=True, text=True, timeout=120)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("[")]
        out[name] = json.loads(lines[-1]) if lines else {"error": done.stderr[-600:]}
        print(name, json.dumps(out[name]), flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump({"expected_kernels_per_step": 300, "scenarios": out}, f, indent=1)


if __name__ == "__main__":
    main()
