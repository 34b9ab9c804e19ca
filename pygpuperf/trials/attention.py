"""Fused attention (torch's scaled_dot_product_attention kernels) timed on each attention shape the step runs,
in each dtype and at the batch a batch fix moves to.

Which kernel runs, and how fast, depends on the dtype and the shape: torch takes the memory-efficient kernel
in fp32 and cuDNN's or the flash kernel in 16 bits, and a small batch leaves SMs idle. In fp32 gpt-tiny
training profiles on an H200 at batch 32 and 64, the efficient kernels' forward took 277 → 467 µs and their
backward 581 → 967 µs (1.67x for twice the work), where a resize that keeps each kernel's speed says 2x.
So the step's own shapes are timed through scaled_dot_product_attention with its default choice of kernel,
as the step calls it: forward and backward when training (the backward's time is the whole less the
forward's), causal where the step's was.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from pygpuperf.trials import dtype_timing
from pygpuperf.trials.dtype_timing import DtypeTimes
from pygpuperf.explain.model import KernelRecord


class _Arguments(NamedTuple):
    """Where an attention op's recorded inputs hold what its key needs."""

    layout: str  # the query's: "bshd" [batch, sequence, heads, head dim], or "bhsd" (heads first)
    query: int
    key: int
    bias: int | None  # a mask (attention bias); None: the op takes none
    causal: int  # efficient attention's custom_mask_type: 0 none, 1 or 2 causal; the others' is_causal
    dropout: int


ATTENTION_OPS: dict[str, _Arguments] = {
    "aten::_efficient_attention_forward": _Arguments("bshd", 0, 1, 3, 9, 8),
    "aten::_efficient_attention_backward": _Arguments("bshd", 1, 2, 4, 14, 11),
    "aten::_flash_attention_forward": _Arguments("bshd", 0, 1, None, 8, 7),
    "aten::_flash_attention_backward": _Arguments("bshd", 1, 2, None, 11, 10),
    "aten::_cudnn_attention_forward": _Arguments("bhsd", 0, 1, 3, 10, 9),
    "aten::_cudnn_attention_backward": _Arguments("bhsd", 1, 2, 8, 14, 13),
}
# Of the fp32 reference's mean magnitude, on the output and the query's gradient.
TOLERANCE = {"fp32": 1e-3, "fp16": 2e-2, "bf16": 1e-1}
MAX_SHAPES = 16  # shapes timed at most: those the step spends most time in
# (query [batch, heads, sequence, head dim], key the same, causal)
AttentionKey = tuple[tuple[int, ...], tuple[int, ...], bool]


@dataclass
class AttentionTiming(DtypeTimes):
    """One attention per dtype, in µs: a query and key of `query`/`key` shapes ([batch, heads, sequence, head
    dim]; the value is shaped as the key), causal or not, forward and backward when `training`."""

    query: list[int]
    key_shape: list[int]
    causal: bool
    training: bool
    us: dict[str, float] = field(default_factory=dict)

    def key(self) -> AttentionKey:
        return tuple(self.query), tuple(self.key_shape), self.causal

    def to_dict(self) -> dict[str, Any]:
        return {"query": list(self.query), "key": list(self.key_shape), "causal": self.causal,
                "training": self.training, "us": dict(self.us)}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "AttentionTiming":
        return AttentionTiming([int(x) for x in d["query"]], [int(x) for x in d["key"]], bool(d["causal"]),
                               bool(d["training"]), dtype_timing.us_from_dict(d))


def _bhsd(shape: Any, layout: str) -> tuple[int, ...] | None:
    if not (isinstance(shape, list) and len(shape) == 4 and all(isinstance(d, int) and d > 0 for d in shape)):
        return None
    return tuple(shape) if layout == "bhsd" else (shape[0], shape[2], shape[1], shape[3])


def _attention_of(record: KernelRecord) -> AttentionKey | tuple[()] | None:
    """The record's attention key; () for one whose shapes or arguments were not all recorded, or that runs
    with a mask or dropout (not timed: its output is not comparable run to run); None for another op."""
    at = ATTENTION_OPS.get(record.op)
    if at is None:
        return None
    shapes, concrete = record.input_shapes, record.concrete_inputs
    if len(shapes) <= at.key or len(concrete) <= max(at.causal, at.dropout):
        return ()
    query, key = _bhsd(shapes[at.query], at.layout), _bhsd(shapes[at.key], at.layout)
    try:
        dropout = float(concrete[at.dropout])
    except ValueError:
        return ()
    masked = at.bias is not None and at.bias < len(shapes) and bool(shapes[at.bias])
    if query is None or key is None or dropout != 0 or masked:
        return ()
    causal = concrete[at.causal] not in ("0", "False")
    return query, key, causal


def attention_shapes(records: Sequence[KernelRecord]) -> list[AttentionKey]:
    """Each attention the step runs (:func:`_attention_of`'s key), most time first."""
    return dtype_timing.most_time_first(records, _attention_of)


def step_dtype(records: Sequence[KernelRecord]) -> str | None:
    """The dtype the step's attention runs in (the first one's query)."""
    return dtype_timing.step_dtype([r for r in records if _attention_of(r)])


def time_step_attention(records: Sequence[KernelRecord], training: bool, device: torch.device | str,
                        samples: int = 20, dtypes: Sequence[str] = dtype_timing.KEYS,
                        scale: float = 1.0) -> list[AttentionTiming]:
    """:func:`time_attention` of each of the step's attention shapes (the :data:`MAX_SHAPES` it spends most
    time in), forward and backward where the step trains."""
    return [time_attention(list(query), list(key), causal, training, device, samples, dtypes, scale)
            for query, key, causal in attention_shapes(records)[:MAX_SHAPES]]


def ratios(timings: Sequence[AttentionTiming], to: str, frm: str) -> Callable[[KernelRecord], float | None]:
    """Time in variant `to` over time in `frm` for an attention kernel (None for other kernels): its own
    shape's timing of its phase, else the ratio of all timed shapes' times together."""
    return dtype_timing.ratios(timings, _attention_of, to, frm)


def time_attention(query: Sequence[int], key: Sequence[int], causal: bool, training: bool,
                   device: torch.device | str, samples: int = 20, dtypes: Sequence[str] = dtype_timing.KEYS,
                   scale: float = 1.0) -> AttentionTiming:
    """Median µs of scaled_dot_product_attention on random non-zero inputs of the `query` and `key` shapes
    ([batch, heads, sequence, head dim], the batch times `scale`; each a heads-first view of a sequence-first
    tensor, as a model's head split makes them), with the backward of the output, query, key and value when
    `training`, in each of `dtypes`, keyed by :func:`dtype_timing.variant`; a dtype off the fp32 reference by
    more than its tolerance, or that fails, is left out."""
    device = torch.device(device)
    generator = torch.Generator(device=device).manual_seed(0)
    batch = max(1, round(query[0] * scale))

    def sequence_first(shape: Sequence[int], low: float) -> torch.Tensor:
        b, h, s, d = batch, shape[1], shape[2], shape[3]
        return (torch.rand(b, s, h, d, device=device, generator=generator) + low).transpose(1, 2)

    # Query and key centred on zero (a spread of scores, not a uniform softmax), the value positive.
    q, k, v = sequence_first(query, -0.5), sequence_first(key, -0.5), sequence_first(key, 0.5)
    grad = torch.rand(batch, query[1], query[2], key[3], device=device, generator=generator) - 0.5
    grouped = {"enable_gqa": True} if query[1] != key[1] else {}
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def run_in(dtype: torch.dtype, forward_only: bool = False) -> Callable[[], dtype_timing.Outputs]:
        # Leaves of their own per dtype, and gradients returned rather than accumulated, as a step runs them.
        xs = [x.to(dtype).requires_grad_(training) for x in (q, k, v)]
        g = grad.to(dtype)

        def run() -> dtype_timing.Outputs:
            out = sdpa(*xs, is_causal=causal, **grouped)
            if not training or forward_only:
                return out, None
            return out, torch.autograd.grad(out, xs, g)[0]

        return run

    reference = dtype_timing.reference_outputs(lambda: run_in(torch.float32)())
    return AttentionTiming(list(query), list(key), causal, training,
                           dtype_timing.time_in_dtypes(run_in, reference, TOLERANCE, device, samples, dtypes, scale,
                                                       split=training))
