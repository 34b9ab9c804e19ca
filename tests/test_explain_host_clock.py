"""The host's own time per step, inside its optimizer's step and inside its backward calls."""

import time

import torch

from pygpuperf.explain import host_clock


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
