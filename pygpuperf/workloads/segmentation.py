"""U-Net (Ronneberger et al., 2015) segmentation training, with padded convolutions and batch norm."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pygpuperf.workloads.recipe import LossScaling, ModelWorkload, Settings, StepRecipe, compile_module
from pygpuperf.workloads.vision import image_params, image_size_knob

_LEVELS = 4  # down-sampling stages: the image side must divide by 2**4


def _double_conv(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True),
        nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True),
    )


class UNet(nn.Module):
    """Encoder of four max-pool stages, decoder of four transposed-conv stages with skip connections.

    Base width 32 (the paper's is 64): 7.8 M parameters, a small U-Net. Padded convolutions keep
    the output the size of the input, so one class map comes out per pixel.
    """

    def __init__(self, in_channels: int = 3, classes: int = 2, width: int = 32) -> None:
        super().__init__()
        widths = [width * 2**i for i in range(_LEVELS + 1)]
        self.stem = _double_conv(in_channels, widths[0])
        self.down = nn.ModuleList(_double_conv(widths[i], widths[i + 1]) for i in range(_LEVELS))
        self.up = nn.ModuleList(
            nn.ConvTranspose2d(widths[i + 1], widths[i], 2, stride=2) for i in reversed(range(_LEVELS))
        )
        self.merge = nn.ModuleList(_double_conv(widths[i] * 2, widths[i]) for i in reversed(range(_LEVELS)))
        self.head = nn.Conv2d(widths[0], classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [self.stem(x)]
        for block in self.down:
            skips.append(block(F.max_pool2d(skips[-1], 2)))
        x = skips.pop()
        for up, merge in zip(self.up, self.merge):
            x = merge(torch.cat([skips.pop(), up(x)], dim=1))
        return self.head(x)


class UNetTraining(ModelWorkload):
    """One Adam training step of a small U-Net on synthetic images and per-pixel labels (2 classes)."""

    def __init__(self, name: str, description: str, image_size: int, default_batch: dict[str, int],
                 defaults: dict[str, Any] | None = None) -> None:
        super().__init__(name, description, default_batch, defaults,
                         (image_size_knob(image_size, 2**_LEVELS, "a multiple of 16: four 2x2 poolings",
                                          multiple_of=2**_LEVELS),))

    def recipe(self, device: torch.device, batch: int, settings: Settings) -> StepRecipe:
        size = settings.knobs["image_size"]
        memory_format = settings.memory_format
        model = UNet().to(device=device, memory_format=memory_format).train()
        images = torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=memory_format)
        masks = torch.randint(0, 2, (batch, size, size), device=device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, **settings.optimizer_options(adam=True))
        scaling = LossScaling(device, settings)
        compiled = compile_module(model, settings)

        def train(net: nn.Module) -> None:
            with settings.autocast(device):
                loss = F.cross_entropy(net(images), masks)
            scaling.backward(loss)
            scaling.step(optimizer)
            scaling.update()

        params = {
            "model": "U-Net (4 levels, base width 32, batch norm, transposed-conv up-sampling, 2 classes)",
            "batch_size": str(batch),
            **image_params(size),
            "optimizer": settings.optimizer_label("Adam", "lr=1e-4"),
            "loss": "per-pixel cross_entropy",
        }
        params |= scaling.params()
        return StepRecipe(body=lambda: train(compiled), eager_body=lambda: train(model), optimizers=(optimizer,),
                          samples_per_step=batch, params=params, modules=(model,))


UNET_TRAIN = UNetTraining(
    name="unet-train",
    description="U-Net segmentation training step (base width 32, 2 classes), 256x256, fp32",
    image_size=256,
    default_batch={"cuda": 64, "cpu": 2, "other": 16},
    defaults={"amp": "none"},
)
