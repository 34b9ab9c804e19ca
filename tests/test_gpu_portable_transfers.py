"""The portable (torch-level) transfer references: host <-> device copies sized by variant, both
directions at once, and GPU <-> GPU copies for every ordered pair of devices.

The `gpu` and `multigpu` tests skip without GPUs; the naming, sizing and waivers run anywhere.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pygpuperf.measure import pairs
from pygpuperf.measure.probe import RunSettings
from pygpuperf.measure.backends.portable import (QUICK_TRANSFER_SIZES, TRANSFER_SIZES, BidirTransferProbe, PortableBackend,
                                          TransferProbe, copies_per_run, run_probe)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
CPU = torch.device("cpu")
GPU = torch.device("cuda", 0)
HOST_TRANSFERS = ["transfer.h2d.pinned", "transfer.d2h.pinned", "transfer.h2d.pageable", "transfer.d2h.pageable"]
FEW = RunSettings(warmup=1, samples=5)
backend = PortableBackend()


# --------------------------------------------------------------------------- anywhere


def test_sizes_are_the_native_variant_names():
    assert len(TRANSFER_SIZES) == 19 and TRANSFER_SIZES[0] == "4KiB" and TRANSFER_SIZES[-1] == "1GiB"
    assert TRANSFER_SIZES[8:11] == ("1MiB", "2MiB", "4MiB")
    assert QUICK_TRANSFER_SIZES == ("4KiB", "256KiB", "16MiB", "256MiB")
    assert set(QUICK_TRANSFER_SIZES) < set(TRANSFER_SIZES)
    for direction in ("h2d", "d2h"):
        for memory in ("pinned", "pageable"):
            probe = TransferProbe(direction, memory)
            assert probe.variants(CPU, False) == list(TRANSFER_SIZES)
            assert probe.variants(CPU, True) == list(QUICK_TRANSFER_SIZES)


@pytest.mark.parametrize("size, copies", [(4 * KiB, 256), (16 * KiB, 256), (32 * KiB, 128), (1 * MiB, 4),
                                          (3 * MiB, 2), (4 * MiB, 1), (GiB, 1)])
def test_copies_per_run(size, copies):
    assert copies_per_run(size) == copies  # clamp(ceil(4 MiB / size), 1, 256)


def test_host_transfers_are_no_cpu_probes_and_say_why():
    # A CPU run lists no host<->device transfers at all; the probes themselves say why not.
    assert not [n for n in backend.probe_names(CPU) if n.startswith("transfer.")]
    for direction in ("h2d", "d2h"):
        for memory in ("pinned", "pageable"):
            assert "same memory" in TransferProbe(direction, memory).waiver(CPU)
    assert "same memory" in BidirTransferProbe().waiver(CPU)
    assert "streams" in BidirTransferProbe().waiver(torch.device("mps"))


def test_unknown_size_variant_is_refused():
    with pytest.raises(ValueError, match="no size variant '3KiB'"):
        TransferProbe("h2d", "pinned").use_variant("3KiB")
    with pytest.raises(ValueError, match="4KiB to 1GiB"):
        TransferProbe("d2h", "pageable").use_variant("2GiB")


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_sizing_and_accounting_through_the_probe_sequence(direction):
    """Pageable copies between two CPU tensors run the real sequence: variant sizing, repeated copies, checks."""
    probe = TransferProbe(direction, "pageable")
    probe.waiver = lambda device: None  # type: ignore[method-assign]
    probe.use_variant("16KiB")
    run = run_probe(probe, CPU, RunSettings(warmup=0, samples=2))
    assert run.verified, run.verify_detail
    assert run.params["bytes"] == 16 * KiB and run.params["copies_per_run"] == 256
    assert run.work.bytes_read == 16 * KiB * 256 and run.work.bytes_written == 0
    assert run.params["host_memory"] == "pageable" and run.params["engine"] == "copy engine"
    assert run.params["direction"] == ("host to device" if direction == "h2d" else "device to host")
    probe.use_variant("")  # "" = settings.size_bytes
    run = run_probe(probe, CPU, RunSettings(warmup=0, samples=1, size_bytes=8 * MiB))
    assert run.params["bytes"] == 8 * MiB and run.params["copies_per_run"] == 1
    poisoned = run_probe(probe, CPU, RunSettings(warmup=0, samples=1, size_bytes=64 * KiB, poison_after_runs=True))
    assert not poisoned.verified


@pytest.fixture
def three_gpus(monkeypatch):
    """Names and waivers read only the device count: pretend there are three."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)


def test_pair_names_expand_every_ordered_pair(three_gpus):
    names = [n for n in backend.probe_names(GPU) if n.startswith(pairs.PAIR_PREFIX)]
    expected = [f"transfer.p2p.{i}.{j}.ce.{mode}" for mode in ("write", "bidir")
                for i in range(3) for j in range(3) if i != j]
    assert names == expected
    for name in names:
        base, src, dst = pairs.split(name)
        assert backend.waiver(name, GPU) is None
        assert f"cuda:{src}" in backend.describe(name, GPU) and f"cuda:{dst}" in backend.describe(name, GPU)
        assert backend.variants(name, GPU, quick=True) == list(QUICK_TRANSFER_SIZES)
    assert "transfer.bidir.pinned" in backend.probe_names(GPU)


def test_pair_waivers_name_their_reason(three_gpus):
    assert "cuda:5 is not visible" in backend.waiver("transfer.p2p.0.5.ce.write", GPU)
    assert "same device" in backend.waiver("transfer.p2p.1.1.ce.bidir", GPU)
    assert "CUDA devices" in backend.waiver("transfer.p2p.0.1.ce.write", CPU)
    with pytest.raises(KeyError, match="transfer.p2p.<i>.<j>.ce.write"):
        backend.describe("transfer.p2p.0.1.sm.write", GPU)
    with pytest.raises(RuntimeError, match="waived"):
        backend.measure("transfer.p2p.0.1.ce.write", CPU, FEW)


@pytest.mark.parametrize("count", [0, 1])
def test_no_pair_names_with_fewer_than_two_gpus(monkeypatch, count):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    assert not [n for n in backend.probe_names(GPU) if n.startswith(pairs.PAIR_PREFIX)]
    assert not [n for n in backend.probe_names(CPU) if n.startswith(pairs.PAIR_PREFIX)]


# --------------------------------------------------------------------------- one GPU


def _check_copy(m, size: int, directions: int = 1) -> None:
    assert m.verified, m.verify_detail
    assert m.backend == "torch-cuda" and m.value > 0 and m.stats.n == FEW.samples
    copies = copies_per_run(size)
    assert m.quantities.bytes == size and m.quantities.copies_per_run == copies
    assert m.bytes_read == directions * size * copies and m.bytes_written == 0
    assert m.params["engine"] == "copy engine" and m.params["variant"]


@pytest.mark.gpu
@pytest.mark.parametrize("name", HOST_TRANSFERS)
@pytest.mark.parametrize("size", ["4KiB", "16MiB"])
def test_sized_host_transfers_verify(name, size):
    assert backend.waiver(name, GPU) is None
    assert backend.variants(name, GPU) == list(TRANSFER_SIZES)
    m = backend.measure(name, GPU, FEW, size)
    _check_copy(m, {"4KiB": 4 * KiB, "16MiB": 16 * MiB}[size])
    assert m.params["host_memory"] == name.split(".")[2]


@pytest.mark.gpu
def test_default_size_is_256_mib():
    m = backend.measure("transfer.h2d.pinned", GPU, RunSettings(warmup=1, samples=3))
    assert m.verified and m.quantities.bytes == 256 * MiB and m.quantities.copies_per_run == 1


@pytest.mark.gpu
@pytest.mark.parametrize("name", [*HOST_TRANSFERS, "transfer.bidir.pinned"])
@pytest.mark.parametrize("size", ["4KiB", "16MiB"])
def test_poisoned_transfers_fail_verification(name, size):
    m = backend.measure(name, GPU, dataclasses.replace(FEW, poison_after_runs=True), size)
    assert not m.verified and not m.usable, m.verify_detail


@pytest.mark.gpu
@pytest.mark.parametrize("size", ["4KiB", "256MiB"])
def test_bidirectional_copies_overlap_and_are_timed_together(size):
    assert backend.waiver("transfer.bidir.pinned", GPU) is None
    bidir = backend.measure("transfer.bidir.pinned", GPU, FEW, size)
    _check_copy(bidir, {"4KiB": 4 * KiB, "256MiB": 256 * MiB}[size], directions=2)
    assert bidir.params["direction"] == "both at once"
    if size == "256MiB":
        h2d = backend.measure("transfer.h2d.pinned", GPU, FEW, size)
        d2h = backend.measure("transfer.d2h.pinned", GPU, FEW, size)
        # Run one after the other, the directions would add no bandwidth; with a stop event that did
        # not wait for both streams, the figure would exceed what the two directions give alone.
        assert bidir.value > 1.2 * max(h2d.value, d2h.value), (bidir.value, h2d.value, d2h.value)
        assert bidir.value < 1.1 * (h2d.value + d2h.value), (bidir.value, h2d.value, d2h.value)


# --------------------------------------------------------------------------- two GPUs


@pytest.mark.multigpu
def test_pair_names_cover_the_visible_gpus():
    count = torch.cuda.device_count()
    names = [n for n in backend.probe_names(GPU) if n.startswith(pairs.PAIR_PREFIX)]
    assert len(names) == 2 * count * (count - 1)
    assert {"transfer.p2p.0.1.ce.write", "transfer.p2p.1.0.ce.write", "transfer.p2p.0.1.ce.bidir"} <= set(names)


@pytest.mark.multigpu
@pytest.mark.parametrize("name", ["transfer.p2p.0.1.ce.write", "transfer.p2p.1.0.ce.write"])
@pytest.mark.parametrize("size", ["4KiB", "64MiB"])
def test_pair_write_verifies(name, size):
    _, src, dst = pairs.split(name)
    assert backend.waiver(name, GPU) is None
    m = backend.measure(name, GPU, FEW, size)
    _check_copy(m, {"4KiB": 4 * KiB, "64MiB": 64 * MiB}[size])
    assert (m.params["src"], m.params["dst"]) == (str(src), str(dst))
    assert m.device == f"cuda:{src}"  # timed on the source GPU's stream, where torch issues the copy
    assert m.params["p2p_access"].startswith(("on", "off"))


@pytest.mark.multigpu
def test_pair_bidir_verifies_and_overlaps():
    write = backend.measure("transfer.p2p.0.1.ce.write", GPU, FEW, "256MiB")
    bidir = backend.measure("transfer.p2p.0.1.ce.bidir", GPU, FEW, "256MiB")
    _check_copy(bidir, 256 * MiB, directions=2)
    assert (bidir.params["src"], bidir.params["dst"]) == ("0,1", "1,0")
    assert bidir.value > 1.2 * write.value, (bidir.value, write.value)


@pytest.mark.multigpu
@pytest.mark.parametrize("name", ["transfer.p2p.0.1.ce.write", "transfer.p2p.1.0.ce.bidir"])
def test_poisoned_pair_copies_fail_verification(name):
    m = backend.measure(name, GPU, dataclasses.replace(FEW, poison_after_runs=True), "1MiB")
    assert not m.verified, m.verify_detail
