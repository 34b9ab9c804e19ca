"""What ``--try-fixes`` measured, as one record: each fix's trial, the step's library ops timed on the device
(per dtype, at another batch, in another layout), which the fixes' predictions price those ops by, and the
host's own time per step, which they pace the host's launches by.

explain.json keeps them beside the explained step (:meth:`Trials.to_dict`, :meth:`Trials.from_doc`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from pygpuperf.explain.model import HostTime
from pygpuperf.trials.attention import AttentionTiming
from pygpuperf.trials.convs import ConvTiming
from pygpuperf.trials.matmuls import MatmulTiming
from pygpuperf.trials.norms import NormTiming
from pygpuperf.trials.sums import SumTiming


@dataclass
class FixTrial:
    """One fix tried on the step: predicted by the kernel model, measured without the profiler."""

    name: str
    what: str
    knobs: dict[str, str]
    status: str  # "measured", "failed" or "waived"
    reason: str = ""  # why waived or failed
    predicted_step_us: float | None = None
    measured_step_us: float | None = None
    baseline_step_us: float | None = None
    samples_per_step: int | None = None
    baseline_samples_per_step: int | None = None
    # The step as given, timed again after every fix: how far the card drifted while they ran.
    baseline_after_step_us: float | None = None
    # Where the step as given and the fixed step were timed in alternating windows (the baseline above is
    # then the given step's median over its windows): each window pair's saving per step (µs, at the
    # baseline's batch).
    paired_savings_us: list[float] = field(default_factory=list)
    # Each window's median step (µs), in the order they ran: the step as given's, and the fixed step's at
    # its own batch.
    given_windows_us: list[float] = field(default_factory=list)
    fixed_windows_us: list[float] = field(default_factory=list)
    # Each window's median clock (MHz) and average power (W) where the device reports them, in the same order.
    given_windows_mhz: list[float] = field(default_factory=list)
    fixed_windows_mhz: list[float] = field(default_factory=list)
    given_windows_w: list[float] = field(default_factory=list)
    fixed_windows_w: list[float] = field(default_factory=list)
    # The device memory held aside while each window pair ran (bytes): written by earlier versions, which held
    # spacers between pairs; read back so their documents keep it.
    pair_spacer_bytes: list[int] = field(default_factory=list)
    # Where both sides' clocks are known and differ: the prediction with the step's time at the clock's pace
    # moved to the fixed windows' clock (:func:`at_clock`).
    predicted_at_fixed_clock_us: float | None = None
    # Where the prediction paces the host's launches by its own time at the step's batch: that time (µs), and
    # of it the optimizer's step and the backward calls, timed before each window pair (the host's pace drifts
    # over seconds), and the prediction at their medians.
    windows_host_step_us: list[float] = field(default_factory=list)
    windows_host_optimizer_us: list[float] = field(default_factory=list)
    windows_host_backward_us: list[float] = field(default_factory=list)
    predicted_at_windows_host_us: float | None = None
    # Where torch.compile's reduce-overhead mode ran the compiled step without CUDA graphs (inductor skips them,
    # e.g. for a step that mutates tensors it does not own): the prediction for the compiled step alone.
    predicted_without_graphs_us: float | None = None
    notes: list[str] = field(default_factory=list)

    def _per_sample(self, us: float | None, samples: int | None) -> float | None:
        return us / samples if us is not None and samples else None

    @property
    def speedup(self) -> float | None:
        """Baseline time per sample over the fixed step's (above 1: faster)."""
        base = self._per_sample(self.baseline_step_us, self.baseline_samples_per_step)
        new = self._per_sample(self.measured_step_us, self.samples_per_step)
        return base / new if base and new else None

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "speedup": self.speedup}

    def line(self) -> str:
        if self.status != "measured":
            return f"  {self.what:34s} {self.status}: {self.reason}"
        per = "" if self.samples_per_step == self.baseline_samples_per_step else \
            f" at batch {self.samples_per_step} (per-sample speedup {self.speedup:.2f}x)"
        predicted = f"predicted {self.predicted_step_us / 1e3:.2f} ms, " if self.predicted_step_us is not None else \
            "no prediction, "
        if self.predicted_at_windows_host_us is not None:
            predicted += f"{self.predicted_at_windows_host_us / 1e3:.2f} at the windows' host pace, "
        if self.predicted_at_fixed_clock_us is not None:
            predicted += f"{self.predicted_at_fixed_clock_us / 1e3:.2f} at the fixed step's clock, "
        return (f"  {self.what:34s} {self.baseline_step_us / 1e3:.2f} → {self.measured_step_us / 1e3:.2f} ms "
                f"({predicted}measured){per}")


def trial_from_dict(d: Mapping[str, Any]) -> FixTrial:
    names = {f.name for f in dataclasses.fields(FixTrial)}
    return FixTrial(**{k: v for k, v in d.items() if k in names})


# explain.json's key for each timing field of Trials, in the order the document writes them.
TIMING_KEYS = {"norm_timings": "batch_norm_timing", "conv_timings": "convolution_timing", "sum_timings": "sum_timing",
               "matmul_timings": "matmul_timing", "attention_timings": "attention_timing"}
_TIMING_TYPES = {"norm_timings": NormTiming, "conv_timings": ConvTiming, "sum_timings": SumTiming,
                 "matmul_timings": MatmulTiming, "attention_timings": AttentionTiming}
# explain.json's keys for each HostTime field of Trials: the document's key for each of HostTime's fields in
# order (the step's time, the optimizer's share, the backward's). The document writes them last.
HOST_TIME_KEYS = {"host_at_batch_one": ("batch_one_step_us", "batch_one_optimizer_us", "batch_one_backward_us"),
                  "host_at_batch": ("host_step_us", "host_optimizer_us", "host_backward_us")}


@dataclass(frozen=True)
class Trials:
    """--try-fixes' results: the fixes tried, in the order they ran, each library op family's shapes timed on
    the device (:mod:`pygpuperf.trials.norms`, ``convs``, ``sums``, ``matmuls``, ``attention``), and the host's
    own time per step (:mod:`pygpuperf.trials.host_clock`)."""

    fixes: tuple[FixTrial, ...] = ()
    norm_timings: tuple[NormTiming, ...] = ()  # each batch-norm shape of the step
    conv_timings: tuple[ConvTiming, ...] = ()  # each convolution shape
    sum_timings: tuple[SumTiming, ...] = ()  # each sum shape
    matmul_timings: tuple[MatmulTiming, ...] = ()  # each GEMM
    attention_timings: tuple[AttentionTiming, ...] = ()  # each attention call's shape
    # The step at batch 1 without the profiler: a floor under any fix that keeps the host's work.
    host_at_batch_one: HostTime | None = None
    # Where the step has no sync of its own: the host's own time per step at the step's batch, each step called
    # after the device drained, without the profiler.
    host_at_batch: HostTime | None = None

    def to_dict(self) -> dict[str, Any]:
        """explain.json's keys for them, each only where it holds something."""
        return {**({"fixes": [f.to_dict() for f in self.fixes]} if self.fixes else {}),
                **{key: [t.to_dict() for t in timings] for name, key in TIMING_KEYS.items()
                   if (timings := getattr(self, name))},
                **{key: value for name, keys in HOST_TIME_KEYS.items() if (host := getattr(self, name)) is not None
                   for key, value in host.to_doc(keys).items()}}

    @staticmethod
    def from_doc(doc: Mapping[str, Any]) -> "Trials":
        """Back from explain.json (:meth:`to_dict`); none where the document has none."""
        timings = {}
        for name, key in TIMING_KEYS.items():
            timed = doc.get(key)
            if timed:
                # One shape (an object) in documents written before every shape was timed.
                items = [timed] if isinstance(timed, Mapping) else timed
                timings[name] = tuple(_TIMING_TYPES[name].from_dict(dict(t)) for t in items)
        return Trials(tuple(trial_from_dict(t) for t in doc.get("fixes", []) if isinstance(t, Mapping)), **timings,
                      **{name: HostTime.from_doc(doc, keys) for name, keys in HOST_TIME_KEYS.items()})
