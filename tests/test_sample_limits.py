"""The default suite's sample limits: sweep points take fewer samples, long runs the samples a budget fits."""

import time

import torch

from pygpuperf.cli import roofline
from pygpuperf.measure.probe import MIN_SAMPLES, Probe, RunSettings, Work, run_probe

CPU = torch.device("cpu")


class Sleeper(Probe):
    """A run that takes `seconds` on the host (a stand-in for a long GEMM) and counts its runs."""

    name = "compute.library.fp32"
    description = "sleeps"

    def __init__(self, seconds: float) -> None:
        self.seconds, self.runs = seconds, 0

    def setup(self, device, settings):
        self.out = torch.zeros(1)

    def work(self):
        return Work(flops=1.0)

    def poison(self):
        self.out.fill_(float("nan"))

    def run(self):
        time.sleep(self.seconds)
        self.runs += 1
        self.out.fill_(1.0)

    def verify(self):
        return bool(self.out.item() == 1.0), "ran"


def test_a_long_run_takes_only_the_samples_its_budget_fits_and_a_short_one_all():
    budget = RunSettings(warmup=2, samples=20, sample_budget_s=0.1)
    slow = Sleeper(0.05)  # 0.1 s fits 2 runs: the floor of MIN_SAMPLES holds
    run = run_probe(slow, CPU, budget)
    assert len(run.sample_seconds) == MIN_SAMPLES and slow.runs == 2 + MIN_SAMPLES and run.verified
    fast = Sleeper(0.0)
    assert len(run_probe(fast, CPU, budget).sample_seconds) == 20
    unlimited = Sleeper(0.05)
    assert len(run_probe(unlimited, CPU, RunSettings(warmup=1, samples=7)).sample_seconds) == 7


def test_sweep_points_take_the_sweep_samples_and_other_probes_theirs():
    settings = RunSettings(samples=20, sweep_samples=10)
    assert settings.for_probe("latency.sweep").samples == 10
    assert settings.for_probe("memory.size.sweep").samples == 10
    assert settings.for_probe("latency.dram").samples == 20
    assert RunSettings(samples=5, sweep_samples=10).for_probe("memory.sweep").samples == 5  # never more


def test_only_the_default_suite_limits_samples():
    parse = roofline.build_parser().parse_args
    default = roofline._settings(parse([]))
    assert default.sweep_samples == roofline.DEFAULT_SWEEP_SAMPLES and default.sample_budget_s > 0
    for flags in (["--full"], ["--quick"], ["--samples", "20"]):
        chosen = roofline._settings(parse(flags))
        assert chosen.sweep_samples == 0 and chosen.sample_budget_s == 0, flags
