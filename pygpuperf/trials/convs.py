"""2-d convolutions in each 16-bit dtype and fp32, timed on each convolution shape the step runs.

The kernel model prices fp16 and bf16 tensor-core math at the card's one rate for each, but the
convolution library picks other kernels per dtype: on an H200, ResNet-50's convolutions took 14.10 ms in
fp16 and 15.76 ms in bf16 in two training profiles. This times the step's own shapes (input, weight,
stride, padding, dilation, groups, layout), forward and, when training, backward, with the step's library
settings (algorithm search, TF32), so that an AMP fix's prediction prices each convolution kernel by its
shape's ratio between dtypes, and a batch fix's by its ratio between batches (see
:mod:`pygpuperf.trials.dtype_timing`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from pygpuperf.core import torch_flags
from pygpuperf.trials import dtype_timing
from pygpuperf.trials.dtype_timing import DtypeTimes
from pygpuperf.explain.model import KernelRecord

# Of the fp32 reference's mean magnitude (the reference runs without TF32; fp32 may run as TF32 here).
TOLERANCE = {"fp32": 1e-2, "fp16": 2e-2, "bf16": 1e-1}
MAX_SHAPES = 48  # shapes timed at most: those the step spends most time in


@dataclass
class ConvShape:
    """A 2-d convolution as the step runs it."""

    input: list[int]
    weight: list[int]
    stride: list[int]
    padding: list[int]
    dilation: list[int]
    groups: int
    channels_last: bool
    input_grad: bool = True  # whether the backward computes the input's gradient (not for a first layer)

    def key(self) -> Hashable:
        return (tuple(self.input), tuple(self.weight), tuple(self.stride), tuple(self.padding),
                tuple(self.dilation), self.groups, self.channels_last)


@dataclass
class ConvTiming(DtypeTimes):
    """One convolution (forward, and backward when training) per dtype, in µs."""

    shape: ConvShape
    training: bool
    us: dict[str, float] = field(default_factory=dict)

    def key(self) -> Hashable:
        return self.shape.key()

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self.shape), "training": self.training, "us": dict(self.us)}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "ConvTiming":
        ints = lambda k: [int(x) for x in d[k]]  # noqa: E731
        shape = ConvShape(ints("input"), ints("weight"), ints("stride"), ints("padding"), ints("dilation"),
                          int(d["groups"]), bool(d["channels_last"]), bool(d.get("input_grad", True)))
        return ConvTiming(shape, bool(d["training"]), dtype_timing.us_from_dict(d))


# Where each convolution op's arguments sit (its profiled inputs): (input, weight, stride, padding,
# dilation, groups[, transposed]). Transposed convolutions are left out.
_ARGS = {
    "aten::cudnn_convolution": (0, 1, 3, 2, 4, 5, None),
    "aten::miopen_convolution": (0, 1, 4, 3, 5, 6, None),
    "aten::convolution": (0, 1, 3, 4, 5, 8, 6),
    "aten::_convolution": (0, 1, 3, 4, 5, 8, 6),
    "aten::convolution_backward": (1, 2, 4, 5, 6, 9, 7),
}
_OUTPUT_MASK = 10  # convolution_backward's argument saying which gradients it computes
# The library settings a forward op recorded: (benchmark, allow_tf32) argument positions.
_SETTINGS = {"aten::cudnn_convolution": (6, 8), "aten::_convolution": (9, 12)}


# A kernel of a convolution op whose arguments were not all recorded: timed by no shape of its own.
_UNRECORDED = ()


def _shape_of(record: KernelRecord) -> ConvShape | tuple[()] | None:
    """The convolution a kernel belongs to; :data:`_UNRECORDED` for a convolution whose arguments were not
    all recorded; None for a kernel of no (2-d, not transposed) convolution op. Its input_grad is left at
    the default (:func:`conv_shapes` reads it off the backward kernels)."""
    at = _ARGS.get(record.op or "")
    if at is None:
        return None
    shapes, concrete = record.input_shapes, record.concrete_inputs
    try:
        x, w = shapes[at[0]], shapes[at[1]]
        stride, padding, dilation = (dtype_timing.concrete_ints(concrete[i]) for i in at[2:5])
        groups = dtype_timing.concrete_ints(concrete[at[5]])
        transposed = str(concrete[at[6]]) == "True" if at[6] is not None else False
        strides = record.input_strides[at[0]]
    except (IndexError, TypeError):
        return _UNRECORDED
    if transposed:
        return None
    if not (isinstance(x, list) and len(x) == 4 and isinstance(w, list) and len(w) == 4 and all(
            isinstance(v, int) and v > 0 for v in (*x, *w)) and stride and padding and dilation and groups):
        return _UNRECORDED
    last = dtype_timing.channels_last(x, strides)
    two = lambda v: list(v * 2 if len(v) == 1 else v)  # noqa: E731 - one value stands for both dims
    return ConvShape(list(x), list(w), two(stride), two(padding), two(dilation), groups[0], last)


def conv_key(record: KernelRecord) -> Hashable | None:
    """The convolution a kernel belongs to, as :meth:`ConvShape.key` spells it; () for a convolution whose
    arguments were not all recorded; None for a kernel of no (2-d, not transposed) convolution op."""
    shape = _shape_of(record)
    return shape.key() if isinstance(shape, ConvShape) else shape


def _input_grad(record: KernelRecord) -> bool | None:
    """A backward convolution's output mask, first entry: whether it computes its input's gradient."""
    if record.op != "aten::convolution_backward" or len(record.concrete_inputs) <= _OUTPUT_MASK:
        return None
    mask = str(record.concrete_inputs[_OUTPUT_MASK]).strip("[] ").split(",")
    return mask[0].strip() == "True" if mask and mask[0].strip() else None


def _library_settings(records: Sequence[KernelRecord]) -> tuple[bool, bool] | None:
    """(algorithm search, TF32) as the step's forward convolutions recorded them, where they did."""
    for r in records:
        at = _SETTINGS.get(r.op or "")
        if at is not None and len(r.concrete_inputs) > max(at):
            return str(r.concrete_inputs[at[0]]) == "True", str(r.concrete_inputs[at[1]]) == "True"
    return None


def conv_shapes(records: Sequence[KernelRecord]) -> list[ConvShape]:
    """Each convolution the step runs, most time (forward and backward) first."""
    spent: dict[Hashable, float] = {}
    shapes: dict[Hashable, ConvShape] = {}
    grads: dict[Hashable, bool] = {}
    for r in records:
        shape = _shape_of(r)
        if not isinstance(shape, ConvShape):
            continue
        key = shape.key()
        shapes.setdefault(key, shape)
        spent[key] = spent.get(key, 0.0) + r.duration_us
        wants = _input_grad(r)
        if wants is not None:
            grads[key] = grads.get(key, False) or wants
    return [dataclasses.replace(shapes[key], input_grad=grads.get(key, True))
            for key, _ in sorted(spent.items(), key=lambda kv: -kv[1])]


def ratios(timings: Sequence[ConvTiming], to: str, frm: str) -> Callable[[KernelRecord], float | None]:
    """Time in dtype `to` over time in `frm` for a convolution kernel (None for other kernels): its own
    shape's timing, else the ratio of all timed shapes' times together; None where neither was measured."""
    return dtype_timing.ratios(timings, conv_key, to, frm)


def time_step_convs(records: Sequence[KernelRecord], training: bool, device: torch.device | str,
                    samples: int = 20, dtypes: Sequence[str] = dtype_timing.KEYS,
                    scale: float = 1.0, layout: str = "") -> list[ConvTiming]:
    """:func:`time_conv` of each of the step's convolution shapes (the :data:`MAX_SHAPES` it spends most time
    in), with the library settings the step ran them with."""
    settings = _library_settings(records)
    restores = [] if settings is None else [torch_flags.set_attribute(torch.backends.cudnn, "benchmark", settings[0]),
                                            torch_flags.set_cudnn_tf32(settings[1])]
    try:
        return [time_conv(shape, training, device, samples, dtypes, scale, layout)
                for shape in conv_shapes(records)[:MAX_SHAPES]]
    finally:
        for restore in reversed(restores):
            restore()


def step_dtype(records: Sequence[KernelRecord]) -> str | None:
    """The dtype the step's convolutions run in (their forward's input)."""
    return dtype_timing.step_dtype([r for r in records if r.phase == "forward" and _shape_of(r) is not None])


def time_conv(shape: ConvShape, training: bool, device: torch.device | str, samples: int = 20,
              dtypes: Sequence[str] = dtype_timing.KEYS, scale: float = 1.0, layout: str = "") -> ConvTiming:
    """Median µs of F.conv2d on random non-zero input and weights of `shape` (its batch times `scale`; in its
    own layout, or NHWC where `layout` says) in each of `dtypes`, forward and backward when `training` (the
    weight's gradient, and the input's where the step computes it; the backward timed in turn with the forward
    and alone, the faster kept: :func:`dtype_timing.fastest_phases`), keyed by :func:`dtype_timing.variant`; a
    dtype whose outputs are off the fp32 reference (run without TF32) by more than its tolerance is left out."""
    device = torch.device(device)
    fmt = torch.channels_last if shape.channels_last or layout == dtype_timing.NHWC else torch.contiguous_format
    generator = torch.Generator(device=device).manual_seed(0)
    images = [max(1, round(shape.input[0] * scale)), *shape.input[1:]]
    base = (torch.rand(*images, device=device, generator=generator) + 0.5).contiguous(memory_format=fmt)
    fan_in = math.prod(shape.weight[1:])
    weight = ((torch.rand(*shape.weight, device=device, generator=generator) - 0.5) / math.sqrt(fan_in)
              ).contiguous(memory_format=fmt)
    args = dict(stride=shape.stride, padding=shape.padding, dilation=shape.dilation, groups=shape.groups)
    grad_of_input = training and shape.input_grad
    grad = None

    def run_in(dtype: torch.dtype, forward_only: bool = False,
               apart: bool = False) -> Callable[[], dtype_timing.Outputs]:
        """The op in `dtype`; with `apart`, its backward alone on a graph kept from one forward."""
        nonlocal grad
        x = base.to(dtype, copy=True).requires_grad_(grad_of_input)
        w = weight.to(dtype, copy=True).requires_grad_(training)
        if training and grad is None:
            out_shape = torch.nn.functional.conv2d(x.detach(), w.detach(), **args).shape
            grad = (torch.rand(*out_shape, device=device, generator=generator) - 0.5).contiguous(memory_format=fmt)
        g = grad.to(dtype) if grad is not None else None
        wanted = (x, w) if grad_of_input else (w,)
        if not training or forward_only:
            return lambda: (torch.nn.functional.conv2d(x, w, **args), None, None)
        kept = torch.nn.functional.conv2d(x, w, **args) if apart else None

        def run() -> dtype_timing.Outputs:
            out = kept if kept is not None else torch.nn.functional.conv2d(x, w, **args)
            grads = torch.autograd.grad(out, wanted, g, retain_graph=kept is not None)
            return out, grads[-1], grads[0] if grad_of_input else None

        return run

    restore = torch_flags.set_cudnn_tf32(False)
    try:
        reference = dtype_timing.reference_outputs(lambda: run_in(torch.float32)())
    finally:
        restore()
    us = dtype_timing.time_in_dtypes(run_in, reference, TOLERANCE, device, samples, dtypes, scale, split=training,
                                     layout=layout)
    if training:  # the library's own pace: the faster of the backward run in turn with the forward, and alone
        us = dtype_timing.fastest_phases(us, dtype_timing.time_in_dtypes(
            functools.partial(run_in, apart=True), reference, TOLERANCE, device, samples, dtypes, scale,
            split=True, layout=layout, backward_apart=True))
    return ConvTiming(shape, training, us)
