"""Output tiles of a tiled GEMM or convolution kernel: its tile shape from the kernel's name, its output
from the op's shapes. The kernel-time model turns tiles into waves on a card's multiprocessors.

Names spell the CTA tile: cuDNN/cuBLAS ``xmma`` kernels ``tilesize128x128x64``, cuBLASLt ``nvjet_sm90_tst_192x192_...``,
CUTLASS ``..._s16816gemm_f16_128x256_32x3_nn_...``. The output is M x N: rows by columns of an ``mm``
(times the batch of a ``bmm``), output pixels by output channels of a convolution's forward pass,
input pixels by input channels of its data gradient. A split-K kernel cuts K into an unknown number
of pieces, and a weight gradient reduces over the batch's pixels in parallel, so neither has a count.
The tile's orientation on the output is not in the name: both counts are given, and the model takes
the one with the fuller waves, which keeps the bound a lower limit.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from typing import Any

from pygpuperf.explain.model import KernelRecord

_TILE_PATTERNS = (
    re.compile(r"tilesize(\d+)x(\d+)x\d+"),  # xmma (cuDNN, cuBLAS)
    re.compile(r"_tile(\d+)x(\d+)x\d+"),  # xmma first-layer convolutions
    re.compile(r"nvjet_sm\d+_[a-z]+_(\d+)x(\d+)_"),  # cuBLASLt nvjet
    # CUTLASS: an optional dtype, the CTA tile, the K tile x stages (tensorop "gemm_f16_128x256_32x3_nn", SIMT
    # "sgemm_256x128_8x4_nn", where a looser pattern read the K tile and stages as the tile)
    re.compile(r"gemm_(?:[a-z]+\d*_)?(\d+)x(\d+)_(?:\d+x\d+_)?(?:nn|nt|tn|tt)"),
)
_SPLIT_K = re.compile(r"split_?k", re.IGNORECASE)
CONVOLUTION_FORWARD = ("aten::cudnn_convolution", "aten::convolution", "aten::_convolution")  # (image, weight, ...)


def tile_shape(name: str) -> tuple[int, int] | None:
    """(rows, columns) of the CTA tile a kernel's name spells, or None."""
    if _SPLIT_K.search(name):
        return None
    for pattern in _TILE_PATTERNS:
        m = pattern.search(name)
        if m:
            a, b = int(m.group(1)), int(m.group(2))
            return (a, b) if a > 0 and b > 0 else None
    return None


def _dims(shape: Any) -> list[int] | None:
    return [int(d) for d in shape] if isinstance(shape, list) and all(isinstance(d, int) for d in shape) else None


def _conv_output(record: KernelRecord, image: list[int], weight: list[int]) -> tuple[int, int] | None:
    """(N x P x Q, K) of a 2-D convolution forward from its input and weight shapes and concrete stride/padding."""
    if len(image) != 4 or len(weight) != 4:
        return None
    extra = record.concrete_inputs
    stride, padding, dilation = _pair(extra, 3, 1), _pair(extra, 4, 0), _pair(extra, 5, 1)
    n, _, h, w = image
    k, _, r, s = weight
    p = (h + 2 * padding[0] - dilation[0] * (r - 1) - 1) // stride[0] + 1
    q = (w + 2 * padding[1] - dilation[1] * (s - 1) - 1) // stride[1] + 1
    return (n * p * q, k) if p > 0 and q > 0 else None


def _pair(extra: list[Any], index: int, default: int) -> tuple[int, int]:
    """A stride/padding/dilation argument as the profiler gives it ("[2, 2]"), else the default."""
    raw = extra[index] if index < len(extra) else ""
    numbers = [int(x) for x in re.findall(r"-?\d+", str(raw))]
    if len(numbers) == 1:
        return numbers[0], numbers[0]
    return (numbers[0], numbers[1]) if len(numbers) >= 2 else (default, default)


def output_shape(record: KernelRecord) -> tuple[int, int, int] | None:
    """(batch, M, N) of the GEMM a kernel computes, from its op's shapes, or None when unknown."""
    op, shapes = record.op, record.input_shapes
    dims = [_dims(s) for s in shapes]
    name = record.name
    if op == "aten::mm" and len(dims) >= 2 and dims[0] and dims[1] and len(dims[0]) == len(dims[1]) == 2:
        return 1, dims[0][0], dims[1][1]
    if op == "aten::addmm" and len(dims) >= 3 and dims[1] and dims[2] and len(dims[1]) == len(dims[2]) == 2:
        return 1, dims[1][0], dims[2][1]
    if op in ("aten::bmm", "aten::baddbmm"):
        first = 0 if op == "aten::bmm" else 1
        a, b = (dims[first], dims[first + 1]) if len(dims) > first + 1 else (None, None)
        if a and b and len(a) == len(b) == 3:
            return a[0], a[1], b[2]
    if op in CONVOLUTION_FORWARD and len(dims) >= 2:
        if dims[0] and dims[1]:
            out = _conv_output(record, dims[0], dims[1])
            return (1, *out) if out else None
    if op == "aten::convolution_backward" and len(dims) >= 2 and dims[1]:
        image = dims[1]
        if "dgrad" in name and len(image) == 4:
            return 1, image[0] * image[2] * image[3], image[1]
    return None


def output_tiles(record: KernelRecord) -> tuple[int, ...]:
    """CTA tiles a tiled kernel launches over its output, in both orientations of its tile (see the module's
    note); () when unknown."""
    tile = tile_shape(record.name)
    shape = output_shape(record) if tile else None
    if tile is None or shape is None:
        return ()
    batch, m, n = shape
    a, b = tile
    return tuple(sorted({batch * math.ceil(m / a) * math.ceil(n / b), batch * math.ceil(m / b) * math.ceil(n / a)}))


def weight_shapes(records: Sequence[KernelRecord]) -> set[tuple[int, int]]:
    """(rows, columns), both ways round, of the second operand of each forward mm/addmm: the weights of
    the step's linear layers, whose gradients are GEMMs with the batch in K rather than in the output."""
    out: set[tuple[int, int]] = set()
    for r in records:
        if r.phase != "forward" or r.op not in ("aten::mm", "aten::addmm"):
            continue
        dims = [_dims(s) for s in r.input_shapes]
        weight = dims[1] if r.op == "aten::mm" and len(dims) >= 2 else dims[2] if len(dims) >= 3 else None
        if weight and len(weight) == 2:
            out.update({(weight[0], weight[1]), (weight[1], weight[0])})
    return out


def at_batch(record: KernelRecord, scale: float, weights: set[tuple[int, int]]) -> KernelRecord:
    """The record with the batch dimension of its GEMM or convolution operands times `scale`, so that its
    output tiles are those of the op at the new batch: the rows of an activation GEMM, the K of a weight
    gradient (`weights`, from :func:`weight_shapes`), the batch of a bmm, the images of a convolution.
    Other ops are returned as they are."""
    dims = [_dims(s) for s in record.input_shapes]
    shapes = list(record.input_shapes)

    def scale_dim(operand: int, axis: int) -> None:
        d = dims[operand] if operand < len(dims) else None
        if d and len(d) > axis:
            shapes[operand] = d[:axis] + [max(1, round(d[axis] * scale))] + d[axis + 1:]

    op = record.op
    if op == "aten::mm" and len(dims) >= 2 and dims[0] and dims[1]:
        if record.phase == "backward" and (dims[0][0], dims[1][-1]) in weights:  # a weight gradient: batch in K
            scale_dim(0, 1)
            scale_dim(1, 0)
        else:
            scale_dim(0, 0)
    elif op == "aten::addmm":
        scale_dim(1, 0)
    elif op in ("aten::bmm", "aten::baddbmm"):
        first = 0 if op == "aten::bmm" else 1
        scale_dim(first, 0)
        scale_dim(first + 1, 0)
    elif op in CONVOLUTION_FORWARD:
        scale_dim(0, 0)
    elif op == "aten::convolution_backward":
        scale_dim(0, 0)
        scale_dim(1, 0)
    return dataclasses.replace(record, input_shapes=shapes) if shapes != record.input_shapes else record
