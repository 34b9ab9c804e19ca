"""Library ops timed on the device in each dtype an AMP fix moves between (fp32, fp16, bf16), and at the
batch a batch fix moves to.

An AMP dtype change can change which kernels a library runs, not just their bytes: torch runs batch norm
through cuDNN in fp32 and fp16 but through its own kernels in bf16, and cuDNN's convolution kernels differ
by dtype too. A batch change does the same: in fp32 ResNet-50 training profiles on an H200 at batch 256 and
512, the forward batch norms took 10.41 and 18.95 ms, 1.82x where their bytes doubled. Nothing in one profile says how fast the other dtype's or
batch's kernels are, so the step's own shapes are timed (:mod:`pygpuperf.trials.norms`,
:mod:`pygpuperf.trials.convs`) and each kernel of such an op is priced by its shape's ratio. Every result
is checked against an fp32 reference after timing; one that is off, or cannot run, is left out. A timing's
`us` is keyed by :func:`variant`: the dtype, and the batch's scale where it is not the step's own.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import torch

from pygpuperf.core.precision import PRECISIONS, precision_of
from pygpuperf.core.timing import sample_seconds
from pygpuperf.explain.model import KernelRecord

KEYS = ("fp32", "fp16", "bf16")
DTYPES: dict[str, torch.dtype] = {k: getattr(torch, str(PRECISIONS[k].torch_dtype)) for k in KEYS}

# A run in one dtype: its outputs (None for one not computed), checked against the reference's.
Outputs = Sequence[torch.Tensor | None]


# The layout a channels_last fix moves an NCHW step's tensors to, as a variant key's suffix.
NHWC = "nhwc"


@dataclass(frozen=True)
class OpFamily:
    """One family of library ops --try-fixes times on the device (batch norms, convolutions, ...): what it is
    called, the field of :class:`~pygpuperf.trials.record.Trials` that keeps its timings, how the step's shapes
    of it are timed, the dtype the step runs it in, and each kernel's ratio between two of its timings. A new
    family is one more module with these and one entry in the fixes' family table."""

    what: str
    field: str
    time_step: Callable[..., list[Any]]
    step_dtype: Callable[[Sequence[KernelRecord]], str | None]
    ratios: Callable[..., Callable[[KernelRecord], float | None]]
    layout_sensitive: bool  # channels_last lays its tensors out differently (a GEMM's operands are matrices)


def variant(dtype: str, scale: float = 1.0, layout: str = "") -> str:
    """The key of a timing in `dtype` at `scale` times the step's batch, in `layout` where it is not the step's
    own: "fp16", "fp16@x2", "fp32@nhwc"."""
    return dtype + ("" if scale == 1 else f"@x{scale:g}") + (f"@{layout}" if layout else "")


def step_dtype(records: Sequence[KernelRecord]) -> str | None:
    """The dtype key (of :data:`KEYS`) the first of `records` with a floating-point input runs in."""
    for r in records:
        found = precision_of(str(r.dtypes[0])) if r.dtypes else None
        if found in KEYS:
            return found
    return None


# A training timing's forward alone, beside its forward and backward together: "fp16@x2" + FORWARD_ONLY.
FORWARD_ONLY = ".forward"


class DtypeTimes:
    """One op on one shape, timed per dtype: `us`, µs by :func:`variant` key (a dtype that failed is absent;
    a training timing also holds its forward alone under the key + :data:`FORWARD_ONLY`), is a field of each
    subclass (a dataclass, its last field)."""

    us: dict[str, float]

    def phase_us(self, key: str, phase: str | None = None) -> float | None:
        """µs of variant `key`: its forward alone, its backward (the whole less the forward), or (`phase` None,
        or no forward timed) the whole."""
        whole, forward = self.us.get(key), self.us.get(key + FORWARD_ONLY)
        if phase not in ("forward", "backward") or whole is None or forward is None:
            return whole
        return forward if phase == "forward" else whole - forward if whole > forward else None

    def ratio(self, to: str, frm: str, phase: str | None = None) -> float | None:
        """Time in variant `to` over time in variant `frm`, where both were measured: of the kernels of
        `phase` where it was timed apart, else of the whole op."""
        a, b = self.phase_us(to, phase), self.phase_us(frm, phase)
        if a and b:
            return a / b
        return self.ratio(to, frm) if phase is not None else None

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


# `run_in(dtype, forward_only)`: the op in that dtype, ready to run; forward_only leaves the backward out.
RunIn = Callable[[torch.dtype, bool], Callable[[], Outputs]]


def time_in_dtypes(run_in: RunIn, reference: Outputs | None, tolerance: Mapping[str, float], device: torch.device,
                   samples: int, dtypes: Sequence[str] = KEYS, scale: float = 1.0,
                   split: bool = False, layout: str = "", backward_apart: bool = False) -> dict[str, float]:
    """Median µs of `run_in(dtype, False)()`'s kernels (their own durations on CUDA: timed alone, an op on a
    small shape runs at the host's pace, where in the step its launches are queued ahead) in each of
    `dtypes`, timed after 3 warm-ups, keyed by :func:`variant` at `scale` and `layout` (the batch and layout
    the operands were built in), and with `split` (a training op) of its
    forward alone (`run_in(dtype, True)`, key + :data:`FORWARD_ONLY`): the libraries' forward and backward
    kernels move apart with the batch (fp32 ResNet-50 training on an H200, batch 256 to 512: forward batch
    norms 10.41 → 18.95 ms, backward 14.43 → 28.31). With `backward_apart`, `run_in(dtype, False)` runs the
    backward alone (on a graph it keeps) and the whole is its time plus the forward's. A dtype whose outputs are
    off `reference` by more than its `tolerance`, or that cannot run here, is left out (all are, without a
    reference)."""
    us: dict[str, float] = {}
    if reference is None:
        return us
    for key in dtypes:
        dtype = DTYPES[key]
        timed: dict[str, float] = {}
        try:
            for forward_only in (False, True) if split else (False,):
                run = run_in(dtype, forward_only)
                seconds = sample_seconds(run, device, 3, samples, kernel_clock=device.type == "cuda")
                outputs = [None if o is None else o.detach().float() for o in run()]
                wanted = [(o, ref) for o, ref in zip(outputs, reference)
                          if ref is not None and not (forward_only and o is None)]  # a forward has no gradients
                if not all(close(o, ref, tolerance[key]) for o, ref in wanted):
                    break
                timed[variant(key, scale, layout) + (FORWARD_ONLY if forward_only else "")] = (
                    statistics.median(seconds) * 1e6)
        except (RuntimeError, TypeError):  # a dtype this device or build cannot run
            continue
        whole = variant(key, scale, layout)
        if whole in timed:
            if backward_apart and split and whole + FORWARD_ONLY in timed:
                timed[whole] += timed[whole + FORWARD_ONLY]
            us.update(timed)
    return us


def fastest_phases(*timed: Mapping[str, float]) -> dict[str, float]:
    """Several timings of one training op (:func:`time_in_dtypes` with `split`), each run another way, as one:
    each variant's forward and backward the fastest of the ways that timed both, so that a slow path one way
    of calling takes does not stand for the library's pace. On an H200, UNet's [64, 512, 32, 32] x [256, 512,
    3, 3] at batch 128, run in turn with its backward, re-initialised the forward's workspace on every call
    (1.7 ms a call, 3 µs in the step; alone, 48.5 µs). [64, 32, 256, 256] x [32, 32, 3, 3]'s backward alone on
    a kept graph ran 10 % slower than in the step at batch 64, in one run where its in-turn timing had come
    within 2.1 %; in another run both ways were 10 % slow."""
    out = dict(timed[0]) if timed else {}
    for more in timed[1:]:
        for key, us in more.items():
            if key.endswith(FORWARD_ONLY) or key not in out:
                out.setdefault(key, us)
                continue
            forwards = [t[key + FORWARD_ONLY] for t in (out, more) if key + FORWARD_ONLY in t]
            if len(forwards) < 2:
                out[key] = min(out[key], us)
                continue
            forward = min(forwards)
            out[key] = forward + min(out[key] - out[key + FORWARD_ONLY], us - more[key + FORWARD_ONLY])
            out[key + FORWARD_ONLY] = forward
    return out


def ratios(timings: Sequence[DtypeTimes], key_of: Callable[[KernelRecord], Hashable | None], to: str,
           frm: str) -> Callable[[KernelRecord], float | None]:
    """Time in variant `to` over time in `frm` for a kernel of the timed op: its own shape's timing (matched by
    `key_of`) of the kernel's phase where the forward was timed apart, else (a shape not timed) the ratio of
    all timed shapes' times together; None where neither was measured or `key_of` says the kernel is not of
    the op."""
    both = [t for t in timings if t.ratio(to, frm) is not None]
    by_key = {t.key(): t for t in reversed(both)}

    def overall(phase: str | None) -> float | None:
        pairs = [(a, b) for t in both if (a := t.phase_us(to, phase)) and (b := t.phase_us(frm, phase))]
        if phase is not None and len(pairs) < len(both):  # not every shape timed its phases apart
            return overall(None)
        return sum(a for a, _ in pairs) / sum(b for _, b in pairs) if pairs else None

    def ratio(record: KernelRecord) -> float | None:
        key = key_of(record)
        if key is None:
            return None
        timing = by_key.get(key)
        return timing.ratio(to, frm, record.phase) if timing is not None else overall(record.phase)

    return ratio


def most_time_first(records: Sequence[KernelRecord],
                    key_of: Callable[[KernelRecord], Hashable | None]) -> list[Any]:
    """Each key `key_of` gives the step's kernels (a falsy key: not of the op, or not timeable), the key the
    step spends most time in first."""
    spent: dict[Any, float] = {}
    for r in records:
        key = key_of(r)
        if key:
            spent[key] = spent.get(key, 0.0) + r.duration_us
    return [key for key, _ in sorted(spent.items(), key=lambda kv: -kv[1])]


def merged(timings: Sequence[DtypeTimes], more: Sequence[DtypeTimes]) -> list[DtypeTimes]:
    """`timings` with each of `more`'s times added to the timing of its key (a key not timed yet appended); a
    variant timed in both keeps its faster phases (:func:`fastest_phases`)."""
    by_key = {t.key(): t for t in timings}
    out = list(timings)
    for t in more:
        if t.key() in by_key:
            by_key[t.key()].us = fastest_phases(by_key[t.key()].us, t.us)
        else:
            by_key[t.key()] = t
            out.append(t)
    return out


def concrete_ints(text: Any) -> list[int] | None:
    """An int list as the profiler spells an op's concrete input ("[1, 1]", "1", "[]"); None where it is not
    one."""
    parts = [x for x in str(text).strip("[] ").split(",") if x.strip()]
    try:
        return [int(x) for x in parts]
    except ValueError:
        return None


def channels_last(shape: Sequence[int], strides: Any) -> bool:
    """Whether a 4-d tensor of `shape` with the recorded `strides` is laid out channels-last (NHWC)."""
    return (len(shape) == 4 and isinstance(strides, list) and len(strides) == 4 and strides[1] == 1
            and shape[1] > 1)


def us_from_dict(d: Mapping[str, Any]) -> dict[str, float]:
    return {str(k): float(v) for k, v in d.get("us", {}).items()}
