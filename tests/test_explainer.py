"""The whole explanation on a recorded-shape CUDA trace: every step's waterfall adds up."""

import dataclasses
import json
from pathlib import Path

import pytest

from pygpuperf import diagnose
from pygpuperf.explain import explainer
from pygpuperf.core.vocabulary import Part
from pygpuperf.explain.trace import CapturedSteps, MathSettings, steps_from_chrome_trace
from pygpuperf.core.results import Ceiling, MachineModel
from pygpuperf.report import explained

FIXTURES = Path(__file__).parent / "fixtures"


def h200_like_model() -> MachineModel:
    m = MachineModel(device="cuda:0")
    for key, value in {"tensor.fp16.acc32": 880.0, "tensor.bf16.acc32": 970.0, "tensor.tf32.acc32": 490.0,
                       "cuda.fp32": 66.0, "cuda.fp16x2": 110.0}.items():
        m.compute[key] = Ceiling(value, "TFLOP/s", f"compute.{key}", "native-cuda")
    m.memory["hbm"] = Ceiling(4700.0, "GB/s", "memory.hbm.write", "native-cuda")
    m.communication["all_reduce"] = Ceiling(327.0, "GB/s", "collective.all_reduce", "torch-cuda")
    return m


@pytest.fixture
def diagnosed():
    trace = json.loads((FIXTURES / "chrome_trace_cuda.json").read_text())
    steps = steps_from_chrome_trace(trace, settings=MathSettings())
    model = h200_like_model()
    e = explainer.explain_captured(CapturedSteps("cuda:0", steps, MathSettings()), model)
    return diagnose.DiagnosedStep(e, diagnose.diagnose(e, model))


def test_every_step_adds_up_to_its_wall_time(diagnosed):
    explanation = diagnosed.explanation
    assert len(explanation.steps) >= 2
    for step in explanation.steps:
        w = step.waterfall
        assert w.ideal_us + sum(w.parts.values()) + w.unexplained_us == pytest.approx(w.measured_us)
        assert w.measured_us == pytest.approx(step.timeline.wall_us)
        assert step.timeline.busy_us + step.timeline.idle.total_us == pytest.approx(step.timeline.wall_us)
        assert 0.0 <= w.coverage <= 1.0


def test_kernels_get_work_and_bounds_from_their_ops(diagnosed):
    explanation = diagnosed.explanation
    kernels = explanation.median.kernels
    gemms = [k for k in kernels if k.kernel_class == "tensor_gemm"]
    assert gemms and all(k.flops > 0 and k.bound_us is not None and k.ceiling for k in gemms)
    assert explanation.median in explanation.steps


def test_outputs_and_summary(diagnosed, tmp_path):
    explanation = diagnosed.explanation
    paths = explained.write_outputs(explanation, tmp_path, diagnosed.diagnosis)
    doc = json.loads(paths[0].read_text())
    assert doc["waterfall"]["measured_us"] == pytest.approx(explanation.median.waterfall.measured_us)
    assert len(doc["kernels"]) == len(explanation.median.kernels)
    assert paths[1].read_text().splitlines()[0].startswith("name,start_us,duration_us")
    text = "\n".join(explainer.summary_lines(explanation))
    assert "roofline ideal" in text and "= measured" in text and Part.UNEXPLAINED in text and "coverage" in text


def test_the_diagnosis_has_its_findings_before_anything_is_written(diagnosed, tmp_path):
    found = [dataclasses.asdict(f) for f in diagnosed.findings]
    assert found, "the recorded step has findings (idle, memory-bound kernels)"
    explained.write_explained(diagnosed.explanation, diagnosed.diagnosis, h200_like_model(), tmp_path,
                              echo=lambda text: None)
    assert json.loads((tmp_path / "findings.json").read_text()) == found
    assert json.loads((tmp_path / "explain.json").read_text())["findings"] == found
