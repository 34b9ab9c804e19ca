"""The host CPU as the kernel describes it: model name, memory size and cache sizes (sysfs)."""

from __future__ import annotations

import os
import platform
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def host_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def cpu_cache_facts(sysfs: Path = Path("/sys/devices/system/cpu")) -> dict[str, int]:
    """Cache sizes the kernel reports: L1d and L2 per logical CPU (instance / CPUs sharing it, as
    one worker thread per CPU sees them), and the total of the distinct L3 instances.

    Keys: l1d_cache_bytes_per_cpu, l2_cache_bytes_per_cpu, l3_cache_bytes; absent when unknown.
    """
    facts: dict[str, int] = {}
    l3_instances: dict[str, int] = {}
    for index in sorted(sysfs.glob("cpu[0-9]*/cache/index[0-9]*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = _sysfs_size((index / "size").read_text().strip())
            shared = (index / "shared_cpu_list").read_text().strip()
        except OSError:
            continue
        if not size:
            continue
        if level == "3":
            l3_instances[shared] = size
            continue
        key = {("1", "Data"): "l1d_cache_bytes_per_cpu", ("2", "Unified"): "l2_cache_bytes_per_cpu"}.get((level, kind))
        if key and key not in facts:
            facts[key] = size // max(1, _cpu_count(shared))
    if l3_instances:
        facts["l3_cache_bytes"] = sum(l3_instances.values())
    return facts


def _sysfs_size(text: str) -> int:
    multiplier = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text.rstrip("KMG")
    return int(digits) * multiplier if digits.isdigit() else 0


def _cpu_count(cpu_list: str) -> int:
    """CPUs in a sysfs list such as '0-3,8-11'."""
    count = 0
    for part in filter(None, cpu_list.split(",")):
        lo, _, hi = part.partition("-")
        count += int(hi) - int(lo) + 1 if hi else 1
    return count


def cpu_simd_facts(cpuinfo: Path = Path("/proc/cpuinfo"),
                   cpufreq: Path = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")) -> dict[str, int]:
    """The widest SIMD the CPU reports (simd_bits: 512 with AVX-512, 256 with AVX, 128 with SSE/NEON) and
    its maximum clock (cpu_clock_max_mhz, from cpufreq; absent in many VMs, and then no peak is known)."""
    facts: dict[str, int] = {}
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines()
                  if line.startswith(("flags", "Features"))), [])
    for flag, bits in (("avx512f", 512), ("avx", 256), ("sse2", 128), ("asimd", 128)):
        if flag in flags:
            facts["simd_bits"] = bits
            break
    try:
        facts["cpu_clock_max_mhz"] = int(cpufreq.read_text().strip()) // 1000  # kHz
    except (OSError, ValueError):
        pass
    return facts
