"""The data of an explained step: kernels with their op, class, work and bound; the
timeline's idle split; and the waterfall from the roofline ideal to the measured time.

Times are microseconds on the device timeline. FLOPs follow the project's counting
(an FMA is 2 FLOPs); bytes are a minimum-traffic estimate (each input read once, each
output written once), stated as such wherever they are reported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pygpuperf.analyze.kernel_time import Access
from pygpuperf.core.results import Stats
from pygpuperf.core.vocabulary import KernelClass, Phase


@dataclass
class KernelRecord:
    """One kernel launch of a profiled step."""

    name: str  # as the profiler reports it
    start_us: float
    duration_us: float
    stream: int = 0
    launch_us: float | None = None  # host time the launch call started (same clock as start_us)
    op: str = ""  # innermost aten op that launched it, e.g. "aten::convolution_backward"
    module: str = ""  # module path, e.g. "layer1.0.conv1"
    phase: Phase = Phase.OTHER
    input_shapes: list[Any] = field(default_factory=list)  # a tensor list is a list of shapes
    dtypes: list[str] = field(default_factory=list)
    input_strides: list[Any] = field(default_factory=list)  # per argument; a 0 stride marks a broadcast (expand) dim
    concrete_inputs: list[Any] = field(default_factory=list)  # non-tensor arguments: stride, padding, flags
    op_call_id: int | None = None  # the launching op call (kernels of one call share their op's work)
    kernel_class: KernelClass = KernelClass.OTHER
    precision: str = ""  # ceiling key suffix it is held against, e.g. "fp16.acc32", "fp32"
    flops: float = 0.0  # this kernel's share of its op's FLOPs
    bytes: float = 0.0  # this kernel's share of its op's minimum traffic
    bound_us: float | None = None  # kernel-time model's lower bound on the measured machine model (fixed + work)
    ceiling: str = ""  # which MachineModel ceiling set the bound, e.g. "compute:tensor.fp16.acc32"
    call: int | None = None  # the traced op call (Explanation.calls) that launched it; None: not traced
    fixed_us: float = 0.0  # the fixed-cost part of bound_us

    @property
    def end_us(self) -> float:
        return self.start_us + self.duration_us


@dataclass(frozen=True)
class CallAccesses:
    """One op call of a traced step (pygpuperf.explain.accesses): what it read and wrote, in issue order."""

    index: int
    op: str
    accesses: tuple[Access, ...]

    def to_list(self) -> list[Any]:
        return [self.op, [[a.storage, a.nbytes, a.write, a.resident] for a in self.accesses]]

    @staticmethod
    def from_list(index: int, item: Any) -> "CallAccesses":
        op, accesses = item
        return CallAccesses(index, str(op), tuple(Access(int(s), int(n), bool(w), bool(r)) for s, n, w, r in accesses))


@dataclass
class Idle:
    """GPU idle time inside a step, by cause."""

    host_bound_us: float = 0.0  # the next kernel was not launched yet
    launch_gap_us: float = 0.0  # launched in time, but short kernels ran out before the next launch landed
    sync_us: float = 0.0  # the host waited on the device (synchronize, .item(), copies to host)

    @property
    def total_us(self) -> float:
        return self.host_bound_us + self.launch_gap_us + self.sync_us


@dataclass
class Timeline:
    """Step wall time = kernel busy time (union over streams) + idle."""

    wall_us: float
    busy_us: float
    idle: Idle
    # Taken off idle time (host-bound first) so wall_us is the step timed without the profiler.
    profiler_overhead_us: float = 0.0


@dataclass
class Waterfall:
    """From the sum of roofline bounds (ideal) to the measured step, category by category."""

    ideal_us: float
    parts: dict[str, float]  # ordered: category -> microseconds added on top of the ideal
    measured_us: float
    unexplained_us: float  # measured - ideal - sum(parts): what no category names
    coverage: float  # share of measured time inside named categories (ideal + parts)


@dataclass
class Throughput:
    """Steps timed without the profiler (device events after warm-up; wall clock off CUDA)."""

    step_us: Stats  # microseconds per step
    samples_per_step: int
    peak_memory_bytes: float | None = None  # allocator peak during the timed steps
    resident_memory_bytes: float | None = None  # held between steps: weights, optimizer state, data
    energy_j_per_step: float | None = None  # device energy over the timed steps / steps; None where not measured
    # The device's clock and power while the steps ran (None where it reports neither): at its power limit a
    # card lowers its clock as the work draws more power, so a fix's windows can run at another clock.
    sm_clock_mhz: float | None = None  # the median of the samples
    power_w: float | None = None  # average over the timed steps
    clock_reasons: list[str] = field(default_factory=list)  # why the clock was held below its top, if it was

    @property
    def samples_per_s(self) -> float:
        return self.samples_per_step / (self.step_us.median * 1e-6)

    @property
    def joules_per_sample(self) -> float | None:
        return self.energy_j_per_step / self.samples_per_step if self.energy_j_per_step is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "samples_per_s": self.samples_per_s,
                "joules_per_sample": self.joules_per_sample}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Throughput":
        return Throughput(Stats(**d["step_us"]), int(d["samples_per_step"]), d.get("peak_memory_bytes"),
                          d.get("resident_memory_bytes"), d.get("energy_j_per_step"), d.get("sm_clock_mhz"),
                          d.get("power_w"), list(d.get("clock_reasons") or []))


def fitting_batch(batch: int, peak: float | None, resident: float | None, capacity: float | None) -> int | None:
    """The largest batch whose memory fits `capacity` when memory = resident + per-sample x batch
    (activations grow with the batch; weights, optimizer state and data buffers do not): 0 when
    the resident part alone does not fit; None without the figures to tell."""
    if not peak or not resident or not capacity or peak <= resident:
        return None
    return max(0, int((capacity - resident) // ((peak - resident) / batch)))


@dataclass
class ExplainedStep:
    index: int
    kernels: list[KernelRecord]
    timeline: Timeline
    waterfall: Waterfall
    self_check: list[KernelRecord]  # kernels faster than their bound: miscounted work
    # The profiled step's window and the host calls in it that waited on the device (same clock as the
    # kernels): where a synchronization holds the host, for a model of the host's and the device's queues.
    window_us: tuple[float, float] | None = None
    syncs: list[tuple[float, float]] = field(default_factory=list)


@dataclass(frozen=True)
class HostTime:
    """The host's own time per step that --try-fixes took without the profiler, and of it the time inside the
    optimizers' step calls and inside backward calls (None where none ran, or it was not timed)."""

    step_us: float
    optimizer_us: float | None = None
    backward_us: float | None = None

    @staticmethod
    def from_doc(doc: Mapping[str, Any], keys: tuple[str, ...]) -> "HostTime | None":
        """From a document's `keys`, one per field in order (see
        :data:`pygpuperf.trials.record.HOST_TIME_KEYS`); None without the step's."""
        values = [float(v) if isinstance(v, (int, float)) else None for v in (doc.get(k) for k in keys)]
        return HostTime(*values) if values[0] is not None else None

    def to_doc(self, keys: tuple[str, ...]) -> dict[str, float]:
        """The fields under `keys`, in order, those measured."""
        return {key: value for key, value in zip(keys, dataclasses.astuple(self)) if value is not None}


@dataclass(frozen=True)
class Explanation:
    """An explained step, written once by the explainer; what --try-fixes measured of it (the fixes, the library
    ops, the host's own time per step) is a record of its own (pygpuperf.trials.record.Trials)."""

    device: str
    steps: list[ExplainedStep]
    median: ExplainedStep  # the step with the median wall time
    unknown_ops: dict[str, float] = field(default_factory=dict)  # op -> kernel time (us) with no cost formula
    throughput: Throughput | None = None  # timed without the profiler
    settings: dict[str, str] = field(default_factory=dict)  # the workload's params: batch, knobs, flags
    calls: list[CallAccesses] = field(default_factory=list)  # the traced step's op calls (KernelRecord.call)

    def to_dict(self) -> dict[str, Any]:
        step = self.median
        return {
            "device": self.device,
            "settings": self.settings,
            "throughput": self.throughput.to_dict() if self.throughput else None,
            "median_step": step.index,
            "step_wall_us": [s.timeline.wall_us for s in self.steps],
            "timeline": dataclasses.asdict(step.timeline),
            "waterfall": dataclasses.asdict(step.waterfall),
            "self_check": [r.name for r in step.self_check],
            **({"step_window_us": list(step.window_us)} if step.window_us is not None else {}),
            "syncs_us": [list(s) for s in step.syncs],
            "unknown_ops_us": self.unknown_ops,
            "kernels": [dataclasses.asdict(r) for r in step.kernels],
            "calls": _numbered_storages(self.calls),
        }


def _numbered_storages(calls: list[CallAccesses]) -> list[Any]:
    """The calls as lists, storages renumbered 1, 2, ... in order of first use (addresses mean nothing later)."""
    numbers: dict[int, int] = {}
    out = []
    for call in calls:
        op, accesses = call.to_list()
        out.append([op, [[numbers.setdefault(s, len(numbers) + 1), n, w, r] for s, n, w, r in accesses]])
    return out
