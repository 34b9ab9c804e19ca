"""Roofline bounds per kernel, the waterfall from the ideal to the measured step, the self-check and A/B deltas."""

from __future__ import annotations

import pytest

from pygpuperf.analyze.kernel_time import FIXED_KEY, Access
from pygpuperf.explain import attribution as at
from pygpuperf.explain.model import Idle, CallAccesses, KernelRecord, Timeline
from pygpuperf.core.vocabulary import KernelClass, Part
from pygpuperf.core.results import Ceiling, MachineModel
from pygpuperf.explain import pricing


def _model() -> MachineModel:
    def tflops(v: float, src: str) -> Ceiling:
        return Ceiling(v, "TFLOP/s", src, "test")

    def gbs(v: float, src: str) -> Ceiling:
        return Ceiling(v, "GB/s", src, "test")

    return MachineModel(
        device="synthetic",
        compute={"tensor.fp16.acc32": tflops(100, "compute.tensor.fp16.acc32"),
                 "library.bf16": tflops(50, "compute.library.bf16"),  # no instruction-level bf16 figure
                 "tensor.tf32.acc32": tflops(50, "compute.tensor.tf32.acc32"),
                 "cuda.fp32": tflops(10, "compute.cuda.fp32")},
        memory={"hbm": gbs(1000, "memory.hbm.copy"), "l2": gbs(5000, "memory.l2.copy")},
        links={"h2d.pinned": gbs(10, "transfer.h2d.pinned")},
        communication={"all_reduce": gbs(100, "collective.all_reduce")},
    )


def k(name: str, start: float, duration: float, cls: str, *, flops: float = 0.0, nbytes: float = 0.0,
      precision: str = "", op: str = "", shapes: list[list[int]] | None = None, phase: str = "forward",
      module: str = "") -> KernelRecord:
    return KernelRecord(name=name, start_us=start, duration_us=duration, op=op, module=module, phase=phase,
                        input_shapes=shapes or [], kernel_class=cls, precision=precision, flops=flops, bytes=nbytes)


def test_bounds_pick_the_ceiling_of_class_and_precision():
    m = _model()
    gemm = k("sm90_xmma_gemm", 0, 25, KernelClass.TENSOR_GEMM, flops=1e9, nbytes=1e6, precision="fp16.acc32")
    assert pricing.kernel_bound(gemm, m) == (pytest.approx(10.0), "compute:tensor.fp16.acc32")
    bf16 = k("gemm_bf16", 0, 30, KernelClass.TENSOR_GEMM, flops=1e9, nbytes=1e6, precision="bf16.acc32")
    assert pricing.kernel_bound(bf16, m) == (pytest.approx(20.0), "compute:library.bf16")
    elementwise = k("vectorized_elementwise_kernel", 0, 10, KernelClass.MEMORY_BOUND, flops=1e6, nbytes=4e6)
    assert pricing.kernel_bound(elementwise, m) == (pytest.approx(4.0), "memory:hbm")
    sgemm = k("sgemm_128x64", 0, 150, KernelClass.VECTOR_MATH, flops=1e9, nbytes=1e6, precision="fp32")
    assert pricing.kernel_bound(sgemm, m) == (pytest.approx(100.0), "compute:cuda.fp32")
    assert pricing.tensor_bound(sgemm, m) == (pytest.approx(20.0), "compute:tensor.tf32.acc32")
    h2d = k("Memcpy HtoD (Pinned -> Device)", 0, 120, KernelClass.MEMCPY, nbytes=2e6)  # the copy counts 1 MB read and written
    assert pricing.kernel_bound(h2d, m) == (pytest.approx(100.0), "links:h2d.pinned")
    d2d = k("Memcpy DtoD (Device -> Device)", 0, 3, KernelClass.MEMCPY, nbytes=2e6)
    assert pricing.kernel_bound(d2d, m) == (pytest.approx(2.0), "memory:hbm")
    nccl = k("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 0, 12, KernelClass.COMMUNICATION, nbytes=1e6)
    assert pricing.kernel_bound(nccl, m) == (pytest.approx(10.0), "communication:all_reduce")


def test_no_bound_without_the_limiting_work_or_for_other_kernels():
    m = _model()
    assert pricing.kernel_bound(k("mystery", 0, 5, KernelClass.OTHER, flops=1e9, nbytes=1e9), m) == (None, "")
    assert pricing.kernel_bound(k("gemm", 0, 5, KernelClass.TENSOR_GEMM, nbytes=1e6, precision="fp16.acc32"), m) == (None, "")
    assert pricing.kernel_bound(k("gemm", 0, 5, KernelClass.TENSOR_GEMM, flops=1e9, precision="fp8.acc32"), m) == (None, "")
    assert pricing.kernel_bound(k("ncclDevKernel_SendRecv", 0, 5, KernelClass.COMMUNICATION, nbytes=1e6), m) == (None, "")


def test_precision_falls_back_to_the_record_dtypes():
    gemm = k("gemm", 0, 25, KernelClass.TENSOR_GEMM, flops=1e9)
    gemm.dtypes = ["c10::Half", "c10::Half"]
    assert pricing.kernel_bound(gemm, _model())[1] == "compute:tensor.fp16.acc32"


def _step() -> tuple[list[KernelRecord], Timeline]:
    records = [
        k("gemm", 0, 25, KernelClass.TENSOR_GEMM, flops=1e9, nbytes=1e6, precision="fp16.acc32"),  # bound 10
        k("elementwise", 30, 10, KernelClass.MEMORY_BOUND, flops=1e6, nbytes=4e6),  # bound 4
        k("sgemm", 40, 150, KernelClass.VECTOR_MATH, flops=1e9, nbytes=1e6, precision="fp32"),  # 100 on CUDA cores, 20 as tf32
        k("nchwToNhwcKernel", 190, 8, KernelClass.LAYOUT, nbytes=2e6),
        k("Memcpy DtoD (Device -> Device)", 198, 3, KernelClass.MEMCPY, nbytes=2e6),  # bound 2
        k("mystery", 201, 4, KernelClass.OTHER),
        k("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 205, 12, KernelClass.COMMUNICATION, nbytes=1e6),  # bound 10
    ]
    busy = sum(r.duration_us for r in records)  # one stream, no overlap: 212
    idle = Idle(host_bound_us=20, launch_gap_us=5, sync_us=3)  # the launch gap is 25..30
    return records, Timeline(wall_us=busy + idle.total_us, busy_us=busy, idle=idle)


def test_waterfall_adds_up_from_the_ideal_to_the_measured_step():
    records, timeline = _step()
    w = at.waterfall(records, timeline, _model())
    assert list(w.parts) == list(at.WATERFALL_PARTS)
    assert w.ideal_us == pytest.approx(10 + 4 + 20 + 2 + 10)
    assert w.parts == pytest.approx({
        Part.FIXED: 0, Part.TENSOR: 15, Part.MEMORY: 6, Part.FALLBACK: 130, Part.LAYOUT: 8, Part.MEMCPY: 1,
        Part.COMMUNICATION: 2, Part.OTHER: 4, Part.IDLE_HOST: 20, Part.IDLE_LAUNCH: 5, Part.IDLE_SYNC: 3})
    assert w.measured_us == 240
    assert w.ideal_us + sum(w.parts.values()) == pytest.approx(w.measured_us, abs=1e-9)
    assert w.unexplained_us == pytest.approx(0, abs=1e-9)
    assert w.coverage == pytest.approx((240 - 4) / 240)


def test_what_the_timeline_leaves_out_is_unexplained():
    records, timeline = _step()
    timeline.wall_us += 12  # time neither the kernels nor the idle split account for
    w = at.waterfall(records, timeline, _model())
    assert w.unexplained_us == pytest.approx(12)
    assert w.ideal_us + sum(w.parts.values()) + w.unexplained_us == pytest.approx(w.measured_us)
    assert w.coverage == pytest.approx((252 - 12 - 4) / 252)


def test_overlapping_streams_share_the_time_they_overlap():
    gemm = k("gemm", 0, 100, KernelClass.TENSOR_GEMM, flops=1e9, precision="fp16.acc32")  # bound 10
    nccl = k("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 50, 100, KernelClass.COMMUNICATION, nbytes=1e6)  # bound 10
    nccl.stream = 7
    assert at.exclusive_times([gemm, nccl]) == pytest.approx([75, 75])
    w = at.waterfall([gemm, nccl], Timeline(wall_us=150, busy_us=150, idle=Idle()), _model())
    assert w.ideal_us == pytest.approx(15)
    assert w.parts[Part.TENSOR] == pytest.approx(67.5)
    assert w.parts[Part.COMMUNICATION] == pytest.approx(67.5)
    assert w.unexplained_us == pytest.approx(0, abs=1e-9)


def test_self_check_flags_kernels_faster_than_their_bound():
    m = _model()
    records = [k("too_fast", 0, 5, KernelClass.TENSOR_GEMM, flops=1e9, precision="fp16.acc32"),  # bound 10 > 5
               k("barely", 10, 9.6, KernelClass.TENSOR_GEMM, flops=1e9, precision="fp16.acc32"),  # 10 <= 1.05 x 9.6
               k("just_over", 20, 9.5, KernelClass.TENSOR_GEMM, flops=1e9, precision="fp16.acc32"),  # 10 > 1.05 x 9.5
               k("mystery", 30, 1, KernelClass.OTHER)]
    at.assign_bounds(records, m)
    assert records[0].bound_us == pytest.approx(10) and records[0].ceiling == "compute:tensor.fp16.acc32"
    assert records[3].bound_us is None
    assert [r.name for r in at.self_check(records)] == ["too_fast", "just_over"]
    # in the waterfall a kernel that beats its bound is all ideal, never a negative part
    w = at.waterfall(records[:1], Timeline(wall_us=5, busy_us=5, idle=Idle()), m)
    assert (w.ideal_us, w.parts[Part.TENSOR]) == (pytest.approx(5), 0)


def test_op_work_splits_by_duration_and_gemm_flops_stay_on_math_kernels():
    conv = dict(op="aten::cudnn_convolution", shapes=[[8, 64, 56, 56], [64, 64, 3, 3]], flops=1e9, nbytes=3e6,
                module="layer1.0.conv1")
    records = [k("nchwToNhwcKernel", 0, 10, KernelClass.LAYOUT, **conv),
               k("sm80_xmma_fprop", 10, 80, KernelClass.TENSOR_GEMM, precision="fp16.acc32", **conv),
               k("splitKreduce_kernel", 90, 10, KernelClass.MEMORY_BOUND, **conv)]
    at.distribute_op_costs(records)
    assert [r.flops for r in records] == pytest.approx([0, 1e9, 0])
    assert [r.bytes for r in records] == pytest.approx([0.3e6, 2.4e6, 0.3e6])


def test_consecutive_calls_of_one_op_are_told_apart_by_repeated_kernel_names():
    same = dict(op="aten::mm", shapes=[[64, 64], [64, 64]], flops=100.0, nbytes=40.0)
    records = [k("gemm", 0, 3, KernelClass.TENSOR_GEMM, **same), k("reduce", 3, 1, KernelClass.MEMORY_BOUND, **same),
               k("gemm", 4, 3, KernelClass.TENSOR_GEMM, **same), k("reduce", 7, 1, KernelClass.MEMORY_BOUND, **same)]
    at.distribute_op_costs(records)
    assert [r.flops for r in records] == pytest.approx([100, 0, 100, 0])
    assert [r.bytes for r in records] == pytest.approx([30, 10, 30, 10])
    # an explicit call id groups exactly
    records = [k("a", 0, 1, KernelClass.MEMORY_BOUND, **same), k("b", 1, 3, KernelClass.MEMORY_BOUND, **same)]
    at.distribute_op_costs(records, group_key=lambda r: "one call")
    assert [r.flops for r in records] == pytest.approx([25, 75])


def _resnet_like(conv_us: float, layout_us: tuple[float, float] | None) -> tuple[list[KernelRecord], Timeline]:
    """Two convolutions with the same shapes, each followed by batch norm; optionally a layout transform
    before and after each convolution (as channels-last with an NCHW-only kernel adds)."""
    records: list[KernelRecord] = []
    t = 0.0
    conv = dict(op="aten::cudnn_convolution", shapes=[[32, 64, 56, 56], [64, 64, 3, 3]])
    for layer in range(2):
        if layout_us:
            records.append(k("nchwToNhwcKernel", t, layout_us[0], KernelClass.LAYOUT, **conv))
            t += layout_us[0]
        records.append(k(f"conv_kernel_{'b' if layout_us else 'a'}", t, conv_us, KernelClass.TENSOR_GEMM, **conv))
        t += conv_us
        if layout_us:
            records.append(k("nhwcToNchwKernel", t, layout_us[1], KernelClass.LAYOUT, **conv))
            t += layout_us[1]
        records.append(k("bn_fw_tr_1C11_kernel", t, 20, KernelClass.MEMORY_BOUND, op="aten::cudnn_batch_norm",
                         shapes=[[32, 64, 56, 56], [64], [64], [64], [64]]))
        t += 20
    idle = Idle(host_bound_us=10)
    return records, Timeline(wall_us=t + idle.total_us, busy_us=t, idle=idle)


def test_match_kernels_pairs_by_op_shapes_and_phase_not_names():
    a, _ = _resnet_like(100, None)
    b, _ = _resnet_like(130, (10, 5))
    match = at.match_kernels(a, b)
    assert len(match.pairs) == 4
    assert all(ra.kernel_class == rb.kernel_class for ra, rb in match.pairs)
    assert {ra.name for ra, _ in match.pairs} == {"conv_kernel_a", "bn_fw_tr_1C11_kernel"}
    assert not match.only_a
    assert sorted(r.name for r in match.only_b) == ["nchwToNhwcKernel"] * 2 + ["nhwcToNchwKernel"] * 2


def test_compare_categories_puts_the_slowdown_on_layout_and_slower_convs():
    a = _resnet_like(100, None)
    b = _resnet_like(130, (10, 5))
    deltas = {d.category: d for d in at.compare_categories(a, b)}
    assert b[1].wall_us - a[1].wall_us == 90
    assert sum(d.delta_us for d in deltas.values()) == pytest.approx(90)
    conv, layout, bn = deltas[KernelClass.TENSOR_GEMM], deltas[KernelClass.LAYOUT], deltas[KernelClass.MEMORY_BOUND]
    assert (conv.a_us, conv.b_us, conv.delta_us) == (200, 260, 60)
    assert (conv.matched_us, conv.unmatched_us) == (60, 0)  # the same convolutions ran slower
    assert (layout.delta_us, layout.matched_us, layout.unmatched_us) == (30, 0, 30)  # work B added
    assert bn.delta_us == 0
    assert deltas[Part.IDLE_HOST].delta_us == 0 and deltas[Part.UNEXPLAINED].delta_us == 0


def test_a_kernel_that_moves_class_is_still_matched():
    shapes = [[256, 256], [256, 256]]
    a = [k("sgemm", 0, 300, KernelClass.VECTOR_MATH, op="aten::mm", shapes=shapes)]
    b = [k("hgemm", 0, 100, KernelClass.TENSOR_GEMM, op="aten::mm", shapes=shapes)]
    deltas = {d.category: d for d in at.compare_categories(
        (a, Timeline(300, 300, Idle())), (b, Timeline(100, 100, Idle())))}
    assert deltas[KernelClass.VECTOR_MATH].matched_us == -300
    assert deltas[KernelClass.TENSOR_GEMM].matched_us == 100
    assert at.match_kernels(a, b).pairs == [(a[0], b[0])]


def test_category_times_add_up_to_the_wall_time():
    records, timeline = _step()
    times = at.category_times(records, timeline)
    assert times[KernelClass.VECTOR_MATH] == 150 and times[KernelClass.LAYOUT] == 8 and times[Part.IDLE_SYNC] == 3
    assert sum(times.values()) == pytest.approx(timeline.wall_us)
    assert times[Part.UNEXPLAINED] == pytest.approx(0, abs=1e-9)


def test_op_call_ids_group_kernels_exactly():
    """Two back-to-back calls of one op with identical shapes split by their call id, not by heuristics."""
    def kernel(name, call, start):
        return KernelRecord(name=name, start_us=start, duration_us=10.0, op="aten::convolution", op_call_id=call,
                            input_shapes=[[8, 64, 56, 56]], dtypes=["c10::Half"], kernel_class=KernelClass.TENSOR_GEMM,
                            flops=1e9, bytes=4e6)
    records = [kernel("gemm", 1, 0.0), kernel("gemm", 1, 10.0), kernel("gemm", 2, 20.0)]
    at.distribute_op_costs(records)
    assert [r.flops for r in records] == [pytest.approx(5e8), pytest.approx(5e8), pytest.approx(1e9)]


def test_without_a_trace_bytes_up_to_the_l2_size_may_come_from_the_l2():
    m = _model()
    m.capacity["l2"] = Ceiling(2e6, "B", "test", "")
    small = k("vectorized_elementwise_kernel", 0, 1, KernelClass.MEMORY_BOUND, nbytes=1e6)
    assert pricing.kernel_bound(small, m) == (pytest.approx(1e6 / 5000e9 * 1e6), "memory:l2")  # 0.2 us at 5 TB/s
    big = k("vectorized_elementwise_kernel", 0, 10, KernelClass.MEMORY_BOUND, nbytes=10e6)
    bound, ceiling = pricing.kernel_bound(big, m)
    # 8 MB reach main memory, all 10 MB pass through the L2: the slower level sets the time.
    assert ceiling == "memory:hbm" and bound == pytest.approx(8e6 / 1000e9 * 1e6)  # 8 us
    # Without a known L2 size the bound stays with main memory.
    del m.capacity["l2"]
    assert pricing.kernel_bound(small, m) == (pytest.approx(1.0), "memory:hbm")


def test_with_a_trace_first_touch_bytes_come_from_main_memory_whatever_their_size():
    m = _model()
    m.capacity["l2"] = Ceiling(60e6, "B", "test", "")
    weights = CallAccesses(0, "aten::mm", (Access(1, 25_000_000, False, True), Access(2, 8_000, True)))
    reread = CallAccesses(1, "aten::add", (Access(2, 8_000, False), Access(3, 8_000, True)))
    gemv = k("gemv", 0, 30, KernelClass.MEMORY_BOUND, nbytes=25_008_000)
    gemv.call = 0
    add = k("add", 30, 1, KernelClass.MEMORY_BOUND, nbytes=16_000)
    add.call = 1
    shares = pricing.reuse_shares([weights, reread], m, bound=False)
    # 25 MB "fit" the 60 MB L2, but nothing was resident: HBM, 25 us at 1 TB/s (and its write after them)
    assert pricing.kernel_bound(gemv, m, shares) == (pytest.approx(25.008), "memory:hbm")
    assert pricing.kernel_bound(gemv, m) == (pytest.approx(25.008e6 / 5000e9 * 1e6), "memory:l2")  # the size rule
    # the activation just written is read from the L2; only the write reaches HBM
    assert pricing.kernel_bound(add, m, shares) == (pytest.approx(8_000 / 1000e9 * 1e6), "memory:hbm")
    # the bound lets small writes stay in the L2: only the weights' first touch reaches HBM
    bound = pricing.reuse_shares([weights, reread], m)
    assert pricing.kernel_bound(gemv, m, bound) == (pytest.approx(25.0), "memory:hbm")
    assert pricing.kernel_bound(add, m, bound) == (pytest.approx(16_000 / 5000e9 * 1e6), "memory:l2")


def test_a_helper_kernel_that_runs_for_the_fixed_cost_alone_takes_no_share_of_the_work():
    """A 1 us offset-table kernel beside a 99 us GEMM of one call: by raw duration it would carry 1 % of the
    bytes; beyond a 1 us fixed cost per kernel it carries none, and the GEMM keeps them all."""
    conv = dict(op="aten::cudnn_convolution", flops=1e9, nbytes=1e6)
    records = [k("computeOffsetsKernel", 0, 1, KernelClass.MEMORY_BOUND, **conv), k("sm90_xmma_fprop", 1, 99, KernelClass.TENSOR_GEMM,
                                                                        precision="fp16.acc32", **conv)]
    for r in records:
        r.op_call_id = 7
    at.distribute_op_costs(records)
    assert records[0].bytes == pytest.approx(1e4)
    at.resplit_op_costs(records, fixed_us=1.0)
    assert [r.bytes for r in records] == pytest.approx([0.0, 1e6])
    assert [r.flops for r in records] == pytest.approx([0.0, 1e9])


def test_bounds_use_a_fixed_cost_no_longer_than_the_shortest_kernel_of_the_step():
    m = _model()
    m.latency[FIXED_KEY] = Ceiling(3000.0, "ns", "latency.kernel.duration", "test")
    fast = k("vectorized_elementwise_kernel", 0, 2.0, KernelClass.MEMORY_BOUND, nbytes=1e3)
    slow = k("vectorized_elementwise_kernel", 5, 40.0, KernelClass.MEMORY_BOUND, nbytes=1e3)
    assert pricing.bound_terms([fast, slow], m).fixed_us == pytest.approx(2.0)
    assert pricing.bound_terms([slow], m).fixed_us == pytest.approx(3.0)
    at.assign_bounds([fast, slow], m)
    assert fast.bound_us == pytest.approx(2.001)  # the 3 us probe figure would put it 50 % over its time
    assert at.self_check([fast, slow]) == []
