"""Workloads on the CPU: a real training step, timed, with counted FLOPs and estimated bytes."""

from __future__ import annotations

import math

import pytest
import torch

from pygpuperf.workloads import WORKLOADS, count_step, get_workload, run_workload

CPU = torch.device("cpu")


def test_registry_has_the_default_workloads() -> None:
    assert {"resnet50-train-amp", "resnet18-train-small"} <= set(WORKLOADS)
    for name, workload in WORKLOADS.items():
        assert workload.name == name and workload.description


def test_unknown_workload_lists_valid_names() -> None:
    with pytest.raises(KeyError) as info:
        get_workload("no-such-model")
    message = str(info.value)
    assert "no-such-model" in message
    for name in WORKLOADS:
        assert name in message


def test_count_step_counts_matmul_flops_and_bytes() -> None:
    a = torch.randn(64, 32)
    b = torch.randn(32, 16)
    flops, nbytes = count_step(lambda: a @ b)
    assert flops == 2 * 64 * 32 * 16
    assert nbytes == (64 * 32 + 32 * 16 + 64 * 16) * 4  # inputs read once, output written once


def test_missing_torchvision_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    # A None entry in sys.modules makes the import fail as if the package were absent.
    monkeypatch.setitem(sys.modules, "torchvision", None)
    monkeypatch.setitem(sys.modules, "torchvision.models", None)
    with pytest.raises(RuntimeError, match="pip install torchvision"):
        get_workload("resnet18-train-small").build(CPU)


def test_resnet18_small_training_run() -> None:
    pytest.importorskip("torchvision")
    result = run_workload(get_workload("resnet18-train-small"), CPU, warmup=1, steps=2)
    assert result.name == "resnet18-train-small" and result.device == "cpu"
    assert result.params["batch_size"] == "16"
    assert result.params["precision"] == "fp32"
    assert result.params["image_size"] == "64x64"
    # Forward + backward of ResNet-18 at 64x64 is about 0.9 GFLOP per image.
    assert result.flops_per_step > 1e9
    assert result.bytes_per_step > 0
    assert math.isfinite(result.intensity) and result.intensity > 0
    assert result.intensity == pytest.approx(result.flops_per_step / result.bytes_per_step)
    assert result.step_time.n == 2 and result.step_time.median > 0
    assert result.samples_per_second == pytest.approx(16 / result.step_time.median)
    assert result.achieved_tflops == pytest.approx(result.flops_per_step / result.step_time.median / 1e12)
    assert any("estimate" in note for note in result.notes)
    # Placement on the roofline is left to the machine model.
    assert result.attainable_tflops is None and result.fraction_of_attainable is None


def test_bad_step_counts_are_rejected() -> None:
    with pytest.raises(ValueError, match="steps"):
        run_workload(get_workload("resnet18-train-small"), CPU, steps=0)
