"""Device telemetry through NVML (nvidia-ml-py): static facts and clock/throttle/link sampling.

Everything degrades to "not available" on devices NVML does not manage.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Iterable, Iterator

import torch

from pygpuperf.core.results import Telemetry

try:
    import pynvml
except ImportError:  # optional at run time: no NVML, no telemetry
    pynvml = None

# Clock-event (throttle) reasons under vendor-neutral names, by the nvidia-ml-py constant of each bit.
_THROTTLE_REASONS = (
    ("nvmlClocksEventReasonGpuIdle", "idle"),
    ("nvmlClocksEventReasonApplicationsClocksSetting", "application_clock_setting"),
    ("nvmlClocksEventReasonSwPowerCap", "software_power_cap"),
    ("nvmlClocksEventReasonHwSlowdown", "hardware_slowdown"),
    ("nvmlClocksEventReasonSyncBoost", "sync_boost"),
    ("nvmlClocksEventReasonSwThermalSlowdown", "software_thermal_slowdown"),
    ("nvmlClocksEventReasonHwThermalSlowdown", "hardware_thermal_slowdown"),
    ("nvmlClocksEventReasonHwPowerBrakeSlowdown", "hardware_power_brake"),
    ("nvmlClocksEventReasonDisplayClockSetting", "display_clock_setting"),
)
_THROTTLE_BITS = {getattr(pynvml, constant): name for constant, name in _THROTTLE_REASONS
                  if pynvml is not None and hasattr(pynvml, constant)}
# Clock-event reasons that say nothing about a card's health.
BENIGN_CLOCK_REASONS = ("idle", "application_clock_setting")


def held_clock_reasons(reasons: Iterable[str]) -> list[str]:
    """The reasons that held the clock back (power cap, thermal slowdown, ...), in order, without the benign ones."""
    return [r for r in reasons if r not in BENIGN_CLOCK_REASONS]


_init_lock = threading.Lock()
_initialized = False


def _nvml_ready() -> bool:
    global _initialized
    if pynvml is None:
        return False
    with _init_lock:
        if not _initialized:
            try:
                pynvml.nvmlInit()
                _initialized = True
            except pynvml.NVMLError:
                return False
    return True


def nvml_handle(device: torch.device) -> Any | None:
    """NVML handle of a torch CUDA device, matched by PCI bus id (honours CUDA_VISIBLE_DEVICES)."""
    if device.type != "cuda" or getattr(torch.version, "hip", None) or not _nvml_ready():
        return None
    props = torch.cuda.get_device_properties(device)
    try:
        bus_id = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
        return pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
    except (AttributeError, pynvml.NVMLError):
        try:
            return pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
        except pynvml.NVMLError:
            return None


def query(fn, *args, default=None):
    """An NVML call's answer, or `default` where the function is missing (an older driver or
    nvidia-ml-py) or the device does not support it."""
    if fn is None:
        return default
    try:
        return fn(*args)
    except Exception:  # NVML raises for every field a device does not support
        return default


def constant(module, name: str) -> Any:
    """An NVML constant as nvidia-ml-py exports it (some releases spell one as a 1-tuple, e.g. (0,)); None
    where this release does not have it."""
    value = getattr(module, name, None)
    return value[0] if isinstance(value, tuple) else value


def throttle_reason_names(mask: int) -> list[str]:
    return [name for bit, name in _THROTTLE_BITS.items() if mask & bit]


def static_facts(device: torch.device) -> dict[str, Any]:
    """Clocks, link, power and ECC facts for results.json's meta (empty without NVML)."""
    h = nvml_handle(device)
    if h is None:
        return {}
    n = pynvml
    facts: dict[str, Any] = {
        "uuid": text(query(n.nvmlDeviceGetUUID, h)),
        "serial": text(query(n.nvmlDeviceGetSerial, h)),
        "driver_version": query(n.nvmlSystemGetDriverVersion),
        "sm_clock_mhz": query(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM),
        "sm_clock_max_mhz": query(n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_SM),
        "mem_clock_mhz": query(n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM),
        "mem_clock_max_mhz": query(n.nvmlDeviceGetMaxClockInfo, h, n.NVML_CLOCK_MEM),
        "memory_bus_width_bits": query(n.nvmlDeviceGetMemoryBusWidth, h),
        "pcie_generation": query(n.nvmlDeviceGetCurrPcieLinkGeneration, h),
        "pcie_generation_max": query(n.nvmlDeviceGetMaxPcieLinkGeneration, h),
        "pcie_width": query(n.nvmlDeviceGetCurrPcieLinkWidth, h),
        "pcie_width_max": query(n.nvmlDeviceGetMaxPcieLinkWidth, h),
        "power_limit_w": _milli(query(n.nvmlDeviceGetPowerManagementLimit, h)),
        "power_limit_default_w": _milli(query(n.nvmlDeviceGetPowerManagementDefaultLimit, h)),
        "ecc_enabled": None,
        "mig_enabled": None,
    }
    ecc = query(n.nvmlDeviceGetEccMode, h)
    if ecc is not None:
        facts["ecc_enabled"] = bool(ecc[0])
    mig = query(n.nvmlDeviceGetMigMode, h)
    if mig is not None:
        facts["mig_enabled"] = bool(mig[0])
    return facts


def text(value: Any) -> str | None:
    """An NVML string (bytes in older bindings) as text; None stays None."""
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _milli(value: int | None) -> float | None:
    return None if value is None else value / 1000.0


def energy_mj(handle: Any) -> int | None:
    """The device's total energy since the driver loaded, mJ (Volta and later), or None."""
    return query(getattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption", None), handle)


class ClockSampler:
    """Samples clocks, power, temperature, throttle reasons and the PCIe link on a background thread."""

    def __init__(self, device: torch.device, interval_s: float = 0.02):
        self._handle = nvml_handle(device)
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.telemetry = Telemetry()
        self._reasons: set[str] = set()
        self._started: float | None = None
        self._energy_mj: int | None = None

    @property
    def active(self) -> bool:
        return self._handle is not None

    def _sample(self) -> None:
        n, h, t = pynvml, self._handle, self.telemetry
        for series, fn, args, scale in (
            (t.sm_clock_mhz, n.nvmlDeviceGetClockInfo, (h, n.NVML_CLOCK_SM), 1.0),
            (t.mem_clock_mhz, n.nvmlDeviceGetClockInfo, (h, n.NVML_CLOCK_MEM), 1.0),
            (t.power_w, n.nvmlDeviceGetPowerUsage, (h,), 1e-3),
            (t.temperature_c, n.nvmlDeviceGetTemperature, (h, n.NVML_TEMPERATURE_GPU), 1.0),
            # Idle links train down to save power: read under load, these show what the transfer got.
            (t.pcie_generation, n.nvmlDeviceGetCurrPcieLinkGeneration, (h,), 1),
            (t.pcie_width, n.nvmlDeviceGetCurrPcieLinkWidth, (h,), 1),
        ):
            value = query(fn, *args)
            if value is not None:
                series.append(value * scale)
        reasons_fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            n, "nvmlDeviceGetCurrentClocksThrottleReasons"
        )
        mask = query(reasons_fn, h)
        if mask is not None:
            self._reasons.update(throttle_reason_names(mask))

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def start(self) -> None:
        # No sample before the run: throttle bits still set by the previous probe would be blamed on this one.
        if self.active:
            self._started = time.monotonic()
            self._energy_mj = energy_mj(self._handle)
            self._thread = threading.Thread(target=self._loop, name="pygpuperf-telemetry", daemon=True)
            self._thread.start()

    def stop(self) -> Telemetry | None:
        if not self.active:
            return None
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        self.telemetry.throttle_reasons = sorted(self._reasons)
        t = self.telemetry
        t.seconds = time.monotonic() - self._started if self._started is not None else None
        end = energy_mj(self._handle)
        if self._energy_mj is not None and end is not None and end >= self._energy_mj:
            t.energy_j, t.energy_source = (end - self._energy_mj) / 1e3, "energy counter"
        elif t.power_w and t.seconds:
            t.energy_j, t.energy_source = float(sum(t.power_w) / len(t.power_w)) * t.seconds, "power integral"
        return t


@contextmanager
def sampling(device: torch.device) -> Iterator[ClockSampler]:
    sampler = ClockSampler(device)
    sampler.start()
    try:
        yield sampler
    finally:
        sampler.stop()
