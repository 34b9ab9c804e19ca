"""Transfers between host and GPU and between GPUs: the latency + bandwidth fit of size
sweeps, efficiency against the links' theoretical rates, and the findings they lead to.

Fit: a transfer measured at several sizes gives a time per copy T(n) for each size n. A copy
pays a fixed cost (launch, DMA setup, the link's round trip) and then moves bytes at the
link's rate, so T(n) = latency + n / bandwidth. The fit minimises relative residuals, so
small copies (microseconds) weigh as much as large ones (milliseconds). n_half = latency x
bandwidth is the size that reaches half the asymptotic bandwidth: copies much smaller than
it are latency-bound, and batching them is what speeds them up.

Link facts are the dict of :func:`pygpuperf.facts.links.link_facts` (the run's meta); every
finding that needs one it lacks is skipped.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from pygpuperf.measure import pairs
from pygpuperf.facts.links import pcie_gbps
from pygpuperf.core.results import Finding, LinkFit, Measurement

MIN_FIT_POINTS = 3
# A link carrying less than this share of its theoretical rate is worth a warning: PCIe copies
# reach 80-90 % after packet headers, NVLink copies about as much.
LINK_EFFICIENCY_FLOOR = 0.75
# Pageable copies below this share of pinned ones are worth a warning.
PAGEABLE_SHARE = 0.5

_HOST = re.compile(r"^transfer\.(h2d|d2h|bidir)\.(pinned|pageable)(\.sm)?$")
_DIRECTIONS = {"h2d": "host-to-device", "d2h": "device-to-host", "bidir": "bidirectional"}


# --------------------------------------------------------------------------- fit


@dataclass(frozen=True)
class LatencyBandwidth:
    """T(n) = latency_s + n / bandwidth_bps, fitted to `points` sizes."""

    latency_s: float
    bandwidth_bps: float  # bytes per second
    rms_relative_error: float
    points: int

    @property
    def n_half_bytes(self) -> float:
        return self.latency_s * self.bandwidth_bps


def fit_latency_bandwidth(sizes: Sequence[float], seconds: Sequence[float]) -> LatencyBandwidth | None:
    """Least-squares fit of time per copy against bytes per copy, on relative residuals.

    None with fewer than MIN_FIT_POINTS distinct sizes, or when time does not grow with size.
    """
    n = np.asarray(sizes, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    ok = np.isfinite(n) & np.isfinite(t) & (n > 0) & (t > 0)
    n, t = n[ok], t[ok]
    if np.unique(n).size < MIN_FIT_POINTS:
        return None
    # (latency + n * s - t) / t = 0 for every point: linear in latency and s = seconds per byte.
    rows = np.column_stack([1.0 / t, n / t])
    ones = np.ones_like(t)
    (latency, per_byte), *_ = np.linalg.lstsq(rows, ones, rcond=None)
    if latency < 0:  # noise can push a latency of a few microseconds below zero: fit through the origin
        latency = 0.0
        x = n / t
        per_byte = float(x @ ones) / float(x @ x)
    if per_byte <= 0:
        return None
    residuals = (latency + n * per_byte - t) / t
    return LatencyBandwidth(float(latency), 1.0 / float(per_byte), float(np.sqrt(np.mean(residuals**2))), int(n.size))


def copy_time(m: Measurement) -> tuple[float, float] | None:
    """(payload bytes of one copy, median seconds of one copy) of a transfer measurement."""
    copies = float(m.quantities.copies_per_run or 1)
    copies = copies if copies > 0 else 1.0
    payload = (m.bytes_read + m.bytes_written) / copies
    run = [s for s in m.sample_seconds if s > 0]
    seconds = float(np.median(run)) if run else (m.bytes_read + m.bytes_written) / (m.value * 1e9)
    if payload <= 0 or not math.isfinite(seconds) or seconds <= 0:
        return None
    return payload, seconds / copies


def fit_measurements(measurements: Iterable[Measurement]) -> LinkFit | None:
    """The fit of one name and backend measured at several sizes (the fastest variant per size)."""
    measurements = [m for m in measurements if m.usable]
    best: dict[float, float] = {}
    for m in measurements:
        point = copy_time(m)
        if point is not None:
            size, seconds = point
            best[size] = min(seconds, best.get(size, math.inf))
    fit = fit_latency_bandwidth(list(best), list(best.values()))
    if fit is None:
        return None
    return LinkFit(name=measurements[0].name, backend=measurements[0].backend, bandwidth_gbs=fit.bandwidth_bps / 1e9,
                   latency_us=fit.latency_s * 1e6, n_half_bytes=fit.n_half_bytes, points=fit.points,
                   rms_relative_error=fit.rms_relative_error, min_bytes=min(best), max_bytes=max(best))


def link_fits(measurements: Iterable[Measurement]) -> dict[str, LinkFit]:
    """One fit per transfer name, keyed like MachineModel.links ("h2d.pinned", "p2p.0.1.ce.write").

    Where several backends fit a name, the native one is kept: it sets the ceilings.
    """
    groups: dict[tuple[str, str], list[Measurement]] = defaultdict(list)
    for m in measurements:
        if m.name.startswith("transfer.") and m.usable:
            groups[(m.name, m.backend)].append(m)
    fits: dict[str, LinkFit] = {}
    for (name, _), group in groups.items():
        fit = fit_measurements(group)
        if fit is None:
            continue
        key = name[len("transfer."):]
        held = fits.get(key)
        if held is None or _preference(fit) > _preference(held):
            fits[key] = fit
    return dict(sorted(fits.items()))


def _preference(fit: LinkFit) -> tuple[bool, int, float]:
    return fit.backend.startswith("native"), fit.points, -fit.rms_relative_error


# --------------------------------------------------------------------------- link facts


def _gpu_facts(facts: dict[str, Any] | None, index: int) -> dict[str, Any]:
    return ((facts or {}).get("gpus") or {}).get(str(index)) or {}


def _pair_facts(facts: dict[str, Any] | None, src: int, dst: int) -> dict[str, Any]:
    return ((facts or {}).get("pairs") or {}).get(f"{src}.{dst}") or {}


def _gen_width(generation: Any, width: Any) -> str:
    return f"Gen{generation if generation is not None else '?'} x{width if width is not None else '?'}"


def describe_pair_link(pair: dict[str, Any]) -> str:
    """"18 x NVLink 4.0 (switch)", "PCIe (same PCIe switch)" or "unknown"."""
    if pair.get("type") == "nvlink":
        version = f" {pair['version']}" if pair.get("version") else ""
        return f"{pair.get('links')} x NVLink{version} ({pair.get('via')})"
    if pair.get("type") == "pcie":
        return f"PCIe ({pair['pcie_path']})" if pair.get("pcie_path") else "PCIe"
    return "unknown"


# --------------------------------------------------------------------------- measurements


def _device_index(m: Measurement) -> int:
    """Torch index of the GPU a host transfer ran on ("cuda:1" -> 1; a bare "cuda" is device 0)."""
    _, _, index = m.device.partition(":")
    return int(index) if index.isdigit() else 0


def _host_transfers(measurements: Iterable[Measurement]) -> dict[int, list[Measurement]]:
    by_gpu: dict[int, list[Measurement]] = defaultdict(list)
    for m in measurements:
        if _HOST.match(m.name):
            by_gpu[_device_index(m)].append(m)
    return by_gpu


def _best(measurements: Iterable[Measurement], name: str) -> Measurement | None:
    usable = [m for m in measurements if m.name == name and m.usable]
    return max(usable, key=lambda m: m.value) if usable else None


def _nodes(value: int | str | None) -> set[int]:
    """NUMA nodes a probe recorded: 0, "0,1" (source and destination apart); none for "unknown" or -1."""
    nodes = set()
    for part in str("" if value is None else value).split(","):
        try:
            node = int(part)
        except ValueError:
            continue
        if node >= 0:
            nodes.add(node)
    return nodes


def _pair_transfers(measurements: Iterable[Measurement]) -> dict[tuple[int, int], list[Measurement]]:
    by_pair: dict[tuple[int, int], list[Measurement]] = defaultdict(list)
    for m in measurements:
        split = pairs.split(m.name)
        if split is not None:
            by_pair[(split[1], split[2])].append(m)
    return by_pair


def _mode(name: str) -> str:
    split = pairs.split(name)
    return split[0][len(pairs.PAIR_PREFIX):] if split else ""


def p2p_efficiency_rows(measurements: Iterable[Measurement], link_facts: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One row per ordered GPU pair for a P2P matrix: the best one-way figure (any engine, read
    or write) and the best bidirectional one, against what the link carries (per direction;
    twice that both ways). Efficiency is None where the link's rate is unknown."""
    rows = []
    for (src, dst), group in sorted(_pair_transfers(measurements).items()):
        usable = [m for m in group if m.usable]
        one_way = [m for m in usable if _mode(m.name).endswith(("write", "read"))]
        both_ways = [m for m in usable if _mode(m.name).endswith("bidir")]
        best = max(one_way, key=lambda m: m.value, default=None)
        best_bidir = max(both_ways, key=lambda m: m.value, default=None)
        pair = _pair_facts(link_facts, src, dst)
        rate = pair.get("gbps_per_direction")
        access = sorted({m.params["p2p_access"] for m in group if "p2p_access" in m.params})
        rows.append({
            "src": src, "dst": dst, "link": describe_pair_link(pair), "theoretical_gbps": rate,
            "best_gbps": best.value if best else None, "best_source": best.name if best else None,
            "best_backend": best.backend if best else None,
            "efficiency": best.value / rate if best and rate else None,
            "bidir_gbps": best_bidir.value if best_bidir else None,
            "bidir_efficiency": best_bidir.value / (2 * rate) if best_bidir and rate else None,
            "p2p_access": ", ".join(access) or None,
        })
    return rows


# --------------------------------------------------------------------------- findings


def _pcie_findings(host: dict[int, list[Measurement]], facts: dict[str, Any] | None) -> list[Finding]:
    findings = []
    indices = sorted(set(host) | {int(k) for k in ((facts or {}).get("gpus") or {})})
    for index in indices:
        link = _gpu_facts(facts, index).get("host_link") or {}
        gen_max, width_max = link.get("generation_max"), link.get("width_max")
        device_max = link.get("device_generation_max")
        samples = [m.telemetry for m in host.get(index, []) if m.telemetry]
        gens = [g for t in samples for g in t.pcie_generation]
        widths = [w for t in samples for w in t.pcie_width]
        sampled = bool(gens or widths)
        if sampled:
            # The best the link reached under load: a sample taken as a copy ended must not count against it.
            gen, width = (int(max(gens)) if gens else None), (int(max(widths)) if widths else None)
            when = "during host transfers"
        else:
            gen, width = link.get("generation"), link.get("width")
            when = "when the run started, outside any transfer"
        # Without a transfer on this GPU its generation says nothing: idle links train down to save power.
        low_gen = gen is not None and gen_max is not None and gen < gen_max and (sampled or index in host)
        low_width = width is not None and width_max is not None and width < width_max
        if low_gen or low_width:
            now, best = pcie_gbps(gen, width), pcie_gbps(gen_max, width_max)
            rates = f" ({now:.1f} of {best:.1f} GB/s per direction)" if now and best else ""
            # A low generation read outside a transfer is only a hint; a narrow link stays narrow.
            warn = sampled or low_width
            if warn:
                fix = ("Seat the card in a slot wired for its full width at the platform's top PCIe generation, and "
                       "check the BIOS link-speed setting, risers and retimers; a link that trains down only under "
                       "load points to signal integrity.")
            else:
                fix = "Links slow down when idle to save power; run the transfer probes to see the speed under load."
            findings.append(Finding(
                "warning" if warn else "info",
                f"GPU {index}'s PCIe link ran at {_gen_width(gen, width)} {when}, below its "
                f"{_gen_width(gen_max, width_max)} maximum{rates}.",
                {"gpu": index, "generation": gen, "width": width, "generation_max": gen_max, "width_max": width_max,
                 "sampled_during_transfers": sampled, "samples": len(gens)},
                fix))
        if device_max is not None and gen_max is not None and device_max > gen_max:
            lost, could = pcie_gbps(gen_max, width_max), pcie_gbps(device_max, width_max)
            rates = f", so host transfers get at most {lost:.1f} instead of {could:.1f} GB/s per direction" \
                if lost and could else ""
            findings.append(Finding(
                "warning", f"GPU {index} supports PCIe Gen{device_max} but its link tops out at Gen{gen_max}{rates}.",
                {"gpu": index, "device_generation_max": device_max, "generation_max": gen_max, "width_max": width_max},
                f"The slot, riser or CPU holds the link back: move the card to a slot wired for Gen{device_max}, "
                "or check the BIOS link-speed setting."))
    return findings


def _host_bandwidth_findings(host: dict[int, list[Measurement]], facts: dict[str, Any] | None) -> list[Finding]:
    findings = []
    for index, group in sorted(host.items()):
        link = _gpu_facts(facts, index).get("host_link") or {}
        rate = link.get("gbps_per_direction")
        if not rate:
            continue
        label = f"PCIe {_gen_width(link.get('generation_max'), link.get('width_max'))}"
        fine = {}
        for direction in ("h2d", "d2h"):
            best = _best(group, f"transfer.{direction}.pinned")
            if best is None:
                continue
            efficiency = best.value / rate
            evidence = {"gpu": index, "direction": direction, "measured_gbps": best.value, "theoretical_gbps": rate,
                        "efficiency": round(efficiency, 3), "link": label, "source": best.name, "backend": best.backend,
                        "bytes": best.quantities.bytes}
            if efficiency < LINK_EFFICIENCY_FLOOR:
                findings.append(Finding(
                    "warning",
                    f"{_DIRECTIONS[direction].capitalize()} copies on GPU {index} reach {best.value:.1f} GB/s, "
                    f"{efficiency:.0%} of the {rate:.1f} GB/s its {label} link carries per direction.",
                    evidence,
                    "Copies from pinned memory normally reach 80-90 % of the link: check the PCIe link speed and NUMA "
                    "findings, an IOMMU in translation mode, and other devices sharing the PCIe switch."))
            else:
                fine[direction] = evidence
        if fine:
            parts = [f"{_DIRECTIONS[d]} {e['measured_gbps']:.1f} GB/s ({e['efficiency']:.0%})" for d, e in fine.items()]
            findings.append(Finding(
                "info", f"Pinned host transfers on GPU {index} reach {', '.join(parts)} of the {rate:.1f} GB/s "
                f"its {label} link carries per direction.", {"gpu": index, "directions": fine}, ""))
    return findings


def _pageable_findings(host: dict[int, list[Measurement]]) -> list[Finding]:
    findings = []
    for index, group in sorted(host.items()):
        for direction in ("h2d", "d2h"):
            pinned = _best(group, f"transfer.{direction}.pinned")
            pageable = _best(group, f"transfer.{direction}.pageable")
            if pinned is None or pageable is None or pageable.value >= PAGEABLE_SHARE * pinned.value:
                continue
            share = pageable.value / pinned.value
            fix = ("pin host batches: DataLoader(pin_memory=True) and .to(device, non_blocking=True)"
                   if direction == "h2d" else
                   "copy into pinned host tensors (torch.empty(..., pin_memory=True)) with non_blocking=True")
            findings.append(Finding(
                "warning",
                f"{_DIRECTIONS[direction].capitalize()} copies from pageable memory on GPU {index} reach "
                f"{pageable.value:.1f} GB/s, {share:.0%} of the {pinned.value:.1f} GB/s from pinned memory.",
                {"gpu": index, "direction": direction, "pageable_gbps": pageable.value, "pinned_gbps": pinned.value,
                 "share": round(share, 3)},
                f"Pageable copies go through a staging buffer the CPU fills; {fix}."))
    return findings


def _numa_findings(measurements: Iterable[Measurement]) -> list[Finding]:
    """Host buffers on another NUMA node than the GPU, from the nodes host probes record."""
    crossed: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
    gpu_nodes: dict[int, set[int]] = defaultdict(set)
    host_nodes: dict[int, set[int]] = defaultdict(set)
    for m in measurements:
        gpu, host = _nodes(m.params.get("gpu_numa_node")), _nodes(m.params.get("host_numa_node"))
        if len(gpu) != 1 or not host - gpu:
            continue
        index = _device_index(m)
        gpu_nodes[index] |= gpu
        host_nodes[index] |= host - gpu
        probe = crossed[index].setdefault(f"{m.name} ({m.backend})", {"value": None, "unit": m.unit,
                                          "gpu_numa_node": min(gpu), "host_numa_node": m.params["host_numa_node"]})
        better = probe["value"] is None or (m.value < probe["value"] if m.unit == "ns" else m.value > probe["value"])
        if m.usable and better:
            probe["value"] = m.value
    findings = []
    for index, probes in sorted(crossed.items()):
        gpu_node = min(gpu_nodes[index])
        nodes = " and ".join(str(n) for n in sorted(host_nodes[index]))
        findings.append(Finding(
            "warning",
            f"Host buffers of {len(probes)} transfer probe(s) on GPU {index} sat on NUMA node {nodes} while the GPU "
            f"hangs off node {gpu_node}, so those copies cross the link between CPU sockets.",
            {"gpu": index, "gpu_numa_node": gpu_node, "host_numa_nodes": sorted(host_nodes[index]), "probes": probes},
            f"Bind the process to node {gpu_node} (numactl --cpunodebind={gpu_node} --membind={gpu_node}, or the "
            "launcher's CPU affinity) so pinned buffers are allocated next to the GPU."))
    return findings


def _p2p_access_findings(by_pair: dict[tuple[int, int], list[Measurement]],
                         facts: dict[str, Any] | None) -> list[Finding]:
    findings = []
    off: dict[tuple[int, int], list[Measurement]] = defaultdict(list)
    for (src, dst), group in by_pair.items():
        off[(min(src, dst), max(src, dst))] += [m for m in group if m.params.get("p2p_access", "").startswith("off")]
    for (a, b), group in sorted(off.items()):
        if not group:
            continue
        pair = _pair_facts(facts, a, b) or _pair_facts(facts, b, a)
        if pair.get("type") == "nvlink":
            joined = f"are joined by {pair.get('links')} NVLinks"
        elif pair.get("pcie_path") == "same PCIe switch":
            joined = "share a PCIe switch"
        else:
            continue  # across host bridges or sockets P2P may be unsupported by design
        findings.append(Finding(
            "warning",
            f"P2P access is off between GPU {a} and GPU {b}, which {joined}, so their copies go through host memory.",
            {"gpus": [a, b], "link": describe_pair_link(pair), "pcie_path": pair.get("pcie_path"),
             "p2p_access": sorted({m.params["p2p_access"] for m in group}), "p2p_status": pair.get("p2p_status"),
             "probes": sorted({m.name for m in group})},
            "Let the GPUs reach each other: in a VM or container pass P2P through; on bare metal check that the "
            "PCIe switch's ACS and the IOMMU do not block it (nvidia-smi topo -p2p rw shows the result)."))
    return findings


def _nvlink_down_findings(facts: dict[str, Any] | None) -> list[Finding]:
    findings = []
    for key, gpu in sorted(((facts or {}).get("gpus") or {}).items(), key=lambda kv: int(kv[0])):
        links = gpu.get("peer_links") or {}
        down, total = links.get("down") or 0, links.get("total") or 0
        if not down:
            continue
        active, rate = total - down, links.get("gbps_per_link")
        rates = f" ({active * rate:.0f} of {total * rate:.0f} GB/s per direction)" if rate else ""
        findings.append(Finding(
            "warning",
            f"GPU {key} has {down} of its {total} NVLinks down, so its peer copies get at most {active}/{total} of the "
            f"bandwidth it was built for{rates}.",
            {"gpu": int(key), "links_total": total, "links_down": down, "version": links.get("version"),
             "gbps_per_link": rate},
            "Check the link status (nvidia-smi nvlink --status) and the fabric manager's log; links that stay down "
            "after a GPU reset need the board or its cabling looked at."))
    return findings


def _p2p_bandwidth_findings(rows: list[dict[str, Any]]) -> list[Finding]:
    rated = [r for r in rows if r["efficiency"] is not None]
    low = [r for r in rated if r["efficiency"] < LINK_EFFICIENCY_FLOOR]
    fine = [r for r in rated if r["efficiency"] >= LINK_EFFICIENCY_FLOOR]
    def evidence(chosen: list[dict[str, Any]]) -> dict[str, Any]:
        return {f"{r['src']}->{r['dst']}": {k: r[k] for k in ("link", "best_gbps", "theoretical_gbps", "efficiency",
                                                             "best_source", "p2p_access")} for r in chosen}

    findings = []
    if low:
        worst = min(low, key=lambda r: r["efficiency"])
        findings.append(Finding(
            "warning",
            f"P2P copies on {len(low)} of {len(rated)} GPU pair(s) reach less than {LINK_EFFICIENCY_FLOOR:.0%} of "
            f"their link's rate; the lowest, GPU {worst['src']} -> GPU {worst['dst']} over {worst['link']}, "
            f"{worst['best_gbps']:.1f} of {worst['theoretical_gbps']:.1f} GB/s ({worst['efficiency']:.0%}).",
            evidence(low),
            "With P2P access off, copies go through host memory; with it on, check for NVLinks down and for other "
            "traffic sharing the links."))
    if fine:
        lo, hi = min(r["efficiency"] for r in fine), max(r["efficiency"] for r in fine)
        spread = f"{lo:.0%}" if f"{lo:.0%}" == f"{hi:.0%}" else f"{lo:.0%} to {hi:.0%}"
        findings.append(Finding(
            "info", f"P2P copies on {len(fine)} GPU pair(s) reach {spread} of their link's rate "
            f"(best {max(r['best_gbps'] for r in fine):.1f} GB/s).",
            evidence(fine), ""))
    return findings


def transfer_findings(measurements: Sequence[Measurement], link_facts: dict[str, Any] | None) -> list[Finding]:
    """Findings on host and peer transfers: link speed under load, bandwidth against the link,
    pageable against pinned copies, NUMA placement, P2P access, NVLinks down and P2P efficiency."""
    host = _host_transfers(measurements)
    by_pair = _pair_transfers(measurements)
    return (_pcie_findings(host, link_facts) + _host_bandwidth_findings(host, link_facts) + _pageable_findings(host)
            + _numa_findings(measurements) + _p2p_access_findings(by_pair, link_facts)
            + _nvlink_down_findings(link_facts) + _p2p_bandwidth_findings(p2p_efficiency_rows(measurements, link_facts)))
