"""The native probe framework: registry, op bindings, error propagation, GIL release."""

import os
import threading
import time

import pytest
import torch

from pygpuperf.measure import native

CPU = torch.device("cpu")


def test_extension_loads_and_reports_its_build():
    assert native.available(), native.IMPORT_ERROR
    info = native.build_info()
    assert info["cuda"] in ("0", "1")
    if os.environ.get("PYGPUPERF_CUDA") == "ON":  # CI builds with CUDA: a silent CPU-only build must fail it
        assert info["cuda"] == "1" and "sm_90a" in info["cuda_archs"]


def test_prefix_filter_stops_at_dots():
    everything = native.list_probes("cpu")
    assert native.list_probes("cpu", "memory.dram") == [n for n in everything if n.startswith("memory.dram.")]
    assert native.list_probes("cpu", "memory.dr") == []
    assert native.list_probes("cpu", "memory.dram.copy") == ["memory.dram.copy"]


def test_unknown_probe_raises_with_its_name():
    with pytest.raises(RuntimeError, match="unknown native probe 'memory.dram.nope'"):
        native.run_probe("memory.dram.nope", CPU)


def test_bad_arguments_raise_instead_of_crashing():
    with pytest.raises(RuntimeError, match="samples must be at least 1"):
        native.run_probe("memory.dram.copy", CPU, samples=0)
    with pytest.raises(RuntimeError, match="warmup must be non-negative"):
        native.run_probe("memory.dram.copy", CPU, warmup=-1)
    with pytest.raises(RuntimeError, match="'cpu' or 'cuda'"):
        native.list_probes("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_cuda_probe_without_gpu_is_waived_not_crashed():
    if not native.cuda_built():
        pytest.skip("CPU-only build has no CUDA probes")
    names = native.list_probes("cuda")
    assert "memory.hbm.copy" in names
    for name in names:
        reason = native.probe_waiver(name, torch.device("cuda", 0))
        assert reason, f"{name} claims to run without a GPU"


def test_native_calls_release_the_gil():
    """Telemetry samples on a Python thread while a probe runs; that needs the GIL released."""
    ticks = 0
    stop = threading.Event()

    def count():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    thread = threading.Thread(target=count)
    thread.start()
    try:
        time.sleep(0.05)
        before = ticks
        start = time.monotonic()
        native.run_probe("compute.simd.fp32", CPU, warmup=0, samples=10)
        elapsed = time.monotonic() - start
        during = ticks - before
    finally:
        stop.set()
        thread.join()
    assert elapsed > 0.05
    assert during >= 0.3 * elapsed / 0.001 * 0.5, f"only {during} ticks in {elapsed:.2f} s"


def test_the_extension_records_the_torch_it_was_built_against():
    from pygpuperf.measure import native

    if not native.available():
        pytest.skip(f"extension not built: {native.IMPORT_ERROR}")
    assert native.build_torch_version() == torch.__version__ == native.build_info()["torch"]


def test_an_extension_built_for_another_torch_is_not_loaded(monkeypatch):
    from pygpuperf.measure import native

    monkeypatch.setattr(native, "build_torch_version", lambda: "1.13.0+cu117")
    with pytest.warns(UserWarning, match="rebuild"):
        reason = native._load()
    assert reason is not None and "\n" not in reason
    assert "built against torch 1.13.0+cu117" in reason and torch.__version__ in reason
    assert native.REBUILD in reason


def test_device_identity_tells_identical_cards_apart():
    from pygpuperf.facts import host

    assert host.device_identity({"uuid": "GPU-3F2A1B9C-77aa-1234-5678-9abcdef01234"}) == "3f2a1b9c"
    assert host.device_identity({"pci_bus_id": "0000:1a:00.0"}) == "00001a000"
    assert host.device_identity({"type": "cpu"}) == ""
