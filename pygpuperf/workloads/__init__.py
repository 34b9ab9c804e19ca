"""Real model runs, timed and accounted for, to place on the measured roofline."""

from __future__ import annotations

from pygpuperf.workloads.accounting import count_step
from pygpuperf.workloads.base import BuiltWorkload, Workload, run_workload, time_built
from pygpuperf.workloads.detection import RETINANET_TRAIN
from pygpuperf.workloads.gan import DCGAN_TRAIN
from pygpuperf.workloads.knobs import KnobError, KnobSpec
from pygpuperf.workloads.language import BERT_BASE_SQUAD_TRAIN, GPT_100M_TRAIN, GPT_TINY_TRAIN, GPTConfig
from pygpuperf.workloads.segmentation import UNET_TRAIN
from pygpuperf.workloads.user import UserWorkload, load_user_step
from pygpuperf.workloads.vision import RESNET18_TRAIN_SMALL, RESNET50, RESNET50_TRAIN_AMP, RESNET101

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        *RESNET50,
        *RESNET101,
        RESNET18_TRAIN_SMALL,
        RETINANET_TRAIN,
        DCGAN_TRAIN,
        UNET_TRAIN,
        GPT_100M_TRAIN,
        BERT_BASE_SQUAD_TRAIN,
        GPT_TINY_TRAIN,
    )
}

#: What runs when none is named: the full model on accelerators, the small one on a CPU.
DEFAULT_WORKLOAD = {"cpu": RESNET18_TRAIN_SMALL.name, "other": RESNET50_TRAIN_AMP.name}
#: What runs instead when the default cannot (torchvision missing): models of plain torch.
FALLBACK_WORKLOAD = {"cpu": GPT_TINY_TRAIN.name, "other": GPT_100M_TRAIN.name}


def default_workload_name(device_type: str) -> str:
    """The workload run by default on a device type."""
    return DEFAULT_WORKLOAD.get(device_type, DEFAULT_WORKLOAD["other"])


def fallback_workload_name(device_type: str) -> str:
    """The default's stand-in that needs nothing beyond torch."""
    return FALLBACK_WORKLOAD.get(device_type, FALLBACK_WORKLOAD["other"])


def get_workload(name: str) -> Workload:
    """The registered workload called `name`; KeyError lists the valid names."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}; valid names: {', '.join(sorted(WORKLOADS))}") from None


__all__ = [
    "BuiltWorkload",
    "DEFAULT_WORKLOAD",
    "GPTConfig",
    "KnobError",
    "KnobSpec",
    "UserWorkload",
    "WORKLOADS",
    "Workload",
    "count_step",
    "default_workload_name",
    "fallback_workload_name",
    "get_workload",
    "load_user_step",
    "run_workload",
    "time_built",
]
