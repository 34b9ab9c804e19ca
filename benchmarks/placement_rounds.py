"""Do the rounds of a library timing see different placements of their operands? One convolution shape of a
profiled step timed several times at its batch and at twice it, each time after the allocator's cache is released
(as --try-fixes does between its rounds), then each time with a spacer of another size held in device memory,
with the address a tensor of the input's size gets just before each timing.

    python benchmarks/placement_rounds.py EXPLAIN.json OUT.json [--rounds 6] [--input 64,32,256,256]
        [--weight 32,32,3,3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
from collections.abc import Iterator
from pathlib import Path

import torch

from pygpuperf.core import torch_flags
from pygpuperf.explain import convs, dtype_timing, fixes
from pygpuperf.explain.compare import load_explanation
from pygpuperf.workloads.recipe import release_device_memory


def ints(text: str) -> list[int]:
    """A shape written as comma-separated integers."""
    return [int(x) for x in text.split(",")]


@contextlib.contextmanager
def step_conv(explain: Path, input_shape: list[int], weight: list[int]) -> Iterator[tuple[convs.ConvShape, str]]:
    """The convolution of `input_shape` × `weight` that a profiled step ran, and the dtype it ran in, with the
    step's cuDNN settings (algorithm search, TF32) set inside the block."""
    records = load_explanation(explain).median.kernels
    shape = next(s for s in convs.conv_shapes(records) if s.input == input_shape and s.weight == weight)
    search, tf32 = convs._library_settings(records) or (False, True)
    restores = [torch_flags.set_attribute(torch.backends.cudnn, "benchmark", search), torch_flags.set_cudnn_tf32(tf32)]
    try:
        yield shape, convs.step_dtype(records)
    finally:
        for restore in reversed(restores):
            restore()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("explain", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--input", type=ints, default=[64, 32, 256, 256])
    parser.add_argument("--weight", type=ints, default=[32, 32, 3, 3])
    args = parser.parse_args()
    device = torch.device("cuda")
    rows = []
    with step_conv(args.explain, args.input, args.weight) as (shape, dtype):
        for spaced in (False, True):
            for n in range(args.rounds):
                for scale in (1.0, 2.0):
                    release_device_memory(device)
                    with fixes._spacer(device, (n + 1) * fixes.ROUND_SPACER_BYTES if spaced else 0):
                        elements = math.prod([round(shape.input[0] * scale), *shape.input[1:]])
                        probe = torch.empty(elements, dtype=torch.float32, device=device)
                        address = probe.data_ptr()
                        del probe
                        timing = convs.time_conv(shape, True, device, dtypes=[dtype], scale=scale)
                    rows.append({"spaced": spaced, "round": n, "scale": scale, "address": hex(address),
                                 "us": timing.us})
    summary = {}
    for spaced in (False, True):
        for scale in (1.0, 2.0):
            total = [r["us"][dtype_timing.variant(dtype, scale, "")]
                     for r in rows if r["spaced"] == spaced and r["scale"] == scale]
            key = f"{'spaced' if spaced else 'released'} x{scale:g}"
            summary[key] = {"us": total, "median": statistics.median(total),
                            "spread": (max(total) - min(total)) / min(total),
                            "addresses": sorted({r["address"] for r in rows
                                                 if r["spaced"] == spaced and r["scale"] == scale})}
            print(f"{key:14s} {min(total) / 1e3:7.3f}-{max(total) / 1e3:7.3f} ms fwd+bwd, spread "
                  f"{100 * summary[key]['spread']:.1f} %, {len(summary[key]['addresses'])} addresses")
    args.out.write_text(json.dumps({"shape": shape.__dict__, "dtype": dtype, "rows": rows, "summary": summary},
                                   indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
