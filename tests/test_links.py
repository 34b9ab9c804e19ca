"""Link facts from NVML, against a fake NVML: PCIe, NUMA, NVLink counts and rates, P2P, and
the PCIe link sampled during transfers."""

import json
import types

import pynvml
import pytest
import torch

from pygpuperf.facts import links
from pygpuperf.facts import nvml
from pygpuperf.analyze import transfers
from pygpuperf.core.results import Measurement

SWITCH_BUS = "FFFFFFFF:FF:FF.0"  # what NVML gives as the far end of a link to an NVSwitch


class NVMLError(Exception):
    pass


class Gpu:
    """One fake device: PCIe link, NVLinks as (active, version code, remote type, remote bus id)."""

    def __init__(self, bus_id, *, gen=5, width=16, gen_max=5, width_max=16, device_gen_max=5, cc=(9, 0),
                 nvlinks=(), name="NVIDIA H200"):
        self.bus_id, self.gen, self.width, self.gen_max, self.width_max = bus_id, gen, width, gen_max, width_max
        self.device_gen_max, self.cc, self.nvlinks, self.name = device_gen_max, cc, list(nvlinks), name


class FakeNvml:
    """The NVML calls links.py and the sampler make, answering from Gpu objects."""

    NVMLError = NVMLError
    NVML_NVLINK_MAX_LINKS = 36
    NVML_P2P_CAPS_INDEX_READ = (0,)  # as nvidia-ml-py spells it
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self, gpus, ancestor=30, p2p=0):
        self.gpus, self.ancestor, self.p2p = gpus, ancestor, p2p
        self.p2p_indices = []

    def _link(self, h, link):
        if link >= len(h.nvlinks):
            raise NVMLError("Invalid Argument")
        return h.nvlinks[link]

    def nvmlDeviceGetPciInfo(self, h):
        return types.SimpleNamespace(busId=h.bus_id.encode())

    def nvmlDeviceGetName(self, h):
        return h.name

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return h.cc

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return h.gen

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return h.width

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return h.gen_max

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return h.width_max

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h):
        return h.device_gen_max

    def nvmlDeviceGetNvLinkState(self, h, link):
        return self._link(h, link)[0]

    def nvmlDeviceGetNvLinkVersion(self, h, link):
        return self._link(h, link)[1]

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        return self._link(h, link)[2]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        return types.SimpleNamespace(busId=self._link(h, link)[3].encode())

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return self.ancestor

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        if not isinstance(index, int):
            raise TypeError("a P2P caps index is an unsigned int")
        self.p2p_indices.append(index)
        return self.p2p

    # Sampler calls
    def nvmlDeviceGetClockInfo(self, h, kind):
        return 1980

    def nvmlDeviceGetPowerUsage(self, h):
        return 500_000

    def nvmlDeviceGetTemperature(self, h, kind):
        return 40

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0



# The constants (feature states, P2P capability indices and statuses, link device types) as
# nvidia-ml-py exports them: the fake answers in the library's own numbers.
for _name in dir(pynvml):
    if _name.startswith("NVML_") and not hasattr(FakeNvml, _name):
        setattr(FakeNvml, _name, getattr(pynvml, _name))

def switch_links(count=18, down=0, code=6):
    """Links of an HGX board: all to NVSwitches, `down` of them inactive."""
    return [(0 if i < down else 1, code, 2, SWITCH_BUS) for i in range(count)]


def h200_node(down=(0, 0)):
    return FakeNvml([Gpu("00000000:18:00.0", nvlinks=switch_links(down=down[0])),
                     Gpu("00000000:2A:00.0", nvlinks=switch_links(down=down[1]))])


def facts(nvml, tmp_path=None):
    return links.facts_from_nvml({i: g for i, g in enumerate(nvml.gpus)}, nvml,
                                 sysfs_root=str(tmp_path) if tmp_path else "/nonexistent")


def test_pcie_rates_per_direction_after_encoding():
    assert links.pcie_gbps(5, 16) == pytest.approx(63.0, rel=1e-3)
    assert links.pcie_gbps(4, 8) == pytest.approx(15.75, rel=1e-3)
    assert links.pcie_gbps(3, 16) == pytest.approx(15.76, rel=1e-3)
    assert links.pcie_gbps(None, 16) is None and links.pcie_gbps(5, 0) is None and links.pcie_gbps(9, 16) is None


def test_bus_ids_are_normalized_to_sysfs_names():
    assert links.normalize_bus_id(b"00000000:1A:00.0") == "0000:1a:00.0"
    assert links.normalize_bus_id("00000001:2B:00.0") == "0001:2b:00.0"
    assert links.normalize_bus_id("garbage") is None and links.normalize_bus_id(None) is None


def test_numa_node_from_sysfs(tmp_path):
    for bus, text in (("0000:18:00.0", "1\n"), ("0000:2a:00.0", "-1\n")):
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "numa_node").write_text(text)
    assert links.numa_node("0000:18:00.0", str(tmp_path)) == 1
    assert links.numa_node("0000:2a:00.0", str(tmp_path)) is None  # -1: the kernel does not know
    assert links.numa_node("0000:99:00.0", str(tmp_path)) is None


def test_h200_node_switch_fabric(tmp_path):
    (tmp_path / "0000:18:00.0").mkdir()
    (tmp_path / "0000:18:00.0" / "numa_node").write_text("0\n")
    nvml = h200_node()
    f = facts(nvml, tmp_path)
    json.dumps(f)  # goes into results.json as is
    assert f["source"] == "nvml"
    gpu = f["gpus"]["0"]
    assert gpu["bus_id"] == "0000:18:00.0" and gpu["numa_node"] == 0 and f["gpus"]["1"]["numa_node"] is None
    assert gpu["compute_capability"] == "9.0"
    host = gpu["host_link"]
    assert (host["type"], host["generation"], host["width"], host["generation_max"], host["width_max"]) == \
        ("pcie", 5, 16, 5, 16)
    assert host["gbps_per_direction"] == pytest.approx(63.0, rel=1e-3)
    peer = gpu["peer_links"]
    assert (peer["type"], peer["total"], peer["active"], peer["down"], peer["to_switch"]) == ("nvlink", 18, 18, 0, 18)
    assert peer["version"] == "4.0" and peer["gbps_per_link"] == 25.0
    pair = f["pairs"]["0.1"]
    assert (pair["type"], pair["via"], pair["links"], pair["links_total"], pair["links_down"]) == \
        ("nvlink", "switch", 18, 18, 0)
    assert pair["gbps_per_direction"] == pytest.approx(450.0)
    assert pair["pcie_path"] == "same host bridge"
    assert pair["p2p_read"] is True and pair["p2p_write"] is True and pair["p2p_status"]["nvlink"] == "ok"
    assert set(f["pairs"]) == {"0.1", "1.0"}
    assert set(nvml.p2p_indices) == {0, 1, 2, 3}


def test_links_down_count_and_lower_the_pair_rate():
    f = facts(h200_node(down=(2, 0)))
    peer = f["gpus"]["0"]["peer_links"]
    assert (peer["total"], peer["active"], peer["down"]) == (18, 16, 2)
    # The fabric path is held to the GPU with fewer live links, either way round.
    assert f["pairs"]["0.1"]["links"] == 16 and f["pairs"]["1.0"]["links"] == 16
    assert f["pairs"]["0.1"]["gbps_per_direction"] == pytest.approx(400.0)
    assert f["pairs"]["0.1"]["links_down"] == 2 and f["pairs"]["1.0"]["links_down"] == 0


def test_direct_bridge_links_are_matched_to_the_peer_by_bus_id():
    a, b = "00000000:01:00.0", "00000000:02:00.0"
    nvml = FakeNvml([Gpu(a, cc=(8, 6), gen=4, gen_max=4, device_gen_max=4, nvlinks=[(1, 5, 0, b)] * 4),
                     Gpu(b, cc=(8, 6), gen=4, gen_max=4, device_gen_max=4, nvlinks=[(1, 5, 0, a)] * 4),
                     Gpu("00000000:03:00.0", cc=(8, 6), gen=4, gen_max=4, device_gen_max=4)])
    f = facts(nvml)
    pair = f["pairs"]["0.1"]
    assert (pair["type"], pair["via"], pair["links"], pair["version"]) == ("nvlink", "direct", 4, "3.1")
    # NVLink 3.1 bridges of 8.6 boards: 112.5 GB/s both ways over 4 links.
    assert pair["gbps_per_direction"] == pytest.approx(56.25)
    # No link to the third GPU, which has none: that pair goes over PCIe.
    assert f["gpus"]["2"]["peer_links"] is None
    assert f["pairs"]["0.2"]["type"] == "pcie" and f["pairs"]["0.2"]["links"] == 0
    assert f["pairs"]["0.2"]["gbps_per_direction"] == pytest.approx(links.pcie_gbps(4, 16))


def test_pcie_pair_path_rate_and_p2p_status():
    nvml = FakeNvml([Gpu("00000000:01:00.0", gen=4, gen_max=4, width_max=16),
                     Gpu("00000000:02:00.0", gen=4, gen_max=4, width=8, width_max=8)], ancestor=10, p2p=4)
    pair = facts(nvml)["pairs"]["0.1"]
    assert pair["type"] == "pcie" and pair["via"] is None and pair["version"] is None
    assert pair["pcie_path"] == "same PCIe switch"
    assert pair["gbps_per_direction"] == pytest.approx(links.pcie_gbps(4, 8))  # the slower of the two links
    assert pair["p2p_read"] is False and pair["p2p_status"]["read"] == "disabled by registry key"


@pytest.mark.parametrize("ancestor, path", [(0, "same PCIe switch"), (20, "same PCIe switch"),
                                            (30, "same host bridge"), (40, "same CPU socket (NUMA node)"),
                                            (50, "across CPU sockets"), (99, None)])
def test_topology_levels(ancestor, path):
    nvml = FakeNvml([Gpu("00000000:01:00.0"), Gpu("00000000:02:00.0")], ancestor=ancestor)
    assert facts(nvml)["pairs"]["1.0"]["pcie_path"] == path


@pytest.mark.parametrize("code, cc, version, rate", [
    (1, (6, 0), "1.0", 20.0), (2, (7, 0), "2.0", 25.0), (4, (8, 0), "3.0", 25.0), (5, (8, 0), "3.1", 25.0),
    (6, (9, 0), "4.0", 25.0), (7, (10, 0), "5.0", 50.0),
    (7, (9, 0), "4.0", 25.0),  # a driver that calls Hopper's links 5.0
    (8, (12, 0), "6.0", None),  # no published per-link rate: no theoretical figure rather than a wrong one
])
def test_nvlink_versions_and_rates(code, cc, version, rate):
    nvml = FakeNvml([Gpu("00000000:01:00.0", cc=cc, nvlinks=switch_links(code=code)),
                     Gpu("00000000:02:00.0", cc=cc, nvlinks=switch_links(code=code))])
    f = facts(nvml)
    assert f["gpus"]["0"]["peer_links"]["version"] == version
    assert f["gpus"]["0"]["peer_links"]["gbps_per_link"] == rate
    assert f["pairs"]["0.1"]["gbps_per_direction"] == (18 * rate if rate else None)


def test_missing_nvml_functions_degrade_to_none():
    class Old(FakeNvml):
        nvmlDeviceGetGpuMaxPcieLinkGeneration = None
        nvmlDeviceGetNvLinkRemoteDeviceType = None
        nvmlDeviceGetP2PStatus = None

    nvml = Old([Gpu("00000000:01:00.0", nvlinks=[(1, 6, 0, "00000000:02:00.0")] * 2),
                Gpu("00000000:02:00.0", nvlinks=[(1, 6, 0, "00000000:01:00.0")] * 2)])
    f = facts(nvml)
    assert f["gpus"]["0"]["host_link"]["device_generation_max"] is None
    assert f["pairs"]["0.1"]["links"] == 2  # still matched by bus id
    assert f["pairs"]["0.1"]["p2p_read"] is None and f["pairs"]["0.1"]["p2p_status"] == {}


def test_link_facts_without_nvml_or_nvidia_device(monkeypatch):
    monkeypatch.setattr(nvml, "pynvml", None)
    f = links.link_facts([torch.device("cpu")])
    assert f["source"] == "unknown" and "not installed" in f["reason"] and f["gpus"] == {} and f["pairs"] == {}
    monkeypatch.setattr(nvml, "pynvml", FakeNvml([]))
    assert links.link_facts([torch.device("cpu")])["source"] == "unknown"  # nvml_handle: CPUs have no handle
    assert links.link_facts([])["source"] == "unknown"


def test_link_facts_keys_gpus_by_torch_index(monkeypatch):
    fake = h200_node()
    monkeypatch.setattr(nvml, "pynvml", fake)
    handles = {3: fake.gpus[0], 5: fake.gpus[1]}
    monkeypatch.setattr(nvml, "nvml_handle", lambda d: handles.get(d.index))
    f = links.link_facts([torch.device("cuda", 3), torch.device("cuda", 5), torch.device("cuda", 7)])
    assert f["source"] == "nvml" and set(f["gpus"]) == {"3", "5"} and set(f["pairs"]) == {"3.5", "5.3"}


def test_sampler_records_the_pcie_link(monkeypatch):
    gpu = Gpu("00000000:01:00.0", gen=4, width=8)
    monkeypatch.setattr(nvml, "pynvml", FakeNvml([gpu]))
    monkeypatch.setattr(nvml, "nvml_handle", lambda d: gpu)
    sampler = nvml.ClockSampler(torch.device("cpu"))
    sampler._sample()
    gpu.gen, gpu.width = 5, 16
    t = sampler.stop()
    assert t.pcie_generation == [4, 5] and t.pcie_width == [8, 16]
    assert t.sm_clock_mhz == [1980, 1980]


def test_degraded_fabric_facts_lead_to_findings():
    """The dict links.py makes is the one transfers.py reads."""
    f = facts(h200_node(down=(2, 0)))
    f["pairs"]["0.1"]["pcie_path"] = f["pairs"]["1.0"]["pcie_path"] = "same PCIe switch"
    m = Measurement.from_samples("transfer.p2p.0.1.ce.write", sample_seconds=[0.1], bytes_read=2e9, bytes_written=0,
                                 flops=0, backend="native-cuda", device="cuda:0", verified=True,
                                 params={"src": "0", "dst": "1", "p2p_access": "off (driver)"})
    titles = [x.title for x in transfers.transfer_findings([m], f)]
    assert any("2 of its 18 NVLinks down" in t for t in titles)
    assert any("P2P access is off between GPU 0 and GPU 1, which are joined by 16 NVLinks" in t for t in titles)
    assert any("20.0 of 400.0 GB/s" in t for t in titles)


def test_without_the_switch_constant_no_link_is_taken_for_a_switch_link(monkeypatch):
    # An nvidia-ml-py that can neither name a switch nor ask a link's far end: the links count, and none
    # is put on the switch fabric (an unanswered query is not a switch).
    monkeypatch.delattr(FakeNvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH")
    monkeypatch.delattr(FakeNvml, "nvmlDeviceGetNvLinkRemoteDeviceType")
    f = facts(h200_node())
    peer = f["gpus"]["0"]["peer_links"]
    assert (peer["total"], peer["active"], peer["to_switch"]) == (18, 18, 0)
