"""Sums over some dimensions of a tensor (the bias gradients of linear and convolution layers), timed on each
sum shape the step runs, in each dtype and at the batch a batch fix moves to.

torch's reduce kernel sums the rows of a tall matrix far from its bandwidth bound, and its time grows much
less than its bytes: in GPT-100M training profiles on an H200 at batch 16 and 32, a bias gradient
([16384, 768] → [768], bf16) took 32.0 and 45.3 µs against a bound of 2.7 and 5.4, the step's sums 1.83 →
2.72 ms; UNet's channel sums went 0.65 → 0.92 ms at twice the batch. Nothing in one profile says how such a
kernel grows, so the batch fix times each shape at both batches (:mod:`pygpuperf.trials.dtype_timing`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from pygpuperf.trials import dtype_timing
from pygpuperf.trials.dtype_timing import DtypeTimes
from pygpuperf.explain.model import KernelRecord

SUM_OP = "aten::sum"
TOLERANCE = {"fp32": 1e-4, "fp16": 2e-2, "bf16": 1e-1}  # of the fp32 reference's magnitude
MAX_SHAPES = 32  # shapes timed at most: those the step spends most time in
SumKey = tuple[tuple[int, ...], tuple[int, ...], bool, bool]  # (shape, dims, keepdim, channels_last)


@dataclass
class SumTiming(DtypeTimes):
    """One sum over `dims` of a tensor of `shape`, per dtype, in µs."""

    shape: list[int]
    dims: list[int]
    keepdim: bool
    channels_last: bool
    us: dict[str, float] = field(default_factory=dict)

    def key(self) -> SumKey:
        return tuple(self.shape), tuple(self.dims), self.keepdim, self.channels_last

    def to_dict(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dims": list(self.dims), "keepdim": self.keepdim,
                "channels_last": self.channels_last, "us": dict(self.us)}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "SumTiming":
        return SumTiming([int(x) for x in d["shape"]], [int(x) for x in d["dims"]], bool(d["keepdim"]),
                         bool(d["channels_last"]), dtype_timing.us_from_dict(d))


def _sum_of(record: KernelRecord) -> SumKey | tuple[()] | None:
    """(shape, dims, keepdim, channels_last) of a sum kernel's op; () for a sum whose arguments were not all
    recorded (or that reduces every dimension); None for a kernel of another op."""
    if record.op != SUM_OP:
        return None
    shape = record.input_shapes[0] if record.input_shapes else None
    concrete = record.concrete_inputs
    dims = dtype_timing.concrete_ints(concrete[1]) if len(concrete) > 2 else None
    if not (isinstance(shape, list) and shape and all(isinstance(d, int) and d > 0 for d in shape)
            and dims and all(-len(shape) <= d < len(shape) for d in dims)):
        return ()
    keepdim = concrete[2] == "True"
    strides = record.input_strides[0] if record.input_strides else None
    last = dtype_timing.channels_last(shape, strides)
    return tuple(shape), tuple(d % len(shape) for d in dims), keepdim, last


def sum_shapes(records: Sequence[KernelRecord]) -> list[SumKey]:
    """Each sum the step runs (:func:`_sum_of`'s key), most time first."""
    return dtype_timing.most_time_first(records, _sum_of)


def step_dtype(records: Sequence[KernelRecord]) -> str | None:
    """The dtype the step's sums run in (the first one's input)."""
    return dtype_timing.step_dtype([r for r in records if _sum_of(r)])


def time_step_sums(records: Sequence[KernelRecord], training: bool, device: torch.device | str,
                   samples: int = 20, dtypes: Sequence[str] = dtype_timing.KEYS,
                   scale: float = 1.0, layout: str = "") -> list[SumTiming]:
    """:func:`time_sum` of each of the step's sum shapes (the :data:`MAX_SHAPES` it spends most time in), a
    4-d one in NHWC where `layout` says; `training` is the other families' signature: a sum is timed alone
    either way."""
    return [time_sum(list(shape), list(dims), keepdim, last, device, samples, dtypes, scale, layout)
            for shape, dims, keepdim, last in sum_shapes(records)[:MAX_SHAPES]]


def ratios(timings: Sequence[SumTiming], to: str, frm: str) -> Callable[[KernelRecord], float | None]:
    """Time in variant `to` over time in `frm` for a sum kernel (None for other kernels): its own shape's
    timing, else the ratio of all timed shapes' times together."""
    return dtype_timing.ratios(timings, _sum_of, to, frm)


def time_sum(shape: Sequence[int], dims: Sequence[int], keepdim: bool, channels_last: bool,
             device: torch.device | str, samples: int = 20, dtypes: Sequence[str] = dtype_timing.KEYS,
             scale: float = 1.0, layout: str = "") -> SumTiming:
    """Median µs of torch.sum over `dims` of random non-zero input of `shape` (its first dimension, the
    batch, times `scale`) in each of `dtypes`, keyed by :func:`dtype_timing.variant`; a dtype whose sum is
    off the fp32 reference by more than its tolerance, or that fails, is left out."""
    device = torch.device(device)
    nhwc = channels_last or (layout == dtype_timing.NHWC and len(shape) == 4)
    fmt = torch.channels_last if nhwc else torch.contiguous_format
    generator = torch.Generator(device=device).manual_seed(0)
    sized = [max(1, round(shape[0] * scale)), *shape[1:]]
    # Centred on zero, so that a 16-bit sum of millions of elements stays finite.
    base = (torch.rand(*sized, device=device, generator=generator) - 0.5).contiguous(memory_format=fmt)
    wanted = list(dims)

    def run_in(dtype: torch.dtype, forward_only: bool = False) -> Callable[[], dtype_timing.Outputs]:
        x = base.to(dtype, copy=True)
        return lambda: (torch.sum(x, wanted, keepdim=keepdim),)

    reference = dtype_timing.reference_outputs(lambda: run_in(torch.float32)())
    return SumTiming(list(shape), list(dims), keepdim, channels_last,
                     dtype_timing.time_in_dtypes(run_in, reference, TOLERANCE, device, samples, dtypes, scale,
                                                 layout=layout))
