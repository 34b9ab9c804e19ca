"""Batch norm in each 16-bit dtype and fp32, timed on each batch-norm shape the step runs.

torch runs batch norm through cuDNN for fp32 and fp16 inputs, but through its own kernels for bf16 ones
(measured on an H200: a ResNet-50 training step's batch norms took 13.8 ms in fp16 and 24.1 ms in bf16),
so an AMP dtype change changes which library's kernels run, not just their bytes. Nothing in one profile
says how fast the other library's kernels are; this times them on the device, on the shapes and layouts the
step runs (how much faster one library is depends on the shape), so that the prediction of an AMP fix can
price each of the step's batch norms in the new dtype, and that of a batch fix at the new batch.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from pygpuperf.trials import dtype_timing
from pygpuperf.explain.classify import BATCH_NORM_OPS
from pygpuperf.trials.dtype_timing import DtypeTimes
from pygpuperf.explain.model import KernelRecord

TOLERANCE = {"fp32": 1e-4, "fp16": 2e-2, "bf16": 1e-1}  # of the fp32 reference's magnitude


@dataclass
class NormTiming(DtypeTimes):
    """One batch norm (forward, and backward when training) per dtype, in µs, on `shape`."""

    shape: list[int]
    channels_last: bool
    training: bool
    us: dict[str, float] = field(default_factory=dict)

    def key(self) -> Hashable:
        return tuple(self.shape), self.channels_last

    def to_dict(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "channels_last": self.channels_last, "training": self.training,
                "us": dict(self.us)}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "NormTiming":
        return NormTiming([int(x) for x in d["shape"]], bool(d["channels_last"]), bool(d["training"]),
                          dtype_timing.us_from_dict(d))


# Shapes timed at most: those the step spends most time in.
MAX_SHAPES = 32


def _layout(r: KernelRecord) -> tuple[tuple[int, ...], bool] | None:
    """(input shape, channels_last) of a batch-norm kernel's first input, where it is a 4-d shape."""
    shape = r.input_shapes[0] if r.input_shapes else None
    if not (isinstance(shape, list) and len(shape) == 4 and all(isinstance(d, int) and d > 0 for d in shape)):
        return None
    strides = r.input_strides[0] if r.input_strides else None
    return tuple(shape), dtype_timing.channels_last(shape, strides)


def norm_shapes(records: Sequence[KernelRecord]) -> list[tuple[list[int], bool]]:
    """(input shape, channels_last) of each forward batch norm the step runs, most time first."""
    def forward_layout(r: KernelRecord) -> tuple[tuple[int, ...], bool] | None:
        forward = r.phase in ("forward", "other") and BATCH_NORM_OPS.search(r.op or "") and "backward" not in r.op
        return _layout(r) if forward else None

    return [(list(shape), last) for shape, last in dtype_timing.most_time_first(records, forward_layout)]


def time_step_norms(records: Sequence[KernelRecord], training: bool, device: torch.device | str,
                    samples: int = 20, dtypes: Sequence[str] = dtype_timing.KEYS,
                    scale: float = 1.0, layout: str = "") -> list[NormTiming]:
    """:func:`time_batch_norm` of each of the step's batch-norm shapes (the :data:`MAX_SHAPES` it spends
    most time in)."""
    return [time_batch_norm(shape, last, training, device, samples, dtypes, scale, layout)
            for shape, last in norm_shapes(records)[:MAX_SHAPES]]


def step_dtype(records: Sequence[KernelRecord]) -> str | None:
    """The dtype the step's batch norms run in (their forward's input)."""
    return dtype_timing.step_dtype([r for r in records if r.phase in ("forward", "other") and _key_of(r)])


def _key_of(record: KernelRecord) -> Hashable | None:
    """A batch-norm kernel's (shape, channels_last); () for one whose shape was not recorded; None for others."""
    if not BATCH_NORM_OPS.search(record.op or ""):
        return None
    return _layout(record) or ()


def ratios(timings: Sequence[NormTiming], to: str, frm: str) -> Callable[[KernelRecord], float | None]:
    """Time in dtype `to` over time in `frm` for a batch-norm kernel (None for other kernels): its own shape's
    timing, else (a shape not timed) the ratio of all timed shapes' times together; None where neither was
    measured."""
    return dtype_timing.ratios(timings, _key_of, to, frm)


def time_batch_norm(shape: Sequence[int], channels_last: bool, training: bool, device: torch.device | str,
                    samples: int = 20, dtypes: Sequence[str] = dtype_timing.KEYS, scale: float = 1.0,
                    layout: str = "") -> NormTiming:
    """Median µs of F.batch_norm on random non-zero input of `shape` (its batch times `scale`; channels_last as
    the step ran it, or NHWC where `layout` says) in each of `dtypes` (fp32 weights, as autocast keeps them),
    forward and backward when `training`, keyed by :func:`dtype_timing.variant`; a dtype whose output (or
    input gradient) is off the fp32 reference by more than its tolerance, or that fails, is left out."""
    device = torch.device(device)
    fmt = torch.channels_last if channels_last or layout == dtype_timing.NHWC else torch.contiguous_format
    generator = torch.Generator(device=device).manual_seed(0)
    sized = [max(1, round(shape[0] * scale)), *shape[1:]]
    base = (torch.rand(*sized, device=device, generator=generator) + 0.5).contiguous(memory_format=fmt)
    channels = shape[1]
    weight = torch.rand(channels, device=device, generator=generator) + 0.5
    bias = torch.rand(channels, device=device, generator=generator) - 0.5
    grad = (torch.rand(*sized, device=device, generator=generator) - 0.5).contiguous(memory_format=fmt)
    mean, var = torch.zeros(channels, device=device), torch.ones(channels, device=device)

    def run_in(dtype: torch.dtype, forward_only: bool = False) -> Callable[[], dtype_timing.Outputs]:
        # A leaf of its own per dtype (a cast of a shared leaf would time the cast's backward too), and
        # gradients returned rather than accumulated: what a training step's batch norm runs.
        x = base.to(dtype, copy=True).requires_grad_(training)
        g = grad.to(dtype)
        w, b = weight.clone().requires_grad_(training), bias.clone().requires_grad_(training)

        def run() -> dtype_timing.Outputs:
            out = torch.nn.functional.batch_norm(x, mean, var, w, b, training=training)
            if not training or forward_only:
                return out, None
            return out, torch.autograd.grad(out, (x, w, b), g)[0]

        return run

    reference = dtype_timing.reference_outputs(lambda: run_in(torch.float32)())
    return NormTiming(list(shape), channels_last, training,
                      dtype_timing.time_in_dtypes(run_in, reference, TOLERANCE, device, samples, dtypes, scale,
                                                  split=training, layout=layout))
