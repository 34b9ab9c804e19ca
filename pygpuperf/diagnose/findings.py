"""What an explained step says to do: findings read off its kernels, timeline and waterfall.

Every share is of the median step's wall time unless it says "of kernel time" (the
kernels' exclusive time, :func:`~pygpuperf.explain.attribution.exclusive_times`, which adds
up to the busy time). `settings` are the built workload's params (``BuiltWorkload.params``:
"cudnn_benchmark", "tf32", "memory_format", "batch_size", "cuda_graphs", "compile"), as
strings the way the workloads record them ("off (torch setting)") or as booleans; a finding
that needs a setting nobody gave is left out rather than guessed.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

from pygpuperf.analyze.conclude import HALF_RATE_RATIO
from pygpuperf.diagnose import causes
from pygpuperf.explain import words
from pygpuperf.explain.attribution import category_times, exclusive_times
from pygpuperf.explain.classify import has_convolutions
from pygpuperf.explain.model import ExplainedStep, Explanation, fitting_batch
from pygpuperf.explain.model import KernelRecord, Timeline
from pygpuperf.core.vocabulary import KernelClass
from pygpuperf.core.vocabulary import Part
from pygpuperf.core.precision import dtype_of
from pygpuperf.core.settings import StepSettings, switch
from pygpuperf.core.results import Finding, MachineModel
from pygpuperf.core.units import ms as _ms, percent as _pct

# Layout transforms above this share of the step are worth removing.
LAYOUT_SHARE = 0.03
# Host-bound idle plus launch gaps above this share of the step: the host, not the GPU, sets the pace.
IDLE_SHARE = 0.10
# Synchronization idle above this share: the step waits on the device on purpose (.item(), .cpu()).
SYNC_SHARE = 0.05
# CUDA-core fp32 GEMM/conv time above this share of the step: TF32 would move it to the tensor cores.
FP32_MATH_SHARE = 0.05
# FP32-accumulate tensor math above this share of the step matters on a half-rate card.
ACC32_SHARE = 0.10
# Memory-bound kernels above this share of kernel time set the step's speed.
MEMORY_BOUND_SHARE = 0.50
# Below this coverage too much of the step is held against no ceiling or idle cause.
COVERAGE_GOAL = 0.90
# Convolution kernels below this share of the step make cudnn.benchmark not worth a word.
CONV_SHARE = 0.05
# How many ops a finding names.
TOP_OPS = 5

_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def _setting(settings: Mapping[str, Any] | None, key: str) -> bool | None:
    """A switch from the params: True/False, or None when absent or not an on/off value."""
    return switch((settings or {}).get(key))


def _tf32(settings: Mapping[str, Any] | None) -> bool | None:
    """TF32 on for both matmuls and convolutions ("on", or "matmul on, conv on (torch setting)")."""
    return StepSettings.parse(settings).tf32


def _top_ops(records: Sequence[KernelRecord], shares: Sequence[float],
             keep: Callable[[KernelRecord], bool]) -> dict[str, float]:
    """Exclusive time (us) by launching op of the records `keep` accepts, largest first."""
    by_op: dict[str, float] = defaultdict(float)
    for record, share in zip(records, shares):
        if keep(record):
            by_op[record.op or record.name[:60]] += share
    return dict(sorted(by_op.items(), key=lambda kv: -kv[1])[:TOP_OPS])


def _batch_words(settings: Mapping[str, Any] | None) -> str:
    batch = (settings or {}).get("batch_size")
    return f"at batch {batch}" if batch not in (None, "") else "at this batch size"


def _ceiling(model: MachineModel | None, table: str, key: str) -> float | None:
    if model is None:
        return None
    ceiling = getattr(model, table).get(key)
    return ceiling.value if ceiling is not None and ceiling.value > 0 else None


# --------------------------------------------------------------------------- the findings


def _layout(records: Sequence[KernelRecord], shares: Sequence[float], times: Mapping[str, float], wall: float,
            settings: Mapping[str, Any] | None, kind: str) -> Finding | None:
    layout_us = times[KernelClass.LAYOUT]
    if wall <= 0 or layout_us / wall <= LAYOUT_SHARE:
        return None
    ops = _top_ops(records, shares, lambda r: r.kernel_class == KernelClass.LAYOUT)
    fmt = str((settings or {}).get("memory_format", "")).lower()
    library = "cuDNN's tensor-core" if kind == words.GPU else "oneDNN's"
    if not has_convolutions(records):
        # No convolution, so no NCHW<->NHWC: the copies are of permuted or sliced views (attention heads, say).
        what = "Layout copies (.contiguous() of permuted or sliced tensors)"
        suggestion = (f"The step has no convolutions, so these are no image-layout transposes; they come from "
                      f"{', '.join(ops)}. Keep tensors in the layout the next op reads (e.g. scaled_dot_product_attention "
                      "on [batch, heads, tokens, dim] views), or torch.compile the model to fuse the copies away.")
    elif fmt == "channels_last":
        what = "Layout transforms (NCHW<->NHWC transposes and copies)"
        suggestion = ("The model already runs channels_last, so these transposes come from ops without an NHWC "
                      f"kernel ({', '.join(ops)}): replace those ops, or keep their inputs in the layout they need.")
    else:
        what = "Layout transforms (NCHW<->NHWC transposes and copies)"
        suggestion = ("Put the model and its inputs in channels_last (model.to(memory_format=torch.channels_last), "
                      "images.contiguous(memory_format=torch.channels_last); knob memory_format=channels_last): "
                      f"{library} convolutions work in NHWC, so NCHW tensors are transposed before and "
                      "after every convolution.")
    return Finding(
        "warning", f"{what} take {_pct(layout_us / wall)} of the step "
        f"({_ms(layout_us)} of {_ms(wall)} ms), work that changes no value.",
        {"layout_us": layout_us, "step_us": wall, "share": round(layout_us / wall, 4), "by_op_us": ops,
         "memory_format": fmt or None},
        suggestion)


def _idle(timeline: Timeline, wall: float, settings: Mapping[str, Any] | None) -> Finding | None:
    host = timeline.idle.host_bound_us + timeline.idle.launch_gap_us
    if wall <= 0 or host / wall <= IDLE_SHARE:
        return None
    remedies = []
    if _setting(settings, "cuda_graphs") is not True:
        remedies.append("capture the step in a CUDA graph (knob cuda_graphs=on, or torch.cuda.graphs)")
    if str((settings or {}).get("compile", "off")).lower() in ("off", "", "none", "false"):
        remedies.append("torch.compile the model (fewer, fused kernels; mode='reduce-overhead' adds CUDA graphs)")
    remedies.append("raise the batch size so each launch carries more work")
    return Finding(
        "warning", f"The GPU idles waiting on the host for {_pct(host / wall)} of the step {_batch_words(settings)} "
        f"({_ms(timeline.idle.host_bound_us)} ms host-bound, {_ms(timeline.idle.launch_gap_us)} ms launch gaps, "
        f"of {_ms(wall)} ms).",
        {"host_bound_us": timeline.idle.host_bound_us, "launch_gap_us": timeline.idle.launch_gap_us,
         "step_us": wall, "share": round(host / wall, 4), "batch_size": (settings or {}).get("batch_size")},
        "The host cannot launch kernels as fast as the GPU runs them: " + "; ".join(remedies) + "."
        + (" The idle time is against the step timed without the profiler (its overhead is taken off)."
           if timeline.profiler_overhead_us > 0 else
           " The profiler adds host time per op, so an unprofiled step loses somewhat less."))


def _memory(explanation: Explanation, settings: Mapping[str, Any] | None, model: MachineModel | None) -> Finding | None:
    """A requested batch that did not fit (the workload fell back to a smaller one), else how large a batch would."""
    settings = settings or {}
    requested, ran = settings.get("batch_size_requested"), settings.get("batch_size")
    if requested not in (None, "") and ran not in (None, "") and str(requested) != str(ran):
        return Finding(
            "warning", f"A batch of {requested} does not fit in memory: the step ran at batch {ran}.",
            {"batch_size_requested": requested, "batch_size": ran},
            "Reach the larger batch with gradient accumulation, activation checkpointing or AMP (half the "
            "activation bytes), or a card with more memory.")
    t = explanation.throughput
    capacity = model.capacity_bytes("memory") if model is not None else None
    fits = fitting_batch(t.samples_per_step, t.peak_memory_bytes, t.resident_memory_bytes, capacity) if t else None
    if fits is None:
        return None
    per_sample = (t.peak_memory_bytes - t.resident_memory_bytes) / t.samples_per_step
    return Finding(
        "info", f"The step peaks at {t.peak_memory_bytes / 1e9:.1f} GB of the card's {capacity / 1e9:.0f} GB "
        f"({_pct(t.peak_memory_bytes / capacity)}) at batch {t.samples_per_step}: about {fits} samples would fit.",
        {"peak_memory_bytes": t.peak_memory_bytes, "resident_memory_bytes": t.resident_memory_bytes,
         "memory_bytes": capacity, "bytes_per_sample": per_sample, "batch_that_fits": fits},
        "Estimated as resident memory (weights, optimizer state, data) plus activations growing linearly with the "
        "batch; --batch-sweep measures the largest batch that runs.")


def _sync(timeline: Timeline, wall: float) -> Finding | None:
    sync = timeline.idle.sync_us
    if wall <= 0 or sync / wall <= SYNC_SHARE:
        return None
    return Finding(
        "warning", f"The host waits on the device for {_pct(sync / wall)} of the step ({_ms(sync)} of {_ms(wall)} ms), "
        "and the GPU idles until it launches again.",
        {"sync_us": sync, "step_us": wall, "share": round(sync / wall, 4)},
        "Remove synchronizing calls from the step (.item(), .cpu(), printing a tensor, torch.cuda.synchronize, "
        "non-pinned copies to the host), or move them to every Nth step.")


def _convolution_us(records: Sequence[KernelRecord], shares: Sequence[float]) -> float:
    return sum(s for r, s in zip(records, shares)
               if r.kernel_class in (KernelClass.TENSOR_GEMM, KernelClass.VECTOR_MATH) and "conv" in r.op.lower())


def _cudnn_benchmark(records: Sequence[KernelRecord], shares: Sequence[float], wall: float,
                     settings: Mapping[str, Any] | None) -> Finding | None:
    if _setting(settings, "cudnn_benchmark") is not False:
        return None
    conv_us = _convolution_us(records, shares)
    if wall <= 0 or conv_us / wall <= CONV_SHARE:
        return None
    return Finding(
        "info", f"cudnn.benchmark is off, so cuDNN picked the algorithms of {_ms(conv_us)} ms of convolution kernels "
        f"({_pct(conv_us / wall)} of the step) by heuristic instead of timing them.",
        {"cudnn_benchmark": (settings or {}).get("cudnn_benchmark"), "convolution_us": conv_us, "step_us": wall},
        "Set torch.backends.cudnn.benchmark = True (knob cudnn_benchmark=on) when input shapes stay the same from "
        "step to step: cuDNN then times its algorithms once per shape and keeps the fastest. "
        "--compare-config cudnn_benchmark=off cudnn_benchmark=on measures what it is worth here.")


def _fp32_math(records: Sequence[KernelRecord], shares: Sequence[float], wall: float,
               settings: Mapping[str, Any] | None, model: MachineModel | None) -> Finding | None:
    fp32 = lambda r: r.kernel_class == KernelClass.VECTOR_MATH and dtype_of(r.precision) == "fp32"  # noqa: E731
    us = sum(s for r, s in zip(records, shares) if fp32(r))
    if wall <= 0 or us / wall <= FP32_MATH_SHARE:
        return None
    ops = _top_ops(records, shares, fp32)
    tf32, cuda = _ceiling(model, "compute", "tensor.tf32.acc32"), _ceiling(model, "compute", "cuda.fp32")
    rates = (f" (TF32 tensor cores {tf32:,.0f} vs CUDA-core FP32 {cuda:,.0f} TFLOP/s on this card)"
             if tf32 and cuda else "")
    if _tf32(settings):
        suggestion = ("TF32 is already allowed, so these ops have no tensor-core kernel at their shapes (depthwise "
                      "convolutions, GEMV, tiny matmuls): run them under AMP (fp16/bf16) or change their shapes.")
    else:
        suggestion = ("Allow TF32 (torch.backends.cuda.matmul.allow_tf32 = True and torch.backends.cudnn.allow_tf32 "
                      f"= True; knob tf32=on) or train with AMP, which moves this math to the tensor cores{rates}.")
    return Finding(
        "warning", f"FP32 matrix math runs on the CUDA cores without TF32 for {_pct(us / wall)} of the step "
        f"({_ms(us)} of {_ms(wall)} ms).",
        {"fp32_vector_math_us": us, "step_us": wall, "share": round(us / wall, 4), "by_op_us": ops,
         "tf32_tflops": tf32, "cuda_fp32_tflops": cuda, "tf32_setting": (settings or {}).get("tf32")},
        suggestion)


def _acc32_half_rate(records: Sequence[KernelRecord], shares: Sequence[float], wall: float,
                     model: MachineModel | None) -> Finding | None:
    acc32, acc16 = _ceiling(model, "compute", "tensor.fp16.acc32"), _ceiling(model, "compute", "tensor.fp16.acc16")
    if not (acc32 and acc16) or acc32 > HALF_RATE_RATIO * acc16:
        return None
    keep = lambda r: r.kernel_class == KernelClass.TENSOR_GEMM and r.precision.endswith(".acc32")  # noqa: E731
    us = sum(s for r, s in zip(records, shares) if keep(r))
    if wall <= 0 or us / wall <= ACC32_SHARE:
        return None
    ratio = acc32 / acc16
    return Finding(
        "info", f"Tensor-core math accumulating in FP32 takes {_pct(us / wall)} of the step ({_ms(us)} ms) on a card "
        f"that runs FP32 accumulation at {100 * ratio:.0f}% of the FP16-accumulate rate ({acc32:,.0f} vs "
        f"{acc16:,.0f} TFLOP/s).",
        {"acc32_us": us, "step_us": wall, "share": round(us / wall, 4), "tensor_fp16_acc32": acc32,
         "tensor_fp16_acc16": acc16, "ratio": round(ratio, 3), "by_op_us": _top_ops(records, shares, keep)},
        "fp16 matmuls may accumulate in fp16 (torch.backends.cuda.matmul.allow_fp16_accumulation = True; knob "
        "fp16_accumulation=on) where the accuracy allows, which reaches cuBLAS matmuls only: convolutions and bf16 "
        "always accumulate in FP32. Otherwise this is the card's design; compare cards at their FP32-accumulate rate.")


def _memory_bound(records: Sequence[KernelRecord], shares: Sequence[float],
                  model: MachineModel | None, kind: str) -> Finding | None:
    kernel_us = sum(shares)
    mem_us = sum(s for r, s in zip(records, shares) if r.kernel_class == KernelClass.MEMORY_BOUND)
    if kernel_us <= 0 or mem_us / kernel_us <= MEMORY_BOUND_SHARE:
        return None
    # How close they run to their HBM bound: each kernel's bound (capped at its time), scaled to its exclusive share.
    bound_us = sum(min(r.bound_us, r.duration_us) * s / r.duration_us for r, s in zip(records, shares)
                   if r.kernel_class == KernelClass.MEMORY_BOUND and r.bound_us is not None and r.duration_us > 0)
    efficiency = bound_us / mem_us if mem_us > 0 else 0.0
    dram = model.dram_key() if model is not None else None
    bandwidth = _ceiling(model, "memory", dram) if dram else None
    at = f" of the measured {bandwidth:,.0f} GB/s" if bandwidth else " of main-memory bandwidth"
    unit, memory, math = ("kernels", "HBM", "the tensor cores") if kind == words.GPU else ("ops", "memory", "the SIMD units")
    if efficiency >= 0.6:
        how = (f"They already move their bytes at {100 * efficiency:.0f}%{at} on average, so only moving fewer bytes "
               "helps: fuse elementwise and normalization ops (torch.compile fuses normalization, activations and "
               "residual adds).")
    else:
        how = (f"They reach {100 * efficiency:.0f}%{at} on average (small or poorly vectorized {unit}): fusing "
               f"them (torch.compile) saves both {'launches' if kind == words.GPU else 'dispatches'} and bytes.")
    return Finding(
        "info", f"Memory-bound {unit} take {_pct(mem_us / kernel_us)} of {unit[:-1]} time ({_ms(mem_us)} of "
        f"{_ms(kernel_us)} ms), so {memory} bandwidth rather than {math} sets the speed of this step.",
        {"memory_bound_us": mem_us, "kernel_us": kernel_us, "share": round(mem_us / kernel_us, 4),
         "bound_us": bound_us, "bandwidth_efficiency": round(efficiency, 3), "memory_gbps": bandwidth,
         "by_op_us": _top_ops(records, shares, lambda r: r.kernel_class == KernelClass.MEMORY_BOUND)},
        how + f" Faster {'tensor cores' if kind == words.GPU else 'SIMD units'} would not shorten this part; more "
        "memory bandwidth would.")


def _self_check(step: ExplainedStep, kind: str) -> Finding | None:
    beat = step.self_check
    if not beat:
        return None
    ops = Counter(r.op or r.name[:60] for r in beat)
    worst = max(beat, key=lambda r: r.bound_us / r.duration_us if r.duration_us > 0 else float("inf"))
    ratio = worst.bound_us / worst.duration_us if worst.duration_us > 0 else float("inf")
    listed = ", ".join(f"{op} ({n})" for op, n in ops.most_common(TOP_OPS))
    # A warning, not an error: the step is fine; pygpuperf's own accounting of these kernels is not.
    return Finding(
        "warning", f"{len(beat)} {words.unit(kind)}(s) ran faster than the roofline bound pygpuperf gives them (up to "
        f"{ratio:.2f}x), so pygpuperf miscounts their work: {listed}.",
        {"kernels": len(beat), "by_op": dict(ops), "worst_ratio": round(ratio, 3), "worst_kernel": worst.name,
         "worst_ceiling": worst.ceiling},
        "Nothing to change in the model: this is a limit of pygpuperf's FLOP and byte formulas (or of the "
        "cache level it assumes the data came from). Until fixed, the roofline ideal is overstated by these "
        f"{words.unit(kind, True)}; please report it with explain.json.")


def _coverage(explanation: Explanation, kind: str) -> Finding | None:
    w = explanation.median.waterfall
    if w.coverage >= COVERAGE_GOAL:
        return None
    unknown = dict(sorted(explanation.unknown_ops.items(), key=lambda kv: -kv[1])[:TOP_OPS])
    other = w.parts.get(Part.OTHER, 0.0)
    units = words.unit(kind, True)
    fix = (f"Add cost formulas for {', '.join(unknown)} (pygpuperf/explain/costs.py) and name the {units} no "
           "rule classifies (pygpuperf/explain/classify.py)" if unknown else
           f"Name the {units} no rule classifies (pygpuperf/explain/classify.py)")
    return Finding(
        "warning", f"Only {_pct(w.coverage)} of the step is held against a ceiling or an idle cause "
        f"(goal {100 * COVERAGE_GOAL:.0f}%): {_ms(other)} ms in {units} with no bound and {_ms(w.unexplained_us)} ms "
        "unexplained.",
        {"coverage": round(w.coverage, 4), "other_kernels_us": other, "unexplained_us": w.unexplained_us,
         "unknown_ops_us": unknown},
        fix + "; until then the waterfall's other parts understate what the step could save.")


class Trial(Protocol):
    """What the findings read of a fix --try-fixes tried (pygpuperf.trials.record.FixTrial, a layer above)."""

    name: str
    what: str
    status: str  # "measured", "failed" or "waived"
    reason: str
    measured_step_us: float | None
    predicted_step_us: float | None
    predicted_at_windows_host_us: float | None
    predicted_at_fixed_clock_us: float | None


@dataclass(frozen=True)
class Diagnosis:
    """What the diagnosis says of an explained step, written once: the named causes of its median step (None
    without the machine model it was explained against) and its findings, errors first."""

    causes: causes.Causes | None
    findings: tuple[Finding, ...]

    def to_dict(self) -> dict[str, Any]:
        """explain.json's keys for it."""
        return {"findings": [dataclasses.asdict(f) for f in self.findings],
                **({"causes": self.causes.to_dict()} if self.causes is not None else {})}


def explain_findings(explanation: Explanation, settings: Mapping[str, Any] | None = None,
                     model: MachineModel | None = None) -> list[Finding]:
    """The findings of :func:`diagnose_step` (a list)."""
    return list(diagnose_step(explanation, settings, model).findings)


def diagnose_step(explanation: Explanation, settings: Mapping[str, Any] | None = None,
                  model: MachineModel | None = None, *, step_causes: causes.Causes | None = None,
                  trials: Sequence[Trial] = ()) -> Diagnosis:
    """The causes and findings of the median step of `explanation`: errors first, then warnings, then notes.

    `settings` (the workload's params) enable the findings that depend on a switch
    (cudnn.benchmark, TF32, memory format, batch size); `model` (the roofline the step
    was explained against) the ones that depend on the card (FP32-accumulate rate) and the causes.
    `step_causes`, causes already named on this step, are taken as they are (the findings again, after
    --try-fixes measured their fixes, without naming the causes twice); `trials`, the fixes --try-fixes tried,
    add what each measured to the cause whose fix it applied.
    """
    step = explanation.median
    records, timeline = step.kernels, step.timeline
    shares = exclusive_times(records)
    times = category_times(records, timeline)
    wall = timeline.wall_us
    # On a CPU the records are ops and the "idle" time is the framework's own work between them: no
    # launches, no device to wait on, no cuDNN, no TF32 or tensor cores to advise.
    kind = words.kind_of(explanation.device)
    gpu = kind == words.GPU and bool(records)
    found_causes = step_causes
    if found_causes is None and model is not None:
        found_causes = causes.step_causes(records, timeline, model, explanation.calls, settings, explanation.device)
    # Each finding with the cause ids (prefixes) it already speaks for: their fixes are attached to it.
    built: list[tuple[Finding | None, tuple[str, ...]]] = [
        (_self_check(step, kind), ()),
        (_coverage(explanation, kind), ()),
        (_layout(records, shares, times, wall, settings, kind), (LAYOUT_CAUSES,)),
        (_idle(timeline, wall, settings) if gpu else None, ("host_bound", "launch_gaps")),
        (_sync(timeline, wall) if gpu else None, ()),
        (_fp32_math(records, shares, wall, settings, model) if gpu else None, ("precision.fp32_no_tf32",)),
        (_acc32_half_rate(records, shares, wall, model) if gpu else None, ()),
        (_memory_bound(records, shares, model, kind), ()),
        (_cudnn_benchmark(records, shares, wall, settings) if gpu else None, ()),
        (_memory(explanation, settings, model), ()),
    ]
    pairs = [(f, covers) for f, covers in built if f is not None]
    if found_causes is None:
        found = [f for f, _ in pairs]
    else:
        by_name: dict[str, Trial] = {}
        for t in trials:
            by_name.setdefault(t.name, t)  # the first trial of a name, as the fix list reads
        found = _with_causes(pairs, found_causes, kind, by_name)
    return Diagnosis(found_causes, tuple(sorted(found, key=lambda f: _SEVERITY_ORDER.get(f.severity, 3))))


LAYOUT_CAUSES = "layout."  # the layout finding names each of these causes with its advice
# A cause of its own becomes a finding above this share of the step.
CAUSE_SHARE = 0.02


def _fix_evidence(fix: causes.Fix | None, trials: Mapping[str, Trial]) -> dict[str, Any] | None:
    """A cause's fix as evidence, with what the --try-fixes trial that applies it measured (`trials` by name)."""
    if fix is None:
        return None
    out = {"name": fix.name, "what": fix.what, "saves_us": fix.saves_us, "predicted_step_us": fix.predicted_step_us,
           "knobs": fix.knobs, "words": fix.words()}
    trial = trials.get(fix.trial)
    if trial is not None:
        out.update({"trial": trial.name, "trial_status": trial.status, "measured_step_us": trial.measured_step_us,
                    "trial_reason": trial.reason})
        out.update({key: value for key, value in _trial_predictions(trial) if value is not None})
    return out


def _trial_predictions(trial: Trial) -> tuple[tuple[str, float | None], ...]:
    """The trial's own predictions: as the fix was applied, at the host's pace beside its windows, and at the
    clock its fixed windows ran (None where not made)."""
    return (("trial_predicted_step_us", trial.predicted_step_us),
            ("trial_predicted_at_windows_host_us", trial.predicted_at_windows_host_us),
            ("trial_predicted_at_fixed_clock_us", trial.predicted_at_fixed_clock_us))


def _measured_words(fix: causes.Fix, trials: Mapping[str, Trial]) -> str:
    trial = trials.get(fix.trial)
    if trial is None:
        return ""
    if trial.status == "measured" and trial.measured_step_us is not None:
        beside = [f"{us / 1e3:.2f} {where}" for us, where in (
            (trial.predicted_at_windows_host_us, "at the host's pace beside its windows"),
            (trial.predicted_at_fixed_clock_us, "at the fixed step's clock")) if us is not None]
        conditions = f" (predicted {', '.join(beside)})" if beside else ""
        return f" Measured with --try-fixes ({trial.what}): {trial.measured_step_us / 1e3:.2f} ms{conditions}."
    return f" --try-fixes {trial.what}: {trial.status} ({trial.reason})."


def _with_causes(found: list[tuple[Finding, tuple[str, ...]]], step_causes: causes.Causes, kind: str,
                 trials: Mapping[str, Trial]) -> list[Finding]:
    """The findings with the predicted fixes of the causes each covers attached, and a finding for each other
    cause that matters."""
    out = []
    covered: set[str] = set()
    for f, covers in found:
        mine = [c for c in step_causes.items if c.id.startswith(covers)] if covers else []
        covered.update(c.id for c in mine)
        if mine:
            f.evidence["causes"] = [{"id": c.id, "us": c.us, "share": c.share, "advice": c.advice,
                                     "fix": _fix_evidence(c.fix, trials)} for c in mine]
            if LAYOUT_CAUSES in covers:
                f.suggestion = " ".join(f"[{c.id.split('.', 1)[1].replace('_', ' ')}: {c.us / 1e3:.2f} ms] {c.advice}"
                                        for c in mine)
            fixes = [c.fix for c in mine if c.fix is not None]
            if fixes:
                best = max(fixes, key=lambda x: x.saves_us)
                f.evidence["fix"] = _fix_evidence(best, trials)
                f.suggestion += f" {best.words()}." + _measured_words(best, trials)
        out.append(f)
    for c in step_causes.items:
        if c.share < CAUSE_SHARE or c.id in covered or c.id in ("sync", "cpu.framework"):
            continue
        evidence = {"cause": c.id, "part": c.part, "us": c.us, "share": c.share, **c.evidence,
                    "fix": _fix_evidence(c.fix, trials)}
        suggestion = c.advice + (f" {c.fix.words()}." + _measured_words(c.fix, trials)
                                 if c.fix is not None and c.fix.saves_us > 0 else "")
        out.append(Finding("info", c.title, evidence, suggestion))
    if kind == words.CPU:
        framework = next((c for c in step_causes.items if c.id == "cpu.framework"), None)
        if framework is not None and framework.share >= IDLE_SHARE:
            out.append(Finding("info", framework.title, {"cause": framework.id, "us": framework.us, "share": framework.share,
                                                         "fix": _fix_evidence(framework.fix, trials)},
                               framework.advice))
    return out


def finding_lines(findings: Sequence[Finding]) -> list[str]:
    """Findings as terminal lines: severity and title, then the suggestion indented."""
    lines = []
    for f in findings:
        lines.append(f"[{f.severity}] {f.title}")
        if f.suggestion:
            lines.append(f"    -> {f.suggestion}")
    return lines
