"""The explainer on a real GPU: its throughput matches a plain PyTorch loop, and ResNet-50 is fully accounted for."""

from __future__ import annotations

import statistics

import pytest
import torch

from pygpuperf import diagnose
from pygpuperf.core.timing import release_profiler
from pygpuperf.explain import explainer, trace
from pygpuperf.workloads import get_workload

pytestmark = pytest.mark.gpu

BATCH = 256


def _plain_resnet50_step(batch: int):
    """The textbook loop: torchvision ResNet-50 in channels_last, fp16 autocast, GradScaler, SGD with momentum."""
    import torchvision

    model = torchvision.models.resnet50(weights=None).cuda().to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    images = torch.randn(batch, 3, 224, 224, device="cuda").contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device="cuda")

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    return step


def _plain_step_seconds(batch: int, warmup: int = 10, steps: int = 30) -> float:
    """Mean step of the plain loop: one event pair around `steps` back-to-back steps."""
    step = _plain_resnet50_step(batch)
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / 1e3 / steps


def _tool_step_seconds(batch: int) -> float:
    with get_workload("resnet50-train-amp").build("cuda", batch, memory_format="channels_last", amp="fp16",
                                                   cudnn_benchmark=True) as built:
        return explainer.measure_throughput(built.step, "cuda", built.samples_per_step).step_us.median * 1e-6


def _release() -> None:
    import gc

    gc.collect()
    torch.cuda.empty_cache()


def test_tool_throughput_within_3_percent_of_a_plain_pytorch_loop():
    previous = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        tool, plain = [], []
        for _ in range(2):  # interleaved, so clock drift hits both alike
            tool.append(_tool_step_seconds(BATCH))
            _release()
            plain.append(_plain_step_seconds(BATCH))
            _release()
    finally:
        torch.backends.cudnn.benchmark = previous
    ratio = statistics.median(tool) / statistics.median(plain)
    print(f"tool {BATCH / statistics.median(tool):,.0f} img/s, plain {BATCH / statistics.median(plain):,.0f} img/s, "
          f"step ratio {ratio:.4f}")
    assert abs(ratio - 1) <= 0.03, (tool, plain)


def test_resnet50_explained_with_full_coverage_and_no_miscounted_kernels():
    model = explainer.quick_machine_model("cuda")
    with get_workload("resnet50-train-amp").build("cuda", BATCH, memory_format="channels_last",
                                                   cudnn_benchmark=True) as built:
        explanation = diagnose.explain_built(built, model, "cuda", steps=2).explanation
    step = explanation.median
    assert explanation.throughput is not None and explanation.throughput.peak_memory_bytes > 0
    # The waterfall adds up to the step timed without the profiler (its overhead is taken off idle time).
    w = step.waterfall
    assert w.ideal_us + sum(w.parts.values()) + w.unexplained_us == pytest.approx(w.measured_us, rel=1e-6)
    assert w.measured_us == pytest.approx(explanation.throughput.step_us.median, rel=0.05)
    assert w.coverage >= 0.95
    assert not step.self_check, sorted({(r.op, r.name[:60]) for r in step.self_check})
    assert len(step.kernels) > 300


def test_batch_norm_is_timed_in_each_dtype_and_checked():
    from pygpuperf.trials.norms import time_batch_norm

    timing = time_batch_norm([32, 64, 28, 28], True, True, "cuda")
    # each passed its check against fp32, its forward timed alone beside the whole
    assert set(timing.us) == {f"{k}{part}" for k in ("fp32", "fp16", "bf16") for part in ("", ".forward")}, timing.us
    assert all(timing.us[k + ".forward"] < timing.us[k] for k in ("fp32", "fp16", "bf16"))
    assert all(0 < us < 1e5 for us in timing.us.values())
    assert timing.ratio("bf16", "fp16") is not None


def test_convolutions_are_timed_in_each_dtype_and_checked():
    from pygpuperf.trials.convs import ConvShape, time_conv

    shape = ConvShape([64, 128, 56, 56], [128, 128, 3, 3], [1, 1], [1, 1], [1, 1], 1, True)
    timing = time_conv(shape, True, "cuda")
    assert set(timing.us) == {f"{k}{part}" for k in ("fp32", "fp16", "bf16") for part in ("", ".forward")}, timing.us
    assert all(0 < us < 1e5 for us in timing.us.values())
    assert timing.us["fp16"] < timing.us["fp32"]  # tensor-core math on half the bytes


def test_a_small_batch_norm_is_timed_by_its_kernels_not_by_the_hosts_pace():
    """Timed by events alone, a small training batch norm runs at the pace of the host's autograd calls: on an
    H200, [256, 512, 7, 7]'s backward came out 124 µs at batch 256 and 142 µs at 512, where in a ResNet-50
    step its kernels took 30 and 65 µs; a batch fix priced by that ratio saw no growth."""
    from pygpuperf.trials.norms import time_batch_norm

    shape = [256, 512, 7, 7]
    now = time_batch_norm(shape, True, True, "cuda", dtypes=("fp32",)).phase_us("fp32", "backward")
    doubled = time_batch_norm(shape, True, True, "cuda", dtypes=("fp32",), scale=2).phase_us("fp32@x2", "backward")
    assert now is not None and doubled is not None
    assert doubled / now > 1.6, f"backward {now:.1f} us at batch 256, {doubled:.1f} us at 512"


def test_a_bias_gradient_sum_grows_less_than_its_bytes_and_the_timing_says_so():
    """torch's reduce kernel sums a tall matrix's rows far from its bandwidth bound: in GPT-100M's H200
    profiles at batch 16 and 32 a [16384, 768] bf16 bias gradient took 32.0 and 45.3 us."""
    from pygpuperf.trials.sums import time_sum

    now = time_sum([16384, 768], [0], True, False, "cuda", dtypes=("bf16",)).us["bf16"]
    doubled = time_sum([16384, 768], [0], True, False, "cuda", dtypes=("bf16",), scale=2).us["bf16@x2"]
    assert 1.0 < doubled / now < 1.8, f"{now:.1f} us, {doubled:.1f} us at twice the rows"


def test_a_gemm_whose_library_kernel_changes_with_the_batch_is_timed_at_both():
    """fp32 BERT-base's feed-forward output projection on an H200 (no TF32): a 128x64-tile kernel at batch 32, a
    128x128-tile one at 64, 1.69x the time for twice the work in the step's profiles."""
    from pygpuperf.trials.matmuls import time_matmul

    shapes, layout = [[768], [12288, 3072], [3072, 768]], [False, True]
    now = time_matmul("aten::addmm", shapes, layout, False, "cuda")
    doubled = time_matmul("aten::addmm", shapes, layout, False, "cuda", dtypes=("fp32",), scale=2,
                          sized=[[768], [24576, 3072], [3072, 768]])
    assert set(now.us) == {"fp32", "fp16", "bf16"} and now.us["bf16"] < now.us["fp32"] / 4, now.us
    assert doubled.us["fp32@x2"] / now.us["fp32"] < 1.9, (now.us, doubled.us)


def test_a_small_batchs_attention_grows_less_than_its_work_and_the_timing_says_so():
    """fp32 gpt-tiny training on an H200 (batch 32 to 64, 4 heads of 256 tokens): the efficient kernels'
    forward took 277 → 467 µs and their backward 581 → 967 µs in the step's profiles, 1.67x for twice the work."""
    from pygpuperf.trials.attention import time_attention

    shape = [32, 4, 256, 64]
    now = time_attention(shape, shape, True, True, "cuda")
    doubled = time_attention(shape, shape, True, True, "cuda", dtypes=("fp32",), scale=2)
    assert {"fp32", "fp16", "bf16"} <= set(now.us) and now.us["bf16"] < now.us["fp32"] / 2, now.us
    assert all(now.us[k + ".forward"] < now.us[k] for k in ("fp32", "fp16", "bf16"))
    assert doubled.us["fp32@x2"] / now.us["fp32"] < 1.9, (now.us, doubled.us)


def _launch_bound_step():
    x = torch.rand(1024, device="cuda") + 0.5

    def step() -> torch.Tensor:
        y = x
        for _ in range(300):  # tiny kernels: the host's launches pace the step
            y = y * 1.0001
        return y

    return step


def test_a_launch_bound_step_timed_after_the_trace_is_as_fast_as_before_it():
    """kineto keeps the tracing library attached after a trace; every launch then costs more, and a
    host-bound step timed after the profile (each fix, the baseline again, the next config compared) looks
    slower than it is (30-36 % on the H200 for the built-in host-bound workloads) unless the tool releases it."""
    step = _launch_bound_step()

    def step_us() -> float:
        return explainer.measure_throughput(step, "cuda", 1, warmup=5, steps=30).step_us.median

    # Kept attached, the loop took 1.98x as long on the H200 (2259 -> 4482 us). Released, a host-paced loop's
    # pace still wanders over seconds with no trace at all (docs/investigations.md; 2886, 3679, 3296,
    # 4340, 4079 us in five phases), so each trace is judged against the window just before it.
    ratios = []
    for _ in range(3):
        before = step_us()
        trace.capture_step(step, torch.device("cuda"), steps=2, warmup=1)
        ratios.append(step_us() / before)  # the timing releases it (each --try-fixes fix, a compared config)
    assert statistics.median(ratios) < 1.25, [f"{r:.2f}" for r in ratios]


def test_a_trace_after_the_release_still_ties_every_kernel_to_its_launch_and_call():
    """Released, the tracing library attaches again for the next trace: its kernels keep their host launch
    times and the calls that launched them."""
    step = _launch_bound_step()
    trace.capture_step(step, torch.device("cuda"), steps=2, warmup=1)
    release_profiler(torch.device("cuda"))
    again = trace.capture_step(step, torch.device("cuda"), steps=2, warmup=1, accesses=True)
    kernels = again.steps[-1].kernels
    assert len(kernels) == 300 and all(k.launch_us is not None for k in kernels)
    traced = again.access_step.kernel_calls
    assert len(traced) == 300 and all(c is not None for c in traced)
