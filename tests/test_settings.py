"""The one reader of a workload's recorded settings: every spelling the workloads and torch's flags write."""

from pygpuperf.core.settings import StepSettings, switch


def test_on_off_settings_are_read_by_their_first_word():
    assert switch("on (whole step in one graph)") is True and switch("off (torch setting)") is False
    assert switch(True) is True and switch("Yes") is True and switch("0") is False
    assert switch("waived: the step syncs") is None and switch(None) is None and switch("inductor") is None


def test_tf32_is_on_only_where_matmuls_and_convolutions_both_use_it():
    split = StepSettings.parse({"tf32": "matmul off, conv on (torch setting)"})
    assert (split.tf32_matmul, split.tf32_conv, split.tf32) == (False, True, False)
    assert StepSettings.parse({"tf32": "matmul on, conv on (torch setting)"}).tf32 is True
    assert StepSettings.parse({"tf32": "on"}).tf32 is True and StepSettings.parse({}).tf32 is None


def test_the_step_settings_a_diagnosis_decides_by():
    s = StepSettings.parse({"batch_size": "256", "amp": "BF16", "memory_format": "contiguous_format",
                            "cuda_graphs": "on (whole step in one graph)", "compile": "inductor",
                            "cudnn_benchmark": "on (torch setting)", "fp16_accumulation": "off"})
    assert s.batch_size == 256 and s.amp == "bf16" and s.nchw and s.cuda_graphs is True and s.compiled
    assert s.flag("cudnn_benchmark") is True and s.flag("fp16_accumulation") is False
    eager = StepSettings.parse({"compile": "off", "batch_size": "n/a", "memory_format": "channels_last"})
    assert not eager.compiled and eager.batch_size is None and not eager.nchw and eager.cuda_graphs is None
