"""How each GPU is linked to the host and to its peers, read from NVML.

Per GPU: the PCIe link to the host (current and maximum generation and width, and what it
carries per direction), the NUMA node it hangs off, and its NVLinks (how many, how many are
down, which version). Per ordered pair of GPUs: the NVLinks between them, direct or through
a switch fabric, or else the PCIe path, and whether NVML reports P2P reads and writes.

:func:`link_facts` returns all of it as a plain JSON-able dict for a run's meta:

    {"source": "nvml",
     "gpus": {"0": {"bus_id", "name", "compute_capability", "numa_node",
                    "host_link": {"type": "pcie", "generation", "width", "generation_max",
                                  "width_max", "device_generation_max", "gbps_per_direction",
                                  "gbps_per_direction_now"},
                    "peer_links": {"type": "nvlink", "total", "active", "down", "to_switch",
                                   "version", "gbps_per_link"} or None}},
     "pairs": {"0.1": {"src", "dst", "type": "nvlink" | "pcie", "via", "links", "links_total",
                       "links_down", "version", "pcie_path", "gbps_per_direction",
                       "p2p_read", "p2p_write", "p2p_status"}}}

GPUs are keyed by their torch index, pairs by "<src>.<dst>" as in ``transfer.p2p.<src>.<dst>.*``.
Without NVML, or for devices it does not manage, the dict says {"source": "unknown", "reason": ...}.
Keys stay vendor-neutral; values name the hardware ("pcie", "nvlink").
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator, Sequence

import torch

from pygpuperf.facts import nvml
from pygpuperf.facts.nvml import constant as _constant, query as _query, text as _text

# Payload rate per lane and direction (GB/s) by PCIe generation, after line encoding:
# 8b/10b for Gen1-2 (2.5, 5 GT/s), 128b/130b for Gen3-5 (8, 16, 32 GT/s), and for Gen6
# (64 GT/s, FLIT mode) the 242 payload bytes of each 256-byte FLIT. Packet headers come on top,
# so copies reach some 80-90 % of these.
PCIE_GBPS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

# NVML's nvmlNvlinkVersion_t codes, as nvmlDeviceGetNvLinkVersion returns them (an H200 reports 6).
NVLINK_VERSIONS = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}
# GB/s per link and direction: P100 (1.0) 20; V100 (2.x), A100 (3.x) and H100/H200 (4.0) 25,
# so 18 x 25 = 450 GB/s per direction on an H100 or H200; B200 (5.0) 50, 18 x 50 = 900.
NVLINK_GBPS_PER_LINK = {"1.0": 20.0, "2.0": 25.0, "2.2": 25.0, "3.0": 25.0, "3.1": 25.0, "4.0": 25.0, "5.0": 50.0}
# The NVLink 3.1 bridges of compute capability 8.6 boards (RTX 3090, A6000, A40) carry
# 112.5 GB/s both ways over 4 links: 14.0625 GB/s per link and direction.
_NVLINK_BRIDGE_GBPS_PER_LINK = 14.0625

# nvmlDeviceGetTopologyCommonAncestor levels: where the PCIe paths of two GPUs meet.
PCIE_PATHS = {
    0: "same PCIe switch",  # INTERNAL: two GPUs of one board, behind its own switch
    10: "same PCIe switch",  # SINGLE
    20: "same PCIe switch",  # MULTIPLE: a tree of switches, no host bridge in between
    30: "same host bridge",  # HOSTBRIDGE
    40: "same CPU socket (NUMA node)",  # NODE
    50: "across CPU sockets",  # SYSTEM
}

# The words for nvmlGpuP2PStatus_t and the capabilities asked of nvmlDeviceGetP2PStatus, by the
# nvidia-ml-py constant of each.
_P2P_STATUS = (("NVML_P2P_STATUS_OK", "ok"), ("NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED", "chipset not supported"),
               ("NVML_P2P_STATUS_GPU_NOT_SUPPORTED", "GPU not supported"),
               ("NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED", "I/O hub topology not supported"),
               ("NVML_P2P_STATUS_DISABLED_BY_REGKEY", "disabled by registry key"),
               ("NVML_P2P_STATUS_NOT_SUPPORTED", "not supported"), ("NVML_P2P_STATUS_UNKNOWN", "unknown"))
_P2P_CAPS = (("read", "NVML_P2P_CAPS_INDEX_READ"), ("write", "NVML_P2P_CAPS_INDEX_WRITE"),
             ("nvlink", "NVML_P2P_CAPS_INDEX_NVLINK"), ("atomics", "NVML_P2P_CAPS_INDEX_ATOMICS"))


def each_link(n, h) -> Iterator[tuple[int, bool]]:
    """(index, active) of each GPU-to-GPU link the device has."""
    enabled = _constant(n, "NVML_FEATURE_ENABLED")
    state_of = getattr(n, "nvmlDeviceGetNvLinkState", None)
    for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 18)):
        state = _query(state_of, h, link)
        if state is not None:  # None: no such link (NVML answers "invalid argument" past the last one)
            yield link, state == enabled


def pcie_gbps(generation: int | None, width: int | None) -> float | None:
    """What a PCIe link carries per direction (GB/s, after line encoding), or None if unknown."""
    if generation not in PCIE_GBPS_PER_LANE or not width:
        return None
    return PCIE_GBPS_PER_LANE[generation] * width


def nvlink_gbps_per_link(version: str | None, compute_capability: str | None = None) -> float | None:
    """What one NVLink carries per direction (GB/s) for the version NVML reports."""
    if version == "3.1" and compute_capability == "8.6":
        return _NVLINK_BRIDGE_GBPS_PER_LINK
    return NVLINK_GBPS_PER_LINK.get(version or "")


def normalize_bus_id(bus_id: str | bytes | None) -> str | None:
    """NVML's "00000000:1A:00.0" as sysfs names it: "0000:1a:00.0" (4-digit domain, lower case)."""
    if bus_id is None:
        return None
    text = bus_id.decode(errors="replace") if isinstance(bus_id, bytes) else str(bus_id)
    domain, sep, rest = text.strip().partition(":")
    try:
        return f"{int(domain, 16):04x}:{rest.lower()}" if sep else None
    except ValueError:
        return None


def numa_node(bus_id: str | None, sysfs_root: str = "/sys/bus/pci/devices") -> int | None:
    """The NUMA node a PCI device hangs off, or None where the kernel does not say (-1, no sysfs)."""
    if not bus_id:
        return None
    try:
        with open(os.path.join(sysfs_root, bus_id, "numa_node"), encoding="ascii") as f:
            node = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


@dataclass
class HostLink:
    type: str = "pcie"
    generation: int | None = None  # now; an idle link may run below its maximum
    width: int | None = None
    generation_max: int | None = None  # of the link: the lower of what the GPU and its slot support
    width_max: int | None = None
    device_generation_max: int | None = None  # what the GPU itself supports
    gbps_per_direction: float | None = None  # at generation_max x width_max
    gbps_per_direction_now: float | None = None


@dataclass
class PeerLinks:
    type: str = "nvlink"
    total: int = 0  # links the GPU has
    active: int = 0
    down: int = 0
    to_switch: int = 0  # active links that end on a switch of the fabric
    version: str | None = None
    gbps_per_link: float | None = None  # per direction
    # Active links ending on another GPU, by its bus id.
    to_bus: dict[str, int] = field(default_factory=dict)


@dataclass
class GpuLinks:
    index: int
    bus_id: str | None
    name: str | None
    compute_capability: str | None
    numa_node: int | None
    host_link: HostLink
    peer_links: PeerLinks | None  # None: the GPU has no NVLink

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        del d["index"]
        if d["peer_links"] is not None:
            del d["peer_links"]["to_bus"]  # the pairs say the same per peer
        return d


@dataclass
class PairLink:
    src: int
    dst: int
    type: str  # "nvlink" or "pcie"
    via: str | None  # nvlink: "direct", "switch" or "direct and switch"
    links: int  # active links from src that reach dst
    links_total: int  # links src has, active or not
    links_down: int
    version: str | None
    pcie_path: str | None  # where the two PCIe paths meet (PCIE_PATHS), None if NVML does not say
    gbps_per_direction: float | None  # theoretical: links x per-link rate, or the slower PCIe link
    p2p_read: bool | None
    p2p_write: bool | None
    p2p_status: dict[str, str] = field(default_factory=dict)


def _host_link(nvml, h) -> HostLink:
    link = HostLink(
        generation=_query(nvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
        width=_query(nvml.nvmlDeviceGetCurrPcieLinkWidth, h),
        generation_max=_query(nvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
        width_max=_query(nvml.nvmlDeviceGetMaxPcieLinkWidth, h),
        device_generation_max=_query(getattr(nvml, "nvmlDeviceGetGpuMaxPcieLinkGeneration", None), h),
    )
    link.gbps_per_direction = pcie_gbps(link.generation_max, link.width_max)
    link.gbps_per_direction_now = pcie_gbps(link.generation, link.width)
    return link


def _peer_links(nvml, h, compute_capability: str | None) -> PeerLinks | None:
    links = PeerLinks()
    versions: Counter[str] = Counter()
    remote_type = getattr(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
    switch = _constant(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH")  # None: this nvidia-ml-py cannot tell
    for link, active in each_link(nvml, h):
        links.total += 1
        if not active:
            links.down += 1
            continue
        links.active += 1
        code = _query(nvml.nvmlDeviceGetNvLinkVersion, h, link)
        if code in NVLINK_VERSIONS:
            versions[NVLINK_VERSIONS[code]] += 1
        # On switch fabrics (HGX boards) every link ends on a switch, whose PCI id NVML gives as FFFFFFFF:FF:FF.0.
        if switch is not None and _query(remote_type, h, link) == switch:
            links.to_switch += 1
            continue
        remote = _query(nvml.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
        bus = normalize_bus_id(_text(getattr(remote, "busId", None)))
        if bus:
            links.to_bus[bus] = links.to_bus.get(bus, 0) + 1
    if links.total == 0:
        return None
    if versions:
        links.version = versions.most_common(1)[0][0]
        major = int(compute_capability.split(".")[0]) if compute_capability else None
        if links.version == "5.0" and major is not None and major < 10:
            # Some drivers report 5.0 for Hopper, whose links are NVLink 4 (5 came with Blackwell).
            links.version = "4.0"
        links.gbps_per_link = nvlink_gbps_per_link(links.version, compute_capability)
    return links


def _gpu(nvml, index: int, h, sysfs_root: str) -> GpuLinks:
    pci = _query(nvml.nvmlDeviceGetPciInfo, h)
    bus_id = normalize_bus_id(_text(getattr(pci, "busId", None)))
    cc = _query(getattr(nvml, "nvmlDeviceGetCudaComputeCapability", None), h)
    compute_capability = f"{cc[0]}.{cc[1]}" if cc else None
    return GpuLinks(index=index, bus_id=bus_id, name=_text(_query(nvml.nvmlDeviceGetName, h)),
                    compute_capability=compute_capability, numa_node=numa_node(bus_id, sysfs_root),
                    host_link=_host_link(nvml, h), peer_links=_peer_links(nvml, h, compute_capability))


def _pair(nvml, a: GpuLinks, ha, b: GpuLinks, hb) -> PairLink:
    pa, pb = a.peer_links, b.peer_links
    direct = pa.to_bus.get(b.bus_id or "", 0) if pa else 0
    # Two GPUs on one switch fabric reach each other over all their switch links, the fewer of the two.
    fabric = min(pa.to_switch, pb.to_switch) if pa and pb else 0
    links = direct + fabric
    words = {code: text for constant, text in _P2P_STATUS if (code := _constant(nvml, constant)) is not None}
    status = {cap: words.get(code, f"status {code}") for cap, index in _P2P_CAPS
              if _constant(nvml, index) is not None
              and (code := _query(getattr(nvml, "nvmlDeviceGetP2PStatus", None), ha, hb,
                                  _constant(nvml, index))) is not None}
    ancestor = _query(getattr(nvml, "nvmlDeviceGetTopologyCommonAncestor", None), ha, hb)
    if links:
        via = "direct and switch" if direct and fabric else ("direct" if direct else "switch")
        rate = pa.gbps_per_link
        gbps = links * rate if rate else None
    else:
        via = None
        # A peer copy over PCIe is held to the slower of the two GPUs' links.
        rates = [g.host_link.gbps_per_direction for g in (a, b)]
        gbps = min(rates) if all(rates) else None
    return PairLink(
        src=a.index, dst=b.index, type="nvlink" if links else "pcie", via=via, links=links,
        links_total=pa.total if pa else 0, links_down=pa.down if pa else 0,
        version=pa.version if pa and links else None, pcie_path=PCIE_PATHS.get(ancestor),
        gbps_per_direction=gbps,
        p2p_read=status["read"] == "ok" if "read" in status else None,
        p2p_write=status["write"] == "ok" if "write" in status else None,
        p2p_status=status,
    )


def facts_from_nvml(handles: dict[int, Any], nvml, sysfs_root: str = "/sys/bus/pci/devices") -> dict[str, Any]:
    """Link facts of the GPUs whose NVML handles are given, keyed by torch index."""
    gpus = {i: _gpu(nvml, i, h, sysfs_root) for i, h in sorted(handles.items())}
    pairs = {f"{i}.{j}": asdict(_pair(nvml, gpus[i], handles[i], gpus[j], handles[j]))
             for i in gpus for j in gpus if i != j}
    return {"source": "nvml", "gpus": {str(i): g.to_dict() for i, g in gpus.items()}, "pairs": pairs}


def unknown(reason: str) -> dict[str, Any]:
    return {"source": "unknown", "reason": reason, "gpus": {}, "pairs": {}}


def link_facts(devices: Sequence[torch.device] | None = None) -> dict[str, Any]:
    """Link facts of `devices` (default: every visible CUDA device) for results' meta."""
    if devices is None:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        devices = [torch.device("cuda", i) for i in range(count)]
    if nvml.pynvml is None:
        return unknown("NVML (nvidia-ml-py) is not installed")
    handles = {}
    for d in devices:
        h = nvml.nvml_handle(d)
        if h is not None:
            handles[d.index or 0] = h
    if not handles:
        return unknown("no device NVML manages (NVML reports on NVIDIA GPUs only)")
    return facts_from_nvml(handles, nvml.pynvml)
