"""The step replayed through the host's and the device's queues: host-paced savings hidden, syncs' costs."""

import dataclasses

import pytest

from pygpuperf.analyze.kernel_time import Access
from pygpuperf.core.results import Ceiling, MachineModel, Stats
from pygpuperf.trials import fixes
from pygpuperf.explain import queue
from pygpuperf.explain.model import (CallAccesses, ExplainedStep, Explanation, HostTime, Idle, KernelRecord, Throughput,
                                     Timeline, Waterfall)
from pygpuperf.trials.record import Trials


def _step(durations, host_gap_us, sync_after=None, ops=None, phases=None, latency_us=10.0):
    """Kernels launched every `host_gap_us` of host work, each starting when launched (plus the latency) or
    when the one before ends; a sync after kernel `sync_after` holds the host until the device has drained."""
    records, syncs, host, device = [], [], 0.0, 0.0
    gaps = host_gap_us if isinstance(host_gap_us, list) else [host_gap_us] * len(durations)
    for i, d in enumerate(durations):
        host += gaps[i]
        start = max(host + latency_us, device + 1.0)
        records.append(KernelRecord(name=f"k{i}", start_us=start, duration_us=d, launch_us=host,
                                    op=(ops or {}).get(i, "aten::add"), phase=(phases or {}).get(i, "forward"),
                                    kernel_class="memory_bound", precision="fp32", bytes=1e3))
        device = start + d
        if i == sync_after:
            syncs.append((host + 1.0, device + 5.0))
            host = device + 5.0
    return records, syncs, (0.0, max(host + gaps[-1], device))


def _fp16_step(backward_gap_us):
    """An fp16 training step: 4 forward kernels of 5 us launched 100 us apart, 12 backward kernels of 1,000 us
    launched `backward_gap_us` apart, the scaler's sync, then 4 optimizer kernels of 5 us 100 us apart."""
    durations = [5.0] * 4 + [1000.0] * 12 + [5.0] + [5.0] * 4
    gaps = [100.0] * 4 + [backward_gap_us] * 12 + [10.0] + [100.0] * 4
    phases = {i: "backward" for i in range(4, 17)} | {i: "optimizer" for i in range(17, 21)}
    return (durations, *_step(durations, gaps, sync_after=16, phases=phases))


def _explanation(records, syncs, window, wall_us, amp="fp16"):
    line = Timeline(wall_us=wall_us, busy_us=sum(r.duration_us for r in records),
                    idle=Idle(host_bound_us=wall_us - sum(r.duration_us for r in records),
                              sync_us=10.0 if syncs else 0.0))
    step = ExplainedStep(0, records, line, Waterfall(0.0, {}, wall_us, 0.0, 1.0), [], window, syncs)
    return Explanation("cuda", [step], step, {}, Throughput(Stats.of([wall_us] * 3), 8), {"amp": amp})


def _model():
    m = MachineModel(device="cuda")
    m.memory["dram"] = Ceiling(1000.0, "GB/s", "memory.dram.copy", "native")
    return m


def test_a_host_paced_step_hides_a_device_saving_that_a_sum_over_kernels_counts():
    records, syncs, window = _step([5.0] * 40, host_gap_us=20.0)
    host = queue.build(records, window, syncs, gap_us=1.0)
    assert host.host_work_us() == pytest.approx(41 * 20.0)  # 40 launches and the step's tail
    # Timed without the profiler at 492 us, the host's work is 60 % of what was profiled.
    fitted = host.fitted([r.duration_us for r in records], wall_us=0.6 * 820.0)
    assert fitted is not None and fitted.scale == pytest.approx(0.6, rel=0.01)
    halved = fitted.period_us([2.5] * 40)
    assert halved == pytest.approx(fitted.period_us([5.0] * 40), rel=0.01)  # the host still paces every launch
    # Growing the kernels first fills the host's idle: at twice as long (10 us + the gap) the host still paces.
    assert fitted.period_us([10.0] * 40) == pytest.approx(0.6 * 820.0, rel=0.01)
    assert fitted.period_us([40.0] * 40) == pytest.approx(40 * 41.0, rel=0.03)


def test_a_device_bound_step_is_not_replayed():
    records, syncs, window = _step([100.0] * 40, host_gap_us=5.0)
    host = queue.build(records, window, syncs, gap_us=1.0)
    assert host.fitted([r.duration_us for r in records], wall_us=40 * 101.0) is None


def test_a_step_that_syncs_is_fitted_though_its_host_runs_ahead_of_most_of_its_kernels():
    # fp16 training: 4 forward and 4 optimizer kernels of 5 us launched 100 us apart, behind the scaler's sync,
    # and 12 backward kernels of 1,000 us the host launches 10 us apart, far ahead of them (the median kernel
    # starts milliseconds after its launch). The host after the sync paces the step, so its scale is the one
    # that replays the step as timed (at 0.6 of the profiled host); without the sync the same lead says the
    # launch times follow the device, and nothing is fitted.
    durations, records, syncs, window = _fp16_step(backward_gap_us=10.0)
    host = queue.build(records, window, syncs, gap_us=1.0)
    assert host.lead_us > 100 * host.latency_us
    wall = host.period_us(durations, scale=0.6)
    assert wall > host.period_us(durations, scale=0.0) * 1.02  # the host's work after the sync shows
    fitted = host.fitted(durations, wall)
    assert fitted is not None and fitted.scale == pytest.approx(0.6, rel=0.02)
    unsynced = queue.build(records, window, [], gap_us=1.0)
    assert unsynced.fitted(durations, wall) is None


def test_a_step_that_syncs_is_fitted_no_slower_than_its_host_and_the_rest_goes_to_the_sync():
    # A device-bound fp16 step: 12 backward kernels of 1,000 us launched 700 us apart, the scaler's sync, then a
    # host-paced optimizer and forward. It ran 1.2 ms above its replay at 0.3 of the profiled host, and its host
    # was timed at 0.3 of it. Fitted to the step's time alone, the host would take 1.05 of its profiled work
    # (9.8 ms a step): halving the backward's kernels would leave a host-bound 10.3 ms step. At most the timed
    # host, the rest returns later from the sync: halved, the device's 6.1 ms and what the sync exposes.
    durations, records, syncs, window = _fp16_step(backward_gap_us=700.0)
    host = queue.build(records, window, syncs, gap_us=1.0)
    wall = host.period_us(durations, scale=0.3) + 1200.0
    unbounded = host.fitted(durations, wall)
    bounded = host.fitted(durations, wall, host_us=0.3 * host.host_work_us())
    assert unbounded.scale == pytest.approx(1.05, rel=0.02) and bounded.scale == pytest.approx(0.3)
    assert bounded.period_us(durations) == pytest.approx(wall, rel=1e-6)  # the step as timed, replayed
    halved = [d / 2 if d > 100 else d for d in durations]
    device_only = host.period_us(halved, scale=0.0)
    assert unbounded.period_us(halved) > device_only + 4000.0
    assert bounded.period_us(halved) == pytest.approx(wall - 6000.0, rel=0.01)  # the sync still costs the same


def test_removing_a_sync_lets_the_host_run_ahead_of_a_busy_device():
    # 20 launches every 10 us, 30 us kernels, a sync after the last: each step waits for the device to drain,
    # then the host's 200 us of launches start the next one behind an idle device.
    records, syncs, window = _step([30.0] * 20, host_gap_us=10.0, sync_after=19)
    host = queue.build(records, window, syncs, gap_us=1.0)
    now = [r.duration_us for r in records]
    synced = host.period_us(now)
    without = host.period_us(now, without_syncs=frozenset(n for n, ev in enumerate(host.events) if ev.sync))
    assert without == pytest.approx(20 * 31.0, rel=0.03)  # the device's own time
    assert synced > without + 5.0  # the wait and the launch latency after it
    # Adding a sync in the middle costs the host's work after it that the device no longer hides: the
    # sync's wait after the drain (5 us), the host's work before the next launch (10 us) and the launch
    # latency (10 us), less the gap it replaces (1 us); the host's launches are faster than the kernels,
    # so the device is not starved after it.
    added = host.period_us(now, without_syncs=frozenset(n for n, ev in enumerate(host.events) if ev.sync),
                           sync_before=10)
    assert added == pytest.approx(without + 5.0 + 10.0 + 10.0 - 1.0, abs=1.0)


def test_the_amp_fix_from_fp16_drops_the_scalers_kernels_and_its_sync():
    # fp16 training: a host-paced forward (8 short kernels), a backward of long kernels the host runs ahead
    # of, GradScaler's unscaling and its sync, a host-paced optimizer, the scale's update.
    durations = [5.0] * 8 + [100.0] * 6 + [5.0] * 6
    host_gaps = [25.0] * 8 + [10.0] * 6 + [25.0] * 6
    ops = {14: fixes._SCALER_OPS[0], 19: fixes._SCALER_OPS[1]}
    phases = {i: "backward" for i in range(8, 15)} | {i: "optimizer" for i in range(15, 19)}
    records, syncs, window = _step(durations, host_gaps, sync_after=14, ops=ops, phases=phases)
    host = queue.build(records, window, syncs, gap_us=1.0)
    wall = host.period_us(durations, scale=1.0)
    e = _explanation(records, syncs, window, wall)
    predicted = fixes.predicted_step(e, _model(), "amp", {"amp": "bf16"}, 8)
    # Without the sync the host's launches (8 x 25 + 6 x 10 + 6 x 25 + the tail, 435 us) hide behind the
    # device's 18 kernels and gaps (7 x 6 + 6 x 101 + 5 x 6 = 678 us); with it, the forward's and the
    # optimizer's launches wait behind the backward's drain.
    assert wall > 900.0
    assert predicted == pytest.approx(7 * 6.0 + 6 * 101.0 + 5 * 6.0, rel=0.03)


def test_a_sync_added_to_a_device_bound_step_exposes_the_host_at_its_pace_at_batch_one():
    # bf16 training, device-bound: 20 long backward kernels the host runs far ahead of, then 20 short optimizer
    # kernels. The profiled host spends 50 us per launch; the step at batch 1, 1000 us, says the unprofiled host
    # spends half that. fp16's loss scaling adds a sync before the optimizer: after the drain, the host's 20
    # launches at 25 us each pace 20 kernels of 5 us.
    durations = [400.0] * 20 + [5.0] * 20
    phases = {i: "backward" for i in range(20)} | {i: "optimizer" for i in range(20, 40)}
    records, syncs, window = _step(durations, host_gap_us=50.0, phases=phases)
    device_us = 20 * 401.0 + 20 * 6.0
    e = _explanation(records, syncs, window, device_us, amp="bf16")
    unpaced = fixes.predicted_step(e, _model(), "amp", {"amp": "fp16"}, 8)
    paced = fixes.predicted_step(e, _model(), "amp", {"amp": "fp16"}, 8,
                                 timings=Trials(host_at_batch_one=HostTime(1000.0)))
    # Without the host's pace the sync is not seen; with it, the optimizer's 20 launches at 25 us leave the
    # device idle for about 20 x (25 - 6) us, plus the host's 25 us before the first launch (after the sync,
    # as GradScaler's comes before the optimizer's step), the sync's return and the first launch's latency
    # (10 us each).
    assert 20 * 19.0 + 25.0 + 20.0 <= paced - unpaced <= 20 * 19.0 + 25.0 + 45.0
    # A batch-1 step slower than the timed step allows (a device still busy at batch 1) is held to the host
    # that still replays the step as timed: a host of 120 us a launch, profiled, at twice that would pace it.
    records, syncs, window = _step(durations, host_gap_us=120.0, phases=phases)
    held = queue.build(records, window, syncs, gap_us=1.0).paced(durations, device_us, 20000.0)
    assert 1.0 < held.scale < 2.0
    assert held.period_us(durations) == pytest.approx(device_us, rel=0.011)


def test_a_host_a_step_ahead_keeps_its_launches_before_the_window_and_no_lead_as_latency():
    # Launched a whole step (4040 us) before they run, while the previous step's kernels held the device: the
    # window starts at the first kernel, long after the first launch.
    records, syncs, _ = _step([100.0] * 40, host_gap_us=5.0)
    ahead = [dataclasses.replace(r, launch_us=r.launch_us - 4040.0) for r in records]
    host = queue.build(ahead, (records[0].start_us, records[-1].end_us), syncs, gap_us=1.0)
    assert host.host_work_us() == pytest.approx(39 * 5.0)  # every launch interval, none clipped by the window
    assert host.latency_us < 20.0  # no launch found the device idle: not the first one's 4 ms lead


def test_the_amp_fix_to_fp16_adds_the_scalers_unscaling_of_the_gradients_before_its_sync():
    # bf16 training, device-bound: 20 long backward kernels, then an optimizer whose traced calls read a
    # 400 MB gradient and read and write a 400 MB parameter. fp16's GradScaler reads and writes each gradient
    # once before its sync: 800 MB at the model's 1000 GB/s is 800 us more on the device.
    durations = [400.0] * 20 + [5.0] * 4
    phases = {i: "backward" for i in range(20)} | {i: "optimizer" for i in range(20, 24)}
    records, syncs, window = _step(durations, host_gap_us=5.0, phases=phases)
    records = [dataclasses.replace(r, call=i) for i, r in enumerate(records)]
    e = _explanation(records, syncs, window, 20 * 401.0 + 4 * 6.0, amp="bf16")
    floor = Trials(host_at_batch_one=HostTime(200.0))
    untraced = fixes.predicted_step(e, _model(), "amp", {"amp": "fp16"}, 8, timings=floor)
    grad, param = Access(1, 400_000_000, False, False), Access(2, 400_000_000, False, False)
    e = dataclasses.replace(e, calls=[CallAccesses(i, "aten::_foreach_add_", (grad, param, dataclasses.replace(
        param, write=True))) for i in range(20, 24)])
    traced = fixes.predicted_step(e, _model(), "amp", {"amp": "fp16"}, 8, timings=floor)
    assert traced - untraced == pytest.approx(800.0, rel=0.05)
    # The other way, bf16 from fp16, adds no unscaling (this step's profile has no scaler kernels to drop).
    e = dataclasses.replace(e, settings={**e.settings, "amp": "fp16"})
    back = fixes.predicted_step(e, _model(), "amp", {"amp": "bf16"}, 8, timings=floor)
    assert back == pytest.approx(e.median.timeline.wall_us, abs=50.0)


def test_an_optimizer_timed_at_batch_one_paces_its_own_launches_after_an_added_sync():
    # The device-bound bf16 step of the test of a sync added to a device-bound step (above), its host timed
    # at batch 1 at 1000 us a step, 800 of them in the optimizer's step: the optimizer's 20 profiled launches
    # at 50 us each take 40 us, not the whole step's 25. After the sync fp16 adds, those launches pace the
    # optimizer's 5 us kernels: each of the 20 leaves the device 15 us longer idle.
    durations = [400.0] * 20 + [5.0] * 20
    phases = {i: "backward" for i in range(20)} | {i: "optimizer" for i in range(20, 40)}
    records, syncs, window = _step(durations, host_gap_us=50.0, phases=phases)
    e = _explanation(records, syncs, window, 20 * 401.0 + 20 * 6.0, amp="bf16")
    whole = fixes.predicted_step(e, _model(), "amp", {"amp": "fp16"}, 8,
                                 timings=Trials(host_at_batch_one=HostTime(1000.0)))
    split_host = Trials(host_at_batch_one=HostTime(1000.0, 800.0))
    split = fixes.predicted_step(e, _model(), "amp", {"amp": "fp16"}, 8, timings=split_host)
    assert split - whole == pytest.approx(20 * 15.0, abs=20.0)
    # The host timed at the step's batch, where its optimizer's step took 1000 us, paces the replay instead of
    # the step at batch 1: each optimizer launch takes 50 us, 10 more (and the host's other work is slower).
    at_batch = fixes.predicted_step(e, _model(), "amp", {"amp": "fp16"}, 8,
                                    timings=dataclasses.replace(split_host, host_at_batch=HostTime(3000.0, 1000.0)))
    assert at_batch - split >= 20 * 10.0 - 20.0
    host = queue.build(records, window, syncs, gap_us=1.0).paced(durations, 20 * 401.0 + 20 * 6.0, 1000.0, 800.0)
    assert host.scale * host.optimizer_ratio == pytest.approx(800.0 / (20 * 50.0))


def _at_clock_step(records, wall_us):
    line = Timeline(wall_us=wall_us, busy_us=wall_us, idle=Idle())
    step = ExplainedStep(0, records, line, Waterfall(0.0, {}, wall_us, 0.0, 1.0), [])
    return Explanation("cuda", [step], step, {}, Throughput(Stats.of([wall_us] * 3), 8), {})


def test_a_prediction_at_a_lower_clock_moves_the_compute_and_the_time_above_main_memorys_pace_only():
    """A kernel held to compute runs at the clock's pace; one held to main memory at its bytes ÷ bandwidth
    runs at the memory's, and only what it runs above that follows the clock; a transfer over a link does not."""
    def kernel(start, ceiling, bound_us, fixed_us=0.0):
        return KernelRecord(name=ceiling, start_us=start, duration_us=100.0, ceiling=ceiling, bound_us=bound_us,
                            fixed_us=fixed_us)
    records = [kernel(0.0, "compute:tensor.fp16.acc32", 90.0), kernel(100.0, "memory:dram", 100.0),
               kernel(200.0, "memory:dram", 55.0, fixed_us=5.0), kernel(300.0, "links:h2d.pinned", 100.0),
               kernel(400.0, "memory:l2", 100.0)]
    e = _at_clock_step(records, wall_us=500.0)
    # At 1,800 MHz against 1,980 each µs at the clock's pace takes 1.1 µs: 100 + 0 + 50 + 0 + 100 of them.
    assert fixes.at_clock(e, _model(), 400.0, 1980.0, 1800.0) == pytest.approx(400.0 * (500.0 + 25.0) / 500.0)
    assert fixes.at_clock(e, _model(), 400.0, 1980.0, 1980.0) == 400.0


def test_a_host_paced_step_keeps_its_time_at_a_lower_clock():
    """Kernels of 5 µs launched 20 µs apart wait on the host: 10 % slower kernels leave the step as it is."""
    records, syncs, window = _step([5.0] * 40, host_gap_us=20.0)
    e = _explanation(records, syncs, window, wall_us=0.6 * 820.0)
    summed = 0.6 * 820.0 + 40 * 5.0 * (1980.0 / 1800.0 - 1)  # what the kernels' own changes add up to
    moved = fixes.at_clock(e, _model(), 0.6 * 820.0, 1980.0, 1800.0)
    assert moved == pytest.approx(0.6 * 820.0, rel=0.01) and moved < summed - 10.0
