"""Findings of an explained step, on synthetic kernels and on the H200 ResNet-50 numbers."""

import dataclasses
import json
from pathlib import Path

import pytest

from pygpuperf.explain import attribution
from pygpuperf.diagnose import findings
from pygpuperf.explain.model import ExplainedStep, Explanation
from pygpuperf.explain.model import Idle, KernelRecord, Timeline, Waterfall
from pygpuperf.core.results import Ceiling, MachineModel

FIXTURES = Path(__file__).parent / "fixtures"


def model(acc32: float = 883.0, acc16: float | None = 964.0) -> MachineModel:
    m = MachineModel(device="cuda:0")
    values = {"tensor.fp16.acc32": acc32, "tensor.tf32.acc32": 490.0, "cuda.fp32": 66.0}
    if acc16 is not None:
        values["tensor.fp16.acc16"] = acc16
    for key, value in values.items():
        m.compute[key] = Ceiling(value, "TFLOP/s", f"compute.{key}", "native-cuda")
    m.memory["hbm"] = Ceiling(4700.0, "GB/s", "memory.hbm.write", "native-cuda")
    return m


def kernel(cls: str, us: float, op: str = "aten::add", precision: str = "", bound: float | None = None,
           name: str = "k") -> KernelRecord:
    return KernelRecord(name=name, start_us=0.0, duration_us=us, op=op, kernel_class=cls, precision=precision,
                        bound_us=bound)


def explained(records: list[KernelRecord], idle: Idle | None = None, unknown: dict | None = None,
              coverage: float | None = None, device: str = "cuda:0") -> Explanation:
    """Kernels back to back from t=0, then the idle time: a step whose wall is their sum."""
    t = 0.0
    for r in records:
        r.start_us, t = t, t + r.duration_us
    idle = idle or Idle()
    line = Timeline(wall_us=t + idle.total_us, busy_us=t, idle=idle)
    bound = sum(min(r.bound_us, r.duration_us) for r in records if r.bound_us is not None)
    parts = {"no_bound": sum(r.duration_us for r in records if r.bound_us is None)}
    water = Waterfall(ideal_us=bound, parts=parts, measured_us=line.wall_us, unexplained_us=0.0,
                      coverage=1.0 if coverage is None else coverage)
    step = ExplainedStep(0, records, line, water, attribution.self_check(records))
    return Explanation(device, [step], step, unknown or {})


def titles(found) -> str:
    return "\n".join(f.title for f in found)


def by_title(found, words: str):
    hits = [f for f in found if words in f.title]
    assert len(hits) == 1, titles(found)
    return hits[0]


# --------------------------------------------------------------------------- synthetic steps


def test_layout_transforms_point_to_channels_last():
    e = explained([kernel("tensor_gemm", 600, "aten::cudnn_convolution", "fp16.acc32", 500),
                   kernel("layout", 200, "aten::cudnn_convolution"), kernel("memory_bound", 200, bound=150)])
    f = by_title(findings.explain_findings(e, {"memory_format": "nchw"}), "Layout transforms")
    assert f.severity == "warning" and "20.0% of the step" in f.title and "0.20 of 1.00 ms" in f.title
    assert "channels_last" in f.suggestion and f.evidence["by_op_us"] == {"aten::cudnn_convolution": 200}
    # Already channels_last: the ops that still transpose are named instead.
    f = by_title(findings.explain_findings(e, {"memory_format": "channels_last"}), "Layout transforms")
    assert "already runs channels_last" in f.suggestion and "aten::cudnn_convolution" in f.suggestion


def test_small_layout_share_is_not_a_finding():
    e = explained([kernel("tensor_gemm", 980, "aten::mm", "fp16.acc32", 900), kernel("layout", 20, "aten::clone")])
    assert not [f for f in findings.explain_findings(e) if "Layout" in f.title]


def test_host_bound_idle_suggests_graphs_compile_and_batch():
    e = explained([kernel("tensor_gemm", 650, "aten::mm", "fp16.acc32", 600)],
                  Idle(host_bound_us=300.0, launch_gap_us=50.0))
    f = by_title(findings.explain_findings(e, {"batch_size": "64", "cuda_graphs": "off", "compile": "off"}),
                 "idles waiting on the host")
    assert "35.0% of the step at batch 64" in f.title and f.evidence["share"] == pytest.approx(0.35)
    assert "CUDA graph" in f.suggestion and "torch.compile" in f.suggestion and "batch size" in f.suggestion
    # What is already on is not suggested again.
    f = by_title(findings.explain_findings(e, {"cuda_graphs": "on (whole step in one graph)",
                                               "compile": "inductor"}), "idles waiting on the host")
    assert "CUDA graph" not in f.suggestion and "torch.compile the model" not in f.suggestion
    assert "at this batch size" in f.title


def test_idle_below_threshold_or_without_kernels_is_not_a_finding():
    busy = explained([kernel("tensor_gemm", 950, "aten::mm", "fp16.acc32", 900)], Idle(host_bound_us=50.0))
    assert not [f for f in findings.explain_findings(busy) if "idles" in f.title]
    cpu = explained([], Idle(host_bound_us=1000.0))
    assert not [f for f in findings.explain_findings(cpu) if "idles" in f.title]


def test_synchronization_is_its_own_finding():
    e = explained([kernel("tensor_gemm", 900, "aten::mm", "fp16.acc32", 850)], Idle(sync_us=100.0))
    f = by_title(findings.explain_findings(e), "waits on the device")
    assert "10.0% of the step" in f.title and ".item()" in f.suggestion


def test_cudnn_benchmark_off_with_convolutions():
    e = explained([kernel("tensor_gemm", 500, "aten::cudnn_convolution", "fp16.acc32", 450),
                   kernel("memory_bound", 500, bound=400)])
    f = by_title(findings.explain_findings(e, {"cudnn_benchmark": "off (torch setting)"}), "cudnn.benchmark")
    assert f.severity == "info" and "0.50 ms of convolution kernels" in f.title and "50.0%" in f.title
    assert "cudnn_benchmark=on" in f.suggestion
    for settings in ({"cudnn_benchmark": "on"}, {"cudnn_benchmark": True}, {}, None):
        assert not [g for g in findings.explain_findings(e, settings) if "cudnn.benchmark" in g.title]
    no_conv = explained([kernel("tensor_gemm", 500, "aten::mm", "fp16.acc32", 450)])
    assert not [g for g in findings.explain_findings(no_conv, {"cudnn_benchmark": False}) if "cudnn" in g.title]


def test_fp32_math_without_tf32():
    e = explained([kernel("vector_math", 100, "aten::mm", "fp32", 20), kernel("tensor_gemm", 900, "aten::mm",
                                                                             "fp16.acc32", 850)])
    f = by_title(findings.explain_findings(e, {"tf32": "off"}, model()), "without TF32")
    assert f.severity == "warning" and "10.0% of the step" in f.title
    assert "tf32=on" in f.suggestion and "490 vs CUDA-core FP32 66" in f.suggestion
    for on in ("on", "matmul on, conv on (torch setting)"):
        f = by_title(findings.explain_findings(e, {"tf32": on}), "without TF32")
        assert "already allowed" in f.suggestion
    # Partly on (convolutions only) still suggests allowing it.
    f = by_title(findings.explain_findings(e, {"tf32": "matmul off, conv on (torch setting)"}), "without TF32")
    assert "tf32=on" in f.suggestion
    small = explained([kernel("vector_math", 40, "aten::mm", "fp32", 8), kernel("tensor_gemm", 960, "aten::mm")])
    assert not [g for g in findings.explain_findings(small) if "TF32" in g.title]


def test_fp32_accumulate_on_a_half_rate_card():
    e = explained([kernel("tensor_gemm", 600, "aten::cudnn_convolution", "fp16.acc32", 500),
                   kernel("memory_bound", 400, bound=300)])
    f = by_title(findings.explain_findings(e, None, model(acc32=70.0, acc16=140.0)), "accumulating in FP32")
    assert "60.0% of the step" in f.title and "at 50% of the FP16-accumulate rate (70 vs 140" in f.title
    assert f.evidence["ratio"] == pytest.approx(0.5) and "fp16_accumulation=on" in f.suggestion
    # A data-center card (0.92) or a model without the fp16-accumulate figure: nothing to say.
    for m in (model(), model(acc16=None), None):
        assert not [g for g in findings.explain_findings(e, None, m) if "accumulating" in g.title]


def test_memory_bound_share_of_kernel_time_and_how_close_to_bandwidth():
    slow = explained([kernel("memory_bound", 600, bound=180), kernel("tensor_gemm", 400, "aten::mm",
                                                                     "fp16.acc32", 350)], Idle(host_bound_us=50))
    f = by_title(findings.explain_findings(slow, None, model()), "Memory-bound kernels")
    assert "60.0% of kernel time (0.60 of 1.00 ms)" in f.title and "HBM bandwidth" in f.title
    assert f.evidence["bandwidth_efficiency"] == pytest.approx(0.3) and "30% of the measured 4,700 GB/s" in f.suggestion
    fast = explained([kernel("memory_bound", 600, bound=480), kernel("tensor_gemm", 400, "aten::mm")])
    f = by_title(findings.explain_findings(fast, None, model()), "Memory-bound kernels")
    assert "already move their bytes at 80%" in f.suggestion
    compute = explained([kernel("memory_bound", 400, bound=300), kernel("tensor_gemm", 600, "aten::mm")])
    assert not [g for g in findings.explain_findings(compute) if "Memory-bound" in g.title]


def test_self_check_violations_are_tool_warnings_not_errors():
    records = [kernel("memory_bound", 10, "aten::clamp_min_", bound=12) for _ in range(3)]
    records += [kernel("tensor_gemm", 100, "aten::cudnn_convolution", "fp16.acc32", bound=110),
                kernel("layout", 900, "aten::cudnn_convolution")]
    found = findings.explain_findings(explained(records))
    # pygpuperf's miscount, not the user's problem: no error finding (which would fail the run's exit code).
    assert not [f for f in found if f.severity == "error"]
    found = [f for f in found if "miscounts" in f.title]
    assert found[0].severity == "warning"
    assert "4 kernel(s) ran faster than the roofline bound pygpuperf gives them (up to 1.20x)" in found[0].title
    assert "aten::clamp_min_ (3), aten::cudnn_convolution (1)" in found[0].title
    assert found[0].evidence["by_op"] == {"aten::clamp_min_": 3, "aten::cudnn_convolution": 1}


def test_low_coverage_names_unknown_ops():
    e = explained([kernel("other", 300, "aten::mystery"), kernel("tensor_gemm", 700, "aten::mm", "fp16.acc32", 600)],
                  unknown={"aten::mystery": 300.0}, coverage=0.7)
    f = by_title(findings.explain_findings(e), "held against a ceiling")
    assert "Only 70.0% of the step" in f.title and "0.30 ms in kernels with no bound" in f.title
    assert "aten::mystery" in f.suggestion
    e.median.waterfall.coverage = 0.95
    assert not [g for g in findings.explain_findings(e) if "held against" in g.title]


def test_finding_lines():
    e = explained([kernel("layout", 500, "aten::copy_"), kernel("tensor_gemm", 500, "aten::mm", "fp16.acc32", 400)])
    lines = findings.finding_lines(findings.explain_findings(e))
    assert lines[0].startswith("[warning] Layout copies") and lines[1].startswith("    -> ")


def test_copies_in_a_model_without_convolutions_get_no_channels_last_advice():
    # A transformer's head split and merge: .contiguous() copies around matmuls and attention.
    e = explained([kernel("tensor_gemm", 500, "aten::mm", "bf16.acc32", 400),
                   kernel("layout", 200, "aten::contiguous"), kernel("tensor_gemm", 300, "aten::_flash_attention_forward",
                                                                     "bf16.acc32", 250)])
    f = by_title(findings.explain_findings(e, {"memory_format": "nchw"}), "Layout copies")
    # No convolutions: the advice names no mechanism the model does not use.
    assert "channels_last" not in f.suggestion and "aten::contiguous" in f.suggestion
    assert "model.to(memory_format" not in f.suggestion and "cuDNN" not in f.suggestion


GPU_WORDS = ("cuda", "cudnn", "gpu", "tensor core", "tensor-core", "graph", "launch", "hbm", "tf32")


def test_a_cpu_step_gets_cpu_words_and_no_gpu_advice():
    records = [kernel("vector_math", 600, "aten::mkldnn_convolution", "fp32", 300),
               kernel("layout", 100, "aten::mkldnn_convolution"),
               kernel("memory_bound", 800, "aten::add_", "fp32", 200)]
    e = explained(records, Idle(host_bound_us=900.0), device="cpu")
    settings = {"cudnn_benchmark": "off (torch setting)", "tf32": "matmul off, conv off (torch setting)",
                "memory_format": "nchw", "batch_size": "16", "cuda_graphs": "off", "compile": "off"}
    found = findings.explain_findings(e, settings, model())
    assert found, "the layout and memory-bound findings apply on a CPU too"
    text = " ".join(f"{f.title} {f.suggestion}" for f in found).lower()
    assert not [w for w in GPU_WORDS if w in text], text
    # The same step on a GPU does get the GPU advice: the words depend on the device, not on luck.
    gpu = " ".join(f"{f.title} {f.suggestion}" for f in findings.explain_findings(
        explained(records, Idle(host_bound_us=900.0)), settings, model())).lower()
    assert "cudnn" in gpu and "cuda graph" in gpu


# --------------------------------------------------------------------------- H200 ResNet-50 numbers


def h200(config: str) -> tuple[Explanation, dict]:
    """One config of the fixture as a step: one kernel per (class, precision, conv) group, back to back."""
    doc = json.loads((FIXTURES / "explain_resnet50_h200.json").read_text())["configs"][config]
    records = [kernel(g["class"], g["time_us"], "aten::cudnn_convolution" if g["conv"] else "aten::add_",
                      g["precision"], g["bound_us"] or None) for g in doc["kernels"]]
    e = explained(records, Idle(**doc["timeline"]["idle"]), coverage=doc["waterfall"]["coverage"])
    assert e.median.timeline.wall_us == pytest.approx(doc["timeline"]["wall_us"], abs=0.01)
    settings = {"batch_size": str(doc["batch_size"]), "memory_format": doc["memory_format"],
                "cudnn_benchmark": "off (torch setting)", "cuda_graphs": "off", "compile": "off"}
    return e, settings


def test_h200_nchw_spends_a_sixth_of_the_step_on_layout():
    e, settings = h200("nchw")
    found = findings.explain_findings(e, settings, model())
    assert "15.7% of the step (13.5 of 86.0 ms)" in by_title(found, "Layout transforms").title
    assert "64.9% of kernel time" in by_title(found, "Memory-bound").title
    assert not [f for f in found if "idles" in f.title]  # 3.2 % idle: NCHW keeps the GPU busy
    assert not [f for f in found if "accumulating" in f.title]  # H200: FP32 accumulate at 92 % rate


def test_h200_channels_last_idles_more_at_batch_64():
    e256, s256 = h200("channels_last")
    e64, s64 = h200("channels_last_bs64")
    f256 = findings.explain_findings(e256, s256, model())
    f64 = findings.explain_findings(e64, s64, model())
    assert not [f for f in f256 if "Layout" in f.title]
    assert "21.7% of the step at batch 256" in by_title(f256, "idles waiting on the host").title
    idle64 = by_title(f64, "idles waiting on the host")
    assert "66.4% of the step at batch 64" in idle64.title and "batch size" in idle64.suggestion
    assert "cudnn.benchmark is off" in by_title(f256, "cudnn.benchmark").title
    # On a half-rate card the same AMP step would draw the accumulate finding.
    half = findings.explain_findings(e256, s256, model(acc32=440.0, acc16=880.0))
    assert "25.3% of the step" in by_title(half, "accumulating in FP32").title


def test_memory_findings_name_a_batch_that_did_not_fit_and_estimate_one_that_would():
    from pygpuperf.explain.model import Throughput
    from pygpuperf.core.results import Stats

    step = explained([kernel("tensor_gemm", 100.0, "aten::mm", "fp16.acc32", bound=60.0)])
    halved = by_title(findings.explain_findings(step, {"batch_size_requested": "512", "batch_size": "256"}, model()),
                      "does not fit")
    assert halved.severity == "warning" and "batch 256" in halved.title
    m = model()
    m.capacity["memory"] = Ceiling(80e9, "B", "test", "")
    step = dataclasses.replace(step, throughput=Throughput(Stats(100.0, 100.0, 100.0, 100.0, 0.0, 5), 256,
                                                           peak_memory_bytes=20e9, resident_memory_bytes=4e9))
    estimate = by_title(findings.explain_findings(step, {"batch_size": "256"}, m), "would fit")
    assert "about 1216 samples" in estimate.title  # (80 - 4) GB / (16 GB / 256)
    assert estimate.evidence["batch_that_fits"] == 1216


def test_a_fixs_evidence_carries_the_trials_predictions_at_the_windows_host_and_the_fixed_clock():
    """findings.json and the finding's words say what the fix measured and what the kernel model predicts for the
    conditions its windows ran in; a trial timed without them says the measurement alone."""
    from pygpuperf.diagnose import causes
    from pygpuperf.trials import fixes

    fix = causes.Fix("tf32", "TF32 on", 10_000.0, 20_000.0, {"tf32": "on"})
    trial = fixes.FixTrial("tf32", "TF32 on", {"tf32": "on"}, "measured", predicted_step_us=20_000.0,
                           measured_step_us=22_000.0, predicted_at_windows_host_us=21_500.0,
                           predicted_at_fixed_clock_us=20_300.0)
    evidence = findings._fix_evidence(fix, {"tf32": trial})
    assert evidence["measured_step_us"] == 22_000.0 and evidence["trial_predicted_at_windows_host_us"] == 21_500.0
    assert evidence["trial_predicted_at_fixed_clock_us"] == 20_300.0
    said = findings._measured_words(fix, {"tf32": trial})
    assert "22.00 ms" in said and "21.50 at the host's pace beside its windows" in said and "20.30 at the fixed" in said
    plain = fixes.FixTrial("tf32", "TF32 on", {"tf32": "on"}, "measured", predicted_step_us=20_000.0,
                           measured_step_us=22_000.0)
    assert "trial_predicted_at_fixed_clock_us" not in findings._fix_evidence(fix, {"tf32": plain})
    assert "predicted" not in findings._measured_words(fix, {"tf32": plain})
