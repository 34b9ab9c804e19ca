"""Re-pricing a profiled step on another machine model: synthetic steps with known answers."""

from __future__ import annotations

import dataclasses
import functools
import subprocess
import sys

import pytest

from pygpuperf.explain import attribution
from pygpuperf.core.vocabulary import Part
from pygpuperf.analyze.machine_model import machine_model as datasheets_model
from pygpuperf.analyze.kernel_time import Access
from pygpuperf.explain.model import CallAccesses, ExplainedStep, Explanation, Throughput
from pygpuperf.explain.model import Idle, KernelRecord, Timeline, Waterfall
from pygpuperf.core.vocabulary import KernelClass
from pygpuperf.explain.pricing import runs_as
from pygpuperf.predict import predict as _predict
from pygpuperf.predict import predict_batch

# These steps check the kernel model's terms under the proportional reading (each kernel keeps the same fraction of
# its bound), at peak ceilings; the default reading has tests of its own (test_predict_cards.py).
predict = functools.partial(_predict, residual="proportional", ceilings="peak")
from pygpuperf.core.results import Ceiling, MachineModel, Stats


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
    gemm = KernelRecord("gemm", start_us=0.0, duration_us=2000.0, kernel_class=KernelClass.TENSOR_GEMM, precision=gemm_precision,
                        flops=100e12 * 1e-3, bytes=1e6)
    elementwise = KernelRecord("add", start_us=2000.0, duration_us=4000.0, kernel_class=KernelClass.MEMORY_BOUND,
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
    assert _by(p, KernelClass.MEMORY_BOUND) == pytest.approx((4000.0, 2000.0))
    assert _by(p, KernelClass.TENSOR_GEMM) == pytest.approx((2000.0, 2000.0))
    assert p.step_us == pytest.approx(8000.0)
    assert p.ratio_to_source == pytest.approx(10 / 8)


def test_half_rate_accumulate_doubles_fp16_acc32_gemm_time():
    p = predict(_profile(), _model(), _model(fp16_acc32=50.0))
    assert _by(p, KernelClass.TENSOR_GEMM) == pytest.approx((2000.0, 4000.0))
    assert _by(p, KernelClass.MEMORY_BOUND) == pytest.approx((4000.0, 4000.0))
    # fp16 with fp16 accumulate is held against its own (full-rate) figure
    p16 = predict(_profile("fp16.acc16"), _model(), _model(fp16_acc32=50.0))
    assert _by(p16, KernelClass.TENSOR_GEMM) == pytest.approx((2000.0, 2000.0))


def test_idle_stays_fixed_and_profiler_overhead_comes_off_host_idle():
    p = predict(_profile(), _model(), _model(hbm=4000.0, fp16_acc32=400.0))
    for category, us in ((Part.IDLE_HOST, 2000.0), (Part.IDLE_LAUNCH, 1000.0), (Part.IDLE_SYNC, 1000.0)):
        assert _by(p, category) == (us, us)
    assert p.step_us == pytest.approx(4000.0 + 500.0 + 1000.0)
    trimmed = predict(_profile(), _model(), _model(), source_step_us=8500.0)
    assert _by(trimmed, Part.IDLE_HOST) == (500.0, 500.0)
    assert trimmed.source_step_us == pytest.approx(8500.0)
    assert any("profiler overhead" in n for n in trimmed.notes)


def test_bf16_on_a_card_without_bf16_runs_as_fp16_with_a_note():
    assert runs_as("bf16.acc32", _model(bf16=False)) == ("fp16.acc32", "bf16 is not supported: runs as fp16")
    assert runs_as("bf16.acc32", _model()) == ("bf16.acc32", None)
    v100_like = _model(fp16_acc32=50.0, bf16=False)
    p = predict(_profile("bf16.acc32"), _model(), v100_like)
    assert _by(p, KernelClass.TENSOR_GEMM) == pytest.approx((2000.0, 4000.0))  # priced at the fp16.acc32 figure
    assert any("runs as fp16" in n for n in p.notes)
    assert "substitute dtype" in p.confidence


def _with_throughput(profile: Explanation, batch: int = 256, peak_gb: float | None = None,
                     resident_gb: float | None = None) -> Explanation:
    step_us = Stats(10000.0, 10000.0, 10000.0, 10000.0, 0.0, 10)
    return dataclasses.replace(profile, throughput=Throughput(step_us, batch, peak_gb * 1e9 if peak_gb else None,
                                                              resident_gb * 1e9 if resident_gb else None))


def _with_memory(model: MachineModel, gb: float) -> MachineModel:
    model.capacity["memory"] = Ceiling(gb * 1e9, "B", "t", "t")
    return model


def test_a_step_that_does_not_fit_is_predicted_at_the_largest_batch_that_does():
    # 4 GB resident + 36 GB of activations at batch 256 (0.140625 GB per sample); the target has 16 GB
    profile = _with_throughput(_profile(), batch=256, peak_gb=40.0, resident_gb=4.0)
    for record in profile.median.kernels:
        record.phase = "forward"  # both kernels grow with the batch
    p = predict(profile, _model(), _with_memory(_model(), 16.0))
    assert p.samples_per_step == 85  # (16 - 4) / 0.140625 = 85.3
    assert p.source_samples_per_step == 256
    scale = 85 / 256
    assert p.step_us == pytest.approx(6000.0 * scale + 4000.0)  # kernels scale, idle (4 ms) does not
    assert p.throughput == pytest.approx(85 / (p.step_us * 1e-6))
    assert any("does not fit" in n and "batch 85" in n for n in p.notes)
    # Enough memory: the profiled batch; unknown peak: said so.
    assert predict(profile, _model(), _with_memory(_model(), 80.0)).samples_per_step == 256
    assert any("peak memory of the profile unknown" in n for n in predict(_profile(), _model(), _model()).notes)
    # Weights and state alone too big: no batch fits, and the note says so.
    tiny = predict(profile, _model(), _with_memory(_model(), 3.0))
    assert any("alone do not fit" in n for n in tiny.notes)


def _with_l2(model: MachineModel, capacity: float) -> MachineModel:
    model.memory["l2"] = Ceiling(4000.0, "GB/s", "t", "t")
    model.capacity["l2"] = Ceiling(capacity, "B", "t", "t")
    return model


def test_a_reread_that_stays_in_the_source_l2_but_not_the_target_s_streams_from_dram_there():
    """Reuse decides the level, per card: a 20 MB activation written by one kernel and read by the next is
    an L2 hit under a 50 MB L2 and a DRAM read under a 6 MB one."""
    mb = 1e6
    calls = [CallAccesses(0, "aten::mul", (Access(1, int(20 * mb), True),)),
             CallAccesses(1, "aten::add", (Access(1, int(20 * mb), False), Access(2, int(20 * mb), True)))]
    write = KernelRecord("write", start_us=0.0, duration_us=40.0, kernel_class=KernelClass.MEMORY_BOUND, bytes=20 * mb, call=0)
    reread = KernelRecord("reread", start_us=50.0, duration_us=40.0, kernel_class=KernelClass.MEMORY_BOUND, bytes=40 * mb, call=1)
    line = Timeline(wall_us=90.0, busy_us=80.0, idle=Idle(host_bound_us=10.0))
    step = ExplainedStep(0, [write, reread], line, Waterfall(0, {}, 90.0, 0, 1), [])
    profile = Explanation("synthetic", [step], step, calls=calls)
    source, target = _with_l2(_model(), 50 * mb), _with_l2(_model(), 6 * mb)
    # Source: the reread's 20 MB read hits the L2, its 20 MB write goes to HBM: 20 us of HBM traffic, 40 measured.
    p = predict(profile, source, target)
    assert _by(p, KernelClass.MEMORY_BOUND) == pytest.approx((80.0, 40.0 + 40.0 * 2))  # 40 MB from HBM on the target: twice
    assert predict(profile, source, _with_l2(_model(), 50 * mb)).step_us == pytest.approx(90.0)


def _batch_profile() -> Explanation:
    """A forward GEMM (compute-bound, 1000 us of work measured at 1100 with 100 us fixed), a tiny forward kernel
    (all fixed cost), and an optimizer kernel over the parameters; fixed cost 100 us per kernel."""
    gemm = KernelRecord("gemm", start_us=0.0, duration_us=1100.0, kernel_class=KernelClass.TENSOR_GEMM, precision="fp16.acc32",
                        flops=100e12 * 1e-3, bytes=1e6, phase="forward", call=0)
    tiny = KernelRecord("tiny", start_us=1100.0, duration_us=100.0, kernel_class=KernelClass.MEMORY_BOUND, bytes=1000.0,
                        phase="forward", call=1)
    update = KernelRecord("adam", start_us=1200.0, duration_us=600.0, kernel_class=KernelClass.MEMORY_BOUND, bytes=500e6,
                          phase="optimizer", call=2)
    calls = [CallAccesses(0, "aten::mm", (Access(1, 500_000, False), Access(2, 500_000, False, True))),
             CallAccesses(1, "aten::relu", (Access(3, 1000, True),)),
             CallAccesses(2, "aten::_foreach_add_", (Access(2, 500_000_000, True, True),))]
    line = Timeline(wall_us=1800.0, busy_us=1800.0, idle=Idle())
    step = ExplainedStep(0, [gemm, tiny, update], line, Waterfall(0, {}, 1800.0, 0, 1), [])
    timed = Throughput(Stats(1800.0, 1800.0, 1800.0, 1800.0, 0.0, 10), 64)
    return Explanation("synthetic", [step], step, throughput=timed, calls=calls)


def _with_fixed_cost(model: MachineModel, us: float) -> MachineModel:
    model.latency["kernel.duration"] = Ceiling(us * 1e3, "ns", "t", "t")
    return model


def test_a_batch_change_scales_the_work_not_the_fixed_cost_nor_the_optimizer():
    model = _with_fixed_cost(_model(), 100.0)
    profile = _batch_profile()
    same = predict_batch(profile, model, 64)
    assert same.step_us == pytest.approx(1800.0)
    quarter = predict_batch(profile, model, 16)
    assert quarter.samples_per_step == 16
    # GEMM: 100 fixed + 1000 x 1/4; the tiny kernel stays at its fixed cost; the optimizer does not shrink.
    assert quarter.step_us == pytest.approx(100 + 250 + 100 + 600)
    fixed_share_64 = 200 / 1800  # of the two forward kernels' fixed costs in the step
    fixed_share_16 = 200 / quarter.step_us
    assert fixed_share_16 > 1.5 * fixed_share_64
    assert quarter.throughput == pytest.approx(16 / (quarter.step_us * 1e-6))
    # The host's time per step, where given, bounds the step from below.
    assert predict_batch(profile, model, 16, host_step_us=5000.0).step_us == pytest.approx(5000.0)


def test_the_residual_carried_from_the_source_is_reported():
    model = _with_fixed_cost(_model(), 100.0)
    faster = _with_fixed_cost(_model(fp16_acc32=200.0), 100.0)
    p = predict(_batch_profile(), model, faster)
    # GEMM work 1000 -> 500 us on the target; it carried no residual (measured = fixed + work). The optimizer's
    # 500 MB at 1000 GB/s is 500 us of work, measured 600 - 100: no residual either.
    assert p.carried_us == pytest.approx(0.0, abs=1e-6)
    slow = _batch_profile()
    gemm, tiny, update = slow.median.kernels
    gemm.duration_us, tiny.start_us, update.start_us = 2100.0, 2100.0, 2200.0  # GEMM: 100 fixed + 2 x its work
    q = predict(slow, model, faster)
    assert q.carried_us == pytest.approx(500.0)  # the second 500 us of the GEMM on the target
    assert "residual carried from the source" in q.confidence


def test_validation_takes_ratios_inside_each_group():
    from pygpuperf.analyze.machine_model import load_model
    from pygpuperf.predict import validate

    source = load_model("datasheet:h200-sxm")
    published = {"reference": "a100-sxm4-80gb", "figures": [
        {"card": "a100-sxm4-80gb", "samples_per_s": 2000, "group": "g1"},
        {"card": "v100-sxm2", "samples_per_s": 1000, "group": "g1"},
        {"card": "v100-16gb", "priced_as": "v100-sxm2", "samples_per_s": 500, "group": "g2"},
        {"card": "rtx3090", "samples_per_s": 1000, "group": "g2"},
        {"card": "quadro-x", "samples_per_s": 9, "group": "g2"},
        {"card": "rtx3090", "samples_per_s": 1, "group": "g2", "precision": "fp32"}]}
    groups = validate(_with_throughput(_profile()), source, published)
    assert [g.name for g in groups] == ["g1", "g2"]
    g1, g2 = groups
    assert g1.reference == "a100-sxm4-80gb" and [r.card for r in g1.rows] == ["v100-sxm2"]
    assert g1.rows[0].published_ratio == 0.5
    assert g2.reference == "v100-16gb" and g2.skipped == ["quadro-x"]  # no a100 in g2: its first card
    assert g2.rows[0].published_ratio == 2.0  # the fp32 figure is left out
    v100 = next(r for r in g1.rows if r.card == "v100-sxm2")
    assert g2.rows[0].predicted_ratio == pytest.approx(g2.rows[0].predicted / v100.predicted)
    from pygpuperf.predict import absolute_errors
    absolute = absolute_errors(groups)  # each group's reference and rows: the V100 is priced once per group
    assert len(absolute) == 4
    assert absolute[1] == pytest.approx(v100.predicted / 1000 - 1) and absolute[2] == pytest.approx(v100.predicted / 500 - 1)


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
    assert len(lines) == 1 and "datasheet:no-such-card: no such card" in lines[0]


def test_cli_json_ranks_targets(tmp_path, capsys):
    import json

    from pygpuperf.cli.predict import run

    profile = tmp_path / "explain.json"
    profile.write_text(json.dumps(_profile().to_dict()), encoding="utf-8")
    assert run(["--profile", str(profile), "--source-model", "datasheet:a100-sxm4-80gb", "--target",
                "datasheet:v100-sxm2", "--target", "datasheet:h100-sxm", "--price", "h100-sxm=2.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["target"] for p in out] == ["h100-sxm", "v100-sxm2"]
    assert out[0]["ratio_to_source"] > 1 > out[1]["ratio_to_source"]
    assert out[0]["eur_per_hour"] == 2.5


def test_cli_out_writes_json_chart_and_page(tmp_path):
    import json

    from pygpuperf.cli.predict import run

    profile = tmp_path / "explain.json"
    profile.write_text(json.dumps(_with_throughput(_profile(), batch=128).to_dict()), encoding="utf-8")
    out = tmp_path / "out"
    assert run(["--profile", str(profile), "--source-model", "datasheet:h200-sxm", "--target", "datasheet:rtx3090",
                "--target", "datasheet:a100-sxm4-80gb", "--price", "rtx3090=0.3", "--out", str(out)]) == 0
    doc = json.loads((out / "prediction.json").read_text())
    assert [d["target"] for d in doc] == ["a100-sxm4-80gb", "rtx3090"]
    assert doc[0]["samples_per_step"] == 128  # the profile's batch
    assert doc[1]["samples_per_eur"] == pytest.approx(doc[1]["throughput_per_s"] * 3600 / 0.3)
    assert (out / "prediction.png").stat().st_size > 10_000
    page = (out / "prediction.html").read_text()
    assert "Predicted on other cards" in page and "rtx3090" in page and "<script" not in page


def test_a_cpu_profile_priced_on_a_gpu_says_its_math_stays_off_the_tensor_cores():
    cpu = MachineModel(device="cpu", compute={"simd.fp32": Ceiling(1.0, "TFLOP/s", "t", "t")},
                       memory={"dram": Ceiling(100.0, "GB/s", "t", "t")})
    record = KernelRecord("aten::mm", start_us=0.0, duration_us=2000.0, kernel_class="vector_math", precision="fp32",
                          flops=1e9, bytes=1e6)
    line = Timeline(wall_us=2000.0, busy_us=2000.0, idle=Idle())
    step = ExplainedStep(0, [record], line, Waterfall(0, {}, 2000.0, 0, 1), [])
    p = predict(Explanation("cpu", [step], step), cpu, _model())
    assert _by(p, "vector_math") == pytest.approx((2000.0, 2000.0 * 50.0 / 1000.0))  # 1 -> 20 TFLOP/s CUDA cores
    assert any("comes from a CPU" in n for n in p.notes)
    assert not any("comes from a CPU" in n for n in predict(_profile(), _model(), _model()).notes)


@pytest.mark.parametrize("content, fragment", [
    ('{"device": "x", "timeline": {}, "waterfall": {}, "kernels": []}', "not a valid explain.json"),
    ('{"device": "x", "timeline": {"wall_us": 1, "busy_us": 1, "idle": {}}, "waterfall": {"ideal_us": 1, '
     '"parts": {}, "measured_us": 1, "unexplained_us": 0, "coverage": 1}, "kernels": [{"name": "k", '
     '"start_us": 0, "duration_us": -5}]}', "not a valid explain.json at kernels/0/duration_us"),
    ("[1, 2", "not valid JSON"),
    ('{"device": NaN}', "not valid JSON"),
])
def test_cli_rejects_a_malformed_profile_in_one_line(tmp_path, content, fragment):
    profile = tmp_path / "explain.json"
    profile.write_text(content, encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "pygpuperf.predict", "--profile", str(profile),
                             "--source-model", "datasheet:h200-sxm", "--target", "datasheet:rtx3090"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr


def test_cli_rejects_a_malformed_validation_file_in_one_line(tmp_path):
    import json

    profile = tmp_path / "explain.json"
    profile.write_text(json.dumps(_with_throughput(_profile()).to_dict()), encoding="utf-8")
    published = tmp_path / "published.json"
    published.write_text('{"figures": [{"card": "rtx3090", "samples_per_s": -1}]}', encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "pygpuperf.predict", "--profile", str(profile),
                             "--source-model", "datasheet:h200-sxm", "--validate", str(published)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a valid published-figures file at figures/0/samples_per_s" in lines[0]


def test_a_tf32_profile_on_a_card_without_tf32_runs_on_its_fp32_vector_units():
    source = _model()
    source.compute["tensor.tf32.acc32"] = Ceiling(50.0, "TFLOP/s", "t", "t")
    flops = 50e12 * 1e-3  # 1 ms at the source's TF32 rate; measured at 2 ms
    gemm = KernelRecord("tf32 gemm", start_us=0.0, duration_us=2000.0, kernel_class=KernelClass.TENSOR_GEMM,
                        precision="tf32.acc32", flops=flops, bytes=1e6)
    attribution.assign_bounds([gemm], source)
    line = Timeline(wall_us=2000.0, busy_us=2000.0, idle=Idle())
    step = ExplainedStep(0, [gemm], line, Waterfall(0, {}, 2000.0, 0, 1), [])
    v100 = datasheets_model("v100-sxm2")  # Volta: tensor cores take fp16 only
    assert "tensor.tf32.acc32" not in v100.compute
    p = predict(Explanation("cuda:0", [step], step), source, v100)
    fp32 = v100.compute["cuda.fp32"].value  # 15.7 TFLOP/s
    # Same efficiency against its bound as on the source, the bound now at the V100's fp32 CUDA-core rate.
    assert p.step_us == pytest.approx(2000.0 * (flops / (fp32 * 1e12)) / 1e-3, rel=1e-6)
    assert any("tf32 is not supported: runs as fp32 on the vector units" in n for n in p.notes)
    assert _by(p, KernelClass.TENSOR_GEMM) == pytest.approx((2000.0, p.step_us))  # the source's class, repriced
    assert p.step_us > 2000.0 * 3  # 15.7 against 50 TFLOP/s: not the H200 time the old fallback kept


def test_each_published_figure_is_priced_from_the_profile_of_its_workload_and_settings():
    from pygpuperf.predict import profile_for

    def profile(**settings: str) -> Explanation:
        return dataclasses.replace(_profile(), settings=settings)

    nhwc = profile(workload="resnet50-train-amp", amp="fp16", memory_format="channels_last")
    nchw = profile(workload="resnet50-train-amp", amp="fp16", memory_format="nchw")
    fp32 = profile(workload="resnet50-train", amp="none", memory_format="nchw")
    profiles = [nhwc, nchw, fp32]
    figure = {"card": "x", "samples_per_s": 1, "workload": "resnet50-train", "precision": "amp-fp16"}
    assert profile_for({**figure, "config": {"memory_format": "nhwc"}}, profiles) is nhwc  # the source's spelling
    assert profile_for({**figure, "config": {"memory_format": "nchw"}}, profiles) is nchw
    assert profile_for({**figure, "precision": "tf32"}, profiles) is fp32  # TF32 is how the fp32 model runs
    assert profile_for({**figure, "workload": "bert-base-squad-train"}, profiles) is None
    unnamed = {k: v for k, v in figure.items() if k != "workload"}
    bert = profile(workload="bert-base-squad-train", amp="fp16")
    assert profile_for(unnamed, [bert, nhwc]) is None  # a figure of no named workload is not priced from BERT
    assert profile_for(unnamed, [nhwc, nchw]) is nhwc  # profiles of one workload: the figure is of it


def test_the_sm_residual_carries_a_kernels_excess_as_time_not_as_a_fraction():
    """The GEMM is bounded at 1 ms and took 2 ms. On a card with half the tensor rate the proportional
    reading keeps 50 % of the bound (4 ms); the sm reading adds the 1 ms excess to the 2 ms bound (3 ms),
    scaled by the clock ratio when the clocks differ."""
    slow = _model(fp16_acc32=50.0)
    proportional = predict(_profile(), _model(), slow, residual="proportional")
    sm = predict(_profile(), _model(), slow, residual="sm")
    assert _by(proportional, KernelClass.TENSOR_GEMM)[1] == pytest.approx(4000.0)
    assert _by(sm, KernelClass.TENSOR_GEMM)[1] == pytest.approx(3000.0)
    fast_clock, slow_clock = _model(), _model(fp16_acc32=50.0)
    fast_clock.facts["clock_mhz"], slow_clock.facts["clock_mhz"] = 2000.0, 1000.0
    assert _by(predict(_profile(), fast_clock, slow_clock, residual="sm"), KernelClass.TENSOR_GEMM)[1] == pytest.approx(4000.0)
    assert predict(_profile(), _model(), _model(), residual="sm").step_us == pytest.approx(10000.0)


def test_a_batch_prediction_resizes_a_memory_kernel_as_the_batch_fix_does_its_ramp_overlapping_its_stream():
    from pygpuperf.core.results import LinkFit

    model = _model(hbm=20.0)
    # The card's copy sweep: 20 GB/s after a 30 us ramp per kernel (no fixed cost measured).
    model.memory_fits["hbm.copy"] = LinkFit("memory.size.sweep", "t", 20.0, 30.0, 6e5, 8, 0.01, 1e3, 1e9)
    add = KernelRecord("add", start_us=0.0, duration_us=100.0, kernel_class=KernelClass.MEMORY_BOUND, precision="fp16",
                       bytes=1e6, phase="forward")  # a 50 us bound, streaming at half its bandwidth
    line = Timeline(wall_us=100.0, busy_us=100.0, idle=Idle())
    step = ExplainedStep(0, [add], line, Waterfall(0, {}, 100.0, 0, 1), [])
    timed = Throughput(Stats(100.0, 100.0, 100.0, 100.0, 0.0, 10), 8)
    profile = Explanation("synthetic", [step], step, throughput=timed)
    assert predict_batch(profile, model, 16).step_us == pytest.approx(2 * 100.0)  # the ramp hides in the stream
    assert predict_batch(profile, model, 1).step_us == pytest.approx(30.0)  # shrunk below it, the ramp is left
