"""Work accounting of one model step: FLOPs counted exactly per op, bytes estimated.

Both counts come from running the step once under torch dispatch modes, outside
any timing (the modes slow every op down).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

BYTES_NOTE = (
    "bytes_per_step is an estimate: the sum of the sizes of every tensor input and output of every "
    "aten op in one step, as if no op reused another's data from cache (views and allocations excluded); "
    "real DRAM traffic is lower where fused or cached data is reused, higher where kernels re-read inputs"
)
FLOPS_NOTE = (
    "flops_per_step counts matmul, convolution and attention (forward and backward) with "
    "torch.utils.flop_counter; elementwise ops, normalisation and the optimizer add no FLOPs"
)

_aten = torch.ops.aten
# Ops that move no data: they only allocate, alias or rewrap a tensor.
_NO_DATA_OPS = {
    _aten.empty,
    _aten.empty_strided,
    _aten.empty_like,
    _aten.new_empty,
    _aten.new_empty_strided,
    _aten.detach,
    _aten.alias,
    _aten.lift_fresh,
    _aten._unsafe_view,
}


Shape = tuple[int, ...]


def _cpu_attention_flops(query: Shape, key: Shape, value: Shape, *args: Any, out_shape: Any = None,
                         **kwargs: Any) -> int:
    return sdpa_flop_count(query, key, value)


def _cpu_attention_backward_flops(grad_out: Shape, query: Shape, key: Shape, value: Shape, *args: Any,
                                  out_shape: Any = None, **kwargs: Any) -> int:
    return sdpa_backward_flop_count(grad_out, query, key, value)


def _extra_flop_formulas() -> dict[Any, Callable[..., int]]:
    """Attention ops torch's flop counter has no formula for: the CPU flash kernels behind
    scaled_dot_product_attention, counted like the CUDA ones (full score matrix, mask ignored)."""
    formulas: dict[Any, Callable[..., int]] = {}
    forward = getattr(_aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    backward = getattr(_aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
    if forward is not None:
        formulas[forward] = _cpu_attention_flops
    if backward is not None:
        formulas[backward] = _cpu_attention_backward_flops
    return formulas


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a kernel touches for `t`: broadcast (stride-0) dimensions count once."""
    if t.numel() == 0:
        return 0
    if t.layout != torch.strided:
        return t.numel() * t.element_size()
    elements = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            elements *= size
    return elements * t.element_size()


def _leaf_tensor_bytes(tree: Any) -> int:
    return sum(tensor_bytes(x) for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor))


class TensorBytesMode(TorchDispatchMode):
    """Sums the bytes of every tensor input and output of every aten op that runs under it.

    An estimate of memory traffic that assumes no cache reuse between ops: each op
    reads all of its inputs and writes all of its outputs from memory. In-place ops
    count their mutated tensor as read and written; views and allocations count nothing.
    """

    def __init__(self) -> None:
        super().__init__()
        self.total_bytes = 0
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if getattr(func, "is_view", False) or func._overloadpacket in _NO_DATA_OPS:
            return out
        # An out= argument is the output: count it once, as written.
        inputs = {k: v for k, v in kwargs.items() if k != "out"}
        self.total_bytes += _leaf_tensor_bytes((args, inputs)) + _leaf_tensor_bytes(out)
        self.ops += 1
        return out


def count_step(step_fn: Callable[[], Any]) -> tuple[float, float]:
    """Run `step_fn` once and return (FLOPs, estimated bytes) of that step.

    FLOPs: torch.utils.flop_counter.FlopCounterMode, forward and backward of
    matmul, convolution and attention. Bytes: :class:`TensorBytesMode`, an
    estimate with no cache reuse (see BYTES_NOTE). Call it outside timing.
    """
    flop_counter = FlopCounterMode(display=False, custom_mapping=_extra_flop_formulas())
    bytes_mode = TensorBytesMode()
    # Entered last, the bytes mode sees each op first, before the flop counter may decompose it.
    with flop_counter, bytes_mode:
        step_fn()
    return float(flop_counter.get_total_flops()), float(bytes_mode.total_bytes)
