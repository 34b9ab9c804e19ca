"""The data of an explained step: kernels with their op, class, work and bound; the
timeline's idle split; and the waterfall from the roofline ideal to the measured time.

Times are microseconds on the device timeline. FLOPs follow the project's counting
(an FMA is 2 FLOPs); bytes are a minimum-traffic estimate (each input read once, each
output written once), stated as such wherever they are reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Kernel classes, in the order reports list them.
TENSOR_GEMM = "tensor_gemm"  # GEMM or convolution on the tensor cores
VECTOR_MATH = "vector_math"  # GEMM/conv or other math on vector units: CUDA cores, CPU SIMD (no tensor cores)
MEMORY_BOUND = "memory_bound"  # elementwise, normalization, pooling, softmax, reductions, optimizer
LAYOUT = "layout"  # NCHW<->NHWC and other transposes, .contiguous()
MEMCPY = "memcpy_memset"
COMMUNICATION = "communication"
OTHER = "other"
KERNEL_CLASSES = (TENSOR_GEMM, VECTOR_MATH, MEMORY_BOUND, LAYOUT, MEMCPY, COMMUNICATION, OTHER)

PHASES = ("forward", "backward", "optimizer", "other")


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
    phase: str = "other"  # one of PHASES
    input_shapes: list[Any] = field(default_factory=list)  # a tensor list is a list of shapes
    dtypes: list[str] = field(default_factory=list)
    input_strides: list[Any] = field(default_factory=list)  # per argument; a 0 stride marks a broadcast (expand) dim
    concrete_inputs: list[Any] = field(default_factory=list)  # non-tensor arguments: stride, padding, flags
    op_call_id: int | None = None  # the launching op call (kernels of one call share their op's work)
    kernel_class: str = OTHER  # one of KERNEL_CLASSES
    precision: str = ""  # ceiling key suffix it is held against, e.g. "fp16.acc32", "fp32"
    flops: float = 0.0  # this kernel's share of its op's FLOPs
    bytes: float = 0.0  # this kernel's share of its op's minimum traffic
    bound_us: float | None = None  # roofline lower bound on the measured machine model
    ceiling: str = ""  # which MachineModel ceiling set the bound, e.g. "compute:tensor.fp16.acc32"

    @property
    def end_us(self) -> float:
        return self.start_us + self.duration_us


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
