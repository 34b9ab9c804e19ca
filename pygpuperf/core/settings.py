"""A workload's settings as its params record them ("on (whole step in one graph)", "matmul off, conv on (torch
setting)", "256"), parsed once into typed fields: the one reader of those strings.

Params stay strings in documents (they say why a setting has its value); what the analysis decides by is read
here, so a new spelling is taught in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

_ON = ("on", "true", "1", "yes")
_OFF = ("off", "false", "0", "no")


def switch(value: Any) -> bool | None:
    """An on/off setting: its first word ("on (torch setting)" is on); None when absent or neither."""
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower().split(" ", 1)[0].rstrip(",")
    return True if word in _ON else False if word in _OFF else None


def _text(value: Any) -> str | None:
    text = str(value).strip().lower() if value is not None else ""
    return text or None


def _count(value: Any) -> int | None:
    try:
        return int(value) if value not in (None, "") and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class StepSettings:
    """What a step ran with, as far as its params say (None: not said)."""

    batch_size: int | None = None
    batch_size_requested: int | None = None  # where the workload ran another batch than was asked for
    amp: str | None = None  # "none", "fp16", "bf16"
    tf32_matmul: bool | None = None
    tf32_conv: bool | None = None
    cudnn_benchmark: bool | None = None
    memory_format: str | None = None  # "channels_last", "nchw", ...
    cuda_graphs: bool | None = None  # True: the whole step runs as one graph
    compile: str | None = None  # None or "off": eager; else how it was compiled
    params: Mapping[str, Any] = field(default_factory=dict, repr=False)  # as recorded

    @staticmethod
    def parse(params: Mapping[str, Any] | None) -> "StepSettings":
        params = dict(params or {})
        tf32 = params.get("tf32")
        if isinstance(tf32, str) and "matmul" in tf32.lower():  # "matmul off, conv on (torch setting)"
            words = tf32.lower()
            matmul, conv = "matmul on" in words, "conv on" in words
        else:
            matmul = conv = switch(tf32)
        return StepSettings(
            batch_size=_count(params.get("batch_size")), batch_size_requested=_count(params.get("batch_size_requested")),
            amp=_text(params.get("amp")), tf32_matmul=matmul, tf32_conv=conv,
            cudnn_benchmark=switch(params.get("cudnn_benchmark")), memory_format=_text(params.get("memory_format")),
            cuda_graphs=switch(params.get("cuda_graphs")), compile=_text(params.get("compile")), params=params)

    @property
    def tf32(self) -> bool | None:
        """TF32 on for both matmuls and convolutions (None where neither is said)."""
        if self.tf32_matmul is None and self.tf32_conv is None:
            return None
        return bool(self.tf32_matmul and self.tf32_conv)

    @property
    def nchw(self) -> bool:
        return self.memory_format in ("nchw", "contiguous_format")

    @property
    def compiled(self) -> bool:
        return self.compile not in (None, "off")

    def flag(self, name: str) -> bool | None:
        """One of torch's global flags by its knob name: tf32, cudnn_benchmark, fp16_accumulation."""
        return self.tf32 if name == "tf32" else self.cudnn_benchmark if name == "cudnn_benchmark" \
            else switch(self.params.get(name))
