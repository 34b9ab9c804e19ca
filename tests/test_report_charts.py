"""The roofline and datasheet charts: files written, labels present and readable, None with nothing to draw."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from pathlib import Path

import matplotlib.image
import pytest
from matplotlib.text import Text

from pygpuperf.facts import datasheets
from pygpuperf.report.chart import (ChartPoint, chart_style, draw_roofline_charts, inline_svg, probe_points,
                                    roofline_chart, roofline_figure, roofline_svg)
from pygpuperf.report.datasheet_chart import datasheet_bars, datasheet_svg, draw_datasheet_chart
from pygpuperf.core.results import MachineModel, Measurement, Results, Stats, WorkloadResult
from pygpuperf.analyze.machine_model import build_machine_model

SVG_TEXT = "{http://www.w3.org/2000/svg}text"


def _m(name: str, value: float, *, backend: str = "native-cuda", verified: bool = True, flops: float = 0.0,
       nbytes: float = 0.0, params: dict[str, str] | None = None) -> Measurement:
    """A measurement whose median is `value` in its unit: 1 ms samples of the matching work."""
    operations = 0.0
    if name.startswith("compute."):
        flops = flops or value * 1e12 * 1e-3
    elif name.startswith("latency."):
        operations = 1e-3 * 1e9 / value  # dependent loads in 1 ms at `value` ns each
    else:
        nbytes = nbytes or value * 1e9 * 1e-3
    return Measurement.from_samples(name, sample_seconds=[1e-3, 0.99e-3, 1.01e-3], bytes_read=nbytes,
                                    bytes_written=0.0, flops=flops, operations=operations, backend=backend,
                                    device="cuda:0", verified=verified, params=params)


def _sweep(precision: str, intensities, roof: float, verified: bool = True) -> list[Measurement]:
    """compute.sweep points: min(intensity x 4.5 TB/s, roof), each declaring its FLOP/byte."""
    values = [(f, min(f * 4.5, roof)) for f in intensities]
    return [_m("compute.sweep", v, nbytes=v * 1e9 / f, flops=v * 1e9, verified=verified,
               params={"precision": precision, "flop_per_byte": f"{f:g}", "variant": f"{precision}.{f:g}"})
            for f, v in values]


def h200_results(name: str = "NVIDIA H200", workload: str = "resnet50-train-amp") -> Results:
    ms = [
        _m("memory.hbm.read", 4500.0), _m("memory.hbm.write", 4650.0), _m("memory.l2.read", 9100.0),
        _m("memory.l1.read", 31700.0), _m("memory.shared.read", 33000.0),
        _m("compute.tensor.fp16.acc32", 875.0), _m("compute.tensor.fp16.acc16", 938.0),
        _m("compute.tensor.bf16.acc32", 943.0), _m("compute.tensor.fp8.acc32", 1894.0),
        _m("compute.cuda.fp32", 66.0), _m("compute.cuda.fp64", 33.3),
        _m("compute.library.bf16", 782.0, backend="torch-cuda"), _m("compute.library.fp32", 51.3, backend="torch-cuda"),
        _m("transfer.h2d.pinned", 55.5), _m("latency.l2", 142.0),
    ]
    ms += _sweep("fp32", (0.25, 1, 4, 16, 64, 256), 66.0) + _sweep("fp16x2", (0.25, 1, 4, 16, 64, 256), 124.0)
    ms += _sweep("fp32", (2048,), 500.0, verified=False)  # wrong output: not drawn
    r = Results(meta={"device": {"name": name}}, measurements=ms)
    r.machine_model = build_machine_model("cuda:0", ms)
    r.workloads = [WorkloadResult(workload, "cuda:0", {}, Stats.of([0.044]), 5768.0, 6.2e12, 1.0e11, 140.2, 62.0,
                                  compute_ceiling="library.bf16", memory_ceiling="hbm", attainable_tflops=279.0,
                                  fraction_of_attainable=0.5)]
    return r


def _svg_texts(svg: str) -> list[str]:
    root = ET.fromstring(svg)  # also proves the SVG is well formed
    return ["".join(t.itertext()) for t in root.iter(SVG_TEXT)]


def _inked(png: Path) -> float:
    rgb = matplotlib.image.imread(png)[..., :3]
    return float((rgb.min(axis=2) < 0.9).mean())


# --------------------------------------------------------------------------- roofline


def test_roofline_writes_png_and_svg_and_gives_the_same_drawing_for_a_page(tmp_path: Path):
    r = h200_results()
    paths, page = draw_roofline_charts(r, tmp_path)
    assert paths == [tmp_path / "roofline.png", tmp_path / "roofline.svg"]
    assert page == roofline_svg(r) == inline_svg(paths[1].read_text(encoding="utf-8"), "roofline")
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[0].stat().st_size > 30_000
    assert matplotlib.image.imread(paths[0]).shape[:2] == (780, 1320)  # 11 x 6.5 in at 120 dpi
    assert 0.02 < _inked(paths[0]) < 0.5
    texts = _svg_texts(paths[1].read_text(encoding="utf-8"))
    assert "Measured roofline: NVIDIA H200" in texts and len(texts) > 30


def test_roofline_chart_keeps_its_signature_and_picks_the_format_by_suffix(tmp_path: Path):
    r = h200_results()
    assert roofline_chart(r, tmp_path / "roofline.png") == tmp_path / "roofline.png"
    assert roofline_chart(r, tmp_path / "roofline.svg") == tmp_path / "roofline.svg"
    assert (tmp_path / "roofline.svg").read_text(encoding="utf-8").lstrip().startswith("<?xml")
    assert draw_roofline_charts(r, tmp_path, formats=("svg",), stem="again")[0] == [tmp_path / "again.svg"]


def test_every_roof_is_labelled_and_close_roofs_share_a_label():
    r = h200_results()
    texts = _svg_texts(roofline_svg(r))
    joined = "\n".join(texts)
    for key in r.machine_model.compute:
        family, rest = key.split(".", 1)
        assert any(t.startswith(family) and rest in t for t in texts), f"compute roof {key} has no label"
    for level in r.machine_model.memory:
        assert f"{level} " in joined, f"memory roof {level} has no label"
    # fp16.acc16 (938) and bf16.acc32 (943) cannot be told apart: one label names both.
    assert "tensor bf16.acc32 · fp16.acc16: 938–943 TFLOP/s" in texts
    assert "tensor fp16.acc32: 875 TFLOP/s" in texts
    # l1 and shared memory run 4 % apart: one slope label; hbm (write is its best stream) and l2 alone.
    assert "shared 33,000 · l1 31,700 GB/s" in texts and "hbm 4,650 GB/s" in texts and "l2 9,100 GB/s" in texts
    for level in ("instruction", "library"):
        assert any(level in t for t in texts), f"the legend does not name the {level} level"


def test_points_probes_workloads_and_overlays_are_drawn():
    r = h200_results()
    overlays = [ChartPoint("gemm_4096", 300.0, 650.0, "kernel"), ChartPoint("layernorm", 0.6, 2.1, "kernel"),
                ChartPoint("nothing to place", 0.0, 1.0, "kernel")]
    texts = _svg_texts(roofline_svg(r, overlays))
    assert "compute.sweep fp32 (native-cuda)" in texts and "compute.sweep fp16x2 (native-cuda)" in texts
    assert "resnet50-train-amp: 140 TFLOP/s" in texts
    assert "gemm_4096" in texts and "layernorm" in texts and "kernel (2)" in texts  # the unplaceable one is left out
    assert "nothing to place" not in texts


def test_probe_points_take_verified_sweep_points_at_their_declared_intensity():
    points = probe_points(h200_results())
    assert len(points) == 12  # the unverified point is left out; compute ceilings are not points
    fp32 = sorted((p for p in points if "fp32" in p.label), key=lambda p: p.intensity)
    assert [p.intensity for p in fp32] == [0.25, 1, 4, 16, 64, 256]
    assert fp32[-1].tflops == pytest.approx(66.0) and {p.kind for p in points} == {"probe"}


def test_margin_labels_do_not_overlap_however_close_the_roofs():
    r = h200_results()
    # Twelve roofs 3 % apart in three families: too far apart to share labels, too close to sit at their lines.
    for k, family in zip(range(12), itertools.cycle(("tensor", "cuda", "library"))):
        name = f"compute.{family}.x{k}"
        r.machine_model.compute[name.split(".", 1)[1]] = build_machine_model(
            "cuda:0", [_m(name, 300.0 * 1.03**k)]).compute[name.split(".", 1)[1]]
    with chart_style("roofline"):
        fig = roofline_figure(r)
        fig.canvas.draw()  # places the annotations
        renderer = fig.canvas.get_renderer()
        labels = [t for t in fig.axes[0].texts if (t.get_gid() or "").startswith("roof-label")]
        boxes = [Text.get_window_extent(t, renderer) for t in labels]  # the text alone, not its leader
        figure_box = fig.bbox
    assert len(labels) >= 12
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), "two roof labels overlap"
    assert all(figure_box.x0 <= b.x0 and b.x1 <= figure_box.x1 + 1 and figure_box.y0 <= b.y0 and b.y1 <= figure_box.y1
               for b in boxes), "a roof label runs off the figure"


def test_names_from_the_results_are_drawn_as_written(tmp_path: Path):
    name = "cost $5 and $6 <b>&"
    texts = _svg_texts(roofline_svg(h200_results(workload=name)))
    assert f"{name}: 140 TFLOP/s" in texts  # no mathtext, and escaped in the SVG


def test_roofline_needs_a_roof(tmp_path: Path):
    r = Results(meta={}, measurements=[])
    assert roofline_chart(r, tmp_path / "a.png") is None and not (tmp_path / "a.png").exists()
    r.machine_model = MachineModel("cpu")
    assert draw_roofline_charts(r, tmp_path) == ([], None) and roofline_svg(r) is None
    assert not list(tmp_path.iterdir())
    # One roof of either kind is enough to draw against.
    only_compute = [_m("compute.library.fp32", 1.5, backend="torch-cpu")]
    r.machine_model = build_machine_model("cpu", only_compute)
    assert roofline_chart(r, tmp_path / "c.png") == tmp_path / "c.png"
    r.machine_model = build_machine_model("cpu", [_m("memory.dram.read", 80.0, backend="native-cpu")])
    assert roofline_chart(r, tmp_path / "m.svg") == tmp_path / "m.svg"
    assert "dram 80 GB/s" in _svg_texts((tmp_path / "m.svg").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- datasheet


def test_datasheet_bars_compare_every_ceiling_the_datasheet_lists():
    r = h200_results()
    card = datasheets.datasheet_for("NVIDIA H200")
    bars = datasheet_bars(r)
    keys = {(b.family, b.key) for b in bars}
    assert {("memory", "hbm"), ("compute", "tensor.fp16.acc32"), ("compute", "library.bf16"),
            ("transfer", "h2d.pinned")} <= keys
    assert not any(b.key == "l2" and b.family == "latency" for b in bars)  # latency is never compared
    expected = {(family, key) for table, family in (("compute", "compute"), ("memory", "memory"), ("links", "transfer"))
                for key, c in getattr(r.machine_model, table).items() if datasheets.datasheet_value(card, c.source)}
    assert keys == expected
    assert [b.family for b in bars] == sorted((b.family for b in bars), key=["compute", "memory", "transfer"].index)
    hbm = next(b for b in bars if b.key == "hbm")
    assert hbm.source == "memory.hbm.write" and hbm.measured == pytest.approx(4650.0)
    assert hbm.datasheet == datasheets.datasheet_value(card, "memory.hbm.write")
    assert hbm.percent == pytest.approx(100 * 4650.0 / hbm.datasheet)


def test_datasheet_chart_labels_each_bar_with_its_percentage(tmp_path: Path):
    r = h200_results()
    (png,), page = draw_datasheet_chart(r, tmp_path / "datasheet.png")
    assert png == tmp_path / "datasheet.png" and png.stat().st_size > 20_000 and 0.02 < _inked(png) < 0.6
    assert page == datasheet_svg(r)
    (svg,), page = draw_datasheet_chart(r, tmp_path / "datasheet.svg")
    assert page == inline_svg(svg.read_text(encoding="utf-8"), "datasheet")
    texts = _svg_texts(svg.read_text(encoding="utf-8"))
    for bar in datasheet_bars(r):
        assert f"{bar.percent:.0f}%" in texts and bar.key in texts
    assert "compute (TFLOP/s)" in texts and "memory (GB/s)" in texts and "transfer (GB/s)" in texts
    assert any(t.startswith("Measured vs datasheet: NVIDIA H200") for t in texts)


def test_datasheet_chart_is_none_without_a_known_card(tmp_path: Path):
    assert datasheet_bars(h200_results(name="Imaginary GPU 9000")) == []
    assert draw_datasheet_chart(h200_results(name="Imaginary GPU 9000"), tmp_path / "d.png") == ([], None)
    assert not (tmp_path / "d.png").exists()
    no_model = h200_results()
    no_model.machine_model = None
    assert datasheet_svg(no_model) is None
    only_latency = Results(meta={"device": {"name": "NVIDIA H200"}}, measurements=[_m("latency.l2", 142.0)])
    only_latency.machine_model = build_machine_model("cuda:0", only_latency.measurements)
    assert draw_datasheet_chart(only_latency, tmp_path / "d.svg") == ([], None)
