"""The batch-norm timing an AMP dtype fix is priced by: each dtype timed and checked against fp32."""

import pytest

from pygpuperf.explain import norms


def test_each_dtype_is_timed_and_one_off_the_fp32_reference_is_left_out(monkeypatch):
    timing = norms.time_batch_norm([4, 8, 6, 6], True, True, "cpu", samples=3)
    assert set(timing.us) == {"fp32", "fp16", "bf16"} and all(us > 0 for us in timing.us.values())
    assert timing.ratio("bf16", "fp16") == pytest.approx(timing.us["bf16"] / timing.us["fp16"])
    monkeypatch.setitem(norms.TOLERANCE, "bf16", 0.0)  # bf16 rounds: no result of it is exactly fp32's
    checked = norms.time_batch_norm([4, 8, 6, 6], True, True, "cpu", samples=3)
    assert "bf16" not in checked.us and "fp32" in checked.us and checked.ratio("bf16", "fp16") is None
