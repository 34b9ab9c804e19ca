"""Transfer size sweeps fitted as latency + size / bandwidth, and the transfer findings on a
healthy and a degraded H200-like node."""

import copy

import numpy as np
import pytest

from pygpuperf.core import documents
from pygpuperf.facts import links
from pygpuperf.analyze import transfers
from pygpuperf.core.results import Measurement, Results, Telemetry
from pygpuperf.analyze.machine_model import build_machine_model


def transfer(name, gbps, size=64 << 20, *, latency_s=0.0, copies=4, backend="native-cuda", device="cuda:0",
             params=None, pcie=None, noise=()):
    """A transfer measured at one size: `gbps` is the rate of its payload once latency is paid."""
    ways = 2 if ".bidir" in name else 1
    per_copy = latency_s + ways * size / (gbps * 1e9)
    runs = [copies * per_copy * (1 + e) for e in (noise or (0.0,) * 5)]
    telemetry = Telemetry(pcie_generation=[pcie[0]] * 3, pcie_width=[pcie[1]] * 3) if pcie else None
    return Measurement.from_samples(name, sample_seconds=runs, bytes_read=ways * size * copies, bytes_written=0,
                                    flops=0, backend=backend, device=device, verified=True,
                                    params={"bytes": str(size), "copies_per_run": str(copies), **(params or {})},
                                    telemetry=telemetry)


def sweep(name, gbps, latency_s, sizes, **kw):
    return [transfer(name, gbps, size, latency_s=latency_s, **kw) for size in sizes]


# --------------------------------------------------------------------------- fit


def test_fit_recovers_latency_and_bandwidth_from_noisy_times():
    latency, bandwidth = 8e-6, 52e9
    sizes = 2.0 ** np.arange(12, 31)  # 4 KiB .. 1 GiB: latency-bound to bandwidth-bound
    ours, absolute = [], []
    for seed in range(40):
        times = (latency + sizes / bandwidth) * (1 + np.random.default_rng(seed).normal(0, 0.02, sizes.size))
        fit = transfers.fit_latency_bandwidth(sizes, times)
        assert fit.points == sizes.size
        assert fit.bandwidth_bps == pytest.approx(bandwidth, rel=0.03)
        assert fit.n_half_bytes == pytest.approx(latency * bandwidth, rel=0.12)  # 416 kB
        assert 0.005 < fit.rms_relative_error < 0.04
        ours.append(abs(fit.latency_s / latency - 1))
        absolute.append(abs(np.polyfit(sizes, times, 1)[1] / latency - 1))
    assert max(ours) < 0.05
    # 2 % of a 1 GiB copy is 2.6x the latency: a fit on absolute seconds loses the latency in that noise.
    assert np.median(absolute) > 0.5


def test_fit_is_exact_on_exact_data():
    sizes = [4096, 65536, 1 << 20, 1 << 24, 1 << 28]
    fit = transfers.fit_latency_bandwidth(sizes, [2e-6 + n / 400e9 for n in sizes])
    assert fit.latency_s == pytest.approx(2e-6, rel=1e-9) and fit.bandwidth_bps == pytest.approx(400e9, rel=1e-9)
    assert fit.rms_relative_error < 1e-9


def test_fit_clamps_a_negative_latency_and_refuses_what_has_no_slope():
    sizes = [1 << 20, 1 << 22, 1 << 24, 1 << 26]
    fit = transfers.fit_latency_bandwidth(sizes, [n / 50e9 * f for n, f in zip(sizes, (0.97, 1.0, 1.0, 1.01))])
    assert fit.latency_s == 0.0 and fit.n_half_bytes == 0.0
    assert fit.bandwidth_bps == pytest.approx(50e9, rel=0.03)
    assert transfers.fit_latency_bandwidth(sizes[:2], [1e-3, 2e-3]) is None  # two sizes
    assert transfers.fit_latency_bandwidth([1 << 20] * 5, [1e-3] * 5) is None  # one size, five times
    assert transfers.fit_latency_bandwidth(sizes, [4e-3, 3e-3, 2e-3, 1e-3]) is None  # faster when larger


def test_link_fits_per_name_prefer_native_and_count_both_ways_of_bidirectional():
    sizes = [1 << 16, 1 << 20, 1 << 24, 1 << 28]
    ms = (sweep("transfer.h2d.pinned", 55.0, 5e-6, sizes, copies=8)
          + sweep("transfer.h2d.pinned", 40.0, 20e-6, sizes, backend="torch-cuda", copies=1)
          + sweep("transfer.bidir.pinned", 100.0, 6e-6, sizes)
          + sweep("transfer.p2p.0.1.ce.write", 390.0, 3e-6, sizes, params={"src": "0", "dst": "1"})
          + sweep("transfer.d2h.pinned", 55.0, 5e-6, sizes[:2]))  # too few sizes for a fit
    ms.append(Measurement.not_run("transfer.h2d.pageable", backend="native-cuda", device="cuda:0", status="error",
                                  reason="boom"))
    fits = transfers.link_fits(ms)
    assert set(fits) == {"h2d.pinned", "bidir.pinned", "p2p.0.1.ce.write"}
    h2d = fits["h2d.pinned"]
    assert h2d.backend == "native-cuda" and h2d.name == "transfer.h2d.pinned" and h2d.points == 4
    assert h2d.bandwidth_gbs == pytest.approx(55.0, rel=1e-6)
    assert h2d.latency_us == pytest.approx(5.0, rel=1e-6)  # per copy, although a run holds eight
    assert h2d.n_half_bytes == pytest.approx(5e-6 * 55e9, rel=1e-6)
    assert (h2d.min_bytes, h2d.max_bytes) == (1 << 16, 1 << 28)
    assert fits["bidir.pinned"].bandwidth_gbs == pytest.approx(100.0, rel=1e-6)
    assert fits["bidir.pinned"].max_bytes == 2 * (1 << 28)  # payload of both directions, as the value counts it
    only_torch = transfers.link_fits([m for m in ms if m.backend == "torch-cuda"])
    assert only_torch["h2d.pinned"].backend == "torch-cuda"
    assert only_torch["h2d.pinned"].latency_us == pytest.approx(20.0, rel=1e-6)


def test_fit_takes_the_fastest_variant_per_size_and_skips_unverified():
    sizes = [1 << 16, 1 << 20, 1 << 24]
    ms = sweep("transfer.h2d.pinned", 50.0, 4e-6, sizes) + sweep("transfer.h2d.pinned", 25.0, 4e-6, sizes)
    wrong = transfer("transfer.h2d.pinned", 500.0, 1 << 28, latency_s=4e-6)
    wrong.verified = False
    fit = transfers.link_fits(ms + [wrong])["h2d.pinned"]
    assert fit.bandwidth_gbs == pytest.approx(50.0, rel=1e-6) and fit.points == 3


def test_machine_model_carries_link_fits_through_json(tmp_path):
    sizes = [1 << 16, 1 << 20, 1 << 24, 1 << 28]
    ms = sweep("transfer.h2d.pinned", 55.0, 5e-6, sizes, pcie=(5, 16))
    model = build_machine_model("cuda:0", iter(ms))  # a generator is read once per table
    assert model.links["h2d.pinned"].value == pytest.approx(ms[-1].value)
    assert model.link_fits["h2d.pinned"].bandwidth_gbs == pytest.approx(55.0, rel=1e-6)
    r = Results(meta={"versions": {"pygpuperf": "0", "torch": "2", "python": "3"}, "device": {"type": "cuda"},
                      "host": {}, "time_utc": "2026-01-01T00:00:00+00:00", "counting": "1 GB = 1e9 B"},
                measurements=ms, machine_model=model)
    loaded = documents.load_results(documents.write_results(r, tmp_path)["json"])
    assert loaded.machine_model.link_fits == model.link_fits
    assert loaded.measurements[0].telemetry.pcie_generation == [5, 5, 5]


def test_documents_without_link_fits_or_pcie_samples_still_load():
    ms = sweep("transfer.h2d.pinned", 55.0, 5e-6, [1 << 16, 1 << 20, 1 << 24], pcie=(5, 16))
    r = Results(meta={"versions": {"pygpuperf": "0", "torch": "2", "python": "3"}, "device": {"type": "cuda"},
                      "host": {}, "time_utc": "2026-01-01T00:00:00+00:00", "counting": "1 GB = 1e9 B"},
                measurements=ms, machine_model=build_machine_model("cuda:0", ms))
    doc = copy.deepcopy(r.to_dict())
    del doc["machine_model"]["link_fits"]
    for m in doc["measurements"]:
        del m["telemetry"]["pcie_generation"], m["telemetry"]["pcie_width"]
    documents.validate_document(doc)
    loaded = Results.from_dict(doc)
    assert loaded.machine_model.link_fits == {} and loaded.measurements[0].telemetry.pcie_width == []
    doc["machine_model"]["link_fits"] = {"h2d.pinned": {"name": "transfer.h2d.pinned", "backend": "x"}}
    with pytest.raises(documents.ResultsFileError, match="link_fits"):
        documents.validate_document(doc)


# --------------------------------------------------------------------------- findings

RATE = links.pcie_gbps(5, 16)  # 63.0 GB/s per direction


def gpu_facts(*, gen=5, width=16, gen_max=5, width_max=16, device_gen_max=5, down=0, numa=0):
    return {"bus_id": "0000:18:00.0", "name": "NVIDIA H200", "compute_capability": "9.0", "numa_node": numa,
            "host_link": {"type": "pcie", "generation": gen, "width": width, "generation_max": gen_max,
                          "width_max": width_max, "device_generation_max": device_gen_max,
                          "gbps_per_direction": links.pcie_gbps(gen_max, width_max),
                          "gbps_per_direction_now": links.pcie_gbps(gen, width)},
            "peer_links": {"type": "nvlink", "total": 18, "active": 18 - down, "down": down, "to_switch": 18 - down,
                           "version": "4.0", "gbps_per_link": 25.0}}


def pair_facts(src, dst, *, links=18, pcie_path="same host bridge", p2p=True):
    nvlink = links > 0
    return {"src": src, "dst": dst, "type": "nvlink" if nvlink else "pcie", "via": "switch" if nvlink else None,
            "links": links, "links_total": 18 if nvlink else 0, "links_down": 0, "version": "4.0" if nvlink else None,
            "pcie_path": pcie_path, "gbps_per_direction": 25.0 * links if nvlink else RATE,
            "p2p_read": p2p, "p2p_write": p2p, "p2p_status": {"read": "ok" if p2p else "not supported"}}


def node_facts(*, down=0, links=18, pcie_path="same host bridge", p2p=True, **gpu0):
    return {"source": "nvml",
            "gpus": {"0": gpu_facts(down=down, **gpu0), "1": gpu_facts()},
            "pairs": {"0.1": pair_facts(0, 1, links=min(links, 18 - down), pcie_path=pcie_path, p2p=p2p),
                      "1.0": pair_facts(1, 0, links=min(links, 18 - down), pcie_path=pcie_path, p2p=p2p)}}


def node_measurements(*, pcie=(5, 16), pinned=(55.0, 55.0), pageable=(40.0, 30.0), host_numa="0", p2p=390.0,
                      p2p_access="on", telemetry=True):
    """Host transfers of GPU 0 and P2P copies both ways; pinned and pageable are (h2d, d2h) GB/s."""
    ms = []
    for direction, fast, slow in zip(("h2d", "d2h"), pinned, pageable):
        for memory, gbps in (("pinned", fast), ("pageable", slow)):
            ms.append(transfer(f"transfer.{direction}.{memory}", gbps, pcie=pcie if telemetry else None,
                               params={"host_memory": memory, "direction": direction, "engine": "copy engine",
                                       "gpu_numa_node": "0", "host_numa_node": host_numa}))
        ms.append(transfer(f"transfer.{direction}.pinned.sm", fast * 0.9, pcie=pcie if telemetry else None))
    ms.append(transfer("transfer.bidir.pinned", pinned[0] * 1.6, pcie=pcie if telemetry else None))
    for src, dst in ((0, 1), (1, 0)):
        for mode, gbps in (("ce.write", p2p), ("ce.read", p2p * 0.95), ("sm.write", p2p * 0.9),
                           ("ce.bidir", p2p * 1.9)):
            ms.append(transfer(f"transfer.p2p.{src}.{dst}.{mode}", gbps, device=f"cuda:{src}",
                               params={"src": str(src), "dst": str(dst), "p2p_access": p2p_access}))
    return ms


def warnings(findings):
    return [f.title for f in findings if f.severity == "warning"]


def test_healthy_h200_node_has_no_warnings_and_reports_efficiency():
    findings = transfers.transfer_findings(node_measurements(), node_facts())
    assert warnings(findings) == []
    infos = [f for f in findings if f.severity == "info"]
    assert len(infos) == 2
    host = infos[0]
    assert host.title == ("Pinned host transfers on GPU 0 reach host-to-device 55.0 GB/s (87%), device-to-host "
                          "55.0 GB/s (87%) of the 63.0 GB/s its PCIe Gen5 x16 link carries per direction.")
    assert host.evidence["directions"]["h2d"]["efficiency"] == pytest.approx(55 / 63.0, abs=1e-3)
    p2p = infos[1]
    assert p2p.title == "P2P copies on 2 GPU pair(s) reach 87% of their link's rate (best 390.0 GB/s)."
    assert p2p.evidence["0->1"]["link"] == "18 x NVLink 4.0 (switch)"


def test_degraded_node_has_each_warning_once():
    ms = node_measurements(pcie=(4, 8), pinned=(25.0, 25.0), pageable=(6.0, 20.0), host_numa="1", p2p=20.0,
                           p2p_access="off (peer access not supported)")
    findings = transfers.transfer_findings(ms, node_facts(down=2, pcie_path="same PCIe switch", p2p=False))
    assert warnings(findings) == [
        "GPU 0's PCIe link ran at Gen4 x8 during host transfers, below its Gen5 x16 maximum "
        "(15.8 of 63.0 GB/s per direction).",
        "Host-to-device copies on GPU 0 reach 25.0 GB/s, 40% of the 63.0 GB/s its PCIe Gen5 x16 link carries per "
        "direction.",
        "Device-to-host copies on GPU 0 reach 25.0 GB/s, 40% of the 63.0 GB/s its PCIe Gen5 x16 link carries per "
        "direction.",
        "Host-to-device copies from pageable memory on GPU 0 reach 6.0 GB/s, 24% of the 25.0 GB/s from pinned memory.",
        "Host buffers of 4 transfer probe(s) on GPU 0 sat on NUMA node 1 while the GPU hangs off node 0, so those "
        "copies cross the link between CPU sockets.",
        "P2P access is off between GPU 0 and GPU 1, which are joined by 16 NVLinks, so their copies go through "
        "host memory.",
        "GPU 0 has 2 of its 18 NVLinks down, so its peer copies get at most 16/18 of the bandwidth it was built for "
        "(400 of 450 GB/s per direction).",
        "P2P copies on 2 of 2 GPU pair(s) reach less than 75% of their link's rate; the lowest, GPU 0 -> GPU 1 over "
        "16 x NVLink 4.0 (switch), 20.0 of 400.0 GB/s (5%).",
    ]
    pageable = next(f for f in findings if "pageable" in f.title)
    assert "pin_memory=True" in pageable.suggestion
    numa = next(f for f in findings if "NUMA" in f.title)
    assert "numactl --cpunodebind=0 --membind=0" in numa.suggestion
    assert numa.evidence["probes"]["transfer.h2d.pinned (native-cuda)"]["value"] == pytest.approx(25.0)
    assert all(f.suggestion for f in findings if f.severity == "warning")


@pytest.mark.parametrize("fault, facts, fragment", [
    ({"pcie": (5, 8)}, {}, "PCIe link ran at Gen5 x8 during host transfers"),
    ({"pinned": (40.0, 55.0)}, {}, "Host-to-device copies on GPU 0 reach 40.0 GB/s, 63%"),
    ({"pinned": (55.0, 30.0), "pageable": (40.0, 20.0)}, {}, "Device-to-host copies on GPU 0 reach 30.0 GB/s, 48%"),
    ({"pageable": (27.0, 30.0)}, {}, "Host-to-device copies from pageable memory on GPU 0 reach 27.0 GB/s, 49%"),
    ({"pageable": (40.0, 5.0)}, {}, "Device-to-host copies from pageable memory"),
    ({"host_numa": "1"}, {}, "sat on NUMA node 1 while the GPU hangs off node 0"),
    ({"host_numa": "0,1"}, {}, "sat on NUMA node 1 while"),  # a bidirectional probe's two buffers
    ({"p2p_access": "off"}, {"links": 0, "pcie_path": "same PCIe switch"}, "which share a PCIe switch"),
    ({}, {"down": 1}, "GPU 0 has 1 of its 18 NVLinks down"),
    ({"p2p": 330.0}, {}, "P2P copies on 2 of 2 GPU pair(s) reach less than 75%"),
    ({}, {"gen_max": 4, "gen": 4}, "GPU 0 supports PCIe Gen5 but its link tops out at Gen4, so host transfers get at "
                                   "most 31.5 instead of 63.0 GB/s per direction."),
])
def test_one_fault_gives_exactly_one_warning(fault, facts, fragment):
    if facts.get("links") == 0:
        fault = {**fault, "p2p": RATE * 0.85}  # a PCIe pair: judged against the PCIe rate
    if "gen_max" in facts:
        fault = {**fault, "pcie": (4, 16), "pinned": (27.0, 27.0), "pageable": (20.0, 20.0)}  # 86% of a Gen4 x16 link
    found = warnings(transfers.transfer_findings(node_measurements(**fault), node_facts(**facts)))
    assert len(found) == 1 and fragment in found[0], found


@pytest.mark.parametrize("measured, facts", [
    ({"p2p_access": "off"}, {"links": 0, "pcie_path": "across CPU sockets"}),  # P2P often unsupported there
    ({"p2p_access": "off"}, {"links": 0, "pcie_path": None}),
    ({"pageable": (28.0, 28.0)}, {}),  # 51 % of pinned
    ({"pinned": (47.5, 47.5), "pageable": (40.0, 40.0)}, {}),  # 75.4 % of the link
    ({"host_numa": "unknown"}, {}),
    ({"host_numa": "-1"}, {}),  # a host without NUMA information
    ({"pcie": (5, 16)}, {"gen": 1}),  # idle at Gen1 when the run started, Gen5 under load
])
def test_no_warning_short_of_the_thresholds(measured, facts):
    if facts.get("links") == 0:
        measured = {**measured, "p2p": RATE * 0.85}
    assert warnings(transfers.transfer_findings(node_measurements(**measured), node_facts(**facts))) == []


def test_numa_placement_of_the_latency_probe_counts_too():
    latency = Measurement.from_samples("latency.h2d", sample_seconds=[2e-6] * 3, bytes_read=0, bytes_written=0,
                                       flops=0, operations=1, backend="native-cuda", device="cuda:1", verified=True,
                                       params={"gpu_numa_node": "1", "host_numa_node": "0"})
    found = [f for f in transfers.transfer_findings(node_measurements() + [latency], node_facts()) if "NUMA" in f.title]
    assert len(found) == 1 and found[0].evidence["gpu"] == 1
    assert found[0].evidence["probes"] == {"latency.h2d (native-cuda)": {
        "value": pytest.approx(2000.0), "unit": "ns", "gpu_numa_node": 1, "host_numa_node": "0"}}


def test_without_transfer_samples_the_link_facts_stand_in():
    ms = node_measurements(telemetry=False)
    idle = transfers.transfer_findings(ms, node_facts(gen=2))
    hint = [f for f in idle if "PCIe link" in f.title]
    assert len(hint) == 1 and hint[0].severity == "info"  # a slow idle link is only a hint
    assert "when the run started, outside any transfer" in hint[0].title
    narrow = transfers.transfer_findings(ms, node_facts(width=8))
    assert warnings(narrow) == ["GPU 0's PCIe link ran at Gen5 x8 when the run started, outside any transfer, "
                                "below its Gen5 x16 maximum (31.5 of 63.0 GB/s per direction)."]
    # A GPU with no host transfer of its own says nothing about its generation at idle.
    other = node_facts()
    other["gpus"]["1"] = gpu_facts(gen=1)
    assert [f for f in transfers.transfer_findings(ms, other) if "PCIe link" in f.title] == []


def test_unknown_links_give_no_link_findings_but_still_compare_pageable():
    ms = node_measurements(pageable=(6.0, 30.0), p2p=20.0)
    for facts in (None, {}, {"source": "unknown", "reason": "no NVML", "gpus": {}, "pairs": {}}):
        found = transfers.transfer_findings(ms, facts)
        assert warnings(found) == [
            "Host-to-device copies from pageable memory on GPU 0 reach 6.0 GB/s, 11% of the 55.0 GB/s from pinned "
            "memory."]


def test_p2p_efficiency_rows():
    rows = transfers.p2p_efficiency_rows(node_measurements(p2p=300.0), node_facts(down=2))
    assert [(r["src"], r["dst"]) for r in rows] == [(0, 1), (1, 0)]
    row = rows[0]
    assert row["link"] == "16 x NVLink 4.0 (switch)" and row["theoretical_gbps"] == 400.0
    assert row["best_gbps"] == pytest.approx(300.0) and row["best_source"] == "transfer.p2p.0.1.ce.write"
    assert row["efficiency"] == pytest.approx(0.75)
    assert row["bidir_gbps"] == pytest.approx(570.0) and row["bidir_efficiency"] == pytest.approx(570 / 800)
    assert row["p2p_access"] == "on"
    unknown = transfers.p2p_efficiency_rows(node_measurements(), None)
    assert unknown[0]["link"] == "unknown" and unknown[0]["efficiency"] is None
    assert unknown[0]["best_gbps"] == pytest.approx(390.0)
