"""The kernel-time model on synthetic kernels, and the access trace it reads reuse from."""

from __future__ import annotations

import pytest
import torch

from pygpuperf.analyze.kernel_time import Access, reuse_traffic
from pygpuperf.explain.accesses import AccessTraceMode, resident_storages

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
    assert second.shares() == {"l2": pytest.approx(0.5)}


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
