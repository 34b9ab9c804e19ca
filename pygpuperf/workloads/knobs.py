"""Workload knobs: what a caller (or a CLI) may set on a workload, parsed, recorded and undone.

Each workload lists its knobs as :class:`KnobSpec` entries (``Workload.knob_specs()``), so a
command line can expose them with their choices and help. ``build(device, batch_size, **knobs)``
takes them by name, as typed values or as the strings a command line passes ("on", "bf16").
Knobs that set torch's process-wide flags (cudnn.benchmark, TF32, fp16 accumulation) are
undone by :func:`set_global_flags`'s restore function, which ``BuiltWorkload.close()`` runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from pygpuperf.core import torch_flags
from pygpuperf.core.errors import UsageError

_TRUE = ("on", "true", "yes", "1")
_FALSE = ("off", "false", "no", "0")


class KnobError(UsageError, ValueError):
    """An unknown knob or a value it does not take; the message is one line that names the fix."""


@dataclass(frozen=True)
class KnobSpec:
    """One knob: its name, what it takes and what it does.

    kind is "bool", "int" or "choice". A default of None means "the workload's own
    choice" (batch size, AMP) or "leave torch's setting as it is" (global flags).
    """

    name: str
    kind: str
    help: str
    choices: tuple[str, ...] = ()
    default: Any = None
    aliases: tuple[tuple[str, str], ...] = ()  # (alias, choice) pairs accepted on input
    minimum: int = 1  # for kind "int"
    multiple_of: int = 1  # for kind "int"

    def parse(self, value: Any) -> Any:
        """The knob's value from a typed value or a command-line string; KnobError says what it takes."""
        if value is None:
            return None
        if self.kind == "bool":
            return self._parse_bool(value)
        if self.kind == "int":
            return self._parse_int(value)
        return self._parse_choice(value)

    def _parse_bool(self, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise KnobError(f"{self.name}={value!r}: use on or off")

    def _parse_int(self, value: Any) -> int:
        if isinstance(value, bool):
            raise KnobError(f"{self.name}={value!r}: use an integer of at least {self.minimum}")
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise KnobError(f"{self.name}={value!r}: use an integer of at least {self.minimum}") from None
        if number != value and not isinstance(value, str):
            raise KnobError(f"{self.name}={value!r}: use an integer of at least {self.minimum}")
        if number < self.minimum:
            raise KnobError(f"{self.name}={number}: use an integer of at least {self.minimum}")
        if number % self.multiple_of:
            raise KnobError(f"{self.name}={number}: use a multiple of {self.multiple_of}")
        return number

    def _parse_choice(self, value: Any) -> str:
        if isinstance(value, bool):
            text = "on" if value else "off"
        else:
            text = str(value).strip().lower()
        text = dict(self.aliases).get(text, text)
        if text not in self.choices:
            raise KnobError(f"{self.name}={value!r}: choose one of {', '.join(self.choices)}")
        return text


BATCH_SIZE = KnobSpec("batch_size", "int", "samples per step (default: the workload's, by device type)")
AMP = KnobSpec(
    "amp",
    "choice",
    "autocast dtype: fp16 (with loss scaling), bf16, none (fp32), or auto: fp16 on cuda, bf16 elsewhere",
    choices=("fp16", "bf16", "none", "auto"),
    aliases=(("float16", "fp16"), ("half", "fp16"), ("bfloat16", "bf16"), ("fp32", "none"), ("off", "none")),
)
MEMORY_FORMAT = KnobSpec(
    "memory_format",
    "choice",
    "layout of images and conv weights (default: channels_last on cuda, nchw elsewhere)",
    choices=("channels_last", "nchw"),
    aliases=(("nhwc", "channels_last"), ("contiguous", "nchw")),
)
TF32 = KnobSpec(
    "tf32", "bool", "TF32 for fp32 matmuls and convolutions (torch.backends.cuda.matmul and cudnn allow_tf32); "
    "default: leave torch's settings"
)
CUDNN_BENCHMARK = KnobSpec(
    "cudnn_benchmark", "bool", "torch.backends.cudnn.benchmark: time cuDNN's algorithms once per shape and keep "
    "the fastest; default: leave torch's setting"
)
FP16_ACCUMULATION = KnobSpec(
    "fp16_accumulation", "bool", "torch.backends.cuda.matmul.allow_fp16_accumulation: fp16 matmuls accumulate "
    "in fp16 (cuBLAS only); default: leave torch's setting"
)
COMPILE = KnobSpec(
    "compile",
    "choice",
    "torch.compile the model: off, on (inductor), max-autotune (inductor's max-autotune-no-cudagraphs mode: "
    "CUDA graphs are the cuda_graphs knob's), or the aot_eager / eager backends that check tracing without codegen",
    choices=("off", "inductor", "max-autotune", "aot_eager", "eager"),
    default="off",
    aliases=(("on", "inductor"), ("false", "off"), ("true", "inductor"), ("none", "off")),
)
CUDA_GRAPHS = KnobSpec(
    "cuda_graphs", "bool", "capture the whole step in one CUDA graph and replay it (cuda only)", default=False
)

#: Knobs every model workload takes, in the order a CLI lists them.
COMMON_KNOBS: tuple[KnobSpec, ...] = (BATCH_SIZE, AMP, TF32, CUDNN_BENCHMARK, FP16_ACCUMULATION, COMPILE, CUDA_GRAPHS)
#: The ones that set torch's process-wide flags.
FLAG_KNOBS: tuple[KnobSpec, ...] = (TF32, CUDNN_BENCHMARK, FP16_ACCUMULATION)


def parse_knobs(workload_name: str, specs: tuple[KnobSpec, ...], knobs: Mapping[str, Any]) -> dict[str, Any]:
    """Every knob of `specs` by name, parsed; unset ones hold their spec default. Unknown names raise KnobError."""
    by_name = {spec.name: spec for spec in specs}
    unknown = sorted(set(knobs) - set(by_name))
    if unknown:
        valid = ", ".join(spec.name for spec in specs) or "none"
        raise KnobError(f"{workload_name} has no knob {', '.join(unknown)}; its knobs: {valid}")
    return {spec.name: spec.parse(knobs[spec.name]) if spec.name in knobs else spec.default for spec in specs}


def resolve_amp(amp: str | None, device: torch.device) -> str:
    """"fp16", "bf16" or "none"; auto is fp16 (with loss scaling) on cuda and bf16 elsewhere."""
    if amp in (None, "auto"):
        return "fp16" if device.type == "cuda" else "bf16"
    return amp


# --------------------------------------------------------------------------- global flags


def _on_off(flag: bool) -> str:
    return "on" if flag else "off"


def _matmul_tf32() -> bool:
    matmul = torch.backends.cuda.matmul
    try:
        return bool(matmul.allow_tf32)
    except RuntimeError:
        # torch >= 2.9 refuses the legacy read once the newer fp32_precision API was used.
        return matmul.fp32_precision == "tf32"


def _cudnn_tf32() -> bool:
    try:
        return bool(torch.backends.cudnn.allow_tf32)
    except RuntimeError:
        return torch.backends.cudnn.conv.fp32_precision == "tf32"


def tf32_state() -> dict[str, bool]:
    """Whether fp32 matmuls (cuBLAS) and convolutions (cuDNN) may run in TF32 now."""
    return {"matmul": _matmul_tf32(), "conv": _cudnn_tf32()}


def set_global_flags(
    tf32: bool | None = None, cudnn_benchmark: bool | None = None, fp16_accumulation: bool | None = None
) -> Callable[[], None]:
    """Set the torch flags given (None leaves one as it is); returns the function that restores them all."""
    restores: list[Callable[[], None]] = []

    def restore() -> None:
        while restores:
            restores.pop()()

    try:
        if cudnn_benchmark is not None:
            restores.append(torch_flags.set_attribute(torch.backends.cudnn, "benchmark", cudnn_benchmark))
        if tf32 is not None:
            restores.append(torch_flags.set_matmul_tf32(tf32))
            restores.append(torch_flags.set_cudnn_tf32(tf32))
        if fp16_accumulation is not None:
            if not torch_flags.has_fp16_accumulation_flag():
                raise KnobError(
                    f"fp16_accumulation: torch {torch.__version__} has no "
                    "torch.backends.cuda.matmul.allow_fp16_accumulation; drop the knob or upgrade torch"
                )
            restores.append(torch_flags.set_attribute(torch.backends.cuda.matmul, "allow_fp16_accumulation", fp16_accumulation))
    except BaseException:
        restore()
        raise
    return restore


def flag_params(knobs: Mapping[str, Any], device: torch.device) -> dict[str, str]:
    """The flags in effect, as params: "on"/"off" where a knob set them, "... (torch setting)" where none did.
    None on a CPU: TF32, cuDNN and cuBLAS accumulation do not touch its math."""
    if device.type == "cpu":
        return {}
    tf32 = tf32_state()
    params: dict[str, str] = {}
    if knobs.get("tf32") is not None:
        params["tf32"] = _on_off(knobs["tf32"])
    else:
        params["tf32"] = f"matmul {_on_off(tf32['matmul'])}, conv {_on_off(tf32['conv'])} (torch setting)"
    benchmark = _on_off(torch.backends.cudnn.benchmark)
    by_knob = knobs.get("cudnn_benchmark") is not None
    params["cudnn_benchmark"] = benchmark if by_knob else f"{benchmark} (torch setting)"
    if torch_flags.has_fp16_accumulation_flag():
        accumulation = _on_off(torch.backends.cuda.matmul.allow_fp16_accumulation)
        set_by_knob = knobs.get("fp16_accumulation") is not None
        params["fp16_accumulation"] = accumulation if set_by_knob else f"{accumulation} (torch setting)"
    return params


def precision_label(device: torch.device, amp: str, dominant_op: str) -> str:
    """The precision a workload runs at, as params["precision"]: "fp16-amp", "bf16-amp", "tf32" or "fp32".

    Without autocast the math is fp32, or TF32 where the workload's dominant op
    ("conv" or "matmul") may use it: NVIDIA GPUs from Ampere on, with the flag on.
    """
    if amp in ("fp16", "bf16"):
        return f"{amp}-amp"
    tf32_capable = (
        device.type == "cuda"
        and torch.version.hip is None
        and torch.cuda.is_available()
        and torch.cuda.get_device_capability(device) >= (8, 0)
    )
    return "tf32" if tf32_capable and tf32_state()[dominant_op] else "fp32"


def flag_state() -> dict[str, bool]:
    """The process-wide torch flags the knobs set, as they are now (to check that a run put them back)."""
    state = {"matmul_tf32": _matmul_tf32(), "cudnn_tf32": _cudnn_tf32(),
             "cudnn_benchmark": bool(torch.backends.cudnn.benchmark)}
    if torch_flags.has_fp16_accumulation_flag():
        state["fp16_accumulation"] = bool(torch.backends.cuda.matmul.allow_fp16_accumulation)
    return state


def restore_flag_state(state: dict[str, bool]) -> None:
    """Set the flags back to a :func:`flag_state` snapshot."""
    if flag_state().get("matmul_tf32") != state.get("matmul_tf32"):
        torch_flags.set_matmul_tf32(state["matmul_tf32"])
    if flag_state().get("cudnn_tf32") != state.get("cudnn_tf32"):
        torch_flags.set_cudnn_tf32(state["cudnn_tf32"])
    torch.backends.cudnn.benchmark = state["cudnn_benchmark"]
    if "fp16_accumulation" in state:
        torch.backends.cuda.matmul.allow_fp16_accumulation = state["fp16_accumulation"]
