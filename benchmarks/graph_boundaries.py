"""What a CUDA graph saves per kernel boundary, by kind of kernel: 64 ops of one kind back to back, launched
into a stream with the host ahead (the device spins while the host issues them) against replayed from one
captured graph, both timed by device events around the 64 ops.

    python benchmarks/graph_boundaries.py OUT.json

The empty-kernel probes (latency.kernel.back_to_back, latency.kernel.graph) time y.fill_ on one element;
this asks whether kernels with work, and memset nodes between them, save the same per boundary.
"""

from __future__ import annotations

import ctypes
import json
import statistics
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

OPS = 64  # ops per timed run
SAMPLES = 30
SPIN_CYCLES_PER_OP = 40_000  # ~20 us at 2 GHz: more than the host takes to issue one op


def _memset_async() -> Callable[[torch.Tensor], None]:
    """cudaMemsetAsync on the current stream (cuDNN's weight gradients issue these between kernels)."""
    lib = ctypes.CDLL("libcudart.so.13") if _loadable("libcudart.so.13") else ctypes.CDLL("libcudart.so")
    lib.cudaMemsetAsync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]

    def memset(t: torch.Tensor) -> None:
        err = lib.cudaMemsetAsync(t.data_ptr(), 0, t.numel() * t.element_size(),
                                  torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(f"cudaMemsetAsync returned {err}")
    return memset


def _loadable(name: str) -> bool:
    try:
        ctypes.CDLL(name)
        return True
    except OSError:
        return False


Case = tuple[Callable[[], None], Callable[[], bool], torch.Tensor, int]  # op, its check, its output, ops per run


def cases(device: torch.device) -> dict[str, Case]:
    """name -> (one op, a check of its output after timing, the output to poison before the last run, ops
    per timed run). The fill is timed at two lengths: a graph's replay has a start of its own."""
    g = torch.Generator(device=device).manual_seed(1)
    out: dict[str, Case] = {}
    y = torch.full((1,), float("nan"), device=device)
    out["fill_1"] = (lambda: y.fill_(3.0), lambda: bool(y.item() == 3.0), y, OPS)
    out["fill_1_x1024"] = (lambda: y.fill_(3.0), lambda: bool(y.item() == 3.0), y, 1024)
    for label, elements in (("copy_64KB", 1 << 14), ("copy_4MB", 1 << 20), ("copy_64MB", 1 << 24)):
        src = torch.rand(elements, device=device, generator=g) + 1.0
        dst = torch.full_like(src, float("nan"))
        out[label] = ((lambda s=src, d=dst: d.copy_(s)), (lambda s=src, d=dst: bool(torch.equal(s, d))), dst, OPS)
    a = torch.randn(2048, 2048, device=device, dtype=torch.bfloat16, generator=g)
    b = torch.randn(2048, 2048, device=device, dtype=torch.bfloat16, generator=g)
    c = torch.full((2048, 2048), float("nan"), device=device, dtype=torch.bfloat16)
    ref = a @ b
    out["gemm_bf16_2048"] = (lambda: torch.mm(a, b, out=c), lambda: bool(torch.equal(c, ref)), c, OPS)
    x = torch.randn(64, 256, 14, 14, device=device, dtype=torch.float16, generator=g).to(
        memory_format=torch.channels_last)
    w = torch.randn(256, 256, 3, 3, device=device, dtype=torch.float16, generator=g).to(
        memory_format=torch.channels_last) * 0.05
    conv_ref = F.conv2d(x, w, padding=1)
    conv_out = [torch.full_like(conv_ref, float("nan"))]  # the last stream run's output (one kernel per op)

    def conv() -> None:
        conv_out[0] = F.conv2d(x, w, padding=1)
    out["conv_fp16_nhwc"] = (conv, lambda: bool(torch.allclose(conv_out[0], conv_ref, rtol=1e-2, atol=1e-2)),
                             conv_out[0], OPS)
    memset = _memset_async()
    buf = torch.rand(1 << 14, device=device, generator=g) + 1.0
    src = torch.rand(1 << 14, device=device, generator=g) + 1.0

    def memset_then_add() -> None:  # two nodes per op: the memset, and a kernel that reads it back
        memset(buf)
        buf.add_(src)
    out["memset+add_64KB"] = (memset_then_add, lambda: bool(torch.equal(buf, src)), buf, OPS)
    return out


def time_case(op: Callable[[], None], poisoned: torch.Tensor, ops: int,
              device: torch.device) -> dict[str, dict[str, float]]:
    stream = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(stream)
    with torch.cuda.stream(side):
        for _ in range(3):
            op()  # warm-up outside the capture (cuBLAS/cuDNN pick their kernels)
    stream.wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(ops):
            op()
    torch.cuda.synchronize(device)
    times: dict[str, list[float]] = {"stream": [], "graph": []}
    for sample in range(SAMPLES + 2):
        for mode in ("stream", "graph"):
            if sample == SAMPLES + 1:
                poisoned.fill_(float("nan"))  # the check after timing sees the last run's output
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(SPIN_CYCLES_PER_OP * ops)  # the host issues every op while the device spins
            start.record()
            if mode == "graph":
                graph.replay()
            else:
                for _ in range(ops):
                    op()
            end.record()
            torch.cuda.synchronize(device)
            times[mode].append(start.elapsed_time(end) * 1e3 / ops)  # µs per op
    out = {}
    for mode, values in times.items():
        v = sorted(values[2:])  # the first two samples are warm-up
        q = statistics.quantiles(v, n=20)
        out[mode] = {"median_us": statistics.median(v), "p5_us": q[0], "p95_us": q[-1],
                     "cv": statistics.stdev(v) / statistics.mean(v), "n": len(v)}
    return out


def main() -> int:
    device = torch.device("cuda", torch.cuda.current_device())
    result = {"device": torch.cuda.get_device_name(device), "timer": "events",
              "torch": torch.__version__, "cases": {}}
    for name, (op, check, output, ops) in cases(device).items():
        timed = time_case(op, output, ops, device)
        timed["ops_per_run"] = ops
        timed["verified"] = check()
        timed["saved_per_op_us"] = timed["stream"]["median_us"] - timed["graph"]["median_us"]
        result["cases"][name] = timed
        print(f"{name:18s} stream {timed['stream']['median_us']:9.3f} us/op (CV {timed['stream']['cv']:.2%}) "
              f"graph {timed['graph']['median_us']:9.3f} (CV {timed['graph']['cv']:.2%}) "
              f"saved {timed['saved_per_op_us']:6.3f}  verified {timed['verified']}", flush=True)
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
