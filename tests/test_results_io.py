"""The result model and its JSON/CSV/DataFrame forms."""

import json
import math

import pytest

from pygpuperf.core import documents
from pygpuperf.core.results import Finding, Measurement, Results, Stats, WorkloadResult, throughput
from pygpuperf.analyze.machine_model import build_machine_model


def _measurement(name="memory.dram.copy", seconds=(0.010, 0.011, 0.012), backend="native-cpu", verified=True):
    return Measurement.from_samples(name, sample_seconds=list(seconds), bytes_read=1e9, bytes_written=1e9, flops=0,
                                    backend=backend, device="cpu", verified=verified, params={"threads": "2"})


def _results():
    ms = [_measurement(), _measurement(backend="torch-cpu", seconds=(0.02, 0.02, 0.021)),
          Measurement.from_samples("compute.library.fp32", sample_seconds=[0.5, 0.5], bytes_read=0, bytes_written=0,
                                   flops=1e12, backend="torch-cpu", device="cpu", verified=True),
          Measurement.not_run("transfer.h2d.pinned", backend="torch-cpu", device="cpu", status="waived",
                              reason="host and device are the same memory")]
    r = Results(meta={"versions": {"pygpuperf": "0", "torch": "2", "python": "3"}, "device": {"type": "cpu"},
                      "host": {}, "time_utc": "2026-01-01T00:00:00+00:00", "counting": "1 GB = 1e9 B"},
                measurements=ms)
    r.machine_model = build_machine_model("cpu", ms)
    r.findings = [Finding("info", "A sentence.", {"x": 1}, "Do this.")]
    r.workloads = [WorkloadResult("toy", "cpu", {"precision": "fp32"}, Stats.of([0.1, 0.2]), 10.0, 1e9, 1e8, 0.01,
                                  10.0, notes=["estimate"])]
    return r


def test_throughput_uses_read_plus_written_bytes_and_si_units():
    assert throughput("memory.hbm.copy", 0.5, 1e9, 1e9, 0) == pytest.approx(4.0)  # 2e9 B / 0.5 s = 4 GB/s
    assert throughput("compute.tensor.fp16.acc32", 2.0, 0, 0, 4e12) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="family"):
        throughput("bogus.thing", 1, 1, 1, 1)


def test_stats_of_samples():
    m = _measurement(seconds=[0.01] * 9 + [0.02])
    assert m.value == pytest.approx(200.0)  # median of 2e9 B / 0.01 s
    assert m.stats.n == 10 and m.stats.p5 < m.stats.p95 and m.stats.cv > 0
    assert m.unit == "GB/s" and m.usable


def test_machine_model_takes_best_usable_and_ignores_unverified():
    fast_but_wrong = _measurement(seconds=[0.001], verified=False)
    model = build_machine_model("cpu", [_measurement(), fast_but_wrong])
    assert model.memory["dram"].value == pytest.approx(_measurement().value)
    assert model.memory["dram"].backend == "native-cpu"


def test_json_round_trip_validates_and_preserves(tmp_path):
    r = _results()
    paths = documents.write_results(r, tmp_path)
    loaded = documents.load_results(paths["json"])
    assert [m.name for m in loaded.measurements] == [m.name for m in r.measurements]
    assert math.isnan(loaded.measurements[3].value) and loaded.measurements[3].status == "waived"
    assert loaded.machine_model.memory["dram"].value == pytest.approx(r.machine_model.memory["dram"].value)
    assert loaded.workloads[0].step_time.median == pytest.approx(0.15)
    frame = documents.to_frame(loaded)
    assert list(frame["name"]) == [m.name for m in r.measurements]
    csv_text = paths["csv"].read_text()
    assert csv_text.splitlines()[0].startswith("name,backend,device,status,value,unit")
    assert len(csv_text.splitlines()) == 1 + len(r.measurements)


def test_numeric_params_read_into_typed_quantities_and_write_back_unchanged(tmp_path):
    doc = _results().to_dict()
    m = doc["measurements"][0]
    # Quantities among labels, in a probe's order; a size given as text and a fractional count are no quantities.
    m["params"] = {"direction": "host to device", "bytes": 268435456, "copies_per_run": 1, "engine": "copy engine",
                   "flop_per_byte": 0.25, "variant": "1024", "size_bytes": "ignored: in registers",
                   "window_bytes": 4096.5, "workers": 132}
    doc["measurements"][1]["params"] = {"flop_per_byte": 2, "precision": "fp32"}
    text = json.dumps(doc, indent=2)
    (tmp_path / "results.json").write_text(text)
    loaded = documents.load_results(tmp_path / "results.json")
    first, second = loaded.measurements[:2]
    q = first.quantities
    assert (q.bytes, q.copies_per_run, q.workers, q.flop_per_byte) == (268435456, 1, 132, 0.25)
    assert type(q.bytes) is int and type(q.workers) is int and type(q.flop_per_byte) is float
    assert type(second.quantities.flop_per_byte) is int  # an int stays an int: written back as 2, not 2.0
    assert q.size_bytes is None and q.window_bytes is None
    assert first.params == {"direction": "host to device", "engine": "copy engine", "variant": "1024",
                            "size_bytes": "ignored: in registers", "window_bytes": 4096.5}
    assert documents.to_json(loaded) == text  # same keys, same order, same numbers
    documents.Checkpoint(tmp_path).write(loaded)
    assert json.dumps(json.loads((tmp_path / "results.json").read_text()), indent=2) == text


@pytest.mark.parametrize("text, fragment", [
    ("{not json", "not valid JSON"),
    ('{"schema": "pygpuperf/1", "meta": {}, "measurements": [], "machine_model": null, "findings": [],'
     ' "workloads": []}', "meta"),
    ("[" * 100000 + "]" * 100000, "not valid JSON"),
    ('{"schema": "other/9"}', "not a valid pygpuperf/1 results file"),
    ('{"value": NaN}', "not valid JSON"),
])
def test_malformed_or_hostile_files_give_clear_errors(tmp_path, text, fragment):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(documents.ResultsFileError, match=fragment) as info:
        documents.load_results(path)
    assert str(path) in str(info.value)


def test_wrong_types_inside_a_measurement_are_rejected(tmp_path):
    doc = _results().to_dict()
    doc["measurements"][0]["bytes_read"] = "lots"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(documents.ResultsFileError, match="measurements/0/bytes_read"):
        documents.load_results(path)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(documents.ResultsFileError, match="cannot read"):
        documents.load_results(tmp_path / "nope.json")


def test_ridge_points_are_part_of_the_model_and_survive_json(tmp_path):
    r = _results()
    # 2 TFLOP/s of fp32 library math (1e12 FLOP in 0.5 s) against the best dram stream.
    dram = r.machine_model.memory["dram"].value
    assert r.machine_model.ridge_points == {"library.fp32/dram": pytest.approx(2e12 / (dram * 1e9))}
    path = documents.write_results(r, tmp_path)["json"]
    assert documents.load_results(path).machine_model.ridge_points == pytest.approx(r.machine_model.ridge_points)


def test_a_noisy_measurement_sets_a_ceiling_only_where_nothing_quieter_did():
    from pygpuperf.core.results import NOISY_CV, Measurement

    def m(name, seconds, verified=True):
        return Measurement.from_samples(name, sample_seconds=seconds, bytes_read=1e9, bytes_written=0.0, flops=0.0,
                                        backend="native-cpu", device="cpu", verified=verified)

    quiet = m("memory.dram.read", [0.020, 0.0201, 0.0199])  # 50 GB/s, CV well under 1 %
    noisy = m("memory.dram.copy", [0.004, 0.020, 0.012])  # 83 GB/s median, CV over 30 %
    assert noisy.noisy and not quiet.noisy and noisy.stats.cv > NOISY_CV
    model = build_machine_model("cpu", [noisy, quiet])
    assert model.memory["dram"].source == "memory.dram.read"  # the higher figure is noise, not a roof
    assert model.memory["dram"].cv == pytest.approx(quiet.stats.cv)
    alone = build_machine_model("cpu", [noisy])
    assert alone.memory["dram"].source == "memory.dram.copy"  # nothing better was measured


def test_the_document_writer_checks_its_schema_and_keeps_what_fails_it(tmp_path):
    from pygpuperf.core import documents
    from pygpuperf.core.documents import ResultsFileError

    good = [{"severity": "warning", "title": "t", "evidence": {"ms": float("nan")}, "suggestion": ""}]
    path = documents.write_document(tmp_path / "findings.json", good, "findings", "findings.json")
    assert json.loads(path.read_text())[0]["evidence"] == {"ms": None}  # JSON has no NaN
    keyed = [{"severity": "info", "title": "t", "evidence": {True: 1, None: 2, 3: 3, 2.5: 4}, "suggestion": ""}]
    path = documents.write_document(tmp_path / "keys.json", keyed, "findings", "findings.json")
    assert json.loads(path.read_text())[0]["evidence"] == json.loads(json.dumps(keyed))[0]["evidence"]
    bad = [{"severity": "fatal", "title": "t", "evidence": {}, "suggestion": ""}]
    with pytest.raises(ResultsFileError, match="severity|fatal"):
        documents.write_document(tmp_path / "again.json", bad, "findings", "findings.json")
    assert not (tmp_path / "again.json").exists()
    assert json.loads((tmp_path / "again.invalid.json").read_text()) == bad


@pytest.mark.parametrize("name", ["findings", "prediction", "compare", "batch_sweep", "explain", "results"])
def test_every_document_schema_is_versioned_and_describes_its_fields(name):
    from pygpuperf.core import documents

    schema = documents.schema(name)
    assert schema["$id"].startswith("pygpuperf/")
    described = json.dumps(schema).count('"description"')
    assert described >= 3, f"{name}: {described} field descriptions"


def test_a_checkpoint_written_as_measurements_arrive_is_the_full_document_at_every_step(tmp_path):
    full = _results()
    growing = Results(meta=full.meta, measurements=[])
    checkpoint = documents.Checkpoint(tmp_path / "incremental")
    (tmp_path / "incremental").mkdir()
    for m in full.measurements:
        growing.measurements.append(m)
        checkpoint.write(growing)
        documents.write_checkpoint(growing, tmp_path)
        assert json.loads((tmp_path / "incremental" / "results.json").read_text()) == \
            json.loads((tmp_path / "results.json").read_text())
    again = documents.load_results(tmp_path / "incremental" / "results.json")  # valid against the schema
    assert [m.name for m in again.measurements] == [m.name for m in full.measurements]


def test_a_workload_placed_again_without_kernel_bounds_is_placed_by_its_counted_intensity():
    from pygpuperf.analyze import conclude

    r = _results()
    w = r.workloads[0]
    conclude.place_workload(w, r.machine_model, kernel_bound_us=50.0)
    by_bounds = w.attainable_tflops
    assert conclude.KERNEL_MODEL_NOTE in w.notes
    conclude.place_workload(w, r.machine_model)
    assert conclude.KERNEL_MODEL_NOTE not in w.notes and "estimate" in w.notes
    assert w.attainable_tflops != by_bounds
    assert "at its intensity" in conclude.workload_findings(w, r.machine_model)[0].title


def test_a_step_that_outruns_the_librarys_figure_is_held_against_the_units_own():
    """A CPU's oneDNN convolutions can beat the BLAS probe's GEMM rate: the step is then no longer placed
    above its roof, and the finding says why its ceiling changed."""
    from pygpuperf.analyze import conclude
    from pygpuperf.core.results import Ceiling, MachineModel

    model = MachineModel(device="cpu")
    model.compute["library.fp32"] = Ceiling(0.224, "TFLOP/s", "compute.library.fp32", "torch-cpu")
    model.compute["simd.fp32"] = Ceiling(0.531, "TFLOP/s", "compute.simd.fp32", "native-cpu")
    model.memory["dram"] = Ceiling(49.3, "GB/s", "memory.dram.copy", "native-cpu")

    def placed(achieved):
        w = WorkloadResult("cnn", "cpu", {"precision": "fp32"}, Stats.of([0.05]), 320.0, achieved * 0.05e12,
                           achieved * 0.05e12 / 18.7, achieved, 18.7)
        return conclude.place_workload(w, model, kernel_bound_us=29_836.0)

    slow = placed(0.1)
    assert slow.compute_ceiling == "library.fp32" and conclude.LIBRARY_OUTRUN_NOTE not in slow.notes
    fast = placed(0.237)
    assert fast.compute_ceiling == "simd.fp32" and fast.fraction_of_attainable <= 1.0
    assert "placed against simd.fp32" in conclude.workload_findings(fast, model)[0].suggestion
