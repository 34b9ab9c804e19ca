"""Image-classification training steps from torchvision, on synthetic data."""

from __future__ import annotations

import gc
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F

from pygpuperf.backends.portable import synchronize
from pygpuperf.workloads.base import BuiltWorkload, Workload

_NUM_CLASSES = 1000
# torch >= 2.5 has the device-neutral name; older releases only the CUDA one.
_OUT_OF_MEMORY = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


def _torchvision_models() -> ModuleType:
    """torchvision.models, imported only when a vision workload is built."""
    try:
        import torchvision.models as models
    except ImportError as exc:
        raise RuntimeError(
            f"vision workloads need torchvision, which failed to import ({exc}); "
            "fix: pip install torchvision (or pip install 'pygpuperf[vision]')"
        ) from exc
    return models


def _release_device_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "xpu":
        torch.xpu.empty_cache()
    elif device.type == "mps":
        torch.mps.empty_cache()


@dataclass(frozen=True)
class _Precision:
    label: str  # reported as params["precision"]: "fp32", "tf32", "fp16-amp", "bf16-amp"
    autocast_dtype: torch.dtype | None
    loss_scaling: bool


def _fp32_precision(device: torch.device) -> _Precision:
    """Plain fp32 training; on NVIDIA GPUs from Ampere on, cuDNN runs its convolutions in TF32 by default."""
    convs_in_tf32 = (
        device.type == "cuda"
        and torch.version.hip is None
        and torch.backends.cudnn.allow_tf32
        and torch.cuda.get_device_capability(device) >= (8, 0)
    )
    return _Precision("tf32" if convs_in_tf32 else "fp32", None, False)


def _amp_precision(device: torch.device) -> _Precision:
    """fp16 autocast with loss scaling on 'cuda'; bf16 autocast (no scaling needed) elsewhere."""
    if device.type == "cuda":
        return _Precision("fp16-amp", torch.float16, True)
    return _Precision("bf16-amp", torch.bfloat16, False)


class ImageClassifierTraining(Workload):
    """One SGD training step of a torchvision classifier on a fixed synthetic batch."""

    def __init__(
        self,
        name: str,
        description: str,
        architecture: str,
        image_size: int,
        default_batch: dict[str, int],
        mixed_precision: bool,
    ) -> None:
        self.name = name
        self.description = description
        self.architecture = architecture
        self.image_size = image_size
        self.default_batch = default_batch  # by device type; "other" for the rest
        self.mixed_precision = mixed_precision

    def _batch_for(self, device: torch.device) -> int:
        return self.default_batch.get(device.type, self.default_batch["other"])

    def build(self, device: torch.device, batch_size: int | None = None, **knobs: Any) -> BuiltWorkload:
        """Build model, data and optimizer; on accelerators, halve the batch until one step fits in memory."""
        if knobs:
            raise TypeError(f"{self.name} takes no knobs, got {sorted(knobs)}")
        device = torch.device(device)
        models = _torchvision_models()
        requested = self._batch_for(device) if batch_size is None else batch_size
        if requested < 1:
            raise ValueError(f"batch_size must be positive, got {requested}")
        batch = requested
        while True:
            try:
                built = self._build_at(models, device, batch)
                break
            except _OUT_OF_MEMORY:
                if batch == 1:
                    raise
            # Outside the except block, so the traceback's frames (and their tensors) are gone.
            _release_device_memory(device)
            batch //= 2
        built.params["batch_size_requested"] = str(requested)
        if batch != requested:
            built.notes.append(f"batch size halved from {requested} to {batch}: the requested batch ran out of memory")
        return built

    def _build_at(self, models: ModuleType, device: torch.device, batch: int) -> BuiltWorkload:
        precision = _amp_precision(device) if self.mixed_precision else _fp32_precision(device)
        # channels_last lets cuDNN pick its fastest (NHWC) convolution kernels.
        memory_format = torch.channels_last if device.type == "cuda" else torch.contiguous_format
        torch.manual_seed(0)
        model = getattr(models, self.architecture)(weights=None, num_classes=_NUM_CLASSES)
        model = model.to(device=device, memory_format=memory_format).train()
        size = self.image_size
        images = torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=memory_format)
        labels = torch.randint(0, _NUM_CLASSES, (batch,), device=device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        scaler = torch.amp.GradScaler(device.type) if precision.loss_scaling else None
        autocast_dtype = precision.autocast_dtype

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                loss = F.cross_entropy(model(images), labels)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()

        if device.type != "cpu":
            # One trial step surfaces an out-of-memory error now, at this batch size.
            step()
            synchronize(device)

        params = {
            "model": f"torchvision.models.{self.architecture}(weights=None)",
            "batch_size": str(batch),
            "image_size": f"{size}x{size}",
            "precision": precision.label,
            "memory_format": "channels_last" if memory_format is torch.channels_last else "contiguous",
            "optimizer": "SGD(lr=0.01, momentum=0.9)",
            "loss": "cross_entropy",
            "data": "synthetic, created once on the device",
        }
        if scaler is not None:
            params["loss_scaling"] = "torch.amp.GradScaler"
        notes = []
        if precision.label == "tf32":
            notes.append("fp32 model; cuDNN runs its convolutions in TF32 (torch.backends.cudnn.allow_tf32 is True)")
        return BuiltWorkload(step=step, samples_per_step=batch, params=params, notes=notes)


RESNET50_TRAIN_AMP = ImageClassifierTraining(
    name="resnet50-train-amp",
    description="ResNet-50 training step, 224x224, mixed precision (fp16 + loss scaling on cuda, bf16 elsewhere)",
    architecture="resnet50",
    image_size=224,
    default_batch={"cuda": 256, "cpu": 8, "other": 64},
    mixed_precision=True,
)

RESNET18_TRAIN_SMALL = ImageClassifierTraining(
    name="resnet18-train-small",
    description="ResNet-18 training step, 64x64, batch 16, fp32: small enough for a CPU",
    architecture="resnet18",
    image_size=64,
    default_batch={"other": 16},
    mixed_precision=False,
)
