"""Fleet validation: the analysis on synthetic rank documents (healthy, a slow GPU, a degraded PCIe link, a
pending row remap, a noisy run), the health facts where NVML says nothing, the report, 10,000 documents,
and the command end to end under torchrun with Gloo on the CPU."""

from __future__ import annotations

import copy
import html
import json
import os
import random
import re
import socket
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch

from pygpuperf.analyze import fleet as analysis
from pygpuperf.cli.fleet import main
from pygpuperf.core import documents
from pygpuperf.facts import datasheets, health, nvml
from pygpuperf.measure import fleet as runner
from pygpuperf.report import fleet_report

CARD = "NVIDIA H200"
# name: (unit, datasheet figure or None, the figure where there is none)
FIGURES = {
    "memory.hbm.read": ("GB/s", "memory.hbm", None),
    "memory.hbm.write": ("GB/s", "memory.hbm", None),
    "memory.hbm.copy": ("GB/s", "memory.hbm", None),
    "compute.tensor.bf16.acc32": ("TFLOP/s", "compute.tensor.bf16.acc32", None),
    "compute.tensor.fp8.acc32": ("TFLOP/s", "compute.tensor.fp8.acc32", None),
    "compute.cuda.fp32": ("TFLOP/s", "compute.cuda.fp32", None),
    "transfer.h2d.pinned": ("GB/s", "transfer.h2d.pinned", None),
    "transfer.d2h.pinned": ("GB/s", "transfer.d2h.pinned", None),
    "latency.kernel.back_to_back": ("ns", None, 1670.0),
    "latency.kernel.duration": ("ns", None, 740.0),
}
META = {"versions": {"pygpuperf": "0.1.0", "torch": torch.__version__}, "time_utc": "2026-12-01T00:00:00+00:00",
        "launch": "synthetic", "world_size": 1, "hosts": 1, "mode": "parallel", "budget_s": 120.0}


def healthy_facts(rank: int, local: int) -> dict:
    h = health.empty_health("")
    h.update(source="nvml", reason=None, name=CARD, uuid=f"GPU-{rank:08x}-0000-0000-0000-000000000000",
             serial=str(1650000000000 + rank), pci_bus_id=f"0000:{0x18 + 0x10 * local:02x}:00.0",
             numa_node=local // 4, driver_version="580.159.03", ecc_enabled=True,
             ecc_errors={"volatile_corrected": 0, "volatile_uncorrected": 0, "aggregate_corrected": 3,
                         "aggregate_uncorrected": 0},
             retired_pages={"single_bit": 0, "double_bit": 0, "pending": False},
             row_remapping={"corrected_rows": 0, "uncorrected_rows": 0, "pending": False, "failed": False},
             # At rest the link trains down to Gen1: only the link seen during a transfer counts.
             pcie={"generation": 1, "width": 16, "generation_max": 5, "width_max": 16},
             gpu_links={"total": 18, "active": 18, "down": 0,
                        "errors": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}},
             clock_event_reasons=["idle"], power_limit_w=700.0, power_limit_default_w=700.0, temperature_c=31,
             sm_clock_mhz=345, sm_clock_max_mhz=1980, mig_enabled=False)
    h["ecc_errors_during_suite"] = {"corrected": 0, "uncorrected": 0}
    return h


def rank_doc(rank: int, host: str, local: int = 0, cv: float = 0.01, jitter: float = 0.003) -> dict:
    """A rank document as measure.fleet sends it: figures at 96 % of the H200's datasheet, 0.3 % apart."""
    rng = random.Random(rank)
    card = datasheets.datasheet_for(CARD)
    figures = {}
    for name, (unit, key, fallback) in FIGURES.items():
        value = (datasheets.datasheet_value(card, key) * 0.96 if key else fallback) * (1 + rng.gauss(0, jitter))
        value = float(f"{value:.6g}")
        figures[name] = {
            "value": value, "unit": unit, "cv": cv, "p5": value * 0.99, "p95": value * 1.01, "n": 5,
            "backend": "native-cuda", "variant": "", "variants": 2, "status": "ok", "reason": "", "seconds": 0.8,
            "telemetry": {"sm_clock_mhz": 1980.0, "mem_clock_mhz": 3201.0, "power_w": 520.0, "power_w_max": 690.0,
                          "temperature_c_max": 61.0, "energy_j": 400.0, "throttle_reasons": [],
                          "pcie_generation_max_seen": 5 if name.startswith("transfer.") else 1,
                          "pcie_width_max_seen": 16}}
    return {"schema": runner.RANK_SCHEMA, "rank": rank, "local_rank": local, "host": host, "device": f"cuda:{local}",
            "device_type": "cuda", "index": local, "card": CARD,
            "versions": {"pygpuperf": "0.1.0", "torch": torch.__version__, "driver": "580.159.03"},
            "suite": {"mode": "parallel", "budget_s": 120.0, "seconds": 14.0, "budget_spent": False},
            "figures": figures, "health": healthy_facts(rank, local), "errors": []}


def synthetic_fleet(n: int, per_host: int = 8, **kw) -> list[dict]:
    return [rank_doc(r, f"node{r // per_host:05d}", r % per_host, **kw) for r in range(n)]


def hosts_of(docs: list[dict], p2p: dict | None = None) -> list[dict]:
    hosts: dict[str, list[dict]] = {}
    for d in docs:
        hosts.setdefault(d["host"], []).append(d)
    waived = {"status": "waived", "reason": "not measured", "gpus": {}, "pairs": {}}
    return [{"schema": runner.HOST_SCHEMA, "host": h, "ranks": ranks, "p2p": (p2p or {}).get(h, waived)}
            for h, ranks in hosts.items()]


def judge(docs: list[dict], thresholds: analysis.Thresholds | None = None, p2p: dict | None = None,
          collectives: list[dict] | None = None) -> dict:
    hosts = hosts_of(docs, p2p)
    return analysis.fleet_document(hosts, collectives or [], {**META, "world_size": len(docs), "hosts": len(hosts)},
                                   thresholds)


def verdict_of(doc: dict, rank: int) -> dict:
    return next(v for v in doc["verdicts"] if v["rank"] == rank)


def serious(doc: dict) -> list[dict]:
    return [f for f in doc["findings"] if f["severity"] != "info"]


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


# --------------------------------------------------------------------------- the analysis


def test_healthy_fleet_passes_with_no_finding(tmp_path, capsys):
    doc = judge(synthetic_fleet(16))
    assert doc["verdict"]["passed"] and doc["verdict"]["exit_code"] == 0
    assert doc["verdict"]["pass"] == 16 and doc["verdict"]["fail"] == doc["verdict"]["no_verdict"] == 0
    assert serious(doc) == [], serious(doc)
    # The straggler threshold is stated: 3 x the 1 % sample CV, above the 0.3 % spread across the fleet.
    stated = [f for f in doc["findings"] if f["kind"] == "straggler_threshold"]
    assert len(stated) == 1 and "3.0% worse than the fleet median" in stated[0]["title"]
    assert doc["cards"][CARD]["figures"]["memory.hbm.read"]["straggler_share"] == pytest.approx(0.03)
    # Against the datasheet: 96 % of it is above the 85 % an H200's HBM is expected to reach.
    read = verdict_of(doc, 0)["figures"]["memory.hbm.read"]
    assert read["vs_expected"] == pytest.approx(0.96 / 0.85, rel=0.02)
    # The same through the command: exit 0.
    path = tmp_path / "in" / "fleet.json"
    path.parent.mkdir()
    fleet_report.write_document(doc, path)
    code, out, err = run_cli(["--reanalyze", str(path), "--out", str(tmp_path / "out"), "--json"], capsys)
    assert code == 0, err
    printed = json.loads(out)
    assert printed["schema"] == "pygpuperf-fleet-verdict/1" and printed["verdict"]["passed"]
    assert {g["verdict"] for g in printed["gpus"]} == {"pass"} and len(printed["gpus"]) == 16
    assert "PASS" in err


def test_slow_gpu_is_named_a_straggler_and_fails_under_thresholds(tmp_path, capsys):
    docs = synthetic_fleet(16)
    docs[11]["figures"]["memory.hbm.read"]["value"] *= 0.92  # still above the datasheet's 85 %: only slow
    doc = judge(docs)
    assert verdict_of(doc, 11)["verdict"] == "fail"
    assert [v["rank"] for v in doc["verdicts"] if v["verdict"] != "pass"] == [11]
    stragglers = [f for f in doc["findings"] if f["kind"] == "straggler"]
    assert [f["ranks"] for f in stragglers] == [[11]] and stragglers[0]["figure"] == "memory.hbm.read"
    assert re.search(r"is 4,\d{3} GB/s, 8\.\d% below the median 4,\d{3} of 16 NVIDIA H200 GPUs", stragglers[0]["title"])
    assert "(stragglers: more than 3.0%)" in stragglers[0]["title"]
    assert "0000:48:00.0" in stragglers[0]["title"] and "node00001" in stragglers[0]["title"]
    assert not [f for f in doc["findings"] if f["kind"] == "below_expected"]

    src = tmp_path / "fleet.json"
    fleet_report.write_document(doc, src)
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text(json.dumps({"schema": "pygpuperf-fleet-thresholds/1",
                                      "cards": {"h200-sxm": {"minimum": {"memory.hbm.read": 4000}}}}))
    code, out, err = run_cli(["--reanalyze", str(src), "--thresholds", str(thresholds), "--out",
                              str(tmp_path / "a"), "--json"], capsys)
    assert code == 1, err
    failed = [g for g in json.loads(out)["gpus"] if g["verdict"] == "fail"]
    assert [g["rank"] for g in failed] == [11] and "straggles 8." in failed[0]["reasons"][0]
    # A tolerance that keeps stragglers a warning passes the same fleet; a minimum above it fails every GPU.
    thresholds.write_text(json.dumps({"schema": "pygpuperf-fleet-thresholds/1",
                                      "tolerances": {"stragglers_fail": False}}))
    code, out, err = run_cli(["--reanalyze", str(src), "--thresholds", str(thresholds), "--out",
                              str(tmp_path / "b"), "--json"], capsys)
    assert code == 0, err
    assert [f["severity"] for f in json.loads(out)["findings"] if f["kind"] == "straggler"] == ["warning"]
    thresholds.write_text(json.dumps({"schema": "pygpuperf-fleet-thresholds/1",
                                      "cards": {CARD: {"minimum": {"memory.hbm.read": 5000}}}}))
    code, out, err = run_cli(["--reanalyze", str(src), "--thresholds", str(thresholds), "--out",
                              str(tmp_path / "c"), "--json"], capsys)
    assert code == 1
    gpus = json.loads(out)["gpus"]
    assert all(g["verdict"] == "fail" for g in gpus)
    assert "below its minimum 5,000" in gpus[0]["reasons"][0]


def test_straggler_threshold_follows_the_measured_noise():
    """The same 8 % shortfall: a straggler in a quiet fleet, not in one whose GPUs spread by 4 %."""
    quiet, spread = synthetic_fleet(16), synthetic_fleet(16, jitter=0.04)
    for docs in (quiet, spread):
        docs[3]["figures"]["memory.hbm.read"]["value"] = docs[4]["figures"]["memory.hbm.read"]["value"] * 0.92
    quiet_doc, spread_doc = judge(quiet), judge(spread)
    assert [f["ranks"] for f in quiet_doc["findings"] if f["kind"] == "straggler"] == [[3]]
    share = spread_doc["cards"][CARD]["figures"]["memory.hbm.read"]["straggler_share"]
    assert share > 0.08 and verdict_of(spread_doc, 3)["verdict"] == "pass"
    stated = [f for f in spread_doc["findings"] if f["kind"] == "straggler_threshold"][0]
    assert stated["evidence"]["straggler_percent"]["memory.hbm.read"] == pytest.approx(100 * share, abs=0.01)


def test_gpu_below_its_expected_figure_fails_with_the_datasheet_named():
    docs = synthetic_fleet(8)
    for d in docs:  # one stream far below the others (copy at 0.8x) is no fault of the card
        d["figures"]["memory.hbm.copy"]["value"] *= 0.8
    assert judge(docs)["verdict"]["passed"]
    for d in docs:  # the whole fleet's memory is slow: no straggler, but every GPU is below datasheet x 85 %
        for op in ("read", "write"):
            d["figures"][f"memory.hbm.{op}"]["value"] *= 0.85
    doc = judge(docs)
    below = [f for f in doc["findings"] if f["kind"] == "below_expected"]
    assert sorted(r for f in below for r in f["ranks"]) == list(range(8))
    assert {f["figure"] for f in below} <= {"memory.hbm.read", "memory.hbm.write"} and len(below) == 8
    assert "datasheet 4,800 x 85% achievable" in below[0]["title"]
    assert not [f for f in doc["findings"] if f["kind"] == "straggler"]


def test_degraded_pcie_link_fails_the_gpu():
    docs = synthetic_fleet(8)
    docs[5]["figures"]["transfer.h2d.pinned"]["telemetry"]["pcie_generation_max_seen"] = 4
    docs[6]["figures"]["transfer.d2h.pinned"]["telemetry"]["pcie_width_max_seen"] = 8
    doc = judge(docs)
    degraded = {f["ranks"][0]: f for f in doc["findings"] if f["kind"] == "pcie_degraded"}
    assert sorted(degraded) == [5, 6]
    assert "Gen4 of Gen5" in degraded[5]["title"] and "x8 of x16" in degraded[6]["title"]
    assert [v["rank"] for v in doc["verdicts"] if v["verdict"] == "fail"] == [5, 6]
    # Every GPU's link sat at Gen1 between transfers (healthy_facts): that alone is no finding.
    assert all(v["verdict"] == "pass" for v in doc["verdicts"] if v["rank"] not in (5, 6))


def test_pending_row_remap_fails_the_gpu():
    docs = synthetic_fleet(8)
    docs[2]["health"]["row_remapping"].update(pending=True, uncorrected_rows=1)
    doc = judge(docs)
    remaps = [f for f in doc["findings"] if f["kind"] == "row_remap"]
    assert [f["ranks"] for f in remaps] == [[2]] and remaps[0]["severity"] == "error"
    assert "reset" in remaps[0]["suggestion"]
    assert verdict_of(doc, 2)["verdict"] == "fail" and verdict_of(doc, 2)["reasons"] == ["row remapping pending"]
    assert doc["verdict"]["fail"] == 1 and doc["verdict"]["exit_code"] == 1


def test_ecc_and_gpu_link_health():
    docs = synthetic_fleet(8)
    docs[1]["health"]["ecc_errors"]["volatile_uncorrected"] = 2
    docs[3]["health"]["gpu_links"].update(active=16, down=2)
    docs[4]["health"]["gpu_links"]["errors"]["crc_flit"] = 7
    docs[7]["health"].update(power_limit_w=500.0)
    docs[0]["figures"]["compute.cuda.fp32"]["telemetry"]["throttle_reasons"] = ["software_power_cap"]
    doc = judge(docs)
    assert {v["rank"] for v in doc["verdicts"] if v["verdict"] == "fail"} == {1, 3}
    kinds = {f["kind"]: f for f in doc["findings"]}
    assert kinds["ecc"]["ranks"] == [1] and kinds["gpu_links"]["ranks"] == [3]
    # Warnings only: link error counters, a lowered power limit, clocks held back.
    assert kinds["gpu_link_errors"]["ranks"] == [4] and kinds["power_limit"]["ranks"] == [7]
    assert kinds["throttling"]["ranks"] == [0] and "software power cap" in kinds["throttling"]["title"]
    assert verdict_of(doc, 7)["verdict"] == "pass" and "power limit 500 W" in verdict_of(doc, 7)["notes"][0]


def test_noisy_run_gives_no_verdict_and_says_so():
    docs = synthetic_fleet(8, cv=0.25)
    docs[2]["figures"]["memory.hbm.read"]["value"] *= 0.5  # noisy too: it cannot fail the GPU either
    doc = judge(docs)
    assert doc["verdict"]["no_verdict"] == 8 and doc["verdict"]["fail"] == 0 and not doc["verdict"]["passed"]
    assert doc["verdict"]["exit_code"] == 1 and "8 without a verdict" in doc["verdict"]["summary"]
    noisy = [f for f in doc["findings"] if f["kind"] == "noisy"]
    assert len(noisy) == 1 and noisy[0]["count"] == 8
    assert "too noisily for a verdict (CV above 10%)" in noisy[0]["title"]
    assert "memory.hbm.read (8)" in noisy[0]["title"]
    assert "CV 25% > 10%" in verdict_of(doc, 2)["reasons"][0]
    assert not [f for f in doc["findings"] if f["kind"] in ("straggler", "below_expected")]


def test_probes_left_out_leave_no_verdict():
    docs = synthetic_fleet(8)
    docs[6]["figures"]["latency.kernel.graph"] = dict(docs[6]["figures"]["latency.kernel.back_to_back"])
    docs[6]["figures"]["latency.kernel.graph"].update(
        status="waived", value=None, reason="not run: the suite's time budget (60 s) was spent")
    doc = judge(docs)
    assert verdict_of(doc, 6)["verdict"] == "no verdict"
    assert verdict_of(doc, 6)["reasons"] == ["1 probe(s) not run within the time budget"]
    assert [f["ranks"] for f in doc["findings"] if f["kind"] == "budget"] == [[6]]
    # A figure a thresholds file asks for must have been measured: a card lacking FP8 cannot pass an FP8 minimum.
    docs = synthetic_fleet(8)
    for d in docs:
        del d["figures"]["compute.tensor.fp8.acc32"]
    asked = analysis.Thresholds({"schema": analysis.THRESHOLDS_SCHEMA_ID,
                                 "cards": {"*": {"minimum": {"compute.tensor.fp8.acc32": 1000}}}}, "t.json")
    doc = judge(docs, asked)
    assert {v["verdict"] for v in doc["verdicts"]} == {"no verdict"}
    assert verdict_of(doc, 0)["reasons"] == ["compute.tensor.fp8.acc32 was not measured"]
    assert judge(docs)["verdict"]["passed"]  # the default set asks only for what was measured


def test_p2p_pair_below_its_link_fails_the_source_gpu():
    docs = synthetic_fleet(4, per_host=4)
    gpus = {str(i): docs[i]["health"]["pci_bus_id"] for i in range(4)}
    pairs = {f"{i}.{j}": {"value": 360.0, "unit": "GB/s", "status": "ok", "expected_gbs": 450.0, "link": "nvlink"}
             for i in range(4) for j in range(4) if i != j}
    pairs["2.0"]["value"] = 90.0
    doc = judge(docs, p2p={"node00000": {"status": "ok", "reason": "", "gpus": gpus, "pairs": pairs}})
    assert [v["rank"] for v in doc["verdicts"] if v["verdict"] == "fail"] == [2]
    assert "P2P copy GPU 2->0 at 90 GB/s" in verdict_of(doc, 2)["reasons"][0]
    assert [f["kind"] for f in serious(doc)] == ["p2p"]


def test_wrong_collective_fails_the_fleet_not_a_gpu():
    rows = [{"op": "all_reduce", "size_bytes": 8192, "busbw_gbs": 10.0, "algbw_gbs": 5.0, "time_s": 1e-5, "cv": 0.01,
             "status": "wrong", "reason": "3 elements wrong", "world_size": 8, "hosts": 1,
             "communication_backend": "nccl"}]
    doc = judge(synthetic_fleet(8), collectives=rows)
    assert doc["verdict"]["pass"] == 8 and not doc["verdict"]["passed"] and doc["verdict"]["exit_code"] == 1
    assert "collective all_reduce at 8192 B: wrong" in doc["verdict"]["fleet_failures"]


def test_invalid_rank_documents_become_stubs_without_a_verdict():
    docs = synthetic_fleet(4)
    broken = copy.deepcopy(docs[1])
    broken["figures"]["memory.hbm.read"]["value"] = "fast"
    docs[1] = broken
    docs[3] = {"schema": runner.RANK_SCHEMA, "rank": 3, "host": "node00000",
               "invalid": "rank document not valid at figures: boom"}
    doc = judge(docs)
    assert verdict_of(doc, 1)["verdict"] == verdict_of(doc, 3)["verdict"] == "no verdict"
    assert "value is not a number" in verdict_of(doc, 1)["reasons"][0]
    assert verdict_of(doc, 0)["verdict"] == "pass"
    fleet_report.fleet_html(doc)  # the report copes with them too


def test_facts_a_device_does_not_expose_are_none_not_a_crash(monkeypatch):
    cpu = health.device_health(torch.device("cpu"))
    assert cpu["source"] is None and cpu["reason"] and cpu["uuid"] is None
    assert cpu["ecc_errors"]["volatile_uncorrected"] is None and cpu["row_remapping"]["pending"] is None

    class NVMLError(Exception):
        pass

    def unsupported(*args):
        raise NVMLError("not supported")

    # A card whose driver answers nothing but its name: every other fact is None.
    fake = types.SimpleNamespace(NVMLError=NVMLError, NVML_FEATURE_ENABLED=1, NVML_NVLINK_MAX_LINKS=4,
                                 NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=0, NVML_CLOCK_MEM=1,
                                 nvmlDeviceGetName=lambda h: b"Some GPU")
    for name in ("nvmlDeviceGetUUID", "nvmlDeviceGetSerial", "nvmlSystemGetDriverVersion", "nvmlDeviceGetClockInfo",
                 "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetMemoryBusWidth", "nvmlDeviceGetCurrPcieLinkGeneration",
                 "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth",
                 "nvmlDeviceGetMaxPcieLinkWidth", "nvmlDeviceGetPowerManagementLimit",
                 "nvmlDeviceGetPowerManagementDefaultLimit", "nvmlDeviceGetEccMode", "nvmlDeviceGetMigMode",
                 "nvmlDeviceGetPciInfo", "nvmlDeviceGetTemperature", "nvmlDeviceGetNvLinkState"):
        setattr(fake, name, unsupported)
    monkeypatch.setattr(nvml, "pynvml", fake)
    monkeypatch.setattr(nvml, "nvml_handle", lambda device: object())
    facts = health.device_health(torch.device("cuda", 0))
    assert facts["source"] == "nvml" and facts["name"] == "Some GPU"
    assert facts["ecc_errors"] == dict.fromkeys(facts["ecc_errors"])
    assert facts["retired_pages"] == {"single_bit": None, "double_bit": None, "pending": None}
    assert facts["row_remapping"]["pending"] is None and facts["clock_event_reasons"] is None
    assert facts["gpu_links"] == {"total": 0, "active": 0, "down": 0, "errors": None}
    assert nvml.energy_mj(object()) is None

    # What it does expose is read: ECC counters, remapped rows, a link down, the energy counter.
    fake.NVML_MEMORY_ERROR_TYPE_CORRECTED, fake.NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    fake.NVML_VOLATILE_ECC, fake.NVML_AGGREGATE_ECC = 0, 1
    fake.nvmlDeviceGetTotalEccErrors = lambda h, kind, scope: 10 * kind + scope + 1
    fake.nvmlDeviceGetRemappedRows = lambda h: (2, 1, 1, 0)
    fake.nvmlDeviceGetNvLinkState = lambda h, link: 0 if link == 3 else 1
    fake.NVML_NVLINK_ERROR_DL_REPLAY = 0
    fake.nvmlDeviceGetNvLinkErrorCounter = lambda h, link, counter: 5
    fake.nvmlDeviceGetTotalEnergyConsumption = lambda h: 123456
    facts = health.device_health(torch.device("cuda", 0))
    assert facts["ecc_errors"] == {"volatile_corrected": 1, "volatile_uncorrected": 11, "aggregate_corrected": 2,
                                   "aggregate_uncorrected": 12}
    assert facts["row_remapping"] == {"corrected_rows": 2, "uncorrected_rows": 1, "pending": True, "failed": False}
    assert facts["gpu_links"] == {"total": 4, "active": 3, "down": 1, "errors": {"replay": 15}}
    assert nvml.energy_mj(object()) == 123456  # mJ: 123.456 J


def test_a_rank_without_health_facts_is_judged_on_its_figures():
    docs = synthetic_fleet(4)
    docs[2]["health"] = {**health.empty_health("the device is not one NVML manages"),
                         "ecc_errors_during_suite": {"corrected": None, "uncorrected": None}}
    doc = judge(docs)
    assert verdict_of(doc, 2)["verdict"] == "pass"
    missing = [f for f in doc["findings"] if f["kind"] == "facts_not_available"]
    assert missing[0]["ranks"] == [2] and "not one NVML manages" in missing[0]["title"]


def test_rank_documents_are_bounded_and_validated_by_their_sender():
    doc = rank_doc(0, "node")
    text = runner.bounded_json(doc)
    assert len(text) < runner.MAX_RANK_DOCUMENT_BYTES and runner.rank_problem(json.loads(text)) is None
    assert json.loads(text)["figures"]["memory.hbm.read"]["value"] == doc["figures"]["memory.hbm.read"]["value"]
    small = runner.bounded_json(doc, limit=3000)  # telemetry and reasons go first, then the figures
    assert len(small.encode()) <= 3000 and runner.rank_problem(json.loads(small)) is None
    assert json.loads(small)["errors"][-1].startswith("document over 3000 bytes")
    bad = copy.deepcopy(doc)
    bad["figures"]["memory.hbm.read"]["status"] = "great"
    sent = json.loads(runner.bounded_json(bad))
    assert "invalid" in sent and "status" in sent["invalid"]


def test_default_thresholds_come_from_the_datasheets(tmp_path, capsys):
    code, out, _ = run_cli(["--show-thresholds"], capsys)
    assert code == 0
    path = tmp_path / "t.json"
    path.write_text(out)
    doc = documents.load_document(path, "fleet_thresholds", "thresholds")  # a file --thresholds reads
    h200 = doc["cards"]["h200-sxm"]["minimum"]
    assert h200["memory.hbm"] == pytest.approx(4800 * 0.85)  # a level: its best stream
    assert not [k for k in h200 if k.startswith("compute.library.")]  # judged against the fleet only
    assert h200["compute.tensor.bf16.acc32"] == pytest.approx(
        datasheets.datasheet_value(datasheets.datasheet_for(CARD), "compute.tensor.bf16.acc32") * 0.8)
    assert h200["transfer.h2d.pinned"] == pytest.approx(63 * 0.75, rel=0.01)


@pytest.mark.parametrize("content, fragment", [
    ("{not json", "not valid JSON"),
    ('{"schema": "pygpuperf-fleet-thresholds/1", "cards": {"x": {"minimum": {"memory.hbm.read": -1}}}}',
     "cards/x/minimum/memory.hbm.read"),
    ('{"schema": "pygpuperf-fleet-thresholds/1", "tolerances": {"noisy_cv": "low"}}', "tolerances/noisy_cv"),
    ('{"schema": "pygpuperf-fleet-thresholds/2"}', "schema"),
])
def test_bad_thresholds_file_is_one_line_and_exit_2(tmp_path, capsys, content, fragment):
    path = tmp_path / "thresholds.json"
    path.write_text(content)
    code, _, err = run_cli(["--device", "cpu", "--thresholds", str(path), "--out", str(tmp_path / "never")], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("pygpuperf: error: --thresholds"), err
    assert fragment in lines[0] and "--show-thresholds" in lines[0]
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize("args, fragment", [
    (["--budget-s", "0"], "--budget-s 0"),
    (["--samples", "0"], "--samples 0"),
    (["--collective-sizes", "1.5MiB"], "--collective-sizes"),
    (["--probes", "compute.tensor"], "--probes compute.tensor: not in the fleet suite for cpu"),
])
def test_bad_flags_are_one_line_and_exit_2(tmp_path, capsys, args, fragment):
    code, _, err = run_cli(["--device", "cpu", *args, "--out", str(tmp_path / "never")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and fragment in err, err
    assert not (tmp_path / "never").exists()


def test_launch_from_torchrun_variables():
    assert runner.Launch.from_environment({}) == runner.Launch()
    launch = runner.Launch.from_environment({"RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "1",
                                             "LOCAL_WORLD_SIZE": "8"})
    assert (launch.rank, launch.world_size, launch.local_rank, launch.local_world_size, launch.launched) == (
        5, 16, 1, 8, True)
    with pytest.raises(runner.UsageError, match="out of range"):
        runner.Launch.from_environment({"RANK": "16", "WORLD_SIZE": "16"})
    with pytest.raises(runner.UsageError, match="each rank takes its own GPU"):
        runner.rank_device(runner.FleetSettings(device="cuda:1"), runner.Launch(0, 2, 0, 2, True))


# --------------------------------------------------------------------------- the report


def test_report_files(tmp_path):
    docs = synthetic_fleet(8)
    docs[4]["host"] = '<script>alert("x")</script>'
    docs[4]["figures"]["memory.hbm.read"]["value"] *= 0.5
    gpus = {str(i): docs[i]["health"]["pci_bus_id"] for i in range(8) if i != 4}
    pairs = {f"{i}.{j}": {"value": 300.0 + i + j, "unit": "GB/s", "status": "ok", "expected_gbs": 450.0,
                          "link": "nvlink"} for i in range(3) for j in range(3) if i != j}
    doc = judge(docs, p2p={"node00000": {"status": "ok", "reason": "", "gpus": gpus, "pairs": pairs}})
    written = fleet_report.write_fleet_reports(doc, tmp_path)
    assert [p.name for p in written] == ["fleet.json", "fleet.csv", "fleet.html"]
    again = documents.load_document(tmp_path / "fleet.json", "fleet", "fleet")  # the whole document validates
    assert len(again["ranks"]) == 8 and again["verdict"] == doc["verdict"]
    import pandas as pd

    frame = pd.read_csv(tmp_path / "fleet.csv")
    assert len(frame) == 8 and list(frame["rank"]) == list(range(8))
    assert frame.loc[frame["rank"] == 4, "verdict"].item() == "fail"
    assert frame.loc[frame["rank"] == 4, "memory.hbm.read vs median"].item() == pytest.approx(0.5, rel=0.02)
    page = (tmp_path / "fleet.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page  # autoescaped
    assert page.count('src="data:image/png;base64,') == 1  # the P2P matrix, inside the page
    assert "Against the fleet median" in page and "Against the expected figure" in page
    assert "default-src 'none'" in html.unescape(page)  # the policy that forbids every fetch


def test_10000_rank_documents_analyzed_and_reported_in_bounded_time_and_memory(tmp_path):
    """The analysis and report path on 10,000 synthetic ranks (1,250 hosts), in a process of its own so
    that its peak memory is its own."""
    script = textwrap.dedent(f"""
        import json, resource, sys, time
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import test_fleet as t
        from pygpuperf.analyze import fleet as analysis
        from pygpuperf.report import fleet_report
        docs = t.synthetic_fleet(10000)
        docs[4321]["figures"]["compute.tensor.bf16.acc32"]["value"] *= 0.8
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # CPU time, not wall time: other processes on a loaded 2-core host do not count against it.
        start = time.process_time()
        doc = t.judge(docs)
        analyzed = time.process_time()
        fleet_report.write_fleet_reports(doc, Path({str(tmp_path)!r}))
        done = time.process_time()
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        print(json.dumps({{"analysis_s": analyzed - start, "report_s": done - analyzed, "grown_mib": grown,
                          "failing": [v["rank"] for v in doc["verdicts"] if v["verdict"] != "pass"]}}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"10,000 ranks: analysis {figures['analysis_s']:.1f} s, report {figures['report_s']:.1f} s, "
          f"peak memory grew {figures['grown_mib']:.0f} MiB")
    assert figures["failing"] == [4321]
    assert figures["analysis_s"] + figures["report_s"] < 30  # a pass over pairs of ranks would take minutes
    assert figures["grown_mib"] < 600  # the documents themselves took 124 MiB as Python objects
    assert (tmp_path / "fleet.csv").stat().st_size > 0 and (tmp_path / "fleet.json").stat().st_size < 150e6


# --------------------------------------------------------------------------- end to end


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The budget holds the CPU suite where the memory probes stream several times a large last-level cache
# (a 480 MiB L3 took 8.3 s for the three of them, with three ranks on two cores).
_TINY = ["--device", "cpu", "--budget-s", "30", "--samples", "3", "--collective-sizes", "8KiB,64KiB"]


def _check_fleet(path: Path, ranks: int, hosts: int, code: int) -> dict:
    doc = documents.load_document(path, "fleet", "fleet")  # validated against data/fleet.schema.json
    assert [r["rank"] for r in doc["ranks"]] == list(range(ranks))
    assert doc["meta"]["launch"] == "torchrun" and doc["meta"]["world_size"] == ranks
    assert len(doc["hosts"]) == doc["meta"]["hosts"] == hosts
    for r in doc["ranks"]:
        assert r["device_type"] == "cpu" and r["health"]["source"] is None
        assert r["figures"]["memory.dram.copy"]["status"] == "ok", r["figures"]["memory.dram.copy"]
    ops = {(c["op"], c["world_size"]) for c in doc["collectives"] if c["status"] == "ok"}
    assert ops == {(op, ranks) for op in ("all_reduce", "all_gather", "reduce_scatter")}
    assert code == doc["verdict"]["exit_code"]  # every rank ends with rank 0's verdict
    return doc


def test_torchrun_three_cpu_ranks_end_to_end(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
                           "-m", "pygpuperf.fleet", *_TINY, "--out", str(tmp_path / "f")],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    doc = _check_fleet(tmp_path / "f" / "fleet.json", 3, 1, proc.returncode)
    assert proc.stdout.count("fleet: % of the fleet median") == 1  # rank 0 alone reports
    assert {r["local_rank"] for r in doc["ranks"]} == {0, 1, 2}
    assert (tmp_path / "f" / "fleet.csv").exists() and (tmp_path / "f" / "fleet.html").exists()


def test_two_hosts_through_c10d_rendezvous(tmp_path):
    """Two torchrun agents, as on two nodes (named by PYGPUPERF_NODE_NAME): host leaders gather their ranks."""
    port = _free_port()
    procs = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node",
         "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"fleet-{port}", "-m",
         "pygpuperf.fleet", *_TINY, "--probes", "memory.dram.copy", "compute.simd.fp32", "--out", str(tmp_path / "f")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", health.NODE_NAME_VARIABLE: f"node{node}"}) for node in (0, 1)]
    outputs = [p.communicate(timeout=300) for p in procs]
    codes = [p.returncode for p in procs]
    assert codes[0] == codes[1] and codes[0] in (0, 1), outputs[0][1][-3000:]
    doc = _check_fleet(tmp_path / "f" / "fleet.json", 4, 2, codes[0])
    assert [(h["host"], h["ranks"]) for h in doc["hosts"]] == [("node0", [0, 1]), ("node1", [2, 3])]
    assert {r["host"] for r in doc["ranks"]} == {"node0", "node1"}


@pytest.mark.gpu
def test_one_gpu_alone(tmp_path, capsys):
    code, _, err = run_cli(["--device", "cuda", "--budget-s", "60", "--out", str(tmp_path / "g")], capsys)
    assert code in (0, 1), err
    doc = documents.load_document(tmp_path / "g" / "fleet.json", "fleet", "fleet")
    rank = doc["ranks"][0]
    assert rank["device_type"] == "cuda" and rank["health"]["source"] == "nvml" and rank["health"]["uuid"]
    read = rank["figures"]["memory.hbm.read"]
    assert read["status"] == "ok" and read["telemetry"]["power_w"] and read["telemetry"]["energy_j"] is not None
    assert rank["health"]["pcie"]["generation_max"] and rank["health"]["row_remapping"] is not None
    assert any(n.startswith("compute.tensor.") or n.startswith("compute.library.") for n in rank["figures"])


def test_a_stopped_fleet_run_keeps_what_it_measured(tmp_path):
    """SIGTERM while the probes run: the rest is waived with the reason, fleet.json is still written from
    what was measured, and the exit code is 143."""
    import signal
    import time

    out = tmp_path / "fleet"
    proc = subprocess.Popen([sys.executable, "-m", "pygpuperf.fleet", "--device", "cpu", "--budget-s", "60",
                             "--samples", "100", "--collective-sizes", "none", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    for line in proc.stderr:  # the rank says each probe it has measured: stop it after the first
        if re.search(r"rank 0: \S+ ok \(", line):
            break
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, (time.monotonic() - started, err[-2000:])
    doc = json.loads((out / "fleet.json").read_text())
    figures = doc["ranks"][0]["figures"]
    reasons = [f.get("reason", "") for f in figures.values()]
    assert any("stopped by SIGTERM" in r for r in reasons)
    assert any(f.get("status") == "ok" for f in figures.values())  # what ran before the signal is kept


def test_a_stop_between_two_probes_keeps_the_one_measured_and_waives_the_rest(monkeypatch):
    """The stop signal can land while a probe's line is being reported, outside any probe: the run kept
    nothing then (fleet.json was not written)."""
    from pygpuperf.core.results import Measurement
    from pygpuperf.core.stopping import Stopped
    from pygpuperf.measure import suite

    cpu = torch.device("cpu")
    planned = runner.plan_suite(cpu)
    assert len(planned) >= 3
    monkeypatch.setattr(suite, "run_one", lambda probe, device, settings: Measurement.not_run(
        probe.name, backend="portable", device="cpu", status="ok", reason=""))
    monkeypatch.setattr(runner, "STOPS", [])

    def reported(record):
        if record.measurement.name == planned[1].name:
            raise Stopped(15)  # SIGTERM while the second probe's line is printed

    records, exhausted = runner.run_suite(cpu, planned, runner.FleetSettings().run_settings(), 60.0, reported)
    assert [r.measurement.status for r in records[:2]] == ["ok", "ok"] and len(records) == len(planned)
    assert all("stopped by SIGTERM" in r.measurement.reason for r in records[2:]) and not exhausted
    assert len(runner.STOPS) == 1
