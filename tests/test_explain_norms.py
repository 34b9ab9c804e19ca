"""The batch-norm timing an AMP dtype fix is priced by: each dtype timed and checked against fp32."""

import pytest

from pygpuperf.trials import norms


def test_each_dtype_is_timed_and_one_off_the_fp32_reference_is_left_out(monkeypatch):
    timing = norms.time_batch_norm([4, 8, 6, 6], True, True, "cpu", samples=3)
    # Training: each dtype forward and backward, and its forward alone.
    assert set(timing.us) == {"fp32", "fp16", "bf16", "fp32.forward", "fp16.forward", "bf16.forward"}
    assert all(us > 0 for us in timing.us.values())
    assert timing.ratio("bf16", "fp16") == pytest.approx(timing.us["bf16"] / timing.us["fp16"])
    assert set(norms.time_batch_norm([4, 8, 6, 6], True, False, "cpu", samples=3).us) == {"fp32", "fp16", "bf16"}
    monkeypatch.setitem(norms.TOLERANCE, "bf16", 0.0)  # bf16 rounds: no result of it is exactly fp32's
    checked = norms.time_batch_norm([4, 8, 6, 6], True, True, "cpu", samples=3)
    assert "bf16" not in checked.us and "bf16.forward" not in checked.us and "fp32" in checked.us
    assert checked.ratio("bf16", "fp16") is None and checked.ratio("bf16", "fp16", "forward") is None


def test_a_kernel_takes_the_ratio_of_its_own_phase_where_the_forward_was_timed_apart():
    from pygpuperf.explain.model import KernelRecord

    def bn(phase, shape=(4, 8, 6, 6)):
        return KernelRecord(name="bn", start_us=0.0, duration_us=1.0, phase=phase, input_shapes=[list(shape)],
                            input_strides=[[288, 36, 6, 1]],
                            op="aten::cudnn_batch_norm" + ("_backward" if phase == "backward" else ""))

    # forward 10 -> 18 at twice the batch, backward 15 -> 30
    timed = norms.NormTiming([4, 8, 6, 6], False, True, {"fp16": 25.0, "fp16.forward": 10.0, "fp16@x2": 48.0,
                                                        "fp16@x2.forward": 18.0})
    ratio = norms.ratios([timed], "fp16@x2", "fp16")
    assert ratio(bn("forward")) == pytest.approx(1.8) and ratio(bn("backward")) == pytest.approx(2.0)
    assert ratio(bn("other")) == pytest.approx(48.0 / 25.0)  # no phase: the whole op's
    assert ratio(bn("backward", (2, 8, 6, 6))) == pytest.approx(2.0)  # a shape not timed: the timed ones' by phase
    whole = norms.NormTiming([4, 8, 6, 6], False, True, {"fp16": 25.0, "fp16@x2": 48.0})  # timed before the split
    assert norms.ratios([whole], "fp16@x2", "fp16")(bn("forward")) == pytest.approx(48.0 / 25.0)
