"""Profiled steps to kernel records: a hand-written CUDA chrome trace and a real CPU profile."""

import copy
import json
from pathlib import Path

import pytest
import torch

from pygpuperf.explain.classify import MathSettings
from pygpuperf.core.vocabulary import KernelClass
from pygpuperf.explain.trace import (
    STEP_RANGE,
    capture_step,
    kernels_from_chrome_trace,
    module_ranges,
    steps_from_chrome_trace,
)

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def trace():
    return json.loads((FIXTURES / "chrome_trace_cuda.json").read_text())


def by_prefix(records, prefix):
    found = [r for r in records if r.name.startswith(prefix)]
    assert len(found) == 1, (prefix, [r.name[:40] for r in found])
    return found[0]


# --- the hand-written CUDA trace -----------------------------------------------------------


def test_steps_and_windows(trace):
    steps = steps_from_chrome_trace(trace, device_index=0)
    assert [(s.host_start_us, s.host_end_us) for s in steps] == [(1000, 1400), (1420, 1800)]
    # Step 0's last kernel (1312) ended before step 1's host start: the window runs to 1420.
    assert [(s.start_us, s.end_us) for s in steps] == [(1000, 1420), (1420, 1800)]
    assert [len(s.kernels) for s in steps] == [12, 3]
    # The kernel launched at 900 belongs to no step, though it ran into step 0's range.
    assert all(k.start_us >= 1000 for s in steps for k in s.kernels)
    assert steps[0].syncs == [(1020, 1027), (1311, 1314)]
    assert steps[1].syncs == [(1495, 1500)]


def _x(cat, name, ts, end, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": end - ts, "args": args}


def _mm_step(start, end, launch, kernel_start, kernel_end, correlation):
    """A step range whose one aten::mm launches one kernel."""
    return [_x("user_annotation", STEP_RANGE, start, end),
            _x("cpu_op", "aten::mm", launch - 5, launch + 5),
            _x("cuda_runtime", "cudaLaunchKernel", launch, launch + 2, correlation=correlation),
            _x("kernel", "ampere_sgemm_128x64_nn", kernel_start, kernel_end, pid=0, tid=7, stream=7,
               correlation=correlation, device=0)]


def test_window_ends_at_the_last_kernel_when_the_host_ran_ahead():
    # The host queues step 1 while step 0's kernel still runs (a GPU-bound loop).
    events = _mm_step(0, 50, 10, 20, 120, correlation=1) + _mm_step(60, 100, 70, 120, 150, correlation=2)
    steps = steps_from_chrome_trace({"traceEvents": events})
    assert [(s.start_us, s.end_us) for s in steps] == [(0, 120), (120, 150)]
    assert [[k.launch_us for k in s.kernels] for s in steps] == [[10], [70]]


def test_kernel_fields(trace):
    step0, step1 = steps_from_chrome_trace(trace, device_index=0)
    fprop = by_prefix(step0.kernels, "sm90_xmma_fprop")
    assert (fprop.start_us, fprop.duration_us, fprop.stream) == (1064, 26, 7)
    assert fprop.launch_us == 1056  # cuLaunchKernel (driver API) with the same correlation id
    assert (fprop.op, fprop.module, fprop.phase) == ("aten::cudnn_convolution", "conv1", "forward")
    assert fprop.input_shapes[:2] == [[8, 3, 32, 32], [16, 3, 3, 3]]
    assert fprop.dtypes[:2] == ["float16", "float16"]
    assert (fprop.kernel_class, fprop.precision) == (KernelClass.TENSOR_GEMM, "fp16.acc32")

    layout = by_prefix(step0.kernels, "void cudnn::ops::nchwToNhwcKernel")
    assert (layout.module, layout.kernel_class, layout.launch_us) == ("conv1", KernelClass.LAYOUT, 1050)

    addmm = by_prefix(step0.kernels, "nvjet_hsh_64x8_64x16_4x1_v_bz_TNN")
    assert (addmm.op, addmm.module, addmm.input_shapes[1:3]) == ("aten::addmm", "fc", [[8, 64], [64, 10]])

    loss = by_prefix(step0.kernels, "void (anonymous namespace)::softmax_warp_forward")
    assert (loss.op, loss.module, loss.phase, loss.kernel_class) == ("aten::_log_softmax", "", "forward", KernelClass.MEMORY_BOUND)


def test_backward_kernels_take_the_module_of_their_forward_op(trace):
    step0 = steps_from_chrome_trace(trace, device_index=0)[0]
    mm = by_prefix(step0.kernels, "nvjet_hsh_64x8_64x16_4x1_v_bz_NNN")
    assert (mm.op, mm.module, mm.phase) == ("aten::mm", "fc", "backward")
    for prefix in ("sm90_xmma_dgrad", "sm90_xmma_wgrad"):
        r = by_prefix(step0.kernels, prefix)
        assert (r.op, r.module, r.phase) == ("aten::convolution_backward", "conv1", "backward")
        assert (r.kernel_class, r.precision) == (KernelClass.TENSOR_GEMM, "fp16.acc32")
    nccl = by_prefix(step0.kernels, "ncclDevKernel")
    assert (nccl.stream, nccl.phase, nccl.kernel_class) == (20, "backward", KernelClass.COMMUNICATION)


def test_optimizer_and_other_phases(trace):
    step0 = steps_from_chrome_trace(trace, device_index=0)[0]
    opt = by_prefix(step0.kernels, "void at::native::(anonymous namespace)::multi_tensor_apply_kernel")
    assert (opt.op, opt.phase) == ("aten::_foreach_add_", "optimizer")
    assert (opt.kernel_class, opt.precision) == (KernelClass.MEMORY_BOUND, "fp16")
    h2d = by_prefix(step0.kernels, "Memcpy HtoD")
    d2h = by_prefix(step0.kernels, "Memcpy DtoH")
    assert (h2d.op, h2d.phase, h2d.kernel_class) == ("aten::copy_", "other", KernelClass.MEMCPY)
    assert (d2h.op, d2h.phase, d2h.kernel_class) == ("aten::_local_scalar_dense", "other", KernelClass.MEMCPY)
    assert {k.phase for k in step0.kernels} == {"forward", "backward", "optimizer", "other"}


def test_layout_copy_and_external_id_fallback(trace):
    step1 = steps_from_chrome_trace(trace, device_index=0)[1]
    copy_kernel = by_prefix(step1.kernels, "void at::native::elementwise_kernel<128, 2")
    # Launched by aten::copy_ under aten::contiguous with differing strides: a layout change.
    assert (copy_kernel.op, copy_kernel.module, copy_kernel.kernel_class) == ("aten::copy_", "act", KernelClass.LAYOUT)
    fill = by_prefix(step1.kernels, "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor")
    assert fill.launch_us is None  # no runtime event with its correlation id
    assert (fill.op, fill.module, fill.kernel_class, fill.precision) == ("aten::fill_", "act", KernelClass.MEMORY_BOUND, "fp16")


def test_device_filter(trace):
    all_devices = steps_from_chrome_trace(trace)[1].kernels
    assert len(all_devices) == 4
    assert len(steps_from_chrome_trace(trace, device_index=0)[1].kernels) == 3
    assert len(steps_from_chrome_trace(trace, device_index=1)[1].kernels) == 1


def test_kernels_from_chrome_trace_and_settings(trace):
    per_step = kernels_from_chrome_trace(trace, device_index=0)
    assert [len(ks) for ks in per_step] == [12, 3]
    assert [k.start_us for k in per_step[0]] == sorted(k.start_us for k in per_step[0])
    # Settings reach the classifier: an fp16 GEMM named without its accumulator follows the switch.
    t = copy.deepcopy(trace)
    for e in t["traceEvents"]:
        if e.get("name") == "nvjet_hsh_64x8_64x16_4x1_v_bz_TNN":
            e["name"] = "gemm_kernel_from_a_new_library"
        if e.get("name") == "aten::addmm":  # 512 rows: a GEMM, not the fixture's 8-row matrix-vector product
            e["args"]["Input Dims"] = [[64], [512, 64], [64, 64], [], []]
    plain = [k for k in kernels_from_chrome_trace(t, 0)[0] if k.name == "gemm_kernel_from_a_new_library"]
    acc16 = [k for k in kernels_from_chrome_trace(t, 0, MathSettings(fp16_accumulation=True))[0]
             if k.name == "gemm_kernel_from_a_new_library"]  # fmt: skip
    assert [k.precision for k in plain + acc16] == ["fp16.acc32", "fp16.acc16"]


def test_kernel_ops_link_kernels_to_their_op_call(trace):
    step0 = steps_from_chrome_trace(trace, device_index=0)[0]
    assert len(step0.kernel_ops) == len(step0.kernels)
    for kernel, op in zip(step0.kernels, step0.kernel_ops):
        assert op is not None and op.name == kernel.op and op in step0.ops
        assert op.start_us <= (kernel.launch_us or op.start_us) <= op.end_us
    # dgrad and wgrad come from one convolution_backward call: the same HostOp object.
    dgrad, wgrad = (step0.kernel_ops[i] for i, k in enumerate(step0.kernels) if "grad_implicit_gemm" in k.name)
    assert dgrad is wgrad
    assert dgrad.input_shapes[:3] == [[8, 16, 30, 30], [8, 3, 32, 32], [16, 3, 3, 3]]
    conv = step0.kernel_ops[[k.name for k in step0.kernels].index(by_prefix(step0.kernels, "sm90_xmma_fprop").name)]
    # Non-tensor arguments (padding, stride, dilation, groups) as the profiler prints them.
    assert conv.concrete_inputs[2:6] == ["[0, 0]", "[1, 1]", "[1, 1]", "1"]
    assert dgrad.concrete_inputs[-1] == "[True, True, True]"


def test_host_ops_of_the_trace(trace):
    step0 = steps_from_chrome_trace(trace, device_index=0)[0]
    mm = [o for o in step0.ops if o.name == "aten::mm"]
    assert len(mm) == 1
    assert (mm[0].thread, mm[0].phase, mm[0].module, mm[0].top_level) == (4300, "backward", "fc", False)
    conv = [o for o in step0.ops if o.name == "aten::conv2d"][0]
    assert (conv.phase, conv.module, conv.sequence, conv.top_level) == ("forward", "conv1", 10, True)
    # The ops are in time order and none is an autograd engine range.
    assert [o.start_us for o in step0.ops] == sorted(o.start_us for o in step0.ops)
    assert not any(o.name.startswith("autograd::engine") for o in step0.ops)


def test_older_category_spellings_and_profiler_step_marks(trace):
    reference = steps_from_chrome_trace(trace, device_index=0)
    old = copy.deepcopy(trace)
    renames = {"cpu_op": "Operator", "cuda_runtime": "Runtime", "kernel": "Kernel", "gpu_memcpy": "Memcpy"}
    for e in old["traceEvents"]:
        e["cat"] = renames.get(e.get("cat"), e.get("cat"))
        if e.get("name") == STEP_RANGE:
            e["name"] = f"ProfilerStep#{int(e['ts'])}"
    steps = steps_from_chrome_trace(old, device_index=0)
    assert [(s.start_us, s.end_us) for s in steps] == [(s.start_us, s.end_us) for s in reference]
    for a, b in zip(steps, reference):
        assert [(k.name, k.op, k.module, k.phase, k.launch_us) for k in a.kernels] == [
            (k.name, k.op, k.module, k.phase, k.launch_us) for k in b.kernels
        ]


def test_trace_without_step_marks_is_one_step(trace):
    t = copy.deepcopy(trace)
    t["traceEvents"] = [e for e in t["traceEvents"] if e.get("name") != STEP_RANGE]
    steps = steps_from_chrome_trace(t, device_index=0)
    assert len(steps) == 1
    assert len(steps[0].kernels) == 16  # every kernel of GPU 0, the early one included


# --- a real CPU profile ----------------------------------------------------------------------


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 4, 3)
        self.act = torch.nn.ReLU()
        self.conv2 = torch.nn.Conv2d(4, 2, 3)
        self.fc = torch.nn.Linear(2 * 4 * 4, 3)

    def forward(self, x):
        return self.fc(torch.flatten(self.conv2(self.act(self.conv1(x))), 1))


@pytest.fixture(scope="module")
def cpu_capture(tmp_path_factory):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(2, 3, 8, 8), torch.randint(0, 3, (2,))

    def step():
        inputs = x * 1.0  # input preparation before the model: phase "other"
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), y)
        loss.backward()
        opt.step()

    path = tmp_path_factory.mktemp("trace") / "cpu_trace.json"
    return model, capture_step(step, "cpu", steps=2, warmup=1, model=model, trace_path=str(path))


def test_cpu_capture_steps(cpu_capture):
    model, cap = cpu_capture
    assert cap.device == "cpu"
    assert [s.index for s in cap.steps] == [0, 1]
    s0, s1 = cap.steps
    assert s0.start_us < s0.end_us == s1.start_us < s1.end_us
    assert s0.host_start_us == s0.start_us  # no device: the window follows the host ranges
    # Without device kernels the records are the ops with cost rules, outermost only, so they never overlap.
    for step in cap.steps:
        ends = [(r.start_us, r.end_us) for r in sorted(step.kernels, key=lambda r: r.start_us)]
        assert all(a_end <= b_start + 1e-3 for (_, a_end), (b_start, _) in zip(ends, ends[1:]))
        convs = [r for r in step.kernels if r.op == "aten::conv2d"]
        assert [(r.module, r.phase, r.kernel_class) for r in convs] == [("conv1", "forward", "vector_math"),
                                                                        ("conv2", "forward", "vector_math")]
        assert convs[0].input_shapes[:2] == [[2, 3, 8, 8], [4, 3, 3, 3]]
        assert any(r.kernel_class == "memory_bound" and r.op == "aten::relu" for r in step.kernels)
        assert any(r.phase == "backward" and r.op == "aten::convolution_backward" for r in step.kernels)
        assert not any(r.op == "aten::convolution" for r in step.kernels)  # inside conv2d: part of its time
    # The hooks are gone after the capture.
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())


def test_cpu_capture_forward_ops(cpu_capture):
    _, cap = cpu_capture
    for step in cap.steps:
        top = [o for o in step.ops if o.top_level]
        assert (top[0].name, top[0].phase) == ("aten::mul", "other")
        convs = [o for o in top if o.name == "aten::conv2d"]
        assert [(o.module, o.phase) for o in convs] == [("conv1", "forward"), ("conv2", "forward")]
        assert convs[0].input_shapes[:3] == [[2, 3, 8, 8], [4, 3, 3, 3], [4]]
        assert convs[0].dtypes[:3] == ["float32", "float32", "float32"]
        assert convs[0].concrete_inputs[3:7] == ["[1, 1]", "[0, 0]", "[1, 1]", "1"]  # stride, padding, dilation, groups
        linear = [o for o in top if o.name == "aten::linear"]
        assert [(o.module, o.input_shapes[:2]) for o in linear] == [("fc", [[2, 32], [3, 32]])]
        relu = [o for o in top if o.name == "aten::relu"]
        assert [o.module for o in relu] == ["act"]
        # The loss is outside every module but inside the forward pass.
        loss = [o for o in top if o.name == "aten::cross_entropy_loss"]
        assert [(o.module, o.phase) for o in loss] == [("", "forward")]


def test_cpu_capture_backward_and_optimizer_ops(cpu_capture):
    _, cap = cpu_capture
    for step in cap.steps:
        conv_bwd = [o for o in step.ops if o.name == "aten::convolution_backward"]
        assert sorted(o.module for o in conv_bwd) == ["conv1", "conv2"]
        assert {o.phase for o in conv_bwd} == {"backward"}
        assert {o.module for o in step.ops if o.name == "AddmmBackward0"} == {"fc"}
        optimizer = [o for o in step.ops if o.phase == "optimizer"]
        assert optimizer and {o.module for o in optimizer} == {""}
        # SGD updates every parameter (one op per tensor or one foreach op over the list).
        updated = set()
        for o in optimizer:
            if o.name in ("aten::add_", "aten::_foreach_add_") and o.input_shapes:
                first = o.input_shapes[0]
                tensors = first if first and isinstance(first[0], list) else [first]
                updated.update(tuple(t) for t in tensors)
        assert updated >= {(4, 3, 3, 3), (4,), (2, 4, 3, 3), (2,), (3, 32), (3,)}
        # Backward comes before the optimizer.
        assert max(o.start_us for o in conv_bwd) < min(o.start_us for o in optimizer)


def test_cpu_capture_kept_trace_parses_with_the_lead_in_step(cpu_capture):
    _, cap = cpu_capture
    trace = json.loads(Path(cap.trace_path).read_text())
    steps = steps_from_chrome_trace(trace)
    assert len(steps) == len(cap.steps) + 1
    assert [(s.start_us, s.end_us) for s in steps[1:]] == [(s.start_us, s.end_us) for s in cap.steps]


def test_module_ranges_close_when_forward_raises():
    class Boom(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), Boom())
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with module_ranges(model):
            with pytest.raises(RuntimeError):
                model(torch.randn(1, 2))
            with torch.autograd.profiler.record_function(STEP_RANGE):
                torch.ones(3).sum()
    events = [e for e in prof.events() if e.name.startswith("module::")]
    assert sorted(e.name for e in events) == ["module::", "module::0", "module::1"]
    # The step range started after the failed forward: no module range encloses it.
    step = next(e for e in prof.events() if e.name == STEP_RANGE)
    assert all(e.time_range.end <= step.time_range.start for e in events)


def test_a_sync_after_the_last_steps_range_is_not_the_steps_own():
    # The profiling loop drains the device after the last step (capture_step): the call waits on that step's
    # kernel, but the step's code did not make it. The sync inside the step's range is its own.
    events = _mm_step(0, 50, 10, 20, 120, correlation=1) + [
        _x("cuda_runtime", "cudaStreamSynchronize", 30, 40),
        _x("cuda_runtime", "cudaDeviceSynchronize", 60, 121),
    ]
    (step,) = steps_from_chrome_trace({"traceEvents": events})
    assert step.syncs == [(30, 40)]
