"""Fused attention timed per dtype and batch on the step's own shapes, and the batch fix priced by it."""

import json

import pytest

from pygpuperf.core.results import Ceiling, MachineModel, Stats
from pygpuperf.trials import attention, fixes
from pygpuperf.compare import explained as compare
from pygpuperf.explain.model import ExplainedStep, Explanation, Idle, KernelRecord, Throughput, Timeline, Waterfall
from pygpuperf.report.explained import explain_document
from pygpuperf.trials.record import Trials

_NONE = [""] * 8


def _efficient(phase="forward", mask_type="1", dropout="0.", bias=()):
    """An efficient-attention kernel as the profiler records it: query, key and value [batch, sequence, heads,
    head dim]."""
    qkv = [[8, 128, 4, 32]] * 3
    if phase == "forward":
        shapes = qkv + [list(bias)] + [[]] * 10
        concrete = _NONE + [dropout, mask_type, "True", "", "", ""]
        op = "aten::_efficient_attention_forward"
    else:
        shapes = [[8, 128, 4, 32]] + qkv + [list(bias), [8, 128, 4, 32]] + [[]] * 14
        concrete = _NONE + ["128", "128", "", dropout, "", "", mask_type, "False", "", "", "", "False"]
        op = "aten::_efficient_attention_backward"
    return KernelRecord(name="fmha_cutlassF_f32_aligned_64x64_rf_sm80", start_us=0.0, duration_us=100.0, op=op,
                        kernel_class="vector_math", precision="fp32", flops=1e6, bytes=1e4, phase=phase,
                        input_shapes=shapes, dtypes=["float32"] * len(shapes), concrete_inputs=concrete)


def _cudnn(phase="forward", causal="True"):
    """A cuDNN attention kernel: query, key and value [batch, heads, sequence, head dim]."""
    qkv = [[2, 12, 256, 64]] * 3
    if phase == "forward":
        shapes, concrete = qkv + [[]] * 10, _NONE + ["True", "0.", causal, "False", ""]
        op = "aten::_cudnn_attention_forward"
    else:
        shapes = [[2, 12, 256, 64]] + qkv + [[2, 12, 256, 64], [2, 12, 256, 1]] + [[]] * 10
        concrete = [""] * 11 + ["256", "256", "0.", causal, ""]
        op = "aten::_cudnn_attention_backward"
    return KernelRecord(name="cudnn_generated_fort_native_sdpa_sm90_flash_fprop", start_us=0.0, duration_us=80.0,
                        op=op, kernel_class="matrix", precision="bf16", flops=1e6, bytes=1e4, phase=phase,
                        input_shapes=shapes, dtypes=["bfloat16"] * len(shapes), concrete_inputs=concrete)


def test_each_backends_forward_and_backward_share_one_key_heads_first_and_causal_as_recorded():
    key = ((8, 4, 128, 32), (8, 4, 128, 32), True)
    assert attention._attention_of(_efficient()) == key == attention._attention_of(_efficient("backward"))
    assert attention._attention_of(_efficient(mask_type="0"))[2] is False
    cudnn = ((2, 12, 256, 64), (2, 12, 256, 64), True)
    assert attention._attention_of(_cudnn()) == cudnn == attention._attention_of(_cudnn("backward"))
    assert attention._attention_of(_cudnn(causal="False"))[2] is False


def test_an_attention_with_dropout_or_a_mask_is_not_timed_and_other_ops_are_not_attention():
    assert attention._attention_of(_efficient(dropout="0.1")) == ()
    assert attention._attention_of(_efficient("backward", bias=(8, 4, 128, 128))) == ()
    other = KernelRecord(name="k", start_us=0.0, duration_us=1.0, op="aten::mm")
    assert attention._attention_of(other) is None
    assert attention.attention_shapes([_efficient(), _efficient("backward"), _efficient(dropout="0.1")]) == [
        ((8, 4, 128, 32), (8, 4, 128, 32), True)]


def test_a_training_attention_is_timed_forward_and_whole_in_each_dtype_and_checked():
    # Long enough a sequence that the backward outweighs the timer's noise on a busy two-core machine.
    timing = attention.time_attention([2, 4, 256, 32], [2, 4, 256, 32], True, True, "cpu", samples=7)
    assert {"fp32", "fp32.forward"} <= set(timing.us), timing.us
    assert timing.us["fp32.forward"] < timing.us["fp32"]  # the backward's kernels come on top
    doubled = attention.time_step_attention([_efficient(), _efficient("backward")], True, "cpu", samples=3,
                                            dtypes=("fp32",), scale=2)
    assert [set(t.us) for t in doubled] == [{"fp32@x2", "fp32@x2.forward"}]
    assert doubled[0].query == [8, 4, 128, 32]  # keyed by the step's own shape


def test_a_wrong_result_is_left_out(monkeypatch):
    monkeypatch.setitem(attention.TOLERANCE, "bf16", 0.0)  # bf16 rounds: no attention of it is exactly fp32's
    timing = attention.time_attention([1, 2, 16, 8], [1, 2, 16, 8], False, False, "cpu", samples=3,
                                      dtypes=("fp32", "bf16"))
    assert "fp32" in timing.us and "bf16" not in timing.us


def test_a_batch_fix_prices_each_attention_phase_by_its_own_ratio(tmp_path):
    model = MachineModel(device="cpu")
    model.compute["simd.fp32"] = Ceiling(1e-3, "TFLOP/s", "compute.simd.fp32", "native-cpu")
    kernels = [_efficient(), _efficient("backward")]
    kernels[1].start_us = 100.0
    line = Timeline(wall_us=250.0, busy_us=200.0, idle=Idle(host_bound_us=50.0))
    step = ExplainedStep(0, kernels, line, Waterfall(0.0, {}, 250.0, 0.0, 1.0), [])
    e = Explanation("cpu", [step], step, {}, Throughput(Stats.of([250.0] * 3), 8), {"batch_size": "8"})
    by_model = fixes.predicted_at_batch(e, model, 2.0)
    # Timed: the forward 1.5x at twice the batch (30 → 45 µs), the backward 1.75x (70 → 122.5 µs).
    timed = Trials(attention_timings=(attention.AttentionTiming([8, 4, 128, 32], [8, 4, 128, 32], True, True,
                                                                {"fp32": 100.0, "fp32.forward": 30.0,
                                                                 "fp32@x2": 167.5, "fp32@x2.forward": 45.0}),))
    assert by_model != pytest.approx(250.0 + 50.0 + 75.0)
    assert fixes.predicted_at_batch(e, model, 2.0, timed) == pytest.approx(250.0 + 50.0 + 75.0)
    (tmp_path / "explain.json").write_text(json.dumps(explain_document(e, None, timed), default=str))
    _, back = compare.load_explained(tmp_path)  # validated against the schema
    assert [t.to_dict() for t in back.attention_timings] == [t.to_dict() for t in timed.attention_timings]


def test_grouped_query_attention_is_timed_with_its_own_key_heads():
    timing = attention.time_attention([1, 8, 32, 16], [1, 2, 32, 16], True, False, "cpu", samples=3,
                                      dtypes=("fp32",))
    assert set(timing.us) == {"fp32"} and timing.key() == ((1, 8, 32, 16), (1, 2, 32, 16), True)
