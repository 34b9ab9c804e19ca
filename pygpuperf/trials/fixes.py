"""`--try-fixes`: apply each fix the tool can apply itself to the user's step, time it without the profiler,
and set the measurement beside the kernel model's prediction.

A fix is a knob set (TF32, cudnn.benchmark, fp16 accumulation, the AMP dtype, channels_last, a CUDA graph,
torch.compile) or a batch size, applied through the workload's knobs or make_step's keywords, or by
wrapping the built step (torch.compile of the step, a captured CUDA graph) where the workload has no knob
for it. A fix that does not apply here is waived with the reason; one that fails (a compile error, a
capture of a step that synchronizes) is reported with its error, never raised. Each fix is timed in
windows alternating with the step as given, built once beside it, so that both see the same host and card.
Torch's global flags are as they were after every fix (:func:`pygpuperf.workloads.knobs.flag_state`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
import statistics
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from pygpuperf.analyze.kernel_time import MEMORY, KernelWork, card_terms, kernel_time
from pygpuperf.core.results import MachineModel
from pygpuperf.core.settings import StepSettings
from pygpuperf.trials import attention, convs, dtype_timing, matmuls, norms, host_clock, sums
from pygpuperf.trials.record import FixTrial, Trials
from pygpuperf.explain import attribution, explainer, queue, words
from pygpuperf.explain.pricing import GROWS_WITH_BATCH, AtBatch, Pricing
from pygpuperf.diagnose import causes
from pygpuperf.explain.classify import MATMUL_OPS
from pygpuperf.explain.model import Explanation, HostTime, KernelRecord, Throughput
from pygpuperf.core.vocabulary import KernelClass
from pygpuperf.workloads import knobs as knob_specs
from pygpuperf.workloads.recipe import release_device_memory

# What --try-fixes tries, in this order.
FIX_NAMES = ("tf32", "cudnn_benchmark", "fp16_accumulation", "amp", "channels_last", "cuda_graphs", "compile",
             "compile_reduce_overhead", "batch_size")
_CPU_FIXES = ("channels_last", "compile", "batch_size")
FLAG_KNOBS = ("tf32", "cudnn_benchmark", "fp16_accumulation")  # global torch flags, set around user code
# Fixes that change the host's own work per step (a graph replays the launches, compile fuses ops); the
# others keep it, so none of them is predicted below the step at batch 1.
HOST_WORK_FIXES = ("cuda_graphs", "compile", "compile_reduce_overhead")
# Each fix is timed in windows alternating with the step as given (given, fixed, fixed, given, ...): the
# host's speed wanders by more than a host-bound step's fixes change it (ResNet-101 AMP's step as given,
# timed before and after its fixes on an H200: 39.19 and 51.16 ms), so each fix takes its baseline from
# the same minutes. (windows of each, warm-up steps, timed steps per window); fewer on a CPU, where each
# step takes long.
PAIRED = {"cpu": (2, 1, 2), "other": (4, 2, 8)}
# On an accelerator a window also lasts at least this long (as many steps as that takes, at most
# MAX_WINDOW_STEPS): eight 9 ms steps (gpt-tiny on an H200) spread its batch fix's window pairs over
# 0.90-2.59 ms saved.
MIN_WINDOW_S, MAX_WINDOW_STEPS = 0.25, 100
# Where a prediction paces the host by its own time per step, that time is taken again over this many steps
# before each window pair: gpt-100m's host after a drain ran 20.0-32.0 ms a step over twelve rounds in 30 s on
# an H200's host, and its fp16 fix's extra time followed it (3.3-7.6 ms, r = 0.80).
HOST_PACE_STEPS = 4


@dataclass
class Target:
    """How fixes reach the step: `build(batch_size, knobs)` builds it (a BuiltWorkload), `takes(knob)` says
    whether the workload or make_step accepts a knob (flag knobs are set around user code by the tool)."""

    build: Callable[[int | None, dict[str, str]], Any]
    takes: Callable[[str], bool]
    batch_size: int | None = None
    knobs: dict[str, str] = field(default_factory=dict)  # the knobs the explained run was given
    user_code: bool = False


def _predictions(found: causes.Causes | None) -> dict[str, float]:
    """Predicted step (µs) by fix name, from the causes' fixes (the largest saving of a name)."""
    out: dict[str, float] = {}
    for c in (found.items if found is not None else ()):
        if c.fix is not None:
            out[c.fix.trial] = min(out.get(c.fix.trial, float("inf")), c.fix.predicted_step_us)
    return out


@dataclass
class _Priced:
    """The explained step's kernels, each one's exclusive time and the kernel model's pricing of them: built
    once per prediction, for every helper below walks the same kernels."""

    explanation: Explanation
    model: MachineModel
    exclusive: list[float]
    causes: causes.Causes | None = None  # the diagnosis' causes of the step, where it was diagnosed
    # the step's library ops timed on the device and the host's own time per step (its fixes are not read)
    timings: Trials = Trials()

    @staticmethod
    def of(explanation: Explanation, model: MachineModel, found: causes.Causes | None = None,
           timings: Trials | None = None) -> "_Priced":
        return _Priced(explanation, model, attribution.exclusive_times(explanation.median.kernels), found,
                       timings if timings is not None else Trials())

    @property
    def records(self) -> list[KernelRecord]:
        return self.explanation.median.kernels

    @functools.cached_property
    def pricing(self) -> Pricing:
        return Pricing.bound(self.records, self.explanation.calls, self.model)

    def paced_at(self, host: HostTime) -> "_Priced":
        """This step with the host's pace at the step's batch set to `host`, its pricing shared."""
        paced = copy.copy(self)  # keeps the pricing, where it was computed
        paced.timings = host_paced_at(self.timings, host)
        return paced


def _deltas_by(step: _Priced, change: Callable[[KernelRecord], KernelRecord | None],
               resized: bool = False) -> list[float]:
    """Each kernel's change of exclusive time when `change` re-prices it by the kernel model (keeping its
    measured residual); 0 for a kernel it returns None for."""
    out = []
    for r, share in zip(step.records, step.exclusive):
        changed = change(r) if r.duration_us > 0 else None
        out.append(share * (step.pricing.reprice(r, changed, cap=False, resized=resized) / r.duration_us - 1.0)
                   if changed is not None else 0.0)
    return out


def _timed_deltas(step: _Priced, ratio: Ratio) -> list[float]:
    """Each kernel's change of exclusive time at the ratio its device timing gives (0 where none does)."""
    return [share * (found - 1.0) if (found := ratio(r)) is not None else 0.0
            for r, share in zip(step.records, step.exclusive)]


def _batch_deltas(step: _Priced, scale: float) -> list[float]:
    """Each kernel's change at `scale` times the batch: forward and backward kernels resized as
    :mod:`pygpuperf.explain.pricing` says (predict's batch predictions resize them the same way), except those
    of a batch norm, convolution, sum, matrix product or attention whose shape was timed at both batches on the device,
    which take their timing's ratio; the rest stay as measured."""
    batch = AtBatch.of(step.records, step.explanation.calls, scale)
    families = [ratio for _, _, ratio in _timed_variant(step.explanation, step.timings, scale)]
    timed = _first_ratio(families) if families else None

    def grown(r: KernelRecord) -> float | None:
        return timed(r) if timed is not None and r.phase in GROWS_WITH_BATCH else None

    deltas = _deltas_by(step, lambda r: batch.kernel(r) if r.phase in GROWS_WITH_BATCH
                        and grown(r) is None else None, resized=True)
    return [a + b for a, b in zip(deltas, _timed_deltas(step, grown))] if timed is not None else deltas


def predicted_at_batch(explanation: Explanation, model: MachineModel, scale: float,
                       timings: Trials | None = None) -> float | None:
    """The step at `scale` times the batch by the kernel model (:func:`_batch_deltas`; with `timings`, the
    library ops timed at both batches by their timing), the idle time as measured."""
    if not explanation.median.kernels:
        return None
    priced = _Priced.of(explanation, model, timings=timings)
    return explanation.median.timeline.wall_us + sum(_batch_deltas(priced, scale))


def _precision_change(name: str, amp: str) -> Callable[[KernelRecord], KernelRecord | None] | None:
    """How a precision fix changes a kernel, as the kernel model prices it (None: not a precision fix)."""
    def tf32(r: KernelRecord) -> KernelRecord | None:
        if r.kernel_class == KernelClass.VECTOR_MATH and r.precision == "fp32" and r.flops > 0 and (
                r.op in MATMUL_OPS or "conv" in r.op.lower()):
            return dataclasses.replace(r, kernel_class=KernelClass.TENSOR_GEMM, precision="tf32.acc32")
        return None

    def fp16_accumulation(r: KernelRecord) -> KernelRecord | None:  # cuBLAS only: convolutions keep theirs
        if r.kernel_class == KernelClass.TENSOR_GEMM and r.precision == "fp16.acc32" and r.op in MATMUL_OPS:
            return dataclasses.replace(r, precision="fp16.acc16")
        return None

    def other_amp(r: KernelRecord) -> KernelRecord | None:
        if r.kernel_class == KernelClass.TENSOR_GEMM and r.precision.startswith(("fp16", "bf16")):
            return dataclasses.replace(r, precision="bf16.acc32" if amp != "bf16" else "fp16.acc32")
        return None

    return {"tf32": tf32, "fp16_accumulation": fp16_accumulation, "amp": other_amp}.get(name)


def _cause_deltas(step: _Priced, trial: str) -> list[float] | None:
    """The saving of the cause whose fix `trial` applies (the largest saving of that name), spread over the
    cause's kernels by their exclusive time; None where no cause with kernels names it."""
    causes_found = step.causes
    found = [c for c in (causes_found.items if causes_found is not None else ())
             if c.fix is not None and c.fix.trial == trial]
    if not found:
        return None
    cause = min(found, key=lambda c: c.fix.predicted_step_us)
    shares = step.exclusive
    total = sum(shares[i] for i in cause.kernels)
    if total <= 0:
        return None
    out = [0.0] * len(shares)
    for i in cause.kernels:
        out[i] = -cause.fix.saves_us * shares[i] / total
    return out


# GradScaler's own kernels (fp16 AMP): checking the gradients for inf/NaN while unscaling them, and the scale's
# update; the scaler's host sync (found_inf.item()) comes between them and the optimizer's step.
_SCALER_OPS = ("aten::_amp_foreach_non_finite_check_and_unscale_", "aten::_amp_update_scale_")


@dataclass(frozen=True)
class _Syncs:
    """A fix's change to the step's host syncs: the queue's sync events it removes, one it adds before an event."""

    removed: frozenset[int] = frozenset()
    added_before: int | None = None


def _scaler_change(step: _Priced, host: queue.HostQueue, to: str, now: str, deltas: list[float]) -> _Syncs:
    """What the AMP fix does to GradScaler's work: fp16 → another dtype drops its kernels (their time off
    `deltas`) and the syncs right after them; another dtype → fp16 on a training step adds a sync before the
    optimizer's first launch."""
    records = step.records
    if now == "fp16" and to != "fp16":
        for i, r in enumerate(records):
            if r.op in _SCALER_OPS:
                deltas[i] = -step.exclusive[i]
        removed, after_scaler = set(), False
        for n, ev in enumerate(host.events):
            if ev.kernel is not None:  # between the unscaling and the optimizer's first kernel
                op, phase = records[ev.kernel].op, records[ev.kernel].phase
                after_scaler = op == _SCALER_OPS[0] or (after_scaler and phase != "optimizer")
            elif ev.sync and after_scaler:
                removed.add(n)
        return _Syncs(frozenset(removed))
    if to == "fp16" and now != "fp16":
        first = next((n for n, ev in enumerate(host.events)
                      if ev.kernel is not None and records[ev.kernel].phase == "optimizer"), None)
        before = next((ev.kernel for ev in reversed(host.events[:first or 0]) if ev.kernel is not None), None)
        if before is not None:  # the unscaling runs after the backward, before the sync waits on it
            deltas[before] += _unscaling_us(step)
        return _Syncs(added_before=first)
    return _Syncs()


def _unscaling_us(step: _Priced) -> float:
    """GradScaler's unscaling and inf/NaN check of the gradients: one read and one write of each (its
    scalar kernels are left out), priced by the kernel model; 0 where the optimizer's calls were not traced."""
    grads = causes.gradient_bytes(step.records, step.explanation.calls)
    if grads <= 0:
        return 0.0
    return kernel_time(KernelWork(MEMORY, "fp32", 0.0, 2 * grads), step.model, step.pricing.terms).total_us


def _queued(priced: _Priced, deltas: Sequence[float],
            change: Callable[[queue.HostQueue, list[float]], _Syncs] | None = None) -> float | None:
    """The step with each kernel's exclusive time changed by `deltas`, replayed through the host's and the
    device's queues (:mod:`pygpuperf.explain.queue`): the measured step plus the replay's change. None where
    the step cannot be replayed (no launch times, or its syncs not kept) or is device-bound without a time at
    batch 1 (in `priced.timings`) to pace its host by (its kernels' changes add up)."""
    step = priced.explanation.median
    if step.timeline.idle.sync_us > 0 and not step.syncs:  # recorded before the syncs were kept
        return None
    host = queue.build(step.kernels, step.window_us, step.syncs, card_terms(priced.model).gap_us)
    if host is None:
        return None
    now = priced.exclusive
    timed = priced.timings
    pace = timed.host_at_batch or timed.host_at_batch_one  # the host's pace at the step's batch, else at batch 1
    host = host.fitted(now, step.timeline.wall_us, pace.step_us if pace else None) or (
        host.paced(now, step.timeline.wall_us, pace.step_us, pace.optimizer_us) if pace else None)
    if host is None:
        return None
    changed = list(deltas)
    syncs = change(host, changed) if change is not None else _Syncs()
    after = [max(a + b, 0.0) for a, b in zip(now, changed)]
    return step.timeline.wall_us + host.period_us(after, without_syncs=syncs.removed,
                                                  sync_before=syncs.added_before) - host.period_us(now)


def predicted_step(explanation: Explanation, model: MachineModel, name: str, knobs: Mapping[str, str],
                   samples_per_step: int | None, by_cause: Mapping[str, float] | None = None,
                   graph_fuses_optimizer: bool = False, found: causes.Causes | None = None,
                   timings: Trials | None = None) -> float | None:
    """The step (µs) the kernel model predicts after fix `name`: a batch change re-priced at the new batch,
    else the causes' prediction of that fix, else a precision fix priced on the kernels it changes. A fix
    that keeps the host's work is replayed through the host's and device's queues where the step allows
    (:func:`_queued`), else its kernels' changes add up. A built-in workload captured in a graph also runs a
    fused optimizer (`graph_fuses_optimizer`). `found` are the step's causes (:func:`pygpuperf.diagnose.diagnose`);
    `timings`, what --try-fixes timed of the step's library ops (:class:`Trials`), price those ops, and its
    host's own time per step paces the replay."""
    return _predicted(_Priced.of(explanation, model, found, timings), name, knobs, samples_per_step, by_cause,
                      graph_fuses_optimizer)


def _predicted(step: _Priced, name: str, knobs: Mapping[str, str], samples_per_step: int | None,
               by_cause: Mapping[str, float] | None, graph_fuses_optimizer: bool) -> float | None:
    """:func:`predicted_step` on a step priced already."""
    explanation, model = step.explanation, step.model
    records = step.records
    wall = explanation.median.timeline.wall_us
    trial = "compile" if name.startswith("compile") else name
    if name == "batch_size" and knobs and samples_per_step:
        if not records:
            return None
        deltas = _batch_deltas(step, int(knobs["batch_size"]) / samples_per_step)
        return _host_kept(step, wall + sum(deltas), deltas)
    found = (by_cause if by_cause is not None else _predictions(step.causes)).get(trial)
    idle = explanation.median.timeline.idle
    if name == "cuda_graphs" and records and idle.sync_us <= 0:  # priced below a finding's share too
        found = wall - causes.graph_saving_us(len(records), idle, card_terms(model))
    if name == "compile_reduce_overhead" and records and idle.sync_us <= 0:  # the compiled step, replayed as graphs
        found = (found if found is not None else wall) - causes.graph_saving_us(len(records), idle, card_terms(model))
    if name == "cuda_graphs" and graph_fuses_optimizer:
        saves, evidence = causes._fused_optimizer_saving(records, step.exclusive, explanation.calls, step.pricing)
        if evidence and found is not None:  # the graph's gap is not paid by the kernels fusion removes
            saves += (evidence["update_kernels"] - 1) * step.pricing.terms.graph_gap_us
        found = (found if found is not None else wall) - saves
    if name in HOST_WORK_FIXES or not records:
        return found
    if name == "channels_last" and (deltas := _nhwc_deltas(step)) is not None:
        return _host_kept(step, wall + sum(deltas), deltas)
    change = _precision_change(name, StepSettings.parse(explanation.settings).amp or "")
    timed = _timed_ratio(explanation, step.timings, knobs) if name == "amp" else None
    deltas: list[float] | None = None
    if found is None and change is not None:  # no cause named it: price the change itself
        # Kernels timed in both dtypes are priced by their timing (below), not by the kernel model.
        deltas = _deltas_by(step, change if timed is None else lambda r: None if timed(r) is not None else change(r))
        found = wall + sum(deltas)
    elif found is not None:
        deltas = _cause_deltas(step, trial)
        if timed is not None:  # the cause priced the timed kernels too: that saving goes back
            back = [causes.bf16_saving(r, share, step.pricing) if timed(r) is not None else 0.0
                    for r, share in zip(records, step.exclusive)]
            found += sum(back)
            deltas = [a + b for a, b in zip(deltas, back)] if deltas is not None else None
    if timed is not None and found is not None:  # what the timed kernels add (negative: save) in the new dtype
        extra = _timed_deltas(step, timed)
        found += sum(extra)
        deltas = [a + b for a, b in zip(deltas, extra)] if deltas is not None else None
    if found is None:
        return None
    scaler = None
    if name == "amp":
        to, now = _amp_dtypes(explanation, knobs)
        scaler = lambda host, changed: _scaler_change(step, host, to, now, changed)  # noqa: E731
    return _host_kept(step, found, deltas, scaler)


def _nhwc_deltas(step: _Priced) -> list[float] | None:
    """A channels_last fix priced by the step's own batch-norm, convolution and sum shapes timed in NHWC
    beside their layout now (each such kernel at its shape's ratio: a convolution's ratio covers the
    transposes the library runs inside it), and the layout cause's other transposes gone; None where nothing
    was timed in NHWC."""
    families = [ratio for _, _, ratio in _timed_variant(step.explanation, step.timings, 1.0, dtype_timing.NHWC)]
    if not families:
        return None
    timed = _first_ratio(families)
    deltas = _timed_deltas(step, timed)
    found = step.causes
    for cause in (found.items if found is not None else ()):
        if cause.id == causes.NCHW_NHWC:
            for i in cause.kernels:
                if timed(step.records[i]) is None:
                    deltas[i] = -step.exclusive[i]
    return deltas


def _host_kept(step: _Priced, found: float, deltas: Sequence[float] | None,
               change: Callable[[queue.HostQueue, list[float]], _Syncs] | None = None) -> float:
    """A fix that keeps the host's work: replayed through the queues where the step allows, else `found`
    (its kernels' changes added up); never below the step at batch 1, the host's own time per step."""
    queued = _queued(step, deltas, change) if deltas is not None else None
    found = queued if queued is not None else found
    floor = step.timings.host_at_batch_one
    return max(found, floor.step_us) if floor else found


def _clock_paced_us(record: KernelRecord, exclusive: float, main_memory: str | None) -> float:
    """The part of a kernel's exclusive time that runs at the device clock's pace: all of it (caches run at the
    clock's pace too), less, for a kernel held to main memory, its bytes ÷ that memory's bandwidth (its bound
    less its fixed cost), which runs at the memory's pace; none of a transfer over a link or a collective."""
    if record.ceiling.startswith(("links:", "communication:")):
        return 0.0
    if main_memory and record.ceiling == f"memory:{main_memory}" and record.bound_us and record.duration_us > 0:
        at_memory = max(record.bound_us - record.fixed_us, 0.0)
        return exclusive * max(1.0 - at_memory / record.duration_us, 0.0)
    return exclusive


def at_clock(explanation: Explanation, model: MachineModel, predicted_us: float, given_mhz: float,
             fixed_mhz: float, timings: Trials | None = None) -> float:
    """A fix's prediction (`predicted_us`, at the clock the step as given ran, `given_mhz`) at the clock its
    fixed step ran (`fixed_mhz`): the explained step with each kernel's time at the clock's pace moved by the
    clocks' ratio, replayed through the queues where the step allows (a host-bound step keeps its host's time,
    paced by `timings`' host times), and the step's relative move applied to the prediction. A power cap runs a
    fix that keeps the device busier at a lower clock (ResNet-50's batch fix on an H200: 1,965 against 1,980
    MHz)."""
    if not given_mhz or not fixed_mhz or given_mhz == fixed_mhz:
        return predicted_us
    return _at_clock(_Priced.of(explanation, model, timings=timings), predicted_us, given_mhz, fixed_mhz)


def _at_clock(step: _Priced, predicted_us: float, given_mhz: float, fixed_mhz: float) -> float:
    """:func:`at_clock` on a step priced already."""
    slower = given_mhz / fixed_mhz - 1.0
    main = step.model.dram_key()
    deltas = [slower * _clock_paced_us(r, share, main) for r, share in zip(step.records, step.exclusive)]
    wall = step.explanation.median.timeline.wall_us
    return predicted_us * _host_kept(step, wall + sum(deltas), deltas) / wall if wall > 0 else predicted_us


def _amp_dtypes(explanation: Explanation, knobs: Mapping[str, str]) -> tuple[str, str]:
    """(the AMP fix's dtype, the step's dtype now: fp32 where it runs no autocast)."""
    now = StepSettings.parse(explanation.settings).amp or ""
    return str(knobs.get("amp", "")), now if now in ("fp16", "bf16") else "fp32"


# The library op families timed on the device, in the order their ratios are looked up.
_LIBRARY_FAMILIES = (
    dtype_timing.OpFamily("batch norms", "norm_timings", norms.time_step_norms, norms.step_dtype, norms.ratios, True),
    dtype_timing.OpFamily("convolutions", "conv_timings", convs.time_step_convs, convs.step_dtype, convs.ratios, True),
    dtype_timing.OpFamily("sums", "sum_timings", sums.time_step_sums, sums.step_dtype, sums.ratios, True),
    dtype_timing.OpFamily("matrix products", "matmul_timings", matmuls.time_step_matmuls, matmuls.step_dtype,
                          matmuls.ratios, False),
    dtype_timing.OpFamily("attention", "attention_timings", attention.time_step_attention, attention.step_dtype,
                          attention.ratios, False),
)
Ratio = Callable[[KernelRecord], float | None]


def _timed_families(explanation: Explanation, timed: Trials, knobs: Mapping[str, str]) -> list[tuple[str, int, Ratio]]:
    """(op family, shapes timed, each of its kernels' time in the AMP fix's dtype over its time now) for the
    families timed on the device (`timed`'s norm_timings, conv_timings, sum_timings, matmul_timings,
    attention_timings)."""
    to, frm = _amp_dtypes(explanation, knobs)
    return [(f.what, len(timings), f.ratios(timings, to, frm)) for f in _LIBRARY_FAMILIES
            if (timings := getattr(timed, f.field))]


def _timed_variant(explanation: Explanation, timed: Trials, scale: float,
                   layout: str = "") -> list[tuple[str, int, Ratio]]:
    """(op family, shapes timed, each of its kernels' time at `scale` times the batch, or in `layout`, over its
    time now, in the dtype the step runs the family in) for the families `timed` both ways on the device."""
    out = []
    for family in _LIBRARY_FAMILIES:
        timings, dtype = getattr(timed, family.field), family.step_dtype(explanation.median.kernels)
        at = dtype_timing.variant(dtype, scale, layout) if dtype else None
        both = [t for t in timings if at and t.ratio(at, dtype) is not None]
        if both:
            out.append((family.what, len(both), family.ratios(both, at, dtype)))
    return out


def _first_ratio(families: Sequence[Ratio]) -> Ratio:
    """A kernel's ratio from the first family that has one for it (None where none does)."""
    def ratio(record: KernelRecord) -> float | None:
        return next((found for found in (of(record) for of in families) if found is not None), None)

    return ratio


def _timed_ratio(explanation: Explanation, timed: Trials, knobs: Mapping[str, str]) -> Ratio | None:
    """For an AMP dtype fix: each kernel of a library family `timed` on the device (:data:`_LIBRARY_FAMILIES`),
    its time in the new dtype over its time now, from its own shape's timing; None for a kernel of none of them,
    or one no timing covers; None in all when nothing was timed."""
    families = [ratio for _, _, ratio in _timed_families(explanation, timed, knobs)]
    return _first_ratio(families) if families else None


def _timed_totals(step: _Priced, ratio: Ratio) -> tuple[float, float]:
    """(µs the step spends now in the kernels `ratio` prices, µs they take after the fix), by exclusive time."""
    timed = [(share, found) for r, share in zip(step.records, step.exclusive) if (found := ratio(r)) is not None]
    return sum(share for share, _ in timed), sum(share * found for share, found in timed)


def _timed_note(step: _Priced, name: str, knobs: Mapping[str, str], samples: int | None) -> list[str]:
    """The evidence an AMP, batch or channels_last fix's prediction takes from the device timings: each timed
    family's kernels now and after the fix."""
    if name == "amp":
        families, how = _timed_families(step.explanation, step.timings, knobs), "in both dtypes"
        after_fix = f"in {knobs.get('amp', '')}"
    elif name == "batch_size" and knobs and samples:
        batch = int(knobs["batch_size"])
        families = _timed_variant(step.explanation, step.timings, batch / samples)
        how = f"at batch {samples} and {batch}"
        after_fix = f"at batch {batch}"
    elif name == "channels_last":
        families = _timed_variant(step.explanation, step.timings, 1.0, dtype_timing.NHWC)
        how, after_fix = "in NCHW and NHWC", "in NHWC"
    else:
        return []
    notes = []
    for what, count, ratio in families:
        now, after = _timed_totals(step, ratio)
        if now > 0:
            notes.append(f"{what}: {count} shapes timed {how} on this device; the step's {what} "
                         f"{now / 1e3:.2f} → {after / 1e3:.2f} ms {after_fix}")
    return notes


def graph_fuses_optimizer(target: Target) -> bool:
    """Whether the fix cuda_graphs runs the workload's own graph build, whose optimizer is fused (a graph
    captures no host sync); a user's step is captured as it is."""
    return not target.user_code and target.takes("cuda_graphs")


def _has_conv(explanation: Explanation) -> bool:
    return any("conv" in r.op.lower() for r in explanation.median.kernels)


def _batch_of(explanation: Explanation, target: Target) -> int | None:
    settings = StepSettings.parse(explanation.settings)
    return target.batch_size or settings.batch_size or int(settings.params.get("samples_per_step") or 0) or None


def _candidates(explanation: Explanation, target: Target) -> list[tuple[str, str, dict[str, str]]]:
    amp = StepSettings.parse(explanation.settings).amp or ""
    batch = _batch_of(explanation, target)
    out = [("tf32", "TF32 on", {"tf32": "on"}), ("cudnn_benchmark", "cudnn.benchmark on", {"cudnn_benchmark": "on"}),
           ("fp16_accumulation", "fp16 accumulation", {"fp16_accumulation": "on"}),
           ("amp", "AMP bf16" if amp != "bf16" else "AMP fp16", {"amp": "bf16" if amp != "bf16" else "fp16"}),
           ("channels_last", "channels_last", {"memory_format": "channels_last"}),
           ("cuda_graphs", "CUDA graph of the step", {"cuda_graphs": "on"}),
           ("compile", "torch.compile", {"compile": "inductor"}),
           ("compile_reduce_overhead", "torch.compile reduce-overhead", {"compile": "reduce-overhead"}),
           ("batch_size", f"batch {2 * batch}" if batch else "batch x2",
            {"batch_size": str(2 * batch)} if batch else {})]
    return out


def _waiver(name: str, knobs: dict[str, str], explanation: Explanation, target: Target,
            device: torch.device) -> str | None:
    """Why a fix does not apply to this step here (None: try it)."""
    settings = StepSettings.parse(explanation.settings)
    kind = words.kind_of(str(device))
    if kind == words.CPU and name not in _CPU_FIXES:
        return {"tf32": "TF32 is a tensor-core format; a CPU does not run it",
                "cudnn_benchmark": "cuDNN does not run on a CPU", "fp16_accumulation": "cuBLAS does not run on a CPU",
                "amp": "on a CPU --try-fixes tries only batch size, torch.compile and channels_last",
                "cuda_graphs": "CUDA graphs need a CUDA device",
                "compile_reduce_overhead": "reduce-overhead adds CUDA graphs, which need a CUDA device",
                }.get(name, "does not apply on a CPU")
    if name == "channels_last":
        if not _has_conv(explanation):
            return "the step runs no convolutions, so channels_last changes nothing"
        if settings.memory_format == "channels_last":
            return "the step runs channels_last already"
        if not target.takes("memory_format"):
            return "make_step takes no memory_format keyword (give it one to let the tool switch the layout)"
    if name in FLAG_KNOBS:
        key = knobs and next(iter(knobs))
        if settings.flag(key) is True:
            return f"{key} is on already"
        if name == "fp16_accumulation" and not (knob_specs.torch_flags.has_fp16_accumulation_flag()):
            return f"torch {torch.__version__} has no allow_fp16_accumulation flag"
        if name == "fp16_accumulation" and not any(r.kernel_class == KernelClass.TENSOR_GEMM and r.precision == "fp16.acc32"
                                                   for r in explanation.median.kernels):
            return "no fp16 matmul accumulates in fp32 here"
        if name == "cudnn_benchmark" and not _has_conv(explanation):
            return "the step runs no convolutions, so cuDNN's algorithm choice does not matter"
    if name == "amp":
        if "amp" not in settings.params or not target.takes("amp"):
            return "the step sets no autocast dtype the tool can change (a workload's amp knob)"
    if name == "batch_size" and not knobs:
        return "the batch size is unknown"
    if name == "cuda_graphs" and settings.cuda_graphs is True:
        return "the step is one CUDA graph already"
    if name.startswith("compile") and settings.compiled:
        return "the step is compiled already"
    return None


def _compiled(step: Callable[[], Any], mode: str | None) -> Callable[[], Any]:
    return torch.compile(step, mode=mode) if mode else torch.compile(step)


def _graphed(step: Callable[[], Any], device: torch.device) -> Callable[[], Any]:
    """The step captured once in a CUDA graph (after warm-up on a side stream) and replayed."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def _apply(name: str, knobs: dict[str, str], target: Target, device: torch.device) -> tuple[Any, Callable[[], Any], int]:
    """Build the step with the fix: (built workload, the step to time, samples per step). It is built in fresh
    memory, as the explained step was in its own process, not in the holes another step or a timing left."""
    release_device_memory(device)
    given = {k: v for k, v in target.knobs.items()}
    batch = target.batch_size
    wrap: Callable[[Callable[[], Any]], Callable[[], Any]] | None = None
    if name == "batch_size":
        batch = int(knobs["batch_size"])
    elif name.startswith("compile") and (target.user_code or knobs["compile"] == "reduce-overhead"
                                         or not target.takes("compile")):
        mode = "reduce-overhead" if knobs["compile"] == "reduce-overhead" else None
        wrap = lambda s: _compiled(s, mode)  # noqa: E731
    elif name == "cuda_graphs" and (target.user_code or not target.takes("cuda_graphs")):
        wrap = lambda s: _graphed(s, device)  # noqa: E731
    else:
        given.update(knobs)
    built = target.build(batch, given)
    step = built.step
    if wrap is not None:
        try:
            step = wrap(step)
        except BaseException:
            built.close()
            raise
    return built, step, int(getattr(built, "samples_per_step", batch or 1) or 1)


def try_fixes(explanation: Explanation, model: MachineModel, target: Target, device: torch.device | str,
              only: Sequence[str] | None = None, baseline: Throughput | None = None,
              measure: Callable[..., Throughput] | None = None, found: causes.Causes | None = None,
              timings: Trials | None = None) -> Trials:
    """Each fix of :data:`FIX_NAMES` (or `only`) applied and timed (see the module's note), with the library ops
    timed for their predictions, and the host's own time per step, which paces them; `found`, the step's causes
    (:func:`pygpuperf.diagnose.diagnose`), give the fixes' predictions; `timings`, library ops and the step at
    batch 1 timed before (their fixes are not read), are not timed again. The record returned holds them all."""
    device = torch.device(device)
    measure = measure or explainer.measure_throughput
    baseline = baseline or explanation.throughput
    base_us = baseline.step_us.median if baseline is not None else explanation.median.timeline.wall_us
    base_samples = baseline.samples_per_step if baseline is not None else None
    predicted = _predictions(found)
    candidates = [(name, what, knobs, _waiver(name, knobs, explanation, target, device))
                  for name, what, knobs in _candidates(explanation, target) if not only or name in only]
    timed = dataclasses.replace(timings, fixes=()) if timings is not None else Trials()
    if timed.host_at_batch_one is None and (_batch_of(explanation, target) or 0) > 1 and any(
            waiver is None and name not in HOST_WORK_FIXES for name, _, _, waiver in candidates):
        # At batch 1 the device's work is small beside the launches: about the host's own time per step.
        with host_clock.timing_phases() as clock:
            step_us = _timed_build(target, device, measure, batch=1, clock=clock)
        timed = dataclasses.replace(timed, host_at_batch_one=HostTime(
            step_us, clock.median_us(), clock.backward_median_us()) if step_us else None)
    with contextlib.ExitStack() as stack:
        given_left_flags = stack.enter_context(_flags_kept())  # the given step's build, open until the end
        given = _open_given(target, device, stack) if any(w is None for *_, w in candidates) else None
        if given is not None and timed.host_at_batch_one and device.type != "cpu" and \
                not explanation.median.syncs:  # the host's own pace at the step's batch
            timed = dataclasses.replace(timed, host_at_batch=_host_pace(given, device))
        run = _Run(explanation, model, target, device, measure, predicted, base_us, base_samples, given, found,
                   timed)
        trials = [_trial(run, name, what, knobs, waiver) for name, what, knobs, waiver in candidates]
    for t in trials if given_left_flags else ():
        if t.status == "measured" and _FLAG_NOTE not in t.notes:
            t.notes.append(_FLAG_NOTE)
    if any(t.status == "measured" for t in trials):
        again = _timed_build(target, device, measure)  # how far the card drifted while the fixes ran
        for t in trials:
            t.baseline_after_step_us = again
    return dataclasses.replace(run.timings, fixes=tuple(trials))


_FLAG_NOTE = "a global torch flag was left changed and has been restored"


@dataclass
class _Given:
    """The step as given, built once and kept open while the fixes run, to time in turn with each."""

    step: Callable[[], Any]
    samples: int
    flags: dict[str, bool]  # torch's global flags as its build left them


def _host_pace(given: _Given, device: torch.device) -> HostTime | None:
    """The host's own time per step of the step as given, and of it in its optimizer's step; None where it fails."""
    with _flags_kept():
        try:
            knob_specs.restore_flag_state(given.flags)
            host, clock = host_clock.host_after_drain(given.step, device)
            return HostTime(statistics.median(host), clock.median_us(), clock.backward_median_us())
        except Exception:  # noqa: BLE001 - the pace then comes from the step at batch 1
            return None


def _open_given(target: Target, device: torch.device, stack: contextlib.ExitStack) -> _Given | None:
    """The step as given, built into `stack` (None where it cannot be built: each fix is then timed alone)."""
    try:
        built, step, samples = _apply("", {}, target, device)
    except Exception:  # noqa: BLE001 - the fixes still run, each against the explained baseline
        return None
    stack.enter_context(built)
    return _Given(step, samples, knob_specs.flag_state())


def window_steps(device: torch.device, step_us: float | None) -> int:
    """Timed steps per window of a paired fix: :data:`PAIRED`'s, or on an accelerator as many as fill
    :data:`MIN_WINDOW_S` at the explained step's time."""
    steps = PAIRED.get(device.type, PAIRED["other"])[2]
    if device.type == "cpu" or not step_us:
        return steps
    return max(steps, min(MAX_WINDOW_STEPS, math.ceil(MIN_WINDOW_S * 1e6 / step_us)))


# A move within this many times its spread (a step's CV, or the standard error of window pairs) is noise.
NOISE_SPREADS = 2.0
def _rebuilt_note(given_us: float, explained: Throughput | None) -> str | None:
    """Where the step as given, built again beside the fix, ran off its explained time by more than
    :data:`NOISE_SPREADS` times the explained steps' CV: a new build of one step places its tensors elsewhere,
    and where they lie moves some kernels (UNet on an H200: 55.18 ms in the windows' build against 54.23 ms
    explained)."""
    if explained is None or not explained.step_us.median:
        return None
    moved = given_us / explained.step_us.median - 1.0
    if abs(moved) <= NOISE_SPREADS * explained.step_us.cv:
        return None
    return (f"the step as given ran {given_us / 1e3:.2f} ms in these windows against "
            f"{explained.step_us.median / 1e3:.2f} ms when explained ({100 * moved:+.1f} %): built again, the same "
            "step need not run at the same speed (where its tensors lie moves some kernels), and the measured "
            "change carries that spread")


# Each library op is timed this many times in turn at each of a fix's variants, each time in fresh memory, and
# the fastest kept: alone, one fresh placement of an op's operands can run it 10-16 % slower than the step
# does (ResNet-50's [256, 256, 56, 56] batch norm at 1.81 ms a call against 1.67 in the step, twice in five
# runs; UNet's [128, 32, 256, 256] convolution's backward at 8.14 ms against 7.0-7.3, once in five).
LIBRARY_ROUNDS = 3
# Released memory is handed out again in the same places, so each round after the first holds this much
# more device memory aside while it times: UNet's [128, 32, 256, 256] x [32, 32, 3, 3] convolution ran
# 8.54-8.56 ms in six released rounds on an H200, 8.22-8.53 behind spacers of other sizes.
ROUND_SPACER_BYTES = 257 << 20
# A clock move a fix's note names: clocks move in steps of about 0.8 % at the top of a data-centre card's range.
CLOCK_MOVE = 0.01


@dataclass
class _Windows:
    """Each window's median step (µs) of the step as given and of the fixed step, in the order they ran, with
    the clock (MHz) and power (W) each ran at where the device reports them."""

    given: list[float]
    fixed: list[float]
    given_mhz: list[float] = field(default_factory=list)
    fixed_mhz: list[float] = field(default_factory=list)
    given_w: list[float] = field(default_factory=list)
    fixed_w: list[float] = field(default_factory=list)
    host: list[HostTime] = field(default_factory=list)  # the given step's host pace before each pair, where timed

    def add(self, is_given: bool, timed: Throughput) -> None:
        side = "given" if is_given else "fixed"
        for suffix, value in (("", timed.step_us.median), ("_mhz", timed.sm_clock_mhz), ("_w", timed.power_w)):
            if value is not None:
                getattr(self, side + suffix).append(value)

    def clock_note(self) -> str | None:
        """The clock and power of each side's windows, where the device reported both for every window."""
        if not (self.given_mhz and self.fixed_mhz and self.given_w and self.fixed_w):
            return None
        m = statistics.median
        given, fixed = m(self.given_mhz), m(self.fixed_mhz)
        note = (f"the card ran {given:,.0f} MHz at {m(self.given_w):,.0f} W in the given step's windows, "
                f"{fixed:,.0f} MHz at {m(self.fixed_w):,.0f} W in the fixed step's")
        moved = fixed / given - 1.0
        if abs(moved) >= CLOCK_MOVE:  # more than one clock step: said in words too
            note += (f": the fixed step ran {100 * abs(moved):.1f} % {'below' if moved < 0 else 'above'} the given "
                     "step's clock")
        return note

    def into(self, trial: FixTrial, given_samples: int, samples: int, explained: Throughput | None) -> float:
        """Keep these windows in `trial` (each side's series, the pairs' savings, the step as given as its
        baseline, and the notes they call for); the fixed step's median µs."""
        trial.given_windows_us, trial.fixed_windows_us = self.given, self.fixed
        trial.given_windows_mhz, trial.fixed_windows_mhz = self.given_mhz, self.fixed_mhz
        trial.given_windows_w, trial.fixed_windows_w = self.given_w, self.fixed_w
        trial.windows_host_step_us = [h.step_us for h in self.host]
        trial.windows_host_optimizer_us = [h.optimizer_us for h in self.host if h.optimizer_us is not None]
        trial.windows_host_backward_us = [h.backward_us for h in self.host if h.backward_us is not None]
        trial.paired_savings_us = self.savings(given_samples / samples)
        trial.baseline_step_us, trial.baseline_samples_per_step = statistics.median(self.given), given_samples
        trial.notes += [note for note in (_rebuilt_note(trial.baseline_step_us, explained), self.clock_note()) if note]
        return statistics.median(self.fixed)

    def savings(self, scale: float) -> list[float]:
        """Each window pair's saving per step at the given step's batch (`scale`: given over fixed samples)."""
        return [a - b * scale for a, b in zip(self.given, self.fixed)]


def _paired(measure: Callable[..., Throughput], device: torch.device, given: _Given, step: Callable[[], Any],
            samples: int, steps: int, pairs: int | None = None, host_pace: bool = False) -> _Windows:
    """Windows of the step as given and of the fixed step in turn (:data:`PAIRED`'s count, or `pairs`), `steps`
    timed steps each, torch's flags set to each one's before its window; with `host_pace`, the given step's host
    time after a drain before each pair (:data:`HOST_PACE_STEPS` steps)."""
    count, warmup, _ = PAIRED.get(device.type, PAIRED["other"])
    count = pairs or count
    fixed_flags = knob_specs.flag_state()
    windows = _Windows([], [])
    try:
        for i in range(count):
            if host_pace:
                knob_specs.restore_flag_state(given.flags)
                host, clock = host_clock.host_after_drain(given.step, device, HOST_PACE_STEPS, warmup=0)
                windows.host.append(HostTime(statistics.median(host), clock.median_us(), clock.backward_median_us()))
            for is_given in ((True, False) if i % 2 == 0 else (False, True)):
                knob_specs.restore_flag_state(given.flags if is_given else fixed_flags)
                release_device_memory(device)  # its activations in fresh memory, not the other step's holes
                timed = measure(given.step if is_given else step, device,
                                given.samples if is_given else samples, warmup=warmup, steps=steps)
                windows.add(is_given, timed)
    finally:
        knob_specs.restore_flag_state(fixed_flags)
    return windows


@dataclass
class _Run:
    """What every fix of one --try-fixes run shares: the explained step, where it runs and how it is timed,
    the causes' predictions, the explained baseline, and the step as given built beside the fixes."""

    explanation: Explanation
    model: MachineModel
    target: Target
    device: torch.device
    measure: Callable[..., Throughput]
    predicted: Mapping[str, float]
    base_us: float
    base_samples: int | None
    given: _Given | None
    causes: causes.Causes | None = None
    timings: Trials = Trials()  # the library ops and the host's own time timed so far, for the fixes' predictions


def _trial(run: _Run, name: str, what: str, knobs: dict[str, str], waiver: str | None) -> FixTrial:
    """One fix: predicted, then (unless waived) applied and timed, in turn with the step as given where it
    was built."""
    explanation, model, target, device = run.explanation, run.model, run.target, run.device
    base_samples, given = run.base_samples, run.given
    trial = FixTrial(name, what, dict(knobs), "waived", baseline_step_us=run.base_us,
                     baseline_samples_per_step=base_samples)
    if waiver is None and device.type == "cuda" and name in ("amp", "batch_size"):
        scale = int(knobs["batch_size"]) / base_samples if name == "batch_size" and base_samples else 1.0
        if name == "amp" or scale != 1:
            run.timings = _time_library_ops(explanation, run.timings, device, scale)
    elif waiver is None and device.type == "cuda" and name == "channels_last":
        run.timings = _time_library_ops(explanation, run.timings, device, layout=dtype_timing.NHWC)
    # After the timings above: the prediction and its notes share it.
    priced = _Priced.of(explanation, model, run.causes, run.timings)
    trial.predicted_step_us = _predicted(priced, name, knobs, base_samples, run.predicted,
                                         graph_fuses_optimizer(target))
    if trial.predicted_step_us is not None:
        trial.notes += _timed_note(priced, name, knobs, base_samples)
    batch_one = run.timings.host_at_batch_one
    if trial.predicted_step_us is not None and batch_one and trial.predicted_step_us == batch_one.step_us:
        trial.notes.append(f"predicted at the step's time at batch 1, {trial.predicted_step_us / 1e3:.2f} ms: "
                           "the host's own work per step, which this fix keeps")
    if waiver is not None:
        trial.reason = waiver
        return trial
    user_flags = {k: knob_specs.TF32.parse(v) for k, v in knobs.items() if k in FLAG_KNOBS} \
        if target.user_code else {}
    with _flags_kept() as restored:
        restore = knob_specs.set_global_flags(**user_flags) if user_flags else (lambda: None)
        skipped = _graph_skips()
        try:
            built, step, samples = _apply(name, knobs, target, device)
            with built:
                if given is not None:
                    paces = run.timings.host_at_batch is not None and name not in HOST_WORK_FIXES
                    windows = _paired(run.measure, device, given, step, samples,
                                      window_steps(device, run.base_us), host_pace=paces)
                    measured = windows.into(trial, given.samples, samples, run.explanation.throughput)
                    _at_fixed_clock(trial, priced)
                    _at_windows_host(trial, run, priced, base_samples)
                else:
                    measured = run.measure(step, device, samples).step_us.median
            trial.status, trial.measured_step_us, trial.samples_per_step = "measured", measured, samples
            if name == "compile_reduce_overhead" and _graph_skips() > skipped:
                _without_graphs(trial, run, priced, base_samples)
            trial.notes += list(getattr(built, "notes", []) or [])
            waived = str(getattr(built, "params", {}).get("cuda_graphs", ""))
            if name == "cuda_graphs" and waived.startswith("waived"):
                trial.status, trial.reason = "waived", waived.removeprefix("waived").lstrip(": ")
        except Exception as exc:  # a failing fix is a result, not a crash
            trial.status, trial.reason = "failed", f"{type(exc).__name__}: {_one_line(exc)}"
        finally:
            restore()
    if restored:  # a step left a flag changed: it has been put back
        trial.notes.append(_FLAG_NOTE)
    return trial


def _graph_skips() -> int:
    """How often inductor has compiled code to run without CUDA graphs in this process (0 before any compile)."""
    dynamo_utils = sys.modules.get("torch._dynamo.utils")  # not imported: nothing compiled yet
    return int(dynamo_utils.counters["inductor"]["cudagraph_skips"]) if dynamo_utils else 0


def _without_graphs(trial: FixTrial, run: _Run, priced: _Priced, samples: int | None) -> None:
    """A reduce-overhead trial whose compiled step ran without CUDA graphs: its prediction as torch.compile's
    alone, and a note saying so."""
    trial.predicted_without_graphs_us = _predicted(priced, "compile", {"compile": "inductor"}, samples,
                                                   run.predicted, graph_fuses_optimizer(run.target))
    trial.notes.append("inductor ran the compiled step without CUDA graphs (it skips them, for one, in a step that "
                       "writes into tensors it does not own; TORCH_LOGS=cudagraphs says why)" + (
                           f": as torch.compile alone the kernel model predicts "
                           f"{trial.predicted_without_graphs_us / 1e3:.2f} ms"
                           if trial.predicted_without_graphs_us is not None else ""))


def windows_host(trial: FixTrial) -> HostTime | None:
    """The host's pace timed beside a trial's windows (medians over its pairs), where it was."""
    if not trial.windows_host_step_us:
        return None
    m = statistics.median
    return HostTime(m(trial.windows_host_step_us),
                    m(trial.windows_host_optimizer_us) if trial.windows_host_optimizer_us else None,
                    m(trial.windows_host_backward_us) if trial.windows_host_backward_us else None)


def host_paced_at(timings: Trials, host: HostTime) -> Trials:
    """`timings` with the host's pace at the step's batch set to `host` (:func:`windows_host`), to predict a fix
    at the pace its windows ran at."""
    return dataclasses.replace(timings, host_at_batch=host)


def _at_windows_host(trial: FixTrial, run: _Run, priced: _Priced, samples: int | None) -> None:
    """Where the host's pace was timed beside the windows, the trial's prediction at it and a note saying so
    (`priced`: the explained step as the trial's prediction priced it; the pace is read when it is replayed)."""
    host = windows_host(trial)
    if host is None or trial.predicted_step_us is None:
        return
    before = priced.timings.host_at_batch
    trial.predicted_at_windows_host_us = _predicted(priced.paced_at(host), trial.name, trial.knobs, samples,
                                                    run.predicted, graph_fuses_optimizer(run.target))
    if trial.predicted_at_windows_host_us is None or before is None:
        return
    trial.notes.append(f"the host took {host.step_us / 1e3:.2f} ms a step after a drain beside these windows "
                       f"({before.step_us / 1e3:.2f} before the fixes); at that pace the kernel model predicts "
                       f"{trial.predicted_at_windows_host_us / 1e3:.2f} ms")


def _at_fixed_clock(trial: FixTrial, priced: _Priced) -> None:
    """Where the two sides' windows ran at different clocks, the trial's prediction at the fixed step's clock
    and a note saying so."""
    if trial.predicted_step_us is None or not trial.given_windows_mhz or not trial.fixed_windows_mhz:
        return
    given, fixed = statistics.median(trial.given_windows_mhz), statistics.median(trial.fixed_windows_mhz)
    if given == fixed:
        return
    trial.predicted_at_fixed_clock_us = _at_clock(priced, trial.predicted_step_us, given, fixed)
    trial.notes.append(f"at the fixed step's {fixed:,.0f} MHz (the step as given ran {given:,.0f}), the kernel "
                       f"model predicts {trial.predicted_at_fixed_clock_us / 1e3:.2f} ms: its compute, caches and "
                       "fixed costs run at the clock's pace, its main-memory bytes at the memory's")


def _time_library_ops(explanation: Explanation, timed: Trials, device: torch.device, scale: float = 1.0,
                      layout: str = "") -> Trials:
    """An AMP dtype fix (`scale` 1), a batch fix (`scale` times the batch) or a channels_last fix (`layout`)
    changes which kernels the libraries run for the step's batch norms, convolutions, sums, matrix products
    and attention, and how fast: time each of their shapes in each dtype, or in the step's dtype at its batch
    and at `scale` times it, or in its own layout and in `layout`, :data:`LIBRARY_ROUNDS` times in turn on an
    accelerator, the fastest kept; `timed` with them merged into each family's timings
    (:data:`_LIBRARY_FAMILIES`). A variant `timed` holds already is not timed again."""
    records = explanation.median.kernels
    training = any(r.phase == "backward" for r in records)
    for family in _LIBRARY_FAMILIES:
        if layout and not family.layout_sensitive:
            continue
        timings = getattr(timed, family.field)
        step = family.step_dtype(records)
        if layout:
            wanted = [(step, 1.0, ""), (step, 1.0, layout)] if step else []
        else:
            wanted = ([(k, 1.0, "") for k in dtype_timing.KEYS] if scale == 1 else
                      [(step, 1.0, ""), (step, scale, "")] if step else [])
        to_time = {}  # (scale, layout): the dtypes not timed yet
        for at, laid in sorted({(s, lay) for _, s, lay in wanted}):
            dtypes = [k for k, s, lay in wanted if (s, lay) == (at, laid)
                      and not any(dtype_timing.variant(k, s, lay) in t.us for t in timings)]
            if dtypes:
                to_time[(at, laid)] = dtypes
        for round_ in range(LIBRARY_ROUNDS if device.type != "cpu" else 1):
            for (at, laid), dtypes in to_time.items():
                # Operands in fresh memory, as in a process of their own: placed in the pools the explained
                # step left, UNet's [64, 32, 256, 256] x [32, 32, 3, 3] backward's kernels ran 8 % slower (3.99
                # ms against 3.70 on one H200), and its batch ratio came out 1.82 where the steps' own kernels
                # grew 1.85-1.99x.
                release_device_memory(device)
                with _spacer(device, round_ * ROUND_SPACER_BYTES):
                    try:
                        laid_out = {"layout": laid} if laid else {}  # only the layout families take one
                        more = family.time_step(records, training, device, dtypes=dtypes, scale=at, **laid_out)
                        timings = dtype_timing.merged(timings, more)
                    except RuntimeError:  # out of memory for its tensors: the fix is then priced without it
                        continue
        timed = dataclasses.replace(timed, **{family.field: tuple(timings)})
    return timed


@contextlib.contextmanager
def _spacer(device: torch.device, size: int) -> Iterator[None]:
    """`size` bytes of device memory held while the block runs, so that its allocations land elsewhere than a
    round's before; none where the device has no room for it."""
    held = None
    if size > 0:
        try:
            held = torch.empty(size, dtype=torch.uint8, device=device)
        # Out of memory, or no such device (torch built without CUDA raises AssertionError): this round
        # times where the last did.
        except (RuntimeError, AssertionError):
            held = None
    try:
        yield
    finally:
        del held


def _timed_build(target: Target, device: torch.device, measure: Callable[..., Throughput],
                 batch: int | None = None, clock: host_clock.PhaseClock | None = None) -> float | None:
    """The step built as given (at `batch` where given) and timed once (µs; None when it cannot be built or
    run, and the fixes stand without it), each step's optimizer time on `clock` where given; torch's flags
    are left as they were."""
    with _flags_kept():
        try:
            name, knobs = ("batch_size", {"batch_size": str(batch)}) if batch else ("", {})
            built, step, samples = _apply(name, knobs, target, device)
            with built:
                return measure(clock.wrap(step) if clock else step, device, samples).step_us.median
        except Exception:  # noqa: BLE001 - a check beside the fixes, not a result of its own
            return None


@contextlib.contextmanager
def _flags_kept() -> Iterator[list[bool]]:
    """torch's global flags put back as they were after the block, whatever a step did to them; the list it
    gives holds True once they had to be."""
    before = knob_specs.flag_state()
    restored: list[bool] = []
    try:
        yield restored
    finally:
        if knob_specs.flag_state() != before:
            knob_specs.restore_flag_state(before)
            restored.append(True)


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text[:limit] + ("…" if len(text) > limit else "")


def fix_lines(trials: Sequence[FixTrial], record: Trials | None = None) -> list[str]:
    """The fixes tried as text; with their `record`, the host's own pace the predictions replayed it at."""
    if not trials:
        return []
    lines = ["fixes tried (step time without the profiler):"]
    for t in trials:
        lines += [t.line(), *(f"      {note}" for note in t.notes)]
    before, after = trials[0].baseline_step_us, trials[0].baseline_after_step_us
    if before and after:
        lines.append(f"  the step as given, again after the fixes: {before / 1e3:.2f} → {after / 1e3:.2f} ms "
                     f"({100 * (after / before - 1):+.1f}%: a smaller change by a fix is within the drift)")
    pace = host_clock.host_pace_line(record)
    return lines + ([f"  {pace}"] if pace else [])
