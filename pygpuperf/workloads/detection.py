"""RetinaNet ResNet-50 FPN (torchvision) detection training, on synthetic images.

Two objectives, chosen by the `objective` knob:

* head-mean (default): the batch goes straight through backbone, FPN and heads, and the step
  backpropagates the mean of the head outputs (class logits and box regressions) and takes an
  SGD step. No resize, anchor matching or loss: every shape is fixed, so torch.compile and
  CUDA graphs take the whole step. It runs the same convolutions, forward and backward, as
  training does; what it leaves out (matching and focal loss) is small next to them.
* detection-loss: torchvision's own training forward with synthetic boxes and labels,
  returning the focal and box losses, summed and backpropagated. Anchor matching has
  data-dependent shapes and host syncs, so CUDA graphs are waived for it.
"""

from __future__ import annotations

from typing import Any

import torch

from pygpuperf.workloads.knobs import KnobSpec
from pygpuperf.workloads.recipe import LossScaling, ModelWorkload, Settings, StepRecipe, compile_module
from pygpuperf.workloads.vision import image_params, image_size_knob, torchvision_error, torchvision_models

_NUM_CLASSES = 91  # COCO's label space, torchvision's default
_BOXES_PER_IMAGE = 4

OBJECTIVE = KnobSpec(
    "objective",
    "choice",
    "head-mean: backpropagate the mean of the head outputs (fixed shapes, graph-capturable); "
    "detection-loss: torchvision's focal and box losses with synthetic boxes",
    choices=("head-mean", "detection-loss"),
    default="head-mean",
)


class _BackboneAndHead(torch.nn.Module):
    """RetinaNet without its transform and post-processing: images in, head outputs out."""

    def __init__(self, retinanet: torch.nn.Module) -> None:
        super().__init__()
        self.backbone = retinanet.backbone
        self.head = retinanet.head

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = list(self.backbone(images).values())
        out = self.head(features)
        return out["cls_logits"], out["bbox_regression"]


def synthetic_targets(batch: int, size: int, device: torch.device) -> list[dict[str, torch.Tensor]]:
    """A few boxes per image, inside it, at least an eighth of its side wide, with random labels."""
    generator = torch.Generator().manual_seed(0)
    targets = []
    for _ in range(batch):
        corner = torch.rand(_BOXES_PER_IMAGE, 2, generator=generator) * size / 2
        extent = (torch.rand(_BOXES_PER_IMAGE, 2, generator=generator) * 3 / 8 + 1 / 8) * size
        boxes = torch.cat([corner, corner + extent], dim=1)
        labels = torch.randint(1, _NUM_CLASSES, (_BOXES_PER_IMAGE,), generator=generator)
        targets.append({"boxes": boxes.to(device), "labels": labels.to(device)})
    return targets


class RetinaNetTraining(ModelWorkload):
    """One SGD training step of torchvision's retinanet_resnet50_fpn (weights=None) on synthetic images."""

    def __init__(self, name: str, description: str, image_size: int, default_batch: dict[str, int],
                 defaults: dict[str, Any] | None = None) -> None:
        super().__init__(name, description, default_batch, defaults,
                         (image_size_knob(image_size, 64, "at least 64, so batch norm trains on a batch of 1"),
                          OBJECTIVE))

    def graph_blocker(self, knobs: dict[str, Any]) -> str | None:
        if knobs["objective"] == "detection-loss":
            return ("the detection loss matches anchors to boxes with data-dependent shapes and host syncs; "
                    "objective=head-mean can be captured")
        return None

    def unavailable(self) -> str | None:
        return torchvision_error()

    def recipe(self, device: torch.device, batch: int, settings: Settings) -> StepRecipe:
        detection = torchvision_models().detection
        size = settings.knobs["image_size"]
        memory_format = settings.memory_format
        # min_size = max_size = the image size: the transform keeps the synthetic images as they are.
        retinanet = detection.retinanet_resnet50_fpn(weights=None, weights_backbone=None, num_classes=_NUM_CLASSES,
                                                     min_size=size, max_size=size)
        retinanet = retinanet.to(device=device, memory_format=memory_format).train()
        optimizer = torch.optim.SGD(retinanet.parameters(), lr=0.01, momentum=0.9,
                                    **settings.optimizer_options(adam=False))
        scaling = LossScaling(device, settings)
        objective = settings.knobs["objective"]
        params = {
            "model": "torchvision.models.detection.retinanet_resnet50_fpn(weights=None, weights_backbone=None)",
            "batch_size": str(batch),
            **image_params(size),
            "objective": objective,
            "optimizer": settings.optimizer_label("SGD", "lr=0.01, momentum=0.9"),
        }
        params |= scaling.params()

        if objective == "head-mean":
            net = _BackboneAndHead(retinanet)
            images = torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=memory_format)
            compiled = compile_module(net, settings)
            params["loss"] = "mean(cls_logits) + mean(bbox_regression), no anchor matching"

            def head_step(module: torch.nn.Module) -> None:
                with settings.autocast(device):
                    logits, boxes = module(images)
                    loss = logits.float().mean() + boxes.float().mean()
                scaling.backward(loss)
                scaling.step(optimizer)
                scaling.update()

            return StepRecipe(body=lambda: head_step(compiled), eager_body=lambda: head_step(net),
                              optimizers=(optimizer,), samples_per_step=batch, params=params, modules=(retinanet,))

        # The transform stacks these into one batch (NCHW); the model's own layout follows memory_format.
        image_list = [torch.rand(3, size, size, device=device) for _ in range(batch)]
        targets = synthetic_targets(batch, size, device)
        compiled = compile_module(retinanet, settings)
        params["loss"] = f"torchvision focal + smooth-L1 box losses, {_BOXES_PER_IMAGE} synthetic boxes per image"

        def loss_step(module: torch.nn.Module) -> None:
            with settings.autocast(device):
                losses = module(image_list, targets)
                loss = sum(losses.values())
            scaling.backward(loss)
            scaling.step(optimizer)
            scaling.update()

        return StepRecipe(body=lambda: loss_step(compiled), eager_body=lambda: loss_step(retinanet),
                          optimizers=(optimizer,), samples_per_step=batch, params=params, modules=(retinanet,))


RETINANET_TRAIN = RetinaNetTraining(
    name="retinanet-train",
    description="RetinaNet ResNet-50 FPN training step, 800x800, fp32; objective head-mean (backprop of the "
    "mean head output) by default, detection-loss for torchvision's losses",
    image_size=800,
    default_batch={"cuda": 16, "cpu": 1, "other": 4},
    defaults={"amp": "none"},
)
