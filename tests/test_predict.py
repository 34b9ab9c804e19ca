"""Re-pricing a profiled step on another machine model: synthetic steps with known answers."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pygpuperf.explain import attribution
from pygpuperf.explain.attribution import IDLE_HOST, IDLE_LAUNCH, IDLE_SYNC
from pygpuperf.explain.explainer import ExplainedStep, Explanation
from pygpuperf.explain.model import MEMORY_BOUND, TENSOR_GEMM, Idle, KernelRecord, Timeline, Waterfall
from pygpuperf.predict import predict, runs_as
from pygpuperf.results import Ceiling, MachineModel


def _model(hbm: float = 1000.0, fp16_acc32: float = 100.0, bf16: bool = True, name: str = "m") -> MachineModel:
    compute = {"tensor.fp16.acc32": Ceiling(fp16_acc32, "TFLOP/s", "t", "t"),
               "tensor.fp16.acc16": Ceiling(100.0, "TFLOP/s", "t", "t"),
               "cuda.fp32": Ceiling(20.0, "TFLOP/s", "t", "t")}
    if bf16:
        compute["tensor.bf16.acc32"] = Ceiling(100.0, "TFLOP/s", "t", "t")
    return MachineModel(device=name, compute=compute, memory={"hbm": Ceiling(hbm, "GB/s", "t", "t")})


def _profile(gemm_precision: str = "fp16.acc32", idle: Idle | None = None) -> Explanation:
    """One compute-bound GEMM (1 ms bound, 2 ms measured) then one memory-bound kernel (1 ms bound, 4 ms measured),
    with idle time around them on a 10 ms step."""
    gemm = KernelRecord("gemm", start_us=0.0, duration_us=2000.0, kernel_class=TENSOR_GEMM, precision=gemm_precision,
                        flops=100e12 * 1e-3, bytes=1e6)
    elementwise = KernelRecord("add", start_us=2000.0, duration_us=4000.0, kernel_class=MEMORY_BOUND,
                               precision="fp16", bytes=1000e9 * 1e-3)
    kernels = [gemm, elementwise]
    attribution.assign_bounds(kernels, _model())
    idle = idle or Idle(host_bound_us=2000.0, launch_gap_us=1000.0, sync_us=1000.0)
    line = Timeline(wall_us=6000.0 + idle.total_us, busy_us=6000.0, idle=idle)
    step = ExplainedStep(0, kernels, line, Waterfall(0, {}, line.wall_us, 0, 1), [])
    return Explanation("synthetic", [step], step)


def _by(prediction, category: str) -> tuple[float, float]:
    change = next(c for c in prediction.waterfall if c.category == category)
    return change.source_us, change.target_us


def test_same_model_predicts_the_measured_step():
    p = predict(_profile(), _model(), _model())
    assert p.step_us == pytest.approx(10000.0)
    assert p.ratio_to_source == pytest.approx(1.0)
    assert p.throughput == pytest.approx(256 / 0.01)


def test_doubling_bandwidth_halves_memory_bound_and_keeps_compute_bound():
    p = predict(_profile(), _model(), _model(hbm=2000.0))
    assert _by(p, MEMORY_BOUND) == pytest.approx((4000.0, 2000.0))
    assert _by(p, TENSOR_GEMM) == pytest.approx((2000.0, 2000.0))
    assert p.step_us == pytest.approx(8000.0)
    assert p.ratio_to_source == pytest.approx(10 / 8)


def test_half_rate_accumulate_doubles_fp16_acc32_gemm_time():
    p = predict(_profile(), _model(), _model(fp16_acc32=50.0))
    assert _by(p, TENSOR_GEMM) == pytest.approx((2000.0, 4000.0))
    assert _by(p, MEMORY_BOUND) == pytest.approx((4000.0, 4000.0))
    # fp16 with fp16 accumulate is held against its own (full-rate) figure
    p16 = predict(_profile("fp16.acc16"), _model(), _model(fp16_acc32=50.0))
    assert _by(p16, TENSOR_GEMM) == pytest.approx((2000.0, 2000.0))


def test_idle_stays_fixed_and_profiler_overhead_comes_off_host_idle():
    p = predict(_profile(), _model(), _model(hbm=4000.0, fp16_acc32=400.0))
    for category, us in ((IDLE_HOST, 2000.0), (IDLE_LAUNCH, 1000.0), (IDLE_SYNC, 1000.0)):
        assert _by(p, category) == (us, us)
    assert p.step_us == pytest.approx(4000.0 + 500.0 + 1000.0)
    trimmed = predict(_profile(), _model(), _model(), source_step_us=8500.0)
    assert _by(trimmed, IDLE_HOST) == (500.0, 500.0)
    assert trimmed.source_step_us == pytest.approx(8500.0)
    assert any("profiler overhead" in n for n in trimmed.notes)


def test_bf16_on_a_card_without_bf16_runs_as_fp16_with_a_note():
    assert runs_as("bf16.acc32", _model(bf16=False)) == ("fp16.acc32", "bf16 is not supported: runs as fp16")
    assert runs_as("bf16.acc32", _model()) == ("bf16.acc32", None)
    v100_like = _model(fp16_acc32=50.0, bf16=False)
    p = predict(_profile("bf16.acc32"), _model(), v100_like)
    assert _by(p, TENSOR_GEMM) == pytest.approx((2000.0, 4000.0))  # priced at the fp16.acc32 figure
    assert any("runs as fp16" in n for n in p.notes)
    assert "substitute dtype" in p.confidence


def test_capacity_notes():
    small = {"memory_gb": 16}
    assert any("does not fit" in n and "40 GB" in n for n in
               predict(_profile(), _model(), _model(), small, peak_memory_gb=40).notes)
    assert not any("does not fit" in n for n in predict(_profile(), _model(), _model(), small, peak_memory_gb=8).notes)
    assert any("peak memory of the profile unknown" in n for n in predict(_profile(), _model(), _model(), small).notes)


def test_smaller_l2_is_reported():
    p = predict(_profile(), _model(), _model(), {"l2_mib": 6}, source_facts={"l2_mib": 50})
    assert any("L2 6 MiB < source 50 MiB" in n for n in p.notes)


def test_confidence_names_the_dominant_part():
    p = predict(_profile(), _model(), _model())
    assert "memory-bound kernels" in p.confidence  # 4 of 10 ms, the largest part


def test_cli_bad_target_is_one_line_with_exit_2(tmp_path):
    profile = tmp_path / "explain.json"
    import json

    profile.write_text(json.dumps(_profile().to_dict()), encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "pygpuperf.predict", "--profile", str(profile),
                             "--source-model", "datasheet:h200-sxm", "--target", "datasheet:no-such-card"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no datasheet entry 'no-such-card'" in lines[0]


def test_cli_json_ranks_targets(tmp_path, capsys):
    import json

    from pygpuperf.predict import run

    profile = tmp_path / "explain.json"
    profile.write_text(json.dumps(_profile().to_dict()), encoding="utf-8")
    assert run(["--profile", str(profile), "--source-model", "datasheet:a100-sxm4-80gb", "--target",
                "datasheet:v100-sxm2", "--target", "datasheet:h100-sxm", "--price", "h100-sxm=2.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["target"] for p in out] == ["h100-sxm", "v100-sxm2"]
    assert out[0]["ratio_to_source"] > 1 > out[1]["ratio_to_source"]
    assert out[0]["eur_per_hour"] == 2.5
