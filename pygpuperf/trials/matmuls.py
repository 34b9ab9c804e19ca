"""Matrix products (mm, addmm, bmm) timed on each GEMM shape the step runs, in each dtype and at the batch a
batch fix moves to.

The GEMM library picks its kernel by the shape: in fp32 BERT-base training profiles on an H200 at batch 32
and 64, the feed-forward output projection ([12288, 3072] x [3072, 768]) ran a 128x64-tile kernel at batch
32 and a 128x128-tile one at 64, and took 1.69x the time for twice the work; the step's forward GEMMs grew
1.85x in all where a resize that keeps each kernel's speed says 1.96x. Nothing in one profile says which
kernel the library takes at another batch or dtype, so the step's own shapes are timed, with the layout
(transposed or not) and the TF32 setting each ran with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from pygpuperf.trials import dtype_timing
from pygpuperf.explain import tiles
from pygpuperf.trials.dtype_timing import DtypeTimes
from pygpuperf.explain.model import KernelRecord

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm")
# Of the fp32 reference's mean magnitude; fp32 covers a step that runs its fp32 GEMMs in TF32.
TOLERANCE = {"fp32": 1e-2, "fp16": 2e-2, "bf16": 1e-1}
MAX_SHAPES = 32  # shapes timed at most: those the step spends most time in
# (op, operand shapes, which operands are transposed views, TF32 on)
MatmulKey = tuple[str, tuple[tuple[int, ...], ...], tuple[bool, ...], bool]


@dataclass
class MatmulTiming(DtypeTimes):
    """One matrix product per dtype, in µs: `op` on operands of `shapes` (addmm: bias, a, b; the step's own,
    whatever batch a variant was timed at), each matrix a transposed view or not, fp32 with TF32 on or off."""

    op: str
    shapes: list[list[int]]
    transposed: list[bool]
    tf32: bool
    us: dict[str, float] = field(default_factory=dict)

    def key(self) -> MatmulKey:
        return self.op, tuple(tuple(s) for s in self.shapes), tuple(self.transposed), self.tf32

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "shapes": [list(s) for s in self.shapes], "transposed": list(self.transposed),
                "tf32": self.tf32, "us": dict(self.us)}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "MatmulTiming":
        return MatmulTiming(str(d["op"]), [[int(x) for x in s] for s in d["shapes"]],
                            [bool(t) for t in d["transposed"]], bool(d["tf32"]), dtype_timing.us_from_dict(d))


def _operands(op: str) -> slice:
    """Which of an op's inputs are its matrices (addmm's first is the bias)."""
    return slice(1, 3) if op == "aten::addmm" else slice(0, 2)


def _transposed(shape: list[int], strides: Any) -> bool:
    """Whether a matrix (the last two dimensions) of `shape` is a transposed view: its rows are contiguous."""
    return (isinstance(strides, list) and len(strides) == len(shape) >= 2 and strides[-2] == 1
            and shape[-2] > 1 and strides[-1] >= shape[-2])


def _matmul_of(record: KernelRecord) -> MatmulKey | tuple[()] | None:
    """The record's GEMM key; () for a GEMM whose operand shapes were not recorded; None for another op."""
    if record.op not in GEMM_OPS:
        return None
    shapes = record.input_shapes
    rank = 3 if record.op == "aten::bmm" else 2
    matrices = shapes[_operands(record.op)] if len(shapes) >= _operands(record.op).stop else []
    if len(matrices) != 2 or not all(isinstance(s, list) and len(s) == rank and all(isinstance(d, int) and d > 0
                                                                                    for d in s) for s in matrices):
        return ()
    strides = record.input_strides[_operands(record.op)] if record.input_strides else []
    flags = tuple(_transposed(s, strides[i] if i < len(strides) else None) for i, s in enumerate(matrices))
    every = [tuple(s) if isinstance(s, list) else () for s in shapes[:_operands(record.op).stop]]
    if not all(all(isinstance(d, int) and d > 0 for d in s) and s for s in every):  # a bias not recorded
        return ()
    return record.op, tuple(every), flags, record.precision.startswith("tf32")


def matmul_records(records: Sequence[KernelRecord]) -> list[tuple[MatmulKey, KernelRecord]]:
    """Each GEMM shape the step runs (its key, and one record of it), most time first."""
    spent: dict[MatmulKey, float] = {}
    first: dict[MatmulKey, KernelRecord] = {}
    for r in records:
        key = _matmul_of(r)
        if key:
            spent[key] = spent.get(key, 0.0) + r.duration_us
            first.setdefault(key, r)
    return [(key, first[key]) for key, _ in sorted(spent.items(), key=lambda kv: -kv[1])]


def step_dtype(records: Sequence[KernelRecord]) -> str | None:
    """The dtype the step's GEMMs run in (the first one's input)."""
    return dtype_timing.step_dtype([r for r in records if _matmul_of(r)])


def time_step_matmuls(records: Sequence[KernelRecord], training: bool, device: torch.device | str,
                      samples: int = 20, dtypes: Sequence[str] = dtype_timing.KEYS,
                      scale: float = 1.0) -> list[MatmulTiming]:
    """:func:`time_matmul` of each of the step's GEMM shapes (the :data:`MAX_SHAPES` it spends most time in), at
    `scale` times the batch where the batch is in their operands (:func:`tiles.at_batch`); `training` is the
    other families' signature: a GEMM is timed alone either way."""
    weights = tiles.weight_shapes(records)
    out = []
    for key, record in matmul_records(records)[:MAX_SHAPES]:
        op, shapes, transposed, tf32 = key
        resized = tiles.at_batch(record, scale, weights) if scale != 1 else record
        sized = [list(s) for s in resized.input_shapes[:len(shapes)]]
        out.append(time_matmul(op, [list(s) for s in shapes], list(transposed), tf32, device, samples, dtypes,
                               scale, sized))
    return out


def ratios(timings: Sequence[MatmulTiming], to: str, frm: str) -> Callable[[KernelRecord], float | None]:
    """Time in variant `to` over time in `frm` for a GEMM kernel (None for other kernels): its own shape's
    timing, else the ratio of all timed shapes' times together."""
    return dtype_timing.ratios(timings, _matmul_of, to, frm)


def time_matmul(op: str, shapes: Sequence[Sequence[int]], transposed: Sequence[bool], tf32: bool,
                device: torch.device | str, samples: int = 20, dtypes: Sequence[str] = dtype_timing.KEYS,
                scale: float = 1.0, sized: Sequence[Sequence[int]] | None = None) -> MatmulTiming:
    """Median µs of `op` on random non-zero operands of `sized` (the shapes at `scale` times the batch; default
    `shapes`), each matrix laid out transposed where `transposed` says, in each of `dtypes` (fp32 with TF32 as
    `tf32` says), keyed by :func:`dtype_timing.variant`; a dtype off the fp32 reference by more than its
    tolerance, or that fails, is left out."""
    device = torch.device(device)
    generator = torch.Generator(device=device).manual_seed(0)
    dims = [list(s) for s in (sized or shapes)]
    matrices = range(len(dims))[_operands(op)]

    def operand(i: int) -> torch.Tensor:
        shape = dims[i]
        flip = i in matrices and transposed[i - matrices.start]
        built = shape[:-2] + [shape[-1], shape[-2]] if flip else shape
        x = torch.rand(*built, device=device, generator=generator) + 0.5  # 0.5..1.5: no zeros, no cancellation
        return x.transpose(-1, -2) if flip else x

    base = [operand(i) for i in range(len(dims))]
    function = {"aten::mm": torch.mm, "aten::addmm": torch.addmm, "aten::bmm": torch.bmm}[op]

    def run_in(dtype: torch.dtype, forward_only: bool = False) -> Callable[[], dtype_timing.Outputs]:
        xs = [x.to(dtype) for x in base]  # keeps each operand's layout
        return lambda: (function(*xs),)

    flags = torch.backends.cuda.matmul
    before = flags.allow_tf32
    try:
        flags.allow_tf32 = False
        reference = dtype_timing.reference_outputs(lambda: run_in(torch.float32)())
        flags.allow_tf32 = tf32
        us = dtype_timing.time_in_dtypes(run_in, reference, TOLERANCE, device, samples, dtypes, scale)
    finally:
        flags.allow_tf32 = before
    return MatmulTiming(op, [list(s) for s in shapes], list(transposed), tf32, us)
