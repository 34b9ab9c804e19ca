"""Library ops timed on the device in each dtype an AMP fix moves between (fp32, fp16, bf16).

An AMP dtype change can change which kernels a library runs, not just their bytes: torch runs batch norm
through cuDNN in fp32 and fp16 but through its own kernels in bf16, and cuDNN's convolution kernels differ
by dtype too. Nothing in one profile says how fast the other dtype's kernels are, so the step's own shapes
are timed (:mod:`pygpuperf.explain.norms`, :mod:`pygpuperf.explain.convs`) and each kernel of such an op is
priced by its shape's ratio. Every dtype's result is checked against an fp32 reference after timing; one
that is off, or cannot run, is left out.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import torch

from pygpuperf.core.precision import PRECISIONS
from pygpuperf.core.timing import sample_seconds
from pygpuperf.explain.model import KernelRecord

KEYS = ("fp32", "fp16", "bf16")
DTYPES: dict[str, torch.dtype] = {k: getattr(torch, str(PRECISIONS[k].torch_dtype)) for k in KEYS}

# A run in one dtype: its outputs (None for one not computed), checked against the reference's.
Outputs = Sequence[torch.Tensor | None]


class DtypeTimes:
    """One op on one shape, timed per dtype: `us`, µs by dtype key of :data:`DTYPES` (a dtype that failed is
    absent), is a field of each subclass (a dataclass, its last field)."""

    us: dict[str, float]

    def ratio(self, to: str, frm: str) -> float | None:
        """Time in dtype `to` over time in dtype `frm`, where both were measured."""
        a, b = self.us.get(to), self.us.get(frm)
        return a / b if a and b else None

    def key(self) -> Hashable:
        """What a kernel record is matched on (see :func:`ratios`)."""
        raise NotImplementedError


def close(value: torch.Tensor | None, reference: torch.Tensor, tolerance: float) -> bool:
    """Finite, and within `tolerance` of the reference's mean magnitude on average."""
    if value is None or not torch.isfinite(value).all():
        return False
    scale = reference.abs().mean().item() or 1.0
    return (value - reference).abs().mean().item() <= tolerance * scale


def reference_outputs(run: Callable[[], Outputs]) -> list[torch.Tensor | None] | None:
    """`run`'s outputs in fp32, to check each dtype against; None where it cannot run (out of memory)."""
    try:
        return [None if o is None else o.detach().float() for o in run()]
    except (RuntimeError, TypeError):
        return None


def time_in_dtypes(run_in: Callable[[torch.dtype], Callable[[], Outputs]], reference: Outputs | None,
                   tolerance: Mapping[str, float], device: torch.device, samples: int) -> dict[str, float]:
    """Median µs of `run_in(dtype)()` in each dtype, timed after 3 warm-ups; a dtype whose outputs are off
    `reference` by more than its `tolerance`, or that cannot run here, is left out (all are, without a
    reference)."""
    us: dict[str, float] = {}
    if reference is None:
        return us
    for key, dtype in DTYPES.items():
        try:
            run = run_in(dtype)
            seconds = sample_seconds(run, device, 3, samples)
            outputs = [None if o is None else o.detach().float() for o in run()]
            if all(close(o, ref, tolerance[key]) for o, ref in zip(outputs, reference) if ref is not None):
                us[key] = statistics.median(seconds) * 1e6
        except (RuntimeError, TypeError):  # a dtype this device or build cannot run
            continue
    return us


def ratios(timings: Sequence[DtypeTimes], key_of: Callable[[KernelRecord], Hashable | None], to: str,
           frm: str) -> Callable[[KernelRecord], float | None]:
    """Time in dtype `to` over time in `frm` for a kernel of the timed op: its own shape's timing (matched by
    `key_of`), else (a shape not timed) the ratio of all timed shapes' times together; None where neither
    was measured or `key_of` says the kernel is not of the op."""
    both = [t for t in timings if t.ratio(to, frm) is not None]
    by_key = {t.key(): t.ratio(to, frm) for t in reversed(both)}
    overall = sum(t.us[to] for t in both) / sum(t.us[frm] for t in both) if both else None

    def ratio(record: KernelRecord) -> float | None:
        key = key_of(record)
        return None if key is None else by_key.get(key, overall)

    return ratio


def us_from_dict(d: Mapping[str, Any]) -> dict[str, float]:
    return {str(k): float(v) for k, v in d.get("us", {}).items()}
