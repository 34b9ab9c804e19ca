"""The host's own time per step, inside its optimizer's step and inside its backward calls."""

import time

import torch

from pygpuperf.trials import host_clock


def test_the_clock_times_a_steps_backward_calls_and_optimizer_steps_apart_and_puts_autograd_back():
    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    original = torch.autograd.backward

    def slow_hook(*_):  # the backward's own work: 2 ms a call, inside loss.backward()
        time.sleep(0.002)

    model.weight.register_hook(slow_hook)

    def step():
        optimizer.zero_grad()
        model(torch.ones(4, 8)).sum().backward()
        optimizer.step()
        time.sleep(0.001)  # the host's work outside both

    host, clock = host_clock.host_after_drain(step, torch.device("cpu"), samples=5, warmup=1)
    assert torch.autograd.backward is original
    assert clock.backward_median_us() >= 2000.0 and clock.median_us() < 2000.0
    assert min(host) >= clock.backward_median_us() + clock.median_us() + 1000.0
    outside = host_clock.PhaseClock()  # a step run outside the block is not timed
    outside.wrap(step)()
    assert outside.backward_median_us() is None


def test_the_host_pace_line_names_the_optimizer_and_backward_shares_where_timed():
    from pygpuperf.explain.model import HostTime
    from pygpuperf.trials.record import Trials

    timed = Trials(host_at_batch=HostTime(30000.0, 4000.0, 15500.0), host_at_batch_one=HostTime(27000.0, 3900.0))
    assert host_clock.host_pace_line(Trials()) is None and host_clock.host_pace_line(None) is None
    line = host_clock.host_pace_line(timed)
    assert line == ("the host's own time per step, without the profiler: 30.00 ms at the step's batch, each step "
                    "after a drain, 4.00 of it in the optimizer's step, 15.50 of it in backward calls; 27.00 ms at "
                    "batch 1, 3.90 of it in the optimizer's step")
