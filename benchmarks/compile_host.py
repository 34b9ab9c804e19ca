"""What torch.compile does to a host-bound step's host: the held-out decode step (or any make_step file) eager,
compiled and compiled in reduce-overhead mode, each timed as a user runs it (windows of a plain loop, one sync at
the end), its host's own time per step after a drain, the kernels one step launches, and how often inductor ran
compiled code without CUDA graphs.

    python benchmarks/compile_host.py OUT.json [--target benchmarks/heldout/llm_decode.py:make_step] [--windows 8]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

import torch

from pygpuperf.explain import host_clock

from plain_loop import plain_loop_seconds  # the sibling script's loop, as a user runs it

WARMUP, WINDOW_STEPS = 5, 20


def _make_step(target: str):
    path, _, name = target.partition(":")
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dynamo imports the step's module by name when it traces the step
    spec.loader.exec_module(module)
    return getattr(module, name or "make_step")


def _kernels_per_step(step) -> int:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def _graph_skips() -> int:
    from torch._dynamo.utils import counters
    return int(counters["inductor"]["cudagraph_skips"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--target", default="benchmarks/heldout/llm_decode.py:make_step")
    parser.add_argument("--windows", type=int, default=8)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    step = _make_step(args.target)(device="cuda", batch_size=1)["step"]
    variants = {"eager": step, "compile": torch.compile(step),
                "reduce-overhead": torch.compile(step, mode="reduce-overhead")}
    out = {"target": args.target, "window_steps": WINDOW_STEPS, "device": torch.cuda.get_device_name(), "variants": {}}
    for name, run in variants.items():
        skips = _graph_skips()
        for _ in range(WARMUP):
            run()
        torch.cuda.synchronize()
        host, _ = host_clock.host_after_drain(run, device, 10)
        windows = [plain_loop_seconds(run, device, WINDOW_STEPS) * 1e6 for _ in range(args.windows)]
        out["variants"][name] = {"windows_us": windows, "median_us": statistics.median(windows),
                                 "cv": statistics.stdev(windows) / statistics.mean(windows),
                                 "host_after_drain_us": host, "host_median_us": statistics.median(host),
                                 "kernels_per_step": _kernels_per_step(run), "cudagraph_skips": _graph_skips() - skips}
        v = out["variants"][name]
        print(f"{name:16s} {v['median_us'] / 1e3:7.2f} ms (CV {100 * v['cv']:.1f} %), "
              f"host {v['host_median_us'] / 1e3:.2f} ms after a drain, {v['kernels_per_step']} kernels, "
              f"{v['cudagraph_skips']} graph skips")
    args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
