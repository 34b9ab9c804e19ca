"""Multi-GPU tests of the GPU <-> GPU pair probes (transfer.p2p.{ce,sm}.{write,read,bidir}):
each runs on an initiator GPU against the peer its variant "<peer>/<size>" names.

Run on a machine with two or more GPUs with `pytest -m multigpu`; they skip elsewhere.
"""

import statistics

import pytest
import torch

from pygpuperf.measure import native

pytestmark = pytest.mark.multigpu

MODES = ["transfer.p2p.ce.write", "transfer.p2p.ce.read", "transfer.p2p.ce.bidir",
         "transfer.p2p.sm.write", "transfer.p2p.sm.read", "transfer.p2p.sm.bidir"]
PAIRS = [(0, 1), (1, 0)]
SIZES = [f"{1 << k}KiB" for k in range(2, 10)] + [f"{1 << k}MiB" for k in range(10)] + ["1GiB"]
QUICK_SIZES = ["4KiB", "256KiB", "16MiB", "256MiB"]
FEW = {"warmup": 1, "samples": 3}


def gpu(index):
    return torch.device("cuda", index)


def peer_access(name, i, j):
    """Whether the probe's directions have peer access: i -> j, and j -> i for bidir."""
    ok = torch.cuda.can_device_access_peer(i, j)
    return ok and torch.cuda.can_device_access_peer(j, i) if name.endswith(".bidir") else ok


def skip_unless_runnable(name, i, j):
    if ".sm." in name and not peer_access(name, i, j):
        pytest.skip(f"no peer access between GPU {i} and GPU {j}: {native.probe_waiver(name, gpu(i))}")


def run(name, i, variant, **kwargs):
    return native.run_probe(name, gpu(i), variant=variant, **{**FEW, **kwargs})


def test_pair_probes_are_registered():
    assert set(MODES) <= set(native.list_probes("cuda"))


@pytest.mark.parametrize("name", MODES)
def test_variants_list_every_usable_peer_and_size(name):
    count = torch.cuda.device_count()
    peers = [j for j in range(1, count) if ".ce." in name or peer_access(name, 0, j)]
    if not peers:
        assert native.probe_waiver(name, gpu(0)), f"{name} runs without any peer"
        return
    assert native.probe_waiver(name, gpu(0)) is None
    assert native.probe_variants(name, gpu(0)) == [f"{j}/{s}" for j in peers for s in SIZES]
    assert native.probe_variants(name, gpu(0), quick=True) == [f"{j}/{s}" for j in peers for s in QUICK_SIZES]


@pytest.mark.parametrize("size", ["4KiB", "16MiB"])
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0]}-{p[1]}")
@pytest.mark.parametrize("name", MODES)
def test_pair_verifies_and_counts(name, pair, size):
    i, j = pair
    skip_unless_runnable(name, i, j)
    r = run(name, i, f"{j}/{size}")
    assert r.verified, r.verify_detail
    p = r.params
    both = name.endswith(".bidir")
    legs = 2 if both else 1
    assert int(p["bytes"]) == {"4KiB": 4 << 10, "16MiB": 16 << 20}[size]
    assert int(p["copies_per_run"]) == (256 if size == "4KiB" else 1)
    assert r.bytes_read == int(p["bytes"]) * int(p["copies_per_run"]) * legs
    assert r.bytes_written == 0 and r.operations == 0
    assert p["counting"] == ("payload bytes, both directions" if both else "payload bytes, one direction")
    assert (p["initiator"], p["peer"]) == (str(i), str(j))
    if both:
        assert (p["src"], p["dst"]) == (f"{i},{j}", f"{j},{i}")
    elif name.endswith(".write"):
        assert (p["src"], p["dst"]) == (str(i), str(j))
    else:
        assert (p["src"], p["dst"]) == (str(j), str(i))
    assert p["engine"] == ("SM" if ".sm." in name else "copy engine")
    assert p["p2p_access"] == ("on" if peer_access(name, i, j) else "off (cudaDeviceCanAccessPeer = 0)")
    # Every destination is checked: one report per direction.
    assert r.verify_detail.count("elements match") == legs, r.verify_detail
    if size == "16MiB":
        assert r.bytes_read / statistics.median(r.sample_seconds) / 1e9 > 1.0


@pytest.mark.parametrize("name", MODES)
def test_pair_detects_unwritten_destination(name):
    skip_unless_runnable(name, 0, 1)
    r = run(name, 0, "1/64KiB", poison_after_runs=True)
    assert not r.verified, r.verify_detail
    assert r.verify_detail.count("wrong") == (2 if name.endswith(".bidir") else 1), r.verify_detail


@pytest.mark.parametrize("name", ["transfer.p2p.ce.write", "transfer.p2p.sm.read"])
def test_initiator_is_not_its_own_peer(name):
    skip_unless_runnable(name, 0, 1)
    with pytest.raises(RuntimeError, match="no variant"):
        run(name, 0, "0/4KiB")


def test_default_variant_takes_the_first_peer_and_requested_size():
    r = native.run_probe("transfer.p2p.ce.write", gpu(0), warmup=0, samples=1, size_bytes=1 << 20)
    assert r.verified, r.verify_detail
    assert (r.params["peer"], r.params["bytes"]) == ("1", str(1 << 20))
