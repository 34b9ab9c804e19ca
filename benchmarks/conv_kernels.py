"""The kernels one convolution's timing runs (explain.convs.time_conv), at the step's batch and at a multiple,
with their times under the profiler: which algorithm the library chose for the shape timed alone.

    python benchmarks/conv_kernels.py OUT.json --input 64,512,32,32 --weight 256,512,3,3 --padding 1 [--scale 2]

The shape runs as --try-fixes times it (fp32, NHWC, TF32 on as in the step, forward and backward with the
input's gradient), a few calls after warm-up; each kernel's median duration per call is kept. Then the same
with all but --left-gb of the device's free memory held, as a step's own tensors hold it, in case the
library's choice depends on the workspace it can get; and time_conv's own figure at each batch.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

import torch

from pygpuperf.core import torch_flags
from pygpuperf.explain import convs

CALLS = 5


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def kernels_of(shape: convs.ConvShape, scale: float, device: torch.device, part: str = "both") -> dict[str, float]:
    """Kernel name → median µs per call of the shape's forward and backward at `scale` times its batch (`part`
    "both": each call runs both; "forward" or "backward": that phase alone, the backward on a kept graph)."""
    images = [max(1, round(shape.input[0] * scale)), *shape.input[1:]]
    x = (torch.rand(*images, device=device) + 0.5).contiguous(memory_format=torch.channels_last).requires_grad_()
    w = (torch.rand(*shape.weight, device=device) - 0.5).contiguous(memory_format=torch.channels_last).requires_grad_()
    args = dict(stride=shape.stride, padding=shape.padding, dilation=shape.dilation, groups=shape.groups)
    out = torch.nn.functional.conv2d(x, w, **args)
    g = torch.rand_like(out)

    def run() -> None:
        if part == "both":
            torch.autograd.grad(torch.nn.functional.conv2d(x, w, **args), (x, w), g)
        elif part == "forward":
            torch.nn.functional.conv2d(x, w, **args)
        else:
            torch.autograd.grad(out, (x, w), g, retain_graph=True)

    for _ in range(3):
        run()
    torch.cuda.synchronize(device)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            run()
        torch.cuda.synchronize(device)
    per: dict[str, list[float]] = collections.defaultdict(list)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            per[ev.name].append(ev.time_range.elapsed_us())
    return {name: statistics.median(times) * len(times) / CALLS for name, times in per.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--input", type=_ints, required=True)
    parser.add_argument("--weight", type=_ints, required=True)
    parser.add_argument("--padding", type=int, default=0)
    parser.add_argument("--stride", type=int, default=1)
    parser.add_argument("--scale", type=float, default=2.0)
    parser.add_argument("--left-gb", type=float, default=8.0)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("conv_kernels.py: needs a GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    shape = convs.ConvShape(args.input, args.weight, [args.stride] * 2, [args.padding] * 2, [1, 1], 1, True)
    restore = torch_flags.set_cudnn_tf32(True)
    try:
        scales = (1.0, args.scale)
        doc = {"input": args.input, "weight": args.weight,
               "time_conv_us": {str(s): convs.time_conv(shape, True, device, dtypes=("fp32",), scale=s).us
                                for s in scales},
               "by_scale": {str(s): kernels_of(shape, s, device) for s in scales}}
        free, _ = torch.cuda.mem_get_info(device)
        held = torch.empty(max(int(free - args.left_gb * 1e9), 0), dtype=torch.uint8, device=device)
        doc["held_bytes"] = held.numel()
        doc["by_scale_memory_held"] = {str(s): kernels_of(shape, s, device) for s in scales}
        del held
        doc["by_scale_phase_apart"] = {f"{s} {part}": kernels_of(shape, s, device, part)
                                       for s in scales for part in ("forward", "backward")}
    finally:
        restore()
    args.out.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    print("time_conv:", doc["time_conv_us"])
    for s, found in [*doc["by_scale"].items(), *(("held " + k, v) for k, v in doc["by_scale_memory_held"].items()),
                     *doc["by_scale_phase_apart"].items()]:
        print(f"x{s}: {sum(found.values()):.1f} us per call")
        for name, us in sorted(found.items(), key=lambda kv: -kv[1]):
            print(f"  {us:9.1f}  {name[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
