"""Profile training steps and turn the profiler's trace into per-step kernel records.

`capture_step` runs a step function under torch.profiler and exports the chrome trace;
`steps_from_chrome_trace` reads it back. The chrome trace is the most version-stable view
the profiler offers: its event categories (cpu_op, user_annotation, cuda_runtime,
cuda_driver, kernel, gpu_memcpy, gpu_memset) and args (correlation, External id, Input
Dims, Input type, Input Strides, stream, Sequence number) have kept their names across
torch releases, while the Python event objects have not.

How a kernel is placed:
- launch: the cudaLaunchKernel / cuLaunchKernel runtime event with the kernel's
  correlation id gives the host launch time and, by time nesting on its thread, the ops,
  module ranges and phase ranges around the launch (without such an event, the kernel's
  External id names its op and the launch time stays unknown);
- op: the innermost operator event enclosing the launch (its shapes and dtypes come from
  record_shapes);
- module: the innermost `module::<path>` range, pushed by forward hooks on the model's
  submodules; kernels of backward nodes take the module of the forward op with the same
  autograd sequence number;
- phase: backward under "autograd::engine::evaluate_function" ranges, optimizer under
  "Optimizer.step#..." / "Optimizer.zero_grad#..." ranges (torch optimizers emit them),
  forward under a module range or between the first module call and the first backward
  node of the step, other otherwise.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from pygpuperf.core import timing
from pygpuperf.explain.accesses import AccessTraceMode, call_of
from pygpuperf.explain.classify import KernelContext, MathSettings, classify
from pygpuperf.explain.model import CallAccesses, KernelRecord
from pygpuperf.core.vocabulary import KernelClass

STEP_RANGE = "pygpuperf::step"
MODULE_PREFIX = "module::"

_BACKWARD_PREFIX = "autograd::engine::evaluate_function"
_OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
_PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
# Host calls that block until the device (or one stream of it) drains.
_SYNC_CALLS = re.compile(
    r"^(?:cuda(?:Device|Stream|Event|Ctx|Thread)Synchronize|cudaMemcpy(?:2D|3D)?(?:ToSymbol|FromSymbol)?"
    r"|cu(?:Ctx|Stream|Event)Synchronize(?:_v2)?|cuMemcpy(?:[DH]to[DH])?(?:_v2)?"
    r"|hip(?:Device|Stream|Event)Synchronize|hipMemcpy)$"
)
# Category spellings of older kineto releases, mapped to the current ones.
_CATEGORY_ALIASES = {
    "operator": "cpu_op",
    "runtime": "cuda_runtime",
    "driver": "cuda_driver",
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
    "concurrent_kernel": "kernel",
}
_DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
_LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
_HOST_CATEGORIES = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")
# The profiler prints c10 type names; records carry torch's dtype names.
_DTYPES = {
    "float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
    "c10::Float8_e4m3fn": "float8_e4m3fn", "c10::Float8_e5m2": "float8_e5m2",
    "c10::Float8_e4m3fnuz": "float8_e4m3fnuz", "c10::Float8_e5m2fnuz": "float8_e5m2fnuz",
    "c10::Float8_e8m0fnu": "float8_e8m0fnu", "long int": "int64", "int": "int32", "short int": "int16",
    "signed char": "int8", "unsigned char": "uint8", "bool": "bool",
    "c10::complex<float>": "complex64", "c10::complex<double>": "complex128", "c10::complex<c10::Half>": "complex32",
}  # fmt: skip
# Nesting tolerance: the export truncates to the nanosecond, so a child may overhang its parent
# by a few; nothing on a host thread happens within 10 ns.
_EPS_US = 0.01


@dataclass
class HostOp:
    """One operator event on a host thread inside a step."""

    name: str
    start_us: float
    duration_us: float
    thread: int
    module: str = ""
    phase: str = "other"
    input_shapes: list[Any] = field(default_factory=list)  # per input; a TensorList is a list of shapes
    dtypes: list[str] = field(default_factory=list)  # torch dtype names; non-tensors as the profiler says
    input_strides: list[Any] = field(default_factory=list)
    concrete_inputs: list[Any] = field(default_factory=list)  # non-tensor argument values, as strings
    sequence: int | None = None  # autograd sequence number: links a forward op to its backward node
    top_level: bool = True  # no operator encloses it (nested ops are listed as well)
    external_id: int | None = None  # the profiler's id of this op call

    @property
    def end_us(self) -> float:
        return self.start_us + self.duration_us


@dataclass
class StepTrace:
    """One profiled step: its device-clock window, kernels, host ops and host syncs.

    The window runs from the end of the previous step's window to whichever comes later:
    the next step's host start (the GPU waited on the host between steps) or this step's
    last kernel end (the GPU was still working when the host moved on). Windows of
    consecutive steps tile the profiled time, so idle time is counted once.
    """

    index: int
    start_us: float
    end_us: float
    host_start_us: float  # the pygpuperf::step range on the host
    host_end_us: float
    kernels: list[KernelRecord] = field(default_factory=list)
    # The op call that launched each kernel (parallel to kernels; the same HostOp object for
    # kernels of one call, so a call's FLOPs can be shared among its kernels), None if unknown.
    kernel_ops: list[HostOp | None] = field(default_factory=list)
    ops: list[HostOp] = field(default_factory=list)
    syncs: list[tuple[float, float]] = field(default_factory=list)  # host calls that waited on the device
    # The traced op call (pygpuperf.explain.accesses) that launched each kernel, parallel to kernels: set in
    # a step run under AccessTraceMode, None elsewhere.
    kernel_calls: list[int | None] = field(default_factory=list)

    @property
    def wall_us(self) -> float:
        return self.end_us - self.start_us


@dataclass
class CapturedSteps:
    device: str
    steps: list[StepTrace]
    settings: MathSettings
    trace_path: str | None = None  # where the chrome trace was kept, if asked to
    access_step: StepTrace | None = None  # one more step, run under AccessTraceMode (its kernel_calls set)
    calls: list[CallAccesses] = field(default_factory=list)  # that step's op calls and what each touched


@dataclass(slots=True)
class _Event:
    cat: str
    name: str
    ts: float
    dur: float
    pid: Any
    tid: Any
    args: dict[str, Any]
    parent: _Event | None = None

    @property
    def end(self) -> float:
        return self.ts + self.dur

    def ancestors(self) -> Iterator[_Event]:
        """This event, then each enclosing event on its thread, innermost first."""
        ev: _Event | None = self
        while ev is not None:
            yield ev
            ev = ev.parent


def _events(trace: dict[str, Any]) -> list[_Event]:
    out = []
    for raw in trace.get("traceEvents", []):
        if raw.get("ph") != "X" or "ts" not in raw:
            continue
        cat = str(raw.get("cat", "")).lower()
        cat = _CATEGORY_ALIASES.get(cat, cat)
        out.append(
            _Event(cat, str(raw.get("name", "")), float(raw["ts"]), float(raw.get("dur", 0.0)),
                   raw.get("pid"), raw.get("tid"), raw.get("args") or {})
        )  # fmt: skip
    return out


def _nest(host: list[_Event]) -> None:
    """Set each host event's parent: the innermost event on the same thread enclosing it."""
    order = {"user_annotation": 0, "cpu_op": 1, "cuda_runtime": 2, "cuda_driver": 2}
    threads: dict[tuple[Any, Any], list[_Event]] = {}
    for ev in host:
        threads.setdefault((ev.pid, ev.tid), []).append(ev)
    for events in threads.values():
        # Outer before inner: earlier start, then longer, then ranges before the ops they wrap.
        events.sort(key=lambda e: (e.ts, -e.dur, order.get(e.cat, 3)))
        stack: list[_Event] = []
        for ev in events:
            while stack and (stack[-1].end <= ev.ts or ev.end > stack[-1].end + _EPS_US):
                stack.pop()
            ev.parent = stack[-1] if stack else None
            stack.append(ev)


def _dtype(name: Any) -> str:
    return _DTYPES.get(name, name) if isinstance(name, str) else str(name)


def _input_shapes(args: dict[str, Any]) -> list[Any]:
    return list(args.get("Input Dims", args.get("Input dims", [])) or [])


def _layout_copy(op: _Event | None) -> bool:
    """A copy whose destination and source strides differ over the non-unit dims: a layout change."""
    if op is None or op.name not in ("aten::copy_", "aten::_copy_from"):
        return False
    dims, strides = _input_shapes(op.args), op.args.get("Input Strides") or []
    if len(dims) < 2 or len(strides) < 2 or dims[0] != dims[1]:
        return False
    dst, src = strides[0], strides[1]
    if not (isinstance(dst, list) and isinstance(src, list)) or not len(dst) == len(src) == len(dims[0]):
        return False
    if 0 in src:
        return False  # a broadcast source: a fill, not a layout change
    pairs = [(d, s) for n, d, s in zip(dims[0], dst, src) if n != 1]
    return any(d != s for d, s in pairs)


@dataclass
class _Step:
    index: int
    host: _Event
    fwd_start: float = 0.0
    bwd_start: float = 0.0


def _step_ranges(events: list[_Event]) -> list[_Event]:
    marks = [e for e in events if e.cat == "user_annotation" and e.name == STEP_RANGE]
    if not marks:
        marks = [e for e in events if e.cat == "user_annotation" and _PROFILER_STEP.match(e.name)]
    if not marks and events:
        # No step marks: the whole trace is one step.
        start, end = min(e.ts for e in events), max(e.end for e in events)
        marks = [_Event("user_annotation", STEP_RANGE, start, end - start, None, None, {})]
    return sorted(marks, key=lambda e: e.ts)


class _Locator:
    """Finds the step whose host range holds a time."""

    def __init__(self, steps: list[_Step]) -> None:
        self.steps = steps
        self.starts = [s.host.ts for s in steps]

    def __call__(self, t: float) -> _Step | None:
        i = bisect.bisect_right(self.starts, t + _EPS_US) - 1
        if i >= 0 and t <= self.steps[i].host.end + _EPS_US:
            return self.steps[i]
        return None


def _context(ev: _Event, step: _Step, seq_module: dict[int, str]) -> tuple[str, str, list[_Event]]:
    """(phase, module, enclosing operator events innermost first) of a host event."""
    phase = ""
    module: str | None = None
    ops: list[_Event] = []
    backward_node: _Event | None = None
    for anc in ev.ancestors():
        if anc.cat == "cpu_op":
            if anc.name.startswith(_BACKWARD_PREFIX):
                backward_node = backward_node or anc
                phase = phase or "backward"
            else:
                ops.append(anc)
        elif anc.cat == "user_annotation":
            if module is None and anc.name.startswith(MODULE_PREFIX):
                module = anc.name[len(MODULE_PREFIX) :]
            if not phase and anc.name.startswith(_OPTIMIZER_PREFIXES):
                phase = "optimizer"
    if phase == "backward" and backward_node is not None and module is None:
        seq = backward_node.args.get("Sequence number")
        module = seq_module.get(seq, "") if seq is not None else ""
    if not phase:
        in_window = step.fwd_start <= ev.ts < step.bwd_start
        phase = "forward" if module is not None or in_window else "other"
    return phase, module or "", ops


def steps_from_chrome_trace(
    trace: dict[str, Any], device_index: int | None = None, settings: MathSettings | None = None
) -> list[StepTrace]:
    """Parse a torch.profiler chrome trace into steps (one per `pygpuperf::step` range).

    Kernels are classified with `settings` (the math switches of the profiled run; torch's
    defaults when None). `device_index` keeps only that GPU's kernels when a trace holds several.
    """
    events = _events(trace)
    host = [e for e in events if e.cat in _HOST_CATEGORIES]
    _nest(host)
    steps = [_Step(i, mark) for i, mark in enumerate(_step_ranges(events))]
    if not steps:
        return []
    locate = _Locator(steps)

    # Forward window of each step: first module call to first backward node.
    firsts: dict[int, float] = {}
    backs: dict[int, float] = {}
    for ev in host:
        if ev.cat == "user_annotation" and ev.name.startswith(MODULE_PREFIX):
            if (step := locate(ev.ts)) is not None:
                firsts[step.index] = min(firsts.get(step.index, ev.ts), ev.ts)
        elif ev.cat == "cpu_op" and ev.name.startswith(_BACKWARD_PREFIX):
            if (step := locate(ev.ts)) is not None:
                backs[step.index] = min(backs.get(step.index, ev.ts), ev.ts)
    for step in steps:
        step.fwd_start = firsts.get(step.index, step.host.ts)
        step.bwd_start = backs.get(step.index, step.host.end + _EPS_US)

    # Module of each forward op by autograd sequence number, for its backward node.
    seq_module: dict[int, str] = {}
    for ev in sorted((e for e in host if e.cat == "cpu_op" and "Sequence number" in e.args), key=lambda e: e.ts):
        if ev.name.startswith(_BACKWARD_PREFIX):
            continue
        module = next((a.name[len(MODULE_PREFIX) :] for a in ev.ancestors()
                       if a.cat == "user_annotation" and a.name.startswith(MODULE_PREFIX)), None)  # fmt: skip
        if module is not None:
            seq_module.setdefault(ev.args["Sequence number"], module)

    out = [StepTrace(s.index, s.host.ts, s.host.end, s.host.ts, s.host.end) for s in steps]
    host_ops: dict[int, HostOp] = {}  # id(_Event) -> its HostOp
    for ev in host:
        if ev.cat != "cpu_op" or ev.name.startswith(_BACKWARD_PREFIX):
            continue
        step = locate(ev.ts)
        if step is None:
            continue
        phase, module, ops = _context(ev, step, seq_module)
        args = ev.args
        host_op = HostOp(
            name=ev.name, start_us=ev.ts, duration_us=ev.dur, thread=ev.tid, module=module, phase=phase,
            input_shapes=_input_shapes(args), dtypes=[_dtype(t) for t in args.get("Input type", [])],
            input_strides=list(args.get("Input Strides", []) or []),
            concrete_inputs=list(args.get("Concrete Inputs", []) or []), sequence=args.get("Sequence number"),
            top_level=len(ops) == 1, external_id=args.get("External id"),
        )  # fmt: skip
        host_ops[id(ev)] = host_op
        out[step.index].ops.append(host_op)
    for trace_step in out:
        trace_step.ops.sort(key=lambda o: o.start_us)

    launches = {e.args["correlation"]: e for e in host if e.cat in _LAUNCH_CATEGORIES and "correlation" in e.args}
    by_external = {e.args["External id"]: e for e in host if e.cat == "cpu_op" and "External id" in e.args}
    math = settings or MathSettings()
    for ev in sorted((e for e in events if e.cat in _DEVICE_CATEGORIES), key=lambda e: e.ts):
        args = ev.args
        if device_index is not None and args.get("device", device_index) != device_index:
            continue
        launch = launches.get(args.get("correlation"))
        anchor = launch or by_external.get(args.get("External id"))
        if anchor is None and args.get("correlation") is not None:
            # Launched before the trace began: a host running ahead of the device (no sync in the
            # step) queues kernels that execute inside the profiled window but belong to earlier steps.
            continue
        step = locate(anchor.ts if anchor is not None else ev.ts)
        if step is None:
            continue  # launched outside the profiled steps
        if anchor is not None:
            phase, module, ops = _context(anchor, step, seq_module)
        else:
            phase, module, ops = "other", "", []
        op = ops[0] if ops else None
        record = KernelRecord(
            name=ev.name,
            start_us=ev.ts,
            duration_us=ev.dur,
            stream=int(args.get("stream", ev.tid if isinstance(ev.tid, int) else 0)),
            launch_us=launch.ts if launch is not None else None,
            op=op.name if op else "",
            module=module,
            phase=phase,
            input_shapes=_input_shapes(op.args) if op else [],
            dtypes=[_dtype(t) for t in op.args.get("Input type", [])] if op else [],
            input_strides=list(op.args.get("Input Strides", []) or []) if op else [],
            concrete_inputs=list(op.args.get("Concrete Inputs", []) or []) if op else [],
            # The profiler numbers op calls ("External id"); a trace without numbers has one event per call.
            op_call_id=(op.args.get("External id", id(op)) if op else None),
        )
        stack = tuple(o.name for o in reversed(ops))
        context = KernelContext(op_stack=stack, layout_copy=_layout_copy(op), settings=math)
        record.kernel_class, record.precision = classify(record, context)
        out[step.index].kernels.append(record)
        out[step.index].kernel_ops.append(host_ops.get(id(op)) if op is not None else None)
        out[step.index].kernel_calls.append(_call(anchor))

    if not any(e.cat in _DEVICE_CATEGORIES for e in events):
        _host_op_records(host, locate, seq_module, out)
    _set_windows(out)
    for ev in host:
        if ev.cat in _LAUNCH_CATEGORIES and _SYNC_CALLS.match(ev.name):
            for trace_step in out:
                # Kept when the step's own code called it: the profiling loop's drain after the last step
                # waits on that step's kernels too, but holds no host of the step.
                if trace_step.host_start_us <= ev.ts < trace_step.host_end_us:
                    trace_step.syncs.append((ev.ts, ev.end))
    return out


class _CallMarks:
    """The pygpuperf::call#<i> ranges of each host thread, for the first one inside a host op."""

    def __init__(self, host: list[_Event]) -> None:
        self.by_thread: dict[tuple[Any, Any], list[_Event]] = {}
        for ev in host:
            if ev.cat == "user_annotation" and call_of([ev.name]) is not None:
                self.by_thread.setdefault((ev.pid, ev.tid), []).append(ev)
        for marks in self.by_thread.values():
            marks.sort(key=lambda e: e.ts)
        self.starts = {k: [e.ts for e in v] for k, v in self.by_thread.items()}

    def inside(self, ev: _Event) -> int | None:
        key = (ev.pid, ev.tid)
        marks = self.by_thread.get(key)
        if not marks:
            return None
        i = bisect.bisect_left(self.starts[key], ev.ts - _EPS_US)
        if i < len(marks) and marks[i].end <= ev.end + _EPS_US:
            return call_of([marks[i].name])
        return None


def _host_op_records(host: list[_Event], locate: _Locator, seq_module: dict[int, str], out: list[StepTrace]) -> None:
    """Records of a run with no device kernels (a CPU): each op the cost rules know, outermost first
    (an enclosed op with a rule is part of its caller's time), classified by what it computes. Time
    outside such ops is the framework's own work, which the timeline counts as host-bound."""
    from pygpuperf.explain import costs

    marks = _CallMarks(host)
    unruled = _unruled_ops(host)
    for ev in host:
        if ev.cat != "cpu_op" or ev.name.startswith(_BACKWARD_PREFIX) or not (
                costs.has_rule(ev.name) or id(ev) in unruled):
            continue
        step = locate(ev.ts)
        if step is None:
            continue
        phase, module, ops = _context(ev, step, seq_module)
        if any(costs.has_rule(o.name) or id(o) in unruled for o in ops[1:]):
            continue
        args = ev.args
        record = KernelRecord(
            name=ev.name, start_us=ev.ts, duration_us=ev.dur, stream=int(ev.tid) if isinstance(ev.tid, int) else 0,
            launch_us=ev.ts, op=ev.name, module=module, phase=phase, input_shapes=_input_shapes(args),
            dtypes=[_dtype(t) for t in args.get("Input type", [])],
            input_strides=list(args.get("Input Strides", []) or []),
            concrete_inputs=list(args.get("Concrete Inputs", []) or []), op_call_id=args.get("External id", id(ev)),
        )
        record.kernel_class = (KernelClass.OTHER if id(ev) in unruled else KernelClass.VECTOR_MATH if costs.is_math_op(ev.name)
                               else KernelClass.MEMORY_BOUND)
        out[step.index].kernels.append(record)
        out[step.index].kernel_ops.append(None)
        # An op with a cost rule may be composite (aten::linear): the traced call it ran is inside it.
        call = _call(ev)
        out[step.index].kernel_calls.append(call if call is not None else marks.inside(ev))


def _unruled_ops(host: list[_Event]) -> set[int]:
    """Outermost aten ops with no cost rule that spend most of their time outside ops with one (a CPU LSTM
    kernel, a sort): recorded as ops of their own with no bound, so their time counts against coverage
    instead of passing for the framework's own work between ops."""
    from pygpuperf.explain import costs

    ruled_inside: dict[int, float] = {}
    for ev in host:
        if ev.cat != "cpu_op" or not costs.has_rule(ev.name):
            continue
        above = [a for a in list(ev.ancestors())[1:] if a.cat == "cpu_op"]
        if any(costs.has_rule(a.name) for a in above):
            continue  # inside a ruled op: its caller's time
        for a in above:
            ruled_inside[id(a)] = ruled_inside.get(id(a), 0.0) + ev.dur
    chosen: set[int] = set()
    for ev in sorted(host, key=lambda e: (e.ts, -e.dur)):
        if ev.cat != "cpu_op" or not ev.name.startswith("aten::") or costs.has_rule(ev.name) or ev.dur <= 0:
            continue
        above = [a for a in list(ev.ancestors())[1:] if a.cat == "cpu_op"]
        if any(id(a) in chosen or costs.has_rule(a.name) for a in above):
            continue
        if ruled_inside.get(id(ev), 0.0) < 0.5 * ev.dur:
            chosen.add(id(ev))
    return chosen


def _call(ev: _Event | None) -> int | None:
    """The traced call (a pygpuperf::call#<i> range) around a launch or host op, if any."""
    if ev is None:
        return None
    return call_of(a.name for a in ev.ancestors() if a.cat == "user_annotation")


def _set_windows(steps: list[StepTrace]) -> None:
    """Tile the device timeline: each window ends at the later of the next step's host start
    and this step's last kernel end (see StepTrace)."""
    for i, step in enumerate(steps):
        last_kernel = max((k.end_us for k in step.kernels), default=None)
        step.start_us = steps[i - 1].end_us if i else step.host_start_us
        boundary = steps[i + 1].host_start_us if i + 1 < len(steps) else step.host_end_us
        step.end_us = max(boundary, last_kernel) if last_kernel is not None else boundary
        step.end_us = max(step.end_us, step.start_us)


def kernels_from_chrome_trace(trace: dict[str, Any], device_index: int | None = None,
                              settings: MathSettings | None = None) -> list[list[KernelRecord]]:  # fmt: skip
    """Kernel records of each step of a chrome trace (see steps_from_chrome_trace)."""
    return [step.kernels for step in steps_from_chrome_trace(trace, device_index, settings)]


@contextmanager
def module_ranges(model: Any) -> Iterator[None]:
    """Wrap every submodule's forward in a `module::<path>` profiler range (root: `module::`).

    Forward hooks rather than the profiler's with_modules (TorchScript only) or with_stack
    (Python frames, costly and named by class, not by path).
    """
    from torch.autograd.profiler import record_function

    open_ranges: dict[int, list[Any]] = {}
    handles = []

    def enter(path: str) -> Callable[..., None]:
        def hook(module: Any, args: Any) -> None:
            rf = record_function(MODULE_PREFIX + path)
            rf.__enter__()
            open_ranges.setdefault(id(module), []).append(rf)

        return hook

    def leave(module: Any, args: Any, output: Any) -> None:
        stack = open_ranges.get(id(module))
        if stack:
            stack.pop().__exit__(None, None, None)

    for path, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(enter(path)))
        handles.append(module.register_forward_hook(leave, always_call=True))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _synchronize(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def capture_step(
    step_fn: Callable[[], Any],
    device: Any,
    steps: int = 3,
    warmup: int = 2,
    model: Any = None,
    trace_path: str | None = None,
    accesses: bool = False,
    resident: Callable[[], set[int]] | None = None,
) -> CapturedSteps:
    """Run `step_fn` `warmup` times, then profile `steps` steps and return their records.

    Under the profiler the function runs steps + 2 more times: one profiler warm-up step
    (kineto's schedule warm-up, which keeps tracer start-up out of the data) and one lead-in
    step whose only role is to give the first reported step a steady-state start (the GPU
    still busy with the previous step, as in training). `model`, when given, gets module
    ranges (see module_ranges). `trace_path` keeps the chrome trace there. `accesses` profiles one
    more step under :class:`~pygpuperf.explain.accesses.AccessTraceMode` (what each op call reads and
    writes; `resident` names the storages that do not grow with the batch).
    """
    import torch
    from torch.autograd.profiler import record_function
    from torch.profiler import ProfilerActivity, profile, schedule

    device = torch.device(device)
    on_gpu = device.type == "cuda"
    if not on_gpu:
        # kineto prints tracer start/stop lines and, on a CUDA build of torch with no GPU, a device-count
        # "ERROR" that says nothing about a CPU step; its GPU diagnostics stay on where a GPU is traced.
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    for _ in range(warmup):
        step_fn()
    _synchronize(device)
    settings = MathSettings.current()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    active = steps + 1
    timing.traced()  # whatever is timed after this trace releases the tracing library first
    with module_ranges(model) if model is not None else nullcontext():
        with profile(
            activities=activities,
            record_shapes=True,
            schedule=schedule(wait=0, warmup=1, active=active, repeat=1),
        ) as prof:
            for i in range(1 + active):
                with record_function(STEP_RANGE):
                    step_fn()
                if i == active:
                    _synchronize(device)  # every kernel of the last step ends inside the trace
                prof.step()
    trace = timing.chrome_trace(prof, trace_path)
    index = (device.index if device.index is not None else torch.cuda.current_device()) if on_gpu else None
    parsed = steps_from_chrome_trace(trace, device_index=index, settings=settings)
    reported = parsed[1:]  # the lead-in step only sets the first reported step's start
    for i, step in enumerate(reported):
        step.index = i
    captured = CapturedSteps(device=str(device), steps=reported, settings=settings, trace_path=trace_path)
    if accesses:
        captured.access_step, captured.calls = _access_step(step_fn, device, activities, index, settings, resident)
    return captured


def _access_step(step_fn: Callable[[], Any], device: Any, activities: list[Any], index: int | None,
                 settings: MathSettings, resident: Callable[[], set[int]] | None
                 ) -> tuple[StepTrace | None, list[CallAccesses]]:
    """One step under AccessTraceMode and the profiler: its kernels tied to the calls that launched them."""
    from torch.autograd.profiler import record_function
    from torch.profiler import profile

    mode = AccessTraceMode(resident, mark=True)
    with profile(activities=activities, record_shapes=False) as prof:
        with record_function(STEP_RANGE), mode:
            step_fn()
        _synchronize(device)
    steps = steps_from_chrome_trace(timing.chrome_trace(prof), device_index=index, settings=settings)
    calls = mode.finish()
    return (steps[0] if steps else None), calls
