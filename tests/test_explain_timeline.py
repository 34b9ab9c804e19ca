"""Busy/idle split of a step: union over streams, idle gaps by cause, parts summing to wall - busy."""

import json
import random
from pathlib import Path

import pytest

from pygpuperf.explain.model import KernelRecord
from pygpuperf.explain.timeline import gaps, timeline
from pygpuperf.explain.trace import steps_from_chrome_trace

FIXTURES = Path(__file__).parent / "fixtures"


def k(start, end, launch=None, stream=7, name="k"):
    return KernelRecord(name=name, start_us=start, duration_us=end - start, stream=stream, launch_us=launch)


def parts(t):
    return t.idle.host_bound_us, t.idle.launch_gap_us, t.idle.sync_us


def test_overlapping_streams_count_once():
    records = [k(0, 10, -5), k(5, 15, -4, stream=20), k(15, 20, -3), k(2, 4, -2, stream=30)]
    t = timeline(records, 0, 20)
    assert t.wall_us == 20
    assert t.busy_us == 20
    assert parts(t) == (0, 0, 0)


def test_host_bound_gap_splits_at_the_launch_call():
    # The second kernel's launch started 5 us into the gap and landed 5 us later.
    t = timeline([k(0, 10, -5), k(20, 30, 15)], 0, 30)
    assert t.busy_us == 20
    assert parts(t) == (5, 5, 0)


def test_launch_issued_before_the_gap_is_all_launch_gap():
    t = timeline([k(0, 10, -5), k(12, 30, 2)], 0, 30)
    assert parts(t) == (0, 2, 0)


def test_sync_overlapping_the_gap_takes_the_host_part():
    records = [k(0, 10, -5), k(20, 30, 15)]
    t = timeline(records, 0, 30, syncs=[(8, 12)])
    assert parts(t) == (0, 5, 5)
    # A sync that ended before the gap opened changes nothing.
    assert parts(timeline(records, 0, 30, syncs=[(2, 9)])) == (5, 5, 0)


def test_gaps_at_step_start_and_end():
    records = [k(10, 20, 5)]
    t = timeline(records, 0, 50)
    assert t.busy_us == 10
    # Leading gap: host until the launch at 5, then 5 us of launch latency; trailing: host-bound.
    assert parts(t) == (5 + 30, 5, 0)
    g = gaps(records, 0, 50)
    assert [(x.start_us, x.end_us, x.next_kernel) for x in g] == [(0, 10, "k"), (20, 50, "")]
    # The host sat in a sync at the end of the step: the trailing gap is the sync's.
    assert parts(timeline(records, 0, 50, syncs=[(18, 22)])) == (5, 5, 30)


def test_kernels_are_clipped_to_the_window():
    records = [k(-5, 5, -10), k(45, 60, 40)]
    t = timeline(records, 0, 50)
    assert t.busy_us == 10
    assert t.idle.total_us == pytest.approx(40)
    # The gap [5, 45) ends with a kernel launched at 40.
    assert parts(t) == (35, 5, 0)


def test_unknown_launch_time_leaves_the_gap_to_the_host():
    assert parts(timeline([k(0, 10, -5), k(20, 30, None)], 0, 30)) == (10, 0, 0)


def test_tied_starts_use_the_earliest_launch():
    records = [k(0, 10, -5), k(20, 30, 18, stream=7), k(20, 25, 12, stream=20)]
    assert parts(timeline(records, 0, 30)) == (2, 8, 0)


def test_empty_step_is_all_idle():
    t = timeline([], 100, 150, syncs=[(120, 130)])
    assert (t.wall_us, t.busy_us) == (50, 0)
    assert parts(t) == (0, 0, 50)
    assert parts(timeline([], 100, 150)) == (50, 0, 0)


def test_parts_sum_to_wall_minus_busy_on_random_steps():
    rng = random.Random(7)
    for _ in range(300):
        start, end = rng.uniform(-50, 50), rng.uniform(100, 400)
        records = []
        for _ in range(rng.randint(0, 25)):
            s = rng.uniform(-100, 450)
            launch = None if rng.random() < 0.1 else s - rng.uniform(-5, 60)
            records.append(k(s, s + rng.uniform(0, 40), launch, stream=rng.choice((7, 20, 30))))
        syncs = [(a, a + rng.uniform(0, 30)) for a in (rng.uniform(-50, 400) for _ in range(rng.randint(0, 3)))]
        t = timeline(records, start, end, syncs)
        assert 0 <= t.busy_us <= t.wall_us + 1e-9
        assert min(parts(t)) >= 0
        assert t.idle.total_us == pytest.approx(t.wall_us - t.busy_us, abs=1e-9)
        g = gaps(records, start, end, syncs)
        assert sum(x.duration_us for x in g) == pytest.approx(t.wall_us - t.busy_us, abs=1e-9)


def test_recorded_step_split_by_hand():
    trace = json.loads((FIXTURES / "chrome_trace_cuda.json").read_text())
    step = steps_from_chrome_trace(trace, device_index=0)[0]
    t = timeline(step.kernels, step.start_us, step.end_us, step.syncs)
    assert t.wall_us == 420
    # 1015-1025, 1060-1090, 1091-1096, 1110-1125, 1126-1129, 1150-1165, 1181-1250 (three
    # overlapping kernels on two streams), 1270-1285, 1311-1312.
    assert t.busy_us == pytest.approx(163)
    # Host-bound: 1000-1012, 1096-1105, 1129-1145, 1165-1176, 1250-1265, 1285-1305.
    assert t.idle.host_bound_us == pytest.approx(83)
    # Launch latency after each launch call, and the back-to-back gaps 1090-1091, 1125-1126.
    assert t.idle.launch_gap_us == pytest.approx(41)
    # The input copy's stream sync (1025-1050) and the .item() sync to the step end (1312-1420).
    assert t.idle.sync_us == pytest.approx(25 + 108)


def test_profiler_overhead_comes_off_host_bound_idle_first():
    from pygpuperf.explain.model import Idle, Timeline
    from pygpuperf.explain.timeline import remove_profiler_overhead

    line = Timeline(wall_us=100.0, busy_us=70.0, idle=Idle(host_bound_us=20.0, launch_gap_us=8.0, sync_us=2.0))
    fixed = remove_profiler_overhead(line, 75.0)
    assert fixed.wall_us == 75.0 and fixed.busy_us == 70.0
    assert (fixed.idle.host_bound_us, fixed.idle.launch_gap_us, fixed.idle.sync_us) == (0.0, 3.0, 2.0)
    assert fixed.profiler_overhead_us == 25.0
    assert fixed.wall_us == fixed.busy_us + fixed.idle.total_us
    # More overhead than idle time: all idle goes, the kernels stay.
    assert remove_profiler_overhead(line, 50.0).wall_us == 70.0
    # A profiled step no slower than the unprofiled one is left alone.
    assert remove_profiler_overhead(line, 120.0) is line
