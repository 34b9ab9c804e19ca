"""Setting torch's global math flags and putting them back: each setter returns its restore."""

from __future__ import annotations

from typing import Any, Callable

import torch


def has_fp16_accumulation_flag() -> bool:
    try:
        return hasattr(torch.backends.cuda.matmul, "allow_fp16_accumulation")
    except RuntimeError:
        return False


def set_matmul_tf32(enabled: bool) -> Callable[[], None]:
    """cuBLAS TF32 for fp32 matmul."""
    matmul = torch.backends.cuda.matmul
    try:
        previous = matmul.allow_tf32
    except RuntimeError:
        # torch >= 2.9 refuses the legacy read once the newer fp32_precision API was used: stay on that API.
        previous_precision = matmul.fp32_precision
        matmul.fp32_precision = "tf32" if enabled else "ieee"
        return lambda: setattr(matmul, "fp32_precision", previous_precision)
    matmul.allow_tf32 = enabled
    return lambda: setattr(matmul, "allow_tf32", previous)


def set_cudnn_tf32(enabled: bool) -> Callable[[], None]:
    """cuDNN TF32 for fp32 convolutions."""
    cudnn = torch.backends.cudnn
    try:
        previous = cudnn.allow_tf32
    except RuntimeError:
        conv = cudnn.conv
        previous_precision = conv.fp32_precision
        conv.fp32_precision = "tf32" if enabled else "ieee"
        return lambda: setattr(conv, "fp32_precision", previous_precision)
    cudnn.allow_tf32 = enabled
    return lambda: setattr(cudnn, "allow_tf32", previous)


def set_attribute(owner: Any, attribute: str, value: bool) -> Callable[[], None]:
    previous = getattr(owner, attribute)
    setattr(owner, attribute, value)
    return lambda: setattr(owner, attribute, previous)


def set_fp16_accumulation(enabled: bool) -> Callable[[], None]:
    """cuBLAS fp16 accumulation for fp16 matmul, where torch has the flag."""
    if not has_fp16_accumulation_flag():
        return lambda: None
    return set_attribute(torch.backends.cuda.matmul, "allow_fp16_accumulation", enabled)
