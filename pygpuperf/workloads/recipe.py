"""What every model workload shares: knobs applied, the step assembled (eager, compiled or
captured in a CUDA graph), the batch halved until it fits, and the settings recorded.

A workload describes one step as a :class:`StepRecipe`: a body that runs the step with the
gradients already cleared, the optimizers whose gradients are cleared before it, and the
params it records. :class:`ModelWorkload` turns that into a :class:`BuiltWorkload`.
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Sequence

import torch

from pygpuperf.core.timing import synchronize
from pygpuperf.workloads.base import BuiltWorkload, Workload
from pygpuperf.workloads.knobs import (
    BATCH_SIZE,
    COMMON_KNOBS,
    MEMORY_FORMAT,
    KnobError,
    KnobSpec,
    flag_params,
    parse_knobs,
    precision_label,
    resolve_amp,
    set_global_flags,
)

# torch >= 2.5 has the device-neutral name; older releases only the CUDA one.
_OUT_OF_MEMORY = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
# Eager steps before capture: allocations, cuDNN autotuning, optimizer and scaler state and
# compilation all happen here, none of which a graph may contain.
_CAPTURE_WARMUP_STEPS = 3


@dataclass(frozen=True)
class Settings:
    """The knobs of one build, parsed and resolved for the device."""

    knobs: dict[str, Any]  # every knob by name, parsed; None where left to the workload or torch
    amp: str  # "fp16", "bf16" or "none"
    memory_format: torch.memory_format  # torch.contiguous_format where the knob does not apply
    compile: str  # "off" or a COMPILE choice
    capture: bool  # the step is captured in a CUDA graph
    graph_waiver: str | None  # why cuda_graphs=on was not honoured

    def autocast(self, device: torch.device) -> ContextManager[Any]:
        """Autocast to the AMP dtype (a no-op context without AMP)."""
        if self.amp == "none":
            return contextlib.nullcontext()
        dtype = torch.float16 if self.amp == "fp16" else torch.bfloat16
        # A captured region must not keep autocast's cast cache across replays (torch's CUDA graph notes).
        return torch.autocast(device.type, dtype=dtype, cache_enabled=not self.capture)

    def optimizer_options(self, adam: bool) -> dict[str, Any]:
        """Keyword arguments for an optimizer the step captures: fused, so loss scaling needs no host sync;
        Adam-family ones also capturable (step counts on the device). torch's defaults otherwise."""
        if not self.capture:
            return {}
        return {"fused": True, "capturable": True} if adam else {"fused": True}

    def optimizer_label(self, name: str, arguments: str) -> str:
        """How params name the optimizer, e.g. "SGD(lr=0.01, momentum=0.9, fused)"."""
        return f"{name}({arguments}, fused)" if self.capture else f"{name}({arguments})"


class LossScaling:
    """fp16 loss scaling (torch.amp.GradScaler) where the step needs it; plain backward and step otherwise."""

    def __init__(self, device: torch.device, settings: Settings) -> None:
        self.scaler = torch.amp.GradScaler(device.type) if settings.amp == "fp16" else None

    def backward(self, loss: torch.Tensor) -> None:
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is not None:
            self.scaler.step(optimizer)
        else:
            optimizer.step()

    def update(self) -> None:
        if self.scaler is not None:
            self.scaler.update()

    def params(self, label: str = "torch.amp.GradScaler") -> dict[str, str]:
        """The step's loss_scaling parameter where it scales the loss; none otherwise."""
        return {"loss_scaling": label} if self.scaler is not None else {}


def compile_module(module: torch.nn.Module, settings: Settings) -> torch.nn.Module:
    """The module torch.compile'd as the compile knob asks, or the module itself."""
    if settings.compile == "off":
        return module
    if settings.compile == "max-autotune":
        return torch.compile(module, mode="max-autotune-no-cudagraphs")  # type: ignore[return-value]
    return torch.compile(module, backend=settings.compile)  # type: ignore[return-value]


@dataclass
class StepRecipe:
    """One step, as a workload describes it.

    body: the step with gradients already cleared, on the compiled model where compile is on.
    eager_body: the same step on the uncompiled model (what FLOPs and bytes are counted from).
    optimizers: whose gradients are set to None before each step (and once before capture).
    modules: the uncompiled models the step runs.
    """

    body: Callable[[], Any]
    eager_body: Callable[[], Any]
    optimizers: Sequence[torch.optim.Optimizer]
    samples_per_step: int
    params: dict[str, str]
    modules: tuple[torch.nn.Module, ...] = ()
    notes: list[str] = field(default_factory=list)


def _clear_gradients(optimizers: Sequence[torch.optim.Optimizer]) -> None:
    for optimizer in optimizers:
        optimizer.zero_grad(set_to_none=True)


def _capture(recipe: StepRecipe, device: torch.device) -> torch.cuda.CUDAGraph:
    """The whole step (forward, backward, loss scaling, optimizer) captured in one CUDA graph.

    Gradients are None before capture, so the graph allocates them in its own pool and each
    replay writes them afresh, as the eager step does after zero_grad(set_to_none=True).
    """

    def step() -> None:
        _clear_gradients(recipe.optimizers)
        recipe.body()

    with torch.cuda.device(device):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(_CAPTURE_WARMUP_STEPS):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        _clear_gradients(recipe.optimizers)
        with torch.cuda.graph(graph):
            recipe.body()
    return graph


def _quiet(step: Callable[[], Any]) -> Callable[[], Any]:
    """`step` with the warning capturable optimizers give once when they run outside a graph silenced."""

    def run() -> None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*capturable=True.*")
            step()

    return run


def assemble(recipe: StepRecipe, device: torch.device, settings: Settings) -> BuiltWorkload:
    """The BuiltWorkload of a recipe: eager, compiled or replaying its CUDA graph."""

    def eager_step() -> None:
        _clear_gradients(recipe.optimizers)
        recipe.eager_body()

    def body_step() -> None:
        _clear_gradients(recipe.optimizers)
        recipe.body()

    params = dict(recipe.params)
    notes = list(recipe.notes)
    step: Callable[[], Any] = body_step
    count: Callable[[], Any] | None = eager_step if settings.compile != "off" else None
    if settings.capture:
        graph = _capture(recipe, device)

        # The graph replays into the model's, optimizer's and data's memory: the default
        # argument keeps them alive as long as the step is.
        def replay(keep_alive: StepRecipe = recipe) -> None:
            graph.replay()

        step = replay
        count = _quiet(eager_step)
        params["cuda_graphs"] = "on (whole step in one graph)"
        notes.append("the timed step replays one CUDA graph of the whole step; FLOPs and bytes come from "
                     "the same step run eagerly")
    elif settings.graph_waiver is not None:
        params["cuda_graphs"] = f"waived: {settings.graph_waiver}"
        notes.append(f"cuda_graphs=on was waived ({settings.graph_waiver}): the step ran without a CUDA graph")
    else:
        params["cuda_graphs"] = "off"
    params["compile"] = settings.compile
    if settings.compile != "off":
        notes.append(f"the model is torch.compile'd ({settings.compile}); FLOPs and bytes are counted on the "
                     "uncompiled model running the same step")
    return BuiltWorkload(step=step, samples_per_step=recipe.samples_per_step, params=params, notes=notes,
                         count_step=count, modules=tuple(recipe.modules))


def release_device_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "xpu":
        torch.xpu.empty_cache()
    elif device.type == "mps":
        torch.mps.empty_cache()


class ModelWorkload(Workload):
    """A workload built from a model step, with the common knobs.

    Subclasses set name, description, default_batch (by device type, "other" for the rest),
    defaults (knob values of this registered name, e.g. {"amp": "bf16"}), dominant_op ("conv"
    or "matmul": the op whose TF32 flag decides the precision label) and convolutional (takes
    memory_format), and implement :meth:`recipe`.
    """

    default_batch: dict[str, int]
    defaults: dict[str, Any]
    dominant_op: str = "conv"
    convolutional: bool = True
    extra_knobs: tuple[KnobSpec, ...] = ()

    def __init__(self, name: str, description: str, default_batch: dict[str, int],
                 defaults: dict[str, Any] | None = None, extra_knobs: tuple[KnobSpec, ...] = ()) -> None:
        self.name = name
        self.description = description
        self.default_batch = default_batch  # by device type; "other" for the rest
        self.defaults = dict(defaults or {})
        self.extra_knobs = extra_knobs

    def knob_specs(self) -> tuple[KnobSpec, ...]:
        layout = (MEMORY_FORMAT,) if self.convolutional else ()
        return (*COMMON_KNOBS[:2], *layout, *COMMON_KNOBS[2:], *self.extra_knobs)

    def default_batch_for(self, device: torch.device) -> int:
        return self.default_batch.get(device.type, self.default_batch["other"])

    def graph_blocker(self, knobs: dict[str, Any]) -> str | None:
        """Why this step, at these knobs, cannot be captured in a CUDA graph (None: it can)."""
        return None

    @property
    def trains(self) -> bool:
        """Whether a step updates weights (an optimizer step, loss scaling under fp16 AMP)."""
        return bool(getattr(self, "training", True))

    @abstractmethod
    def recipe(self, device: torch.device, batch: int, settings: Settings) -> StepRecipe:
        """Model, synthetic data and optimizer on `device` at batch size `batch`, as one step."""

    def settings(self, device: torch.device, knobs: dict[str, Any]) -> Settings:
        """Parse `knobs` over this workload's defaults; KnobError for unknown names and bad values."""
        given = {**self.defaults, **knobs}
        given.pop("batch_size", None)
        parsed = parse_knobs(self.name, self.knob_specs(), given)
        waiver = None
        if parsed["cuda_graphs"]:
            if device.type != "cuda":
                waiver = f"CUDA graphs need a CUDA device, not {device.type}"
            else:
                waiver = self.graph_blocker(parsed)
        if self.convolutional:
            layout = parsed["memory_format"] or ("channels_last" if device.type == "cuda" else "nchw")
            parsed["memory_format"] = layout
            memory_format = torch.channels_last if layout == "channels_last" else torch.contiguous_format
        else:
            memory_format = torch.contiguous_format
        amp = resolve_amp(parsed["amp"], device)
        parsed["amp"] = amp
        if parsed["cuda_graphs"] and waiver is None and amp == "fp16" and self.trains:
            # Measured on an H200 (torch 2.11): inside the captured step GradScaler's found-inf check skipped
            # every optimizer step, so the replays trained nothing and their time would flatter the step.
            waiver = ("fp16 loss scaling skipped every optimizer step inside a captured graph; "
                      "amp=bf16 needs no loss scaling and can be captured")
        return Settings(knobs=parsed, amp=amp, memory_format=memory_format, compile=parsed["compile"],
                        capture=bool(parsed["cuda_graphs"]) and waiver is None, graph_waiver=waiver)

    def build(self, device: torch.device, batch_size: int | None = None, **knobs: Any) -> BuiltWorkload:
        """Apply the knobs, then build; on accelerators, halve the batch until one step fits in memory.

        The global flags the knobs set stay set until the BuiltWorkload is closed.
        """
        device = torch.device(device)
        if "batch_size" in knobs:
            if batch_size is not None:
                raise KnobError("batch_size given twice: pass it once")
            batch_size = knobs.pop("batch_size")
        settings = self.settings(device, knobs)
        requested = self.default_batch_for(device) if batch_size is None else BATCH_SIZE.parse(batch_size)
        restore = set_global_flags(
            settings.knobs["tf32"], settings.knobs["cudnn_benchmark"], settings.knobs["fp16_accumulation"]
        )
        try:
            built, batch = self._build_fitting(device, requested, settings)
        except BaseException:
            restore()
            raise
        built.on_close.insert(0, restore)  # last: after anything the recipe added
        built.params["workload"] = self.name
        built.params["batch_size_requested"] = str(requested)
        built.params["amp"] = settings.amp
        built.params["precision"] = precision_label(device, settings.amp, self.dominant_op)
        if self.convolutional:
            built.params["memory_format"] = settings.knobs["memory_format"]
        built.params.update(flag_params(settings.knobs, device))
        if batch != requested:
            built.notes.append(f"batch size halved from {requested} to {batch}: the requested batch ran out of memory")
        if built.params["precision"] == "tf32":
            built.notes.append(f"fp32 model; its {'convolutions' if self.dominant_op == 'conv' else 'matmuls'} "
                               "run in TF32 (torch's allow_tf32 flag is on)")
        elif settings.knobs["tf32"] and device.type != "cuda":
            built.notes.append(f"tf32=on has no effect on {device.type}: TF32 is an NVIDIA tensor-core format")
        return built

    def _build_fitting(self, device: torch.device, requested: int, settings: Settings) -> tuple[BuiltWorkload, int]:
        batch = requested
        while True:
            try:
                return self._build_at(device, batch, settings), batch
            except _OUT_OF_MEMORY:
                if batch == 1 or device.type == "cpu":
                    raise
            # Outside the except block, so the traceback's frames (and their tensors) are gone.
            release_device_memory(device)
            batch //= 2

    def _build_at(self, device: torch.device, batch: int, settings: Settings) -> BuiltWorkload:
        torch.manual_seed(0)
        built = assemble(self.recipe(device, batch, settings), device, settings)
        if device.type != "cpu":
            # One trial step surfaces an out-of-memory error now, at this batch size.
            built.step()
            synchronize(device)
        return built
