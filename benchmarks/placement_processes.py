"""Is the process-to-process spread of one convolution's timing the library's algorithm or the operands' memory?
One convolution shape of a profiled step timed forward and backward at twice its batch (as a batch fix times it) in
several fresh processes, each also tracing one forward and backward to name the kernels the library ran; some
processes first hold most of the free device memory, which narrows the workspace a library's algorithm may take.

    python benchmarks/placement_processes.py EXPLAIN.json OUT.json [--processes 6] [--held 2] [--scale 2]
        [--input 64,32,256,256] [--weight 32,32,3,3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

# The fraction of the free device memory a "held" process takes before it times.
HELD_SHARE = 0.85


def _child(args: argparse.Namespace) -> int:
    import torch

    from pygpuperf.explain import convs, dtype_timing

    from placement_rounds import ints, step_conv  # the sibling script's shape and the step's library settings

    device = torch.device("cuda")
    with step_conv(args.explain, ints(args.input), ints(args.weight)) as (shape, dtype):
        held = None
        if args.hold:
            free, _ = torch.cuda.mem_get_info(device)
            held = torch.empty(int(free * HELD_SHARE), dtype=torch.uint8, device=device)
        timing = convs.time_conv(shape, True, device, dtypes=[dtype], scale=args.scale)
        # One forward and backward traced, on tensors of the timing's shape and dtype, for the kernels' names.
        images = [round(shape.input[0] * args.scale), *shape.input[1:]]
        torch_dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        x = (torch.rand(*images, device=device) + 0.5).to(torch_dtype).requires_grad_(shape.input_grad)
        w = (torch.rand(*shape.weight, device=device) - 0.5).to(torch_dtype).requires_grad_(True)
        conv = dict(stride=shape.stride, padding=shape.padding, dilation=shape.dilation, groups=shape.groups)
        out = torch.nn.functional.conv2d(x, w, **conv)
        grad = torch.rand_like(out) - 0.5
        wanted = (x, w) if shape.input_grad else (w,)
        for _ in range(2):  # warm: the library's plans are made before the traced call
            torch.autograd.grad(torch.nn.functional.conv2d(x, w, **conv), wanted, grad)
        torch.cuda.synchronize()
        activity = torch.profiler.ProfilerActivity.CUDA
        with torch.profiler.profile(activities=[activity]) as prof:
            torch.autograd.grad(torch.nn.functional.conv2d(x, w, **conv), wanted, grad)
            torch.cuda.synchronize()
        kernels = [{"name": e.name, "us": e.device_time} for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA]
        row = {"hold": args.hold, "address": hex(x.data_ptr()), "dtype": dtype,
               "us": timing.us[dtype_timing.variant(dtype, args.scale, "")],
               "phases": dict(timing.us), "kernels": kernels}
        del held
    print(json.dumps(row))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("explain", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--held", type=int, default=2, help="of which this many hold most free memory first")
    parser.add_argument("--scale", type=float, default=2.0)
    parser.add_argument("--input", default="64,32,256,256")
    parser.add_argument("--weight", default="32,32,3,3")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--hold", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(args)
    rows = []
    for n in range(args.processes):
        hold = n % 2 == 1 and n // 2 < args.held  # the held ones between plain ones
        command = [sys.executable, __file__, str(args.explain), str(args.out), "--child", "--scale", str(args.scale),
                   "--input", args.input, "--weight", args.weight] + (["--hold"] if hold else [])
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            print(f"process {n}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        row["process"] = n
        rows.append(row)
        names = sorted({k["name"][:60] for k in row["kernels"]})
        print(f"process {n} {'held ' if row['hold'] else 'plain'} {row['us'] / 1e3:7.3f} ms fwd+bwd at {row['address']}"
              f"  traced {sum(k['us'] for k in row['kernels']) / 1e3:6.3f} ms in {len(row['kernels'])} kernels: "
              f"{'; '.join(names)}")
    by_kernels: dict[str, list[float]] = {}
    for row in rows:
        by_kernels.setdefault(" | ".join(sorted({k["name"] for k in row["kernels"]})), []).append(row["us"])
    for i, (names, us) in enumerate(by_kernels.items()):
        print(f"kernel set {i}: {len(us)} processes, {min(us) / 1e3:.3f}-{max(us) / 1e3:.3f} ms "
              f"(median {statistics.median(us) / 1e3:.3f})")
    args.out.write_text(json.dumps({"input": args.input, "weight": args.weight, "scale": args.scale, "rows": rows,
                                    "kernel_sets": by_kernels}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
