"""Image classification from torchvision (ResNet-18/50/101), training and inference, on synthetic data."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F

from pygpuperf.workloads.knobs import KnobSpec
from pygpuperf.workloads.recipe import LossScaling, ModelWorkload, Settings, StepRecipe, compile_module

_NUM_CLASSES = 1000
_SYNTHETIC = "synthetic, created once on the device"


def torchvision_error() -> str | None:
    """Why torchvision cannot be used here (not installed, or built for another torch), or None."""
    try:
        import torchvision.models  # noqa: F401
    except Exception as exc:  # a torchvision built for another torch fails with RuntimeError, not ImportError
        return (f"vision workloads need torchvision, which failed to import ({' '.join(str(exc).split())[:200]}); "
                "fix: pip install torchvision matching your torch (or pip install 'pygpuperf[vision]')")
    return None


def torchvision_models() -> ModuleType:
    """torchvision.models, imported only when a vision workload is built."""
    error = torchvision_error()
    if error is not None:
        raise RuntimeError(error)
    import torchvision.models as models

    return models


def image_size_knob(default: int, minimum: int, why: str, multiple_of: int = 1) -> KnobSpec:
    return KnobSpec("image_size", "int", f"height and width of the synthetic images in pixels ({why})",
                    default=default, minimum=minimum, multiple_of=multiple_of)


def image_params(size: int) -> dict[str, str]:
    return {"image_size": f"{size}x{size}", "data": _SYNTHETIC}


class ImageClassifier(ModelWorkload):
    """A torchvision classifier on a fixed synthetic batch: one SGD training step, or one
    forward pass under torch.inference_mode (model in eval mode) when `training` is False."""

    def __init__(
        self,
        name: str,
        description: str,
        architecture: str,
        image_size: int,
        default_batch: dict[str, int],
        training: bool = True,
        defaults: dict[str, Any] | None = None,
    ) -> None:
        # ResNets downsample by 32; below that the last stage has nothing left to pool.
        super().__init__(name, description, default_batch, defaults, (image_size_knob(image_size, 32, "at least 32"),))
        self.architecture = architecture
        self.image_size = image_size
        self.training = training

    def unavailable(self) -> str | None:
        return torchvision_error()

    def recipe(self, device: torch.device, batch: int, settings: Settings) -> StepRecipe:
        models = torchvision_models()
        memory_format = settings.memory_format
        model = getattr(models, self.architecture)(weights=None, num_classes=_NUM_CLASSES)
        model = model.to(device=device, memory_format=memory_format).train(self.training)
        size = settings.knobs["image_size"]
        images = torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=memory_format)
        compiled = compile_module(model, settings)
        params = {
            "model": f"torchvision.models.{self.architecture}(weights=None)",
            "batch_size": str(batch),
            **image_params(size),
            "mode": "training" if self.training else "inference (torch.inference_mode, eval)",
        }
        if not self.training:
            def infer(net: torch.nn.Module) -> None:
                with torch.inference_mode(), settings.autocast(device):
                    net(images)

            return StepRecipe(body=lambda: infer(compiled), eager_body=lambda: infer(model), optimizers=(),
                              samples_per_step=batch, params=params, modules=(model,))

        labels = torch.randint(0, _NUM_CLASSES, (batch,), device=device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, **settings.optimizer_options(adam=False))
        scaling = LossScaling(device, settings)

        def train(net: torch.nn.Module) -> None:
            with settings.autocast(device):
                loss = F.cross_entropy(net(images), labels)
            scaling.backward(loss)
            scaling.step(optimizer)
            scaling.update()

        params["optimizer"] = settings.optimizer_label("SGD", "lr=0.01, momentum=0.9")
        params["loss"] = "cross_entropy"
        params |= scaling.params()
        return StepRecipe(body=lambda: train(compiled), eager_body=lambda: train(model), optimizers=(optimizer,),
                          samples_per_step=batch, params=params, modules=(model,))


_AMP = {"amp": "auto"}
_BF16 = {"amp": "bf16"}
_FP32 = {"amp": "none"}
_TF32 = {"amp": "none", "tf32": True}


def _resnet(depth: int, cuda_batch: int) -> list[ImageClassifier]:
    arch = f"resnet{depth}"
    batches = {"cuda": cuda_batch, "cpu": 8, "other": 64}
    infer_batches = {"cuda": 2 * cuda_batch, "cpu": 8, "other": 128}
    title = f"ResNet-{depth}"

    def make(suffix: str, what: str, defaults: dict[str, Any], training: bool = True) -> ImageClassifier:
        return ImageClassifier(f"{arch}-{suffix}", f"{title} {what}, 224x224", arch, 224,
                               batches if training else infer_batches, training, defaults)

    return [
        make("train-amp", "training step, mixed precision (fp16 + loss scaling on cuda, bf16 elsewhere)", _AMP),
        make("train-bf16", "training step, bf16 autocast", _BF16),
        make("train", "training step, fp32 (TF32 where torch's flags allow it)", _FP32),
        make("train-tf32", "training step, fp32 with TF32 forced on", _TF32),
        make("infer", "inference (torch.inference_mode), fp32 (TF32 where torch's flags allow it)", _FP32, False),
        make("infer-amp", "inference (torch.inference_mode), fp16 autocast on cuda, bf16 elsewhere", _AMP, False),
    ]


RESNET50 = _resnet(50, 256)
RESNET101 = _resnet(101, 128)
RESNET50_TRAIN_AMP = RESNET50[0]

RESNET18_TRAIN_SMALL = ImageClassifier(
    name="resnet18-train-small",
    description="ResNet-18 training step, 64x64, batch 16, fp32: small enough for a CPU",
    architecture="resnet18",
    image_size=64,
    default_batch={"other": 16},
    defaults=_FP32,
)
