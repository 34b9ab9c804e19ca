"""DCGAN (Radford et al., 2015) training at 64x64: one discriminator step and one generator step."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pygpuperf.workloads.recipe import LossScaling, ModelWorkload, Settings, StepRecipe, compile_module
from pygpuperf.workloads.vision import image_params

LATENT = 100  # nz
GENERATOR_WIDTH = 64  # ngf
DISCRIMINATOR_WIDTH = 64  # ndf
IMAGE_SIZE = 64  # the architecture's four stride-2 stages fix it
CHANNELS = 3


def _init_weights(module: nn.Module) -> None:
    """The paper's initialisation: conv weights N(0, 0.02), batch-norm scales N(1, 0.02)."""
    if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
        nn.init.normal_(module.weight, 0.0, 0.02)
    elif isinstance(module, nn.BatchNorm2d):
        nn.init.normal_(module.weight, 1.0, 0.02)
        nn.init.zeros_(module.bias)


class Generator(nn.Module):
    """Latent (N, 100, 1, 1) -> image (N, 3, 64, 64) in [-1, 1]: transposed convs 4 -> 8 -> 16 -> 32 -> 64."""

    def __init__(self, latent: int = LATENT, width: int = GENERATOR_WIDTH, channels: int = CHANNELS) -> None:
        super().__init__()

        def up(c_in: int, c_out: int, stride: int, padding: int) -> list[nn.Module]:
            conv = nn.ConvTranspose2d(c_in, c_out, 4, stride, padding, bias=False)
            return [conv, nn.BatchNorm2d(c_out), nn.ReLU(True)]

        self.net = nn.Sequential(
            *up(latent, width * 8, 1, 0),
            *up(width * 8, width * 4, 2, 1),
            *up(width * 4, width * 2, 2, 1),
            *up(width * 2, width, 2, 1),
            nn.ConvTranspose2d(width, channels, 4, 2, 1, bias=False),
            nn.Tanh(),
        )
        self.apply(_init_weights)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


class Discriminator(nn.Module):
    """Image (N, 3, 64, 64) -> one logit per image (the sigmoid is in the loss, which autocast keeps fp32)."""

    def __init__(self, width: int = DISCRIMINATOR_WIDTH, channels: int = CHANNELS) -> None:
        super().__init__()

        def down(c_in: int, c_out: int, norm: bool) -> list[nn.Module]:
            layers: list[nn.Module] = [nn.Conv2d(c_in, c_out, 4, 2, 1, bias=False)]
            if norm:
                layers.append(nn.BatchNorm2d(c_out))
            return [*layers, nn.LeakyReLU(0.2, inplace=True)]

        self.net = nn.Sequential(
            *down(channels, width, norm=False),
            *down(width, width * 2, norm=True),
            *down(width * 2, width * 4, norm=True),
            *down(width * 4, width * 8, norm=True),
            nn.Conv2d(width * 8, 1, 4, 1, 0, bias=False),
        )
        self.apply(_init_weights)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.net(image).flatten()


class DCGANTraining(ModelWorkload):
    """One DCGAN iteration on a fixed synthetic batch: the discriminator on real and generated
    images, then the generator through the discriminator; Adam(2e-4, betas (0.5, 0.999)) for both."""

    def __init__(self, name: str, description: str, default_batch: dict[str, int],
                 defaults: dict[str, Any] | None = None) -> None:
        super().__init__(name, description, default_batch, defaults)

    def recipe(self, device: torch.device, batch: int, settings: Settings) -> StepRecipe:
        memory_format = settings.memory_format
        generator = Generator().to(device=device, memory_format=memory_format).train()
        discriminator = Discriminator().to(device=device, memory_format=memory_format).train()
        real = (torch.rand(batch, CHANNELS, IMAGE_SIZE, IMAGE_SIZE, device=device) * 2 - 1).contiguous(
            memory_format=memory_format)
        # Fixed noise, like the fixed images: the step's work does not depend on the values.
        noise = torch.randn(batch, LATENT, 1, 1, device=device).contiguous(memory_format=memory_format)
        ones = torch.ones(batch, device=device)
        zeros = torch.zeros(batch, device=device)
        options = settings.optimizer_options(adam=True)
        opt_g = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999), **options)
        opt_d = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999), **options)
        # One scaler for both losses and optimizers, updated once per iteration (torch's AMP recipe).
        scaling = LossScaling(device, settings)
        compiled_g = compile_module(generator, settings)
        compiled_d = compile_module(discriminator, settings)

        def iteration(g: nn.Module, d: nn.Module) -> None:
            with settings.autocast(device):
                fake = g(noise)
                loss_d = (F.binary_cross_entropy_with_logits(d(real), ones)
                          + F.binary_cross_entropy_with_logits(d(fake.detach()), zeros))
            scaling.backward(loss_d)
            scaling.step(opt_d)
            with settings.autocast(device):
                loss_g = F.binary_cross_entropy_with_logits(d(fake), ones)
            # As in the reference loop, this also adds to the discriminator's gradients; they are cleared next step.
            scaling.backward(loss_g)
            scaling.step(opt_g)
            scaling.update()

        params = {
            "model": (f"DCGAN generator and discriminator "
                      f"(nz {LATENT}, ngf {GENERATOR_WIDTH}, ndf {DISCRIMINATOR_WIDTH})"),
            "batch_size": str(batch),
            **image_params(IMAGE_SIZE),
            "optimizer": settings.optimizer_label("Adam", "lr=2e-4, betas=(0.5, 0.999)") + " x2",
            "loss": "binary_cross_entropy_with_logits (discriminator on real and fake, then generator)",
        }
        params |= scaling.params("torch.amp.GradScaler (one for both optimizers)")
        return StepRecipe(
            body=lambda: iteration(compiled_g, compiled_d),
            eager_body=lambda: iteration(generator, discriminator),
            optimizers=(opt_d, opt_g),
            samples_per_step=batch,
            params=params,
            modules=(generator, discriminator),
            notes=["a DCGAN step is one discriminator and one generator update; samples are real images per step"],
        )


DCGAN_TRAIN = DCGANTraining(
    name="dcgan-train",
    description="DCGAN training iteration (discriminator and generator steps), 64x64, fp32",
    default_batch={"cuda": 256, "cpu": 16, "other": 64},
    defaults={"amp": "none"},
)
