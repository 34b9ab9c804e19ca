"""A step's kernels at another batch: what grows with it, what stays, and how a resized kernel's time moves.
One model for --try-fixes' batch fix and for predict's batch predictions.

The forward and backward kernels' FLOPs scale with the batch, and their bytes do except those of the
model's parameters, buffers and gradients (the traced accesses say which); their operands' batch dimension
scales too, so their output tiles are those of the op at the new batch (:func:`tiles.at_batch`).
Optimizer and other kernels stay as they are.

A resized kernel's time is its fixed cost, its ramp, and its new work times the residual it had
(measured beyond fixed cost and ramp, over its work). The ramp is what a kernel spends beyond its fixed
cost before it streams: the card's main-memory copy sweep fits time = t0 + bytes / bandwidth, and
t0 - fixed (3.3 µs on the H200) does not grow with the bytes; the library's small GEMMs spend about as much
beyond their fixed cost and waves (4.0-4.3 µs for 512³ and 1024³ in bf16 and fp16), so a compute kernel
keeps it, up to its excess over its bound. A memory-bound kernel's ramp overlaps its streaming: it takes
the longer of the two (in fp32 ResNet-50 profiles on an H200 at batch 256 and 512, 125 ReLU, add and
ReLU-backward kernels of 17.5-566 µs took twice their time at the new batch, within -4.1 to +3.5 µs from p10
to p90 and 0.6 µs more at the median: no constant beyond the fixed cost), so a
streaming kernel doubles with its bytes and one shrunk below its ramp keeps the ramp as its floor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pygpuperf.analyze.kernel_time import CardTerms, KernelTime
from pygpuperf.explain import tiles
from pygpuperf.explain.model import CallAccesses, KernelRecord
from pygpuperf.core.vocabulary import KernelClass

GROWS_WITH_BATCH = ("forward", "backward")


def resident_shares(calls: Sequence[CallAccesses]) -> dict[int, float]:
    """Each traced call's share of bytes in resident storages (parameters, buffers, gradients)."""
    out = {}
    for c in calls:
        total = sum(a.nbytes for a in c.accesses)
        out[c.index] = sum(a.nbytes for a in c.accesses if a.resident) / total if total else 0.0
    return out


@dataclass(frozen=True)
class AtBatch:
    """A step's kernels at `scale` times the batch: each traced call's resident share (from
    :func:`resident_shares`), the step's weight shapes (:func:`tiles.weight_shapes`), and how a kernel's
    ramp moves from the card it was measured on to the one it is priced on (the ratio of their ramps beyond
    their fixed costs; 1 on the same card)."""

    scale: float
    resident: Mapping[int, float]
    weights: set[tuple[int, int]]
    ramp_scale: float = 1.0

    @staticmethod
    def of(records: Sequence[KernelRecord], calls: Sequence[CallAccesses], scale: float,
           source: CardTerms | None = None, target: CardTerms | None = None) -> "AtBatch":
        ramp = 1.0
        if source is not None and target is not None:
            here, there = (max(t.stream_t0_us - t.fixed_us, 0.0) for t in (source, target))
            ramp = there / here if here > 0 else 1.0
        return AtBatch(scale, resident_shares(calls), tiles.weight_shapes(records), ramp)

    def kernel(self, record: KernelRecord) -> KernelRecord:
        """The record's work at the new batch (forward and backward kernels; others unchanged)."""
        scale = self.scale
        if scale == 1 or record.phase not in GROWS_WITH_BATCH:
            return record
        fixed_share = self.resident.get(record.call, 0.0) if record.call is not None else 0.0
        return dataclasses.replace(tiles.at_batch(record, scale, self.weights), flops=record.flops * scale,
                                   bytes=record.bytes * (fixed_share + (1 - fixed_share) * scale))


def kept_ramp(record: KernelRecord, before: KernelTime, t0_us: float) -> float:
    """µs of the record's time that is its ramp (the copy sweep's t0, CardTerms.stream_t0_us, beyond its
    fixed cost, up to its excess over its bound)."""
    excess = record.duration_us - before.total_us
    return min(max(t0_us - before.fixed_us, 0.0), max(excess, 0.0))


def resized_us(record: KernelRecord, before: KernelTime, after: KernelTime, t0_us: float,
               ramp_scale: float = 1.0) -> float:
    """The record's duration on its resized work (`after`, priced as `before` was): fixed cost, the ramp it
    kept (times `ramp_scale` on another card), and the new work at the residual it had beyond both; for a
    memory-bound kernel, fixed cost and the longer of its ramp and its new work at the residual it had beyond
    its fixed cost. A kernel faster than its bound (miscounted work: an FFT convolution) keeps its speed."""
    if record.kernel_class == KernelClass.MEMORY_BOUND:  # its ramp overlaps its streaming: the longer of the two
        ramp = max(t0_us - before.fixed_us, 0.0)
        streaming = max(record.duration_us - before.fixed_us, 0.0) / before.work_us
        return after.fixed_us + max(ramp * ramp_scale, after.work_us * streaming)
    ramp = kept_ramp(record, before, t0_us)
    residual = max(record.duration_us - before.fixed_us - ramp, 0.0) / before.work_us
    return after.fixed_us + ramp * ramp_scale + after.work_us * residual
