"""The kernel-time model on synthetic kernels, and the access trace it reads reuse from."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pygpuperf.analyze.kernel_time import (MATRIX, MEMORY, VECTOR, Access, KernelWork, card_terms, kernel_time,
                                            reuse_traffic)
from pygpuperf.core.results import Ceiling, MachineModel
from pygpuperf.explain.accesses import AccessTraceMode, resident_storages
from pygpuperf.explain.classify import classify
from pygpuperf.explain.model import KernelRecord
from pygpuperf.core.vocabulary import KernelClass

MB = 1 << 20


def test_first_touch_reads_come_from_main_memory_and_rereads_from_the_cache():
    weight, activation, other = 1, 2, 3
    calls = [
        [Access(weight, 25 * MB, False, True), Access(activation, 4 * MB, True)],  # GEMV: weight read once
        [Access(activation, 4 * MB, False), Access(other, 4 * MB, True)],  # the activation just written
    ]
    first, second = reuse_traffic(calls, [("l2", 60 * MB)], "hbm")
    assert first.reads == {"l2": 0.0, "hbm": 25 * MB}  # 25 MB "fits" the 60 MB L2, but nothing was resident
    assert first.written == 4 * MB and first.resident == 25 * MB
    assert second.reads == {"l2": 4 * MB, "hbm": 0.0}
    assert second.shares() == {"l2": pytest.approx(0.5), "hbm": pytest.approx(0.5)}  # the write reaches HBM
    # A lower bound's view: the call's writes may stay in a cache that holds all it touches.
    bound = reuse_traffic(calls, [("l2", 60 * MB)], "hbm", writes_stay_cached=True)[1]
    assert bound.shares() == {"l2": pytest.approx(1.0)}


def test_reuse_distance_beyond_the_capacity_is_a_miss():
    # a 10 MB tensor, then 60 MB of other data, then the tensor again: evicted from a 60 MB cache
    calls = [[Access(1, 10 * MB, True)]] + [[Access(10 + i, 10 * MB, True)] for i in range(6)]
    calls.append([Access(1, 10 * MB, False)])
    assert reuse_traffic(calls, [("l2", 60 * MB)], "hbm")[-1].reads["hbm"] == 10 * MB
    # with only 40 MB in between it is still there; nearer levels take what fits them
    near = [[Access(1, 10 * MB, True)]] + [[Access(10 + i, 10 * MB, True)] for i in range(4)] + [[Access(1, 10 * MB, False)]]
    last = reuse_traffic(near, [("l2", 60 * MB), ("l1", 1 * MB)], "hbm")[-1]
    assert last.reads["l2"] == 10 * MB and last.reads["l1"] == 0


def test_a_call_reading_one_tensor_twice_reads_it_once():
    traffic = reuse_traffic([[Access(7, MB, False), Access(7, MB, False), Access(8, MB, True)]], [("l2", 60 * MB)],
                            "dram")[0]
    assert traffic.reads["dram"] == MB and traffic.total == 2 * MB


def test_access_trace_marks_writes_views_and_resident_storages():
    layer = torch.nn.Linear(64, 32)
    x = torch.randn(16, 64)
    out = torch.empty(16, 32)
    mode = AccessTraceMode(resident_storages([layer]), mark=False)
    with mode:
        y = layer(x)  # addmm: reads bias, x, weight; writes y
        y.relu_()  # in place: reads and writes y
        x.view(-1)  # a view moves nothing
        torch.mul(y.detach(), 2.0, out=out)  # out= is written, not read
    calls = mode.finish()
    ops = [c.op for c in calls]
    assert "aten::view" not in ops and ops[0] == "aten::addmm"
    addmm = calls[0].accesses
    assert sorted(a.nbytes for a in addmm if not a.write) == [32 * 4, 16 * 64 * 4, 64 * 32 * 4]
    assert [a.nbytes for a in addmm if a.write] == [16 * 32 * 4]
    assert {a.nbytes for a in addmm if a.resident} == {32 * 4, 64 * 32 * 4}  # bias and weight
    relu = next(c for c in calls if c.op == "aten::relu_")
    assert {a.write for a in relu.accesses} == {True, False}
    mul = calls[-1]
    out_key = out.untyped_storage().data_ptr()
    assert [a.write for a in mul.accesses if a.storage == out_key] == [True]


def _card(units: int = 132, fixed_ns: float | None = 2000.0) -> MachineModel:
    model = MachineModel("card", compute={"tensor.fp16.acc32": Ceiling(100.0, "TFLOP/s", "t", "t"),
                                          "cuda.fp32": Ceiling(20.0, "TFLOP/s", "t", "t")},
                         memory={"hbm": Ceiling(1000.0, "GB/s", "t", "t"), "l2": Ceiling(4000.0, "GB/s", "t", "t")},
                         capacity={"l2": Ceiling(50e6, "B", "t", "t")}, facts={"compute_units": float(units)})
    if fixed_ns is not None:
        model.latency["kernel.duration"] = Ceiling(fixed_ns, "ns", "t", "t")
    return model


def test_a_fixed_cost_dominates_a_tiny_kernel():
    tiny = kernel_time(KernelWork(MEMORY, "fp32", 0.0, 4096.0, shares={}), _card())  # first touch: from HBM
    assert tiny.fixed_us == 2.0 and tiny.memory_us == pytest.approx(4096 / 1000e9 * 1e6)
    assert tiny.total_us == pytest.approx(2.0041, rel=1e-4) and tiny.fixed_us / tiny.total_us > 0.99
    big = kernel_time(KernelWork(MEMORY, "fp32", 0.0, 1e9, shares={}), _card())
    assert big.fixed_us / big.total_us < 0.002  # 1 GB: 1 ms of bytes, 2 us fixed
    assert kernel_time(KernelWork(MEMORY, "fp32", 0.0, 4096.0), _card(fixed_ns=None)).total_us < 0.01


def test_wave_quantization_on_two_unit_counts():
    gemm = KernelWork(MATRIX, "fp16.acc32", 100e12 * 1e-3, 1e6, tiles=(133,))  # 1 ms at the full roof
    on_132 = kernel_time(gemm, _card(units=132))
    on_133 = kernel_time(gemm, _card(units=133))
    assert on_133.compute_us == pytest.approx(1000.0)  # one full wave
    assert on_132.wave_efficiency == pytest.approx(133 / 264)  # 132 + 1 tile: a second wave, nearly empty
    assert on_132.compute_us == pytest.approx(1000.0 * 264 / 133)
    # fewer tiles than units: the library splits K to fill the card, no wave loss is assumed
    assert kernel_time(KernelWork(MATRIX, "fp16.acc32", 1e9, 0.0, tiles=(40,)), _card()).wave_efficiency == 1.0
    # of two tile orientations, the one with fuller waves counts
    assert kernel_time(dataclasses.replace(gemm, tiles=(133, 132)), _card(units=132)).wave_efficiency == 1.0
    # a tiled GEMM on the vector units (a CUDA-core SGEMM) runs in the same waves
    sgemm = kernel_time(KernelWork(VECTOR, "fp32", 20e12 * 1e-3, 1e6, tiles=(133,)), _card(units=132))
    assert sgemm.compute_us == pytest.approx(1000.0 * 264 / 133)


def test_a_gemv_is_bounded_by_its_bytes_whatever_runs_it():
    n = k = 4096
    # 1 token through a weight read for the first time in the step (shares {}: nothing served by a cache)
    gemv = KernelWork(MATRIX, "fp16.acc32", 2.0 * n * k, 2.0 * n * k + 4 * (n + k), shares={})
    t = kernel_time(gemv, _card())
    assert t.memory_us > 50 * t.compute_us and t.ceiling == "memory:hbm"
    record = KernelRecord("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT", 0.0, 40.0, op="aten::mm",
                          input_shapes=[[1, k], [k, n]], dtypes=["c10::Half", "c10::Half"])
    assert classify(record)[0] == KernelClass.MEMORY_BOUND  # a decode GEMV is a memory-bound kernel, not tensor-core under-use
    record.input_shapes = [[4096, k], [k, n]]
    assert classify(record)[0] == KernelClass.TENSOR_GEMM


def test_the_bound_of_a_datasheet_card_takes_the_measured_fixed_cost_at_its_clock():
    measured = _card()
    measured.facts["clock_mhz"] = 2000.0
    sheet = _card(fixed_ns=None)
    sheet.facts["clock_mhz"] = 1000.0
    terms = card_terms(sheet, measured)
    assert terms.fixed_us == pytest.approx(4.0) and "assumed" in terms.notes[0]
    assert card_terms(sheet).fixed_us == 0.0 and "no fixed cost" in card_terms(sheet).notes[0]


@pytest.mark.parametrize("name, tile", [
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(Params)", (256, 128)),
    ("void cutlass::Kernel2<cutlass_80_tensorop_f16_s16816gemm_f16_128x256_32x3_nn_align8>(Params)", (128, 256)),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x5_nt_align4>(Params)", (128, 128)),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x64x8_stage3_warpsize2x2x1_ffma", (128, 64)),
    ("nvjet_sm90_hsh_192x192_64x3_2x1_v_bz_coopB_NTN", (192, 192)),
])
def test_tile_shapes_read_from_kernel_names(name, tile):
    # The CTA tile, not the K tile and stage count that follow it in CUTLASS names.
    from pygpuperf.explain.tiles import tile_shape
    assert tile_shape(name) == tile


def _gemm(op: str, shapes: list, phase: str, name: str = "nvjet_sm90_tst_128x128_64x4_1x2_h_bz_NNT") -> KernelRecord:
    return KernelRecord(name, 0.0, 100.0, op=op, phase=phase, input_shapes=shapes, kernel_class=KernelClass.TENSOR_GEMM)


def test_at_twice_the_batch_activation_gemms_get_twice_the_tiles_and_weight_gradients_none():
    from pygpuperf.explain.tiles import at_batch, output_tiles, weight_shapes
    tokens, hidden, ffn = 4096, 768, 3072
    forward = _gemm("aten::addmm", [[ffn], [tokens, hidden], [hidden, ffn]], "forward")
    grad_input = _gemm("aten::mm", [[tokens, ffn], [ffn, hidden]], "backward")
    grad_weight = _gemm("aten::mm", [[hidden, tokens], [tokens, ffn]], "backward")
    conv = _gemm("aten::cudnn_convolution", [[64, 64, 56, 56], [64, 64, 3, 3], [], [1, 1], [1, 1], [1, 1]],
                 "forward", "sm90_xmma_fprop_implicit_gemm_tilesize128x128x64")
    bmm = _gemm("aten::bmm", [[96, 128, 64], [96, 64, 128]], "forward")
    weights = weight_shapes([forward, grad_input, grad_weight])
    assert (hidden, ffn) in weights and (ffn, hidden) in weights and (tokens, ffn) not in weights
    for record in (forward, grad_input, conv, bmm):
        before, after = output_tiles(record), output_tiles(at_batch(record, 2.0, weights))
        assert before and after == tuple(2 * t for t in before), record.op
    # a forward GEMM whose output happens to have a weight's shape is still an activation GEMM
    square = _gemm("aten::mm", [[hidden, hidden], [hidden, ffn]], "forward")
    assert output_tiles(at_batch(square, 2.0, weights)) == tuple(2 * t for t in output_tiles(square))
    doubled = at_batch(grad_weight, 2.0, weights)
    assert output_tiles(doubled) == output_tiles(grad_weight)  # the output is the weight's shape
    assert doubled.input_shapes == [[hidden, 2 * tokens], [2 * tokens, ffn]]  # the batch is in K
