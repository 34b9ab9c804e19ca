"""Workloads on the CPU: a real training step, timed, with counted FLOPs and estimated bytes."""

from __future__ import annotations

import math

import pytest
import torch

from pygpuperf.workloads import WORKLOADS, BuiltWorkload, Workload, count_step, get_workload, run_workload

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


# --------------------------------------------------------------------------- the built workload's life cycle


class _Recorded(Workload):
    """A workload whose step, counted step and close are recorded, to check what run_workload calls."""

    name = "recorded"
    description = "records calls"

    def __init__(self, fail_on_step: int | None = None) -> None:
        self.calls: list[str] = []
        self.fail_on_step = fail_on_step

    def build(self, device: torch.device, batch_size: int | None = None, **knobs: object) -> BuiltWorkload:
        a, b = torch.randn(8, 4), torch.randn(4, 2)

        def step() -> None:
            self.calls.append("step")
            if self.fail_on_step is not None and self.calls.count("step") == self.fail_on_step:
                raise RuntimeError("step failed")

        def count() -> None:
            self.calls.append("count")
            a @ b

        return BuiltWorkload(step=step, samples_per_step=batch_size or 1, params=dict(knobs), count_step=count,
                             on_close=[lambda: self.calls.append("close")])


def test_run_workload_counts_the_count_step_and_closes() -> None:
    workload = _Recorded()
    result = run_workload(workload, CPU, batch_size=4, warmup=2, steps=3, knobs={"flavour": "plain"})
    # A replayed graph is invisible to dispatch modes: the eager count_step is what gets counted.
    assert result.flops_per_step == 2 * 8 * 4 * 2
    assert workload.calls == ["step", "count", "step", "step", "step", "step", "close"]
    assert result.params["flavour"] == "plain" and result.samples_per_second == pytest.approx(
        4 / result.step_time.median)


def test_run_workload_closes_when_a_step_fails() -> None:
    workload = _Recorded(fail_on_step=2)
    with pytest.raises(RuntimeError, match="step failed"):
        run_workload(workload, CPU, warmup=1, steps=3)
    assert workload.calls[-1] == "close"


def test_built_workload_closes_once_last_added_first() -> None:
    order: list[int] = []
    built = BuiltWorkload(step=lambda: None, samples_per_step=1, params={},
                          on_close=[lambda: order.append(1), lambda: order.append(2)])
    with built:
        pass
    built.close()
    assert order == [2, 1]


def test_knob_specs_parse_command_line_strings() -> None:
    from pygpuperf.core.errors import UsageError
    from pygpuperf.workloads.knobs import AMP, COMPILE, CUDA_GRAPHS, KnobError, KnobSpec

    assert CUDA_GRAPHS.parse("on") is True and CUDA_GRAPHS.parse("OFF") is False and CUDA_GRAPHS.parse(True)
    assert AMP.parse("bfloat16") == "bf16" and AMP.parse("fp32") == "none"
    assert COMPILE.parse("on") == "inductor" and COMPILE.parse(False) == "off"
    size = KnobSpec("image_size", "int", "side", minimum=16, multiple_of=16)
    assert size.parse("64") == 64
    for bad in ("8", "40", "x", 2.5, True):
        with pytest.raises(KnobError) as info:
            size.parse(bad)
        assert isinstance(info.value, UsageError) and "image_size" in str(info.value)
