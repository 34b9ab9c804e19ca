"""GPU tests of the host <-> device transfer probes: copy-engine copies over pinned and
pageable memory, SM copies over mapped pinned memory, both directions at once, and the
host <-> GPU round-trip latency.

Run on a GPU machine with `pytest -m gpu`; they skip elsewhere.
"""

import os
import re
import statistics

import pytest
import torch

from pygpuperf.measure import native

pytestmark = pytest.mark.gpu

GPU = torch.device("cuda", 0)
BANDWIDTH = ["transfer.h2d.pinned", "transfer.d2h.pinned", "transfer.h2d.pageable", "transfer.d2h.pageable",
             "transfer.bidir.pinned", "transfer.h2d.pinned.sm", "transfer.d2h.pinned.sm", "transfer.bidir.pinned.sm"]
SIZES = [f"{1 << k}KiB" for k in range(2, 10)] + [f"{1 << k}MiB" for k in range(10)] + ["1GiB"]
QUICK_SIZES = ["4KiB", "256KiB", "16MiB", "256MiB"]
FEW = {"warmup": 1, "samples": 3}
NODE = re.compile(r"-?\d+|unknown")


def run(name, variant="", **kwargs):
    return native.run_probe(name, GPU, variant=variant, **{**FEW, **kwargs})


def size_bytes(name):
    number, unit = re.fullmatch(r"(\d+)(KiB|MiB|GiB)", name).groups()
    return int(number) << {"KiB": 10, "MiB": 20, "GiB": 30}[unit]


def directions(name):
    return 2 if ".bidir." in name else 1


def gbps(r):
    return r.bytes_read / statistics.median(r.sample_seconds) / 1e9


def test_probes_are_registered_and_runnable_here():
    assert set(BANDWIDTH + ["latency.h2d"]) <= set(native.list_probes("cuda"))
    for name in BANDWIDTH + ["latency.h2d"]:
        assert native.probe_waiver(name, GPU) is None, name


@pytest.mark.parametrize("name", BANDWIDTH)
def test_variants_are_the_sizes(name):
    assert len(SIZES) == 19
    assert native.probe_variants(name, GPU) == SIZES
    assert native.probe_variants(name, GPU, quick=True) == QUICK_SIZES


@pytest.mark.parametrize("size", ["4KiB", "16MiB"])
@pytest.mark.parametrize("name", BANDWIDTH)
def test_transfer_verifies_and_counts_every_copy(name, size):
    r = run(name, size)
    assert r.verified, r.verify_detail
    p = r.params
    assert int(p["bytes"]) == size_bytes(size)
    # 4 KiB repeats 256 times per run (capped), 16 MiB is one copy.
    assert int(p["copies_per_run"]) == (256 if size == "4KiB" else 1)
    both = p["counting"] == "payload bytes, both directions"
    assert both == (directions(name) == 2)
    assert r.bytes_read == int(p["bytes"]) * int(p["copies_per_run"]) * directions(name)
    assert r.bytes_written == 0 and r.flops == 0 and r.operations == 0
    assert all(s > 0 for s in r.sample_seconds)
    assert p["engine"] == ("SM" if name.endswith(".sm") else "copy engine")
    assert p["host_memory"].startswith("pageable" if ".pageable" in name else "pinned")
    assert p["direction"] == {"h2d": "host to device", "d2h": "device to host", "bidir": "both at once"}[
        name.split(".")[1]]
    assert NODE.fullmatch(str(p["gpu_numa_node"])), p["gpu_numa_node"]
    assert all(NODE.fullmatch(n) for n in p["host_numa_node"].split(",")), p["host_numa_node"]
    if size == "16MiB":
        assert gbps(r) > 1.0, f"{name}: {gbps(r):.2f} GB/s"


@pytest.mark.parametrize("name", BANDWIDTH)
def test_transfer_detects_unwritten_destination(name):
    r = run(name, "64KiB", poison_after_runs=True)
    assert not r.verified, r.verify_detail
    if directions(name) == 2:
        # Both destinations were poisoned, and both are checked.
        assert r.verify_detail.count("wrong") == 2, r.verify_detail


@pytest.mark.parametrize("name", ["transfer.h2d.pinned.sm", "transfer.d2h.pinned.sm", "transfer.bidir.pinned.sm",
                                  "transfer.h2d.pageable"])
def test_requested_size_that_is_not_whole_vectors_verifies(name):
    # No variant: the size comes from size_bytes; 1000012 B is whole floats but not 16-byte vectors.
    r = run(name, size_bytes=1_000_012)
    assert r.verified, r.verify_detail
    assert int(r.params["bytes"]) == 1_000_012
    assert int(r.params["copies_per_run"]) == 5  # ceil(4 MiB / 1000012 B)
    assert r.bytes_read == 1_000_012 * 5 * directions(name)


def test_bidir_counts_both_directions_of_the_same_copies():
    one = run("transfer.h2d.pinned", "1MiB")
    both = run("transfer.bidir.pinned", "1MiB")
    assert both.verified and one.verified
    assert both.bytes_read == 2 * one.bytes_read
    assert "host to device" in both.verify_detail and "device to host" in both.verify_detail


def test_numa_nodes_match_sysfs():
    r = run("transfer.h2d.pinned", "4KiB")
    props = torch.cuda.get_device_properties(GPU)
    path = f"/sys/bus/pci/devices/{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0/numa_node"
    if os.path.exists(path):
        with open(path) as f:
            assert r.params["gpu_numa_node"] == f.read().strip()
    host = r.params["host_numa_node"]
    if host != "unknown":
        assert os.path.isdir(f"/sys/devices/system/node/node{host}"), host


def test_h2d_latency_round_trips_are_plausible():
    assert native.probe_variants("latency.h2d", GPU) == [""]
    r = native.run_probe("latency.h2d", GPU, warmup=1, samples=5)
    assert r.verified, r.verify_detail
    p = r.params
    assert r.operations == int(p["round_trips"]) > 0
    assert r.bytes_read == 0 and r.bytes_written == 0
    assert int(p["message_bytes"]) == 4 and p["mechanism"]
    assert NODE.fullmatch(str(p["gpu_numa_node"])) and NODE.fullmatch(str(p["host_numa_node"]))
    us = statistics.median(r.sample_seconds) / r.operations * 1e6
    assert 0.3 <= us <= 100, f"{us:.3f} us per round trip"


def test_h2d_latency_detects_unwritten_result():
    r = native.run_probe("latency.h2d", GPU, warmup=0, samples=1, poison_after_runs=True)
    assert not r.verified, r.verify_detail


def test_unknown_size_is_rejected():
    with pytest.raises(RuntimeError, match="no variant"):
        run("transfer.h2d.pinned", "3KiB")
