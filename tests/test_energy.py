"""Energy: each probe's joules from the device's energy counter (else power x time), a workload's joules
per sample, and a prediction's cost and energy per 1,000 samples."""

import types

import pytest
import torch

from pygpuperf.core.results import Stats, Telemetry, per_watt
from pygpuperf.explain.model import Throughput
from pygpuperf.facts import nvml


def _fake_nvml(energy_mj, power_mw=300_000):
    """A stand-in for nvidia-ml-py: each energy read returns the next counter value."""
    reads = iter(energy_mj or [])
    fake = types.SimpleNamespace(
        NVML_CLOCK_SM=0, NVML_CLOCK_MEM=1, NVML_TEMPERATURE_GPU=0,
        nvmlDeviceGetClockInfo=lambda h, c: 1980, nvmlDeviceGetPowerUsage=lambda h: power_mw,
        nvmlDeviceGetTemperature=lambda h, t: 40, nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 5,
        nvmlDeviceGetCurrPcieLinkWidth=lambda h: 16, nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0)
    if energy_mj is not None:
        fake.nvmlDeviceGetTotalEnergyConsumption = lambda h: next(reads)
    return fake


def _sample(monkeypatch, fake):
    monkeypatch.setattr(nvml, "pynvml", fake)
    monkeypatch.setattr(nvml, "nvml_handle", lambda device: object())
    with nvml.sampling(torch.device("cuda", 0)) as sampler:
        pass
    return sampler.telemetry


def test_a_probe_takes_its_joules_from_the_energy_counter(monkeypatch):
    t = _sample(monkeypatch, _fake_nvml([1_000_000, 1_012_500]))
    assert t.energy_j == pytest.approx(12.5) and t.energy_source == "energy counter"


def test_without_a_counter_energy_is_power_times_time(monkeypatch):
    t = _sample(monkeypatch, _fake_nvml(None, power_mw=250_000))
    assert t.energy_source == "power integral" and t.energy_j == pytest.approx(250.0 * t.seconds)


def test_rates_per_watt_use_the_average_power_and_say_nothing_without_it():
    t = Telemetry(power_w=[100.0, 900.0], energy_j=20.0, seconds=0.1)  # 200 W from energy / time, not the samples
    assert per_watt(4000.0, t) == pytest.approx(20.0)
    assert per_watt(4000.0, Telemetry()) is None and per_watt(4000.0, None) is None


def test_a_workload_reports_joules_per_sample():
    t = Throughput(Stats.of([10_000.0] * 5), samples_per_step=256, energy_j_per_step=5.12)
    assert t.joules_per_sample == pytest.approx(0.02)
    assert Throughput.from_dict(t.to_dict()).energy_j_per_step == pytest.approx(5.12)
    assert Throughput(Stats.of([1.0]), 1).joules_per_sample is None


def test_a_prediction_prices_1000_samples_in_euros_and_joules():
    from pygpuperf.predict import Prediction, prediction_documents

    p = Prediction(source="a", target="b", source_step_us=1e5, step_us=50_000.0, samples_per_step=250,
                   waterfall=[], target_power_w=400.0)
    doc, = prediction_documents([p], {"b": 3.6})
    assert doc["eur_per_1000_samples"] == pytest.approx(3.6 / 3600 * 0.05 * 4)  # 4 steps of 50 ms
    assert doc["joules_per_1000_samples"] == pytest.approx(400.0 * 0.05 * 4)
