"""The explained step's charts and page: kernel groups and their sums, the kernel roofline's bubbles,
the waterfall's bars in order, and explain.html self-contained, escaped and adding up."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest

from pygpuperf.explain import attribution
from pygpuperf.explain.model import ExplainedStep, Explanation
from pygpuperf.explain.words import label
from pygpuperf.explain.model import Idle, KernelRecord, Timeline, Waterfall
from pygpuperf.core.vocabulary import KernelClass
from pygpuperf.report.chart import roofline_svg
from pygpuperf.report.explain_charts import (IDEAL, MEASURED, MIN_SHARE, explain_charts, explain_roofline,
                                             explain_roofline_svg, kernel_groups, kernel_points,
                                             short_kernel_name, waterfall_bars, waterfall_chart, waterfall_svg)
from pygpuperf.report.explain_html import explain_section_html, write_explain_html, write_explain_report
from pygpuperf.core.results import Ceiling, MachineModel, Results
from pygpuperf.core.vocabulary import Part

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE_KERNEL = '<script>alert("k")</script> void evil<int>(float*) & $x$'
HOSTILE_OP = "aten::<img src=x onerror=alert(1)>"

# (name, op, class, precision, duration us, FLOPs, bytes, bound us)
KERNELS = [
    ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32", "aten::cudnn_convolution", KernelClass.TENSOR_GEMM, "fp16.acc32",
     4000.0, 2.0e12, 4.0e9, 2500.0),
    ("sm90_xmma_fprop_small", "aten::cudnn_convolution", KernelClass.TENSOR_GEMM, "fp16.acc32", 1000.0, 0.4e12, 1.0e9, 500.0),
    ("sm90_xmma_dgrad", "aten::convolution_backward", KernelClass.TENSOR_GEMM, "fp16.acc32", 6000.0, 4.0e12, 8.0e9, 5000.0),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<__half, float>(float*)", "aten::cudnn_batch_norm", KernelClass.MEMORY_BOUND, "fp16",
     3000.0, 1.0e10, 8.0e9, 2000.0),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::relu>(int)", "aten::relu_", KernelClass.MEMORY_BOUND, "fp16",
     1500.0, 1.0e9, 4.0e9, 1000.0),
    ("void at::native::elementwise_kernel<128, 4>(int)", "aten::relu_", KernelClass.MEMORY_BOUND, "fp16",
     500.0, 0.5e9, 2.0e9, 500.0),
    ("nchwToNhwcKernel", "aten::contiguous", KernelClass.LAYOUT, "", 800.0, 0.0, 2.0e9, 500.0),
    (HOSTILE_KERNEL, HOSTILE_OP, KernelClass.MEMORY_BOUND, "fp32", 700.0, 1.0e8, 2.8e9, 700.0),
    ("Memcpy DtoD (Device -> Device)", "", KernelClass.MEMCPY, "", 100.0, 0.0, 4.0e8, 100.0),
    ("fast_reduce_kernel", "aten::sum", KernelClass.MEMORY_BOUND, "fp16", 200.0, 1.0e8, 1.2e9, 300.0),  # beats its bound
    ("tiny_scalar_kernel", "aten::mul", KernelClass.MEMORY_BOUND, "fp32", 2.0, 2.0, 24.0, 0.01),  # far under MIN_SHARE
]
IDLE = Idle(host_bound_us=2000.0, launch_gap_us=500.0, sync_us=0.0)


def _records() -> list[KernelRecord]:
    records, start = [], 0.0
    for name, op, cls, precision, us, flops, nbytes, bound in KERNELS:
        records.append(KernelRecord(name, start, us, op=op, kernel_class=cls, precision=precision, flops=flops,
                                    bytes=nbytes, bound_us=bound, ceiling="memory:hbm"))
        start += us
    return records


def explanation() -> Explanation:
    """One step of the kernels above, back to back on one stream, with idle time, and a waterfall
    whose ideal (the bounds, capped at each duration) and parts add up to the wall time."""
    records = _records()
    busy = sum(r.duration_us for r in records)
    line = Timeline(wall_us=busy + IDLE.total_us, busy_us=busy, idle=IDLE)
    parts = dict.fromkeys(attribution.WATERFALL_PARTS, 0.0)
    ideal = 0.0
    for r in records:
        if r.kernel_class == KernelClass.LAYOUT:
            parts[Part.LAYOUT] += r.duration_us
            continue
        share = min(r.bound_us, r.duration_us)
        ideal += share
        part = Part.MEMCPY if r.kernel_class == KernelClass.MEMCPY else (
            Part.TENSOR if r.kernel_class == KernelClass.TENSOR_GEMM else Part.MEMORY)
        parts[part] += r.duration_us - share
    parts[Part.IDLE_HOST] = IDLE.host_bound_us
    parts[Part.IDLE_LAUNCH] = IDLE.launch_gap_us
    waterfall = Waterfall(ideal_us=ideal, parts=parts, measured_us=line.wall_us, unexplained_us=0.0,
                          coverage=1.0)
    step = ExplainedStep(1, records, line, waterfall, attribution.self_check(records))
    other = ExplainedStep(0, records, Timeline(line.wall_us * 1.1, busy, IDLE), waterfall, [])
    return Explanation("cuda:0", [other, step], step, {"aten::_amp_update_scale_": 1.5})


def model() -> MachineModel:
    m = MachineModel(device="cuda:0")
    m.compute["tensor.fp16.acc32"] = Ceiling(800.0, "TFLOP/s", "compute.tensor.fp16.acc32", "native-cuda")
    m.compute["cuda.fp32"] = Ceiling(60.0, "TFLOP/s", "compute.cuda.fp32", "native-cuda")
    m.memory["hbm"] = Ceiling(4000.0, "GB/s", "memory.hbm.read", "native-cuda")
    m.memory["l2"] = Ceiling(9000.0, "GB/s", "memory.l2.read", "native-cuda")
    return m


def results() -> Results:
    return Results(meta={"device": {"name": "Test GPU H1"}}, machine_model=model())


def _svg_root(text: str) -> ET.Element:
    return ET.fromstring(text)  # also proves the SVG is well formed


def _texts(root: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in root.iter() if t.tag in (f"{SVG}text", "text")]


def _ids(root: ET.Element, prefix: str) -> list[str]:
    return [e.get("id") for e in root.iter() if (e.get("id") or "").startswith(prefix)]


def _png_ok(path: Path, min_bytes: int) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > min_bytes
    rgb = matplotlib.image.imread(path)[..., :3]
    assert 0.01 < float((rgb.min(axis=2) < 0.9).mean()) < 0.6  # drawn on, not blank nor flooded


# --------------------------------------------------------------------------- kernel groups and points


def test_kernel_groups_sum_time_flops_and_bytes_per_op_class_and_precision():
    e = explanation()
    groups = kernel_groups(e)
    # The two forward convolutions are one group, as are the two relu kernels.
    assert len(groups) == len(KERNELS) - 2
    assert [g.time_us for g in groups] == sorted((g.time_us for g in groups), reverse=True)
    assert sum(g.time_us for g in groups) == pytest.approx(sum(k[4] for k in KERNELS))
    assert sum(g.flops for g in groups) == pytest.approx(sum(k[5] for k in KERNELS))
    assert sum(g.bytes for g in groups) == pytest.approx(sum(k[6] for k in KERNELS))
    assert sum(g.share for g in groups) == pytest.approx(1.0)
    forward = next(g for g in groups if g.op == "aten::cudnn_convolution")
    assert (forward.launches, forward.time_us, forward.label) == (2, 5000.0, "cudnn_convolution fp16.acc32")
    assert forward.names[0] == KERNELS[0][0]  # most time first
    assert forward.intensity == pytest.approx(2.4e12 / 5.0e9)
    assert forward.tflops == pytest.approx(2.4e12 / 5000e-6 / 1e12)
    assert forward.gbs == pytest.approx(5.0e9 / 5000e-6 / 1e9)
    assert forward.efficiency == pytest.approx(3000.0 / 5000.0)
    relu = next(g for g in groups if g.op == "aten::relu_")
    assert relu.names == (KERNELS[4][0], KERNELS[5][0]) and relu.time_us == 2000.0
    # A kernel no op launched is grouped by its name, shortened.
    copy = next(g for g in groups if g.kernel_class == KernelClass.MEMCPY)
    assert copy.op == "" and copy.label == "Memcpy DtoD"
    assert next(g for g in groups if g.op == "aten::sum").efficiency == pytest.approx(1.5)
    by_name = kernel_groups(e, by="name")
    assert len(by_name) == len(KERNELS) and by_name[0].label == "sm90_xmma_dgrad fp16.acc32"
    with pytest.raises(ValueError):
        kernel_groups(e, by="module")


def test_short_kernel_names_drop_namespaces_templates_and_arguments():
    assert short_kernel_name(KERNELS[4][0]) == "vectorized_elementwise_kernel"
    assert short_kernel_name("void cudnn::bn_fw_tr_1C11_kernel_NCHW<__half, float>(float*)") == \
        "bn_fw_tr_1C11_kernel_NCHW"
    foreach = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
               "(anonymous namespace)::TensorListMetadata<2>, float>(float*)")
    assert short_kernel_name(foreach) == "multi_tensor_apply_kernel"
    assert short_kernel_name("Memset (Device)") == "Memset"
    assert short_kernel_name("x" * 80, width=20) == "x" * 19 + "…"


def test_an_empty_step_still_charts_and_renders(tmp_path: Path):
    line = Timeline(wall_us=1000.0, busy_us=0.0, idle=Idle(host_bound_us=600.0))
    parts = dict.fromkeys(attribution.WATERFALL_PARTS, 0.0)
    parts[Part.IDLE_HOST] = 600.0
    step = ExplainedStep(0, [], line, Waterfall(0.0, parts, 1000.0, 400.0, 0.6), [])
    e = Explanation("cpu", [step], step)
    assert kernel_groups(e) == [] and kernel_points(e) == []
    assert [b.name for b in waterfall_bars(e)] == [IDEAL, Part.IDLE_HOST, Part.UNEXPLAINED, MEASURED]
    names = [p.name for p in write_explain_report(e, tmp_path, model()).paths]
    assert names == ["waterfall.png", "waterfall.svg", "kernel_roofline.png", "kernel_roofline.svg", "explain.html"]
    text = "".join(_parse((tmp_path / "explain.html").read_text(encoding="utf-8")).text)
    assert "No op ran in the step." in text and "No op ran faster than its roofline bound" in text  # a CPU step


def test_kernel_points_are_one_per_group_and_overlay_the_plain_roofline():
    e = explanation()
    points = kernel_points(e, top=None)
    groups = kernel_groups(e)
    assert len(points) == len(groups)
    for p, g in zip(points, groups):
        assert p.kind == g.kernel_class and p.label.startswith(g.label)
        assert f"({100 * g.share:.1f}%)" in p.label
        assert p.intensity == pytest.approx(g.intensity) and p.tflops == pytest.approx(g.tflops)
    assert [p.drawable for p in points] == [g.flops > 0 and g.bytes > 0 for g in groups]  # layout, copy: no FLOPs
    assert len(kernel_points(e, top=3)) == 3
    # The chart's overlay hook takes them as they are: named beside their markers.
    svg = roofline_svg(results(), kernel_points(e, top=4))
    texts = _texts(_svg_root(svg))
    assert any(t.startswith("convolution_backward fp16.acc32 (") for t in texts)


# --------------------------------------------------------------------------- kernel roofline


def test_kernel_roofline_draws_one_bubble_per_group_and_names_the_largest(tmp_path: Path):
    e = explanation()
    groups = kernel_groups(e)
    drawn = [g for g in groups if g.drawable and g.share >= MIN_SHARE]
    assert len(drawn) == 6  # no layout, no memcpy (no FLOPs), no tiny scalar kernel
    png = explain_roofline(results(), e, tmp_path / "kernels.png")
    svg = explain_roofline(results(), e, tmp_path / "kernels.svg")
    assert (png, svg) == (tmp_path / "kernels.png", tmp_path / "kernels.svg")
    _png_ok(png, 30_000)
    root = _svg_root(svg.read_text(encoding="utf-8"))
    assert len(_ids(root, "kernel-bubble-")) == len(drawn)
    texts = _texts(root)
    assert "Kernels on the measured roofline: Test GPU H1" in texts
    for g in drawn:  # six groups: all named
        assert f"{g.label} {100 * g.share:.0f}%" in texts
    assert any(t.startswith("tensor-core GEMM/conv: 2 groups") for t in texts)
    assert any(t.startswith("not drawn, no FLOPs or bytes counted: 2 groups") for t in texts)
    assert any(t.startswith("not drawn, under 0.5% each: 1 groups") for t in texts)
    assert not any("_kernel group" in t for t in texts)  # the stand-ins are gone
    hostile = next(g for g in drawn if g.op == HOSTILE_OP)
    assert f"{hostile.label} {100 * hostile.share:.0f}%" in texts  # "$" drawn as written, not as math
    # Bubble area follows the time share: the largest group's marker is the widest.
    sizes = {}
    for n in range(len(drawn)):
        group = next(el for el in root.iter() if el.get("id") == f"kernel-bubble-{n}")
        path = next(el for el in group.iter() if el.tag == f"{SVG}path" and el.get("d"))
        xs = [float(v) for v in re.findall(r"(-?\d+(?:\.\d+)?) -?\d+(?:\.\d+)?", path.get("d"))]
        sizes[n] = max(xs) - min(xs)
    assert sizes[0] == max(sizes.values()) and sizes[0] > 2 * sizes[len(drawn) - 1]


def test_kernel_roofline_takes_a_machine_model_and_needs_a_roof(tmp_path: Path):
    e = explanation()
    assert explain_roofline(model(), e, tmp_path / "k.svg") == tmp_path / "k.svg"
    assert "Kernels on the measured roofline: cuda:0" in _texts(_svg_root((tmp_path / "k.svg").read_text()))
    bare = Results(meta={"device": {"name": "x"}})
    assert explain_roofline(bare, e, tmp_path / "none.png") is None and not (tmp_path / "none.png").exists()
    assert explain_roofline_svg(bare, e) is None


# --------------------------------------------------------------------------- waterfall


def test_waterfall_bars_stack_from_the_ideal_to_the_measured_step():
    e = explanation()
    w = e.median.waterfall
    bars = waterfall_bars(e)
    nonzero = [name for name, us in w.parts.items() if us != 0]
    assert [b.name for b in bars] == [IDEAL, *nonzero, Part.UNEXPLAINED, MEASURED]
    for before, bar in zip(bars[:-2], bars[1:-1]):
        assert bar.start_us == pytest.approx(before.end_us)  # each part starts where the last ended
    assert bars[-2].end_us == pytest.approx(w.measured_us) and bars[-1].length_us == w.measured_us


def test_waterfall_chart_writes_png_and_svg_with_parts_in_order(tmp_path: Path):
    e = explanation()
    w = e.median.waterfall
    assert waterfall_chart(e, tmp_path / "w.png") == tmp_path / "w.png"
    _png_ok(tmp_path / "w.png", 15_000)
    path = waterfall_chart(e, tmp_path / "w.svg", device="Test GPU H1")
    root = _svg_root(path.read_text(encoding="utf-8"))
    texts = _texts(root)
    rows = [IDEAL, *(label(name) for name, us in w.parts.items() if us != 0), label(Part.UNEXPLAINED),
            MEASURED]
    assert [t for t in texts if t in rows] == rows
    assert label(Part.IDLE_SYNC) not in texts  # zero: no row, named in the note instead
    assert any(t.startswith("no time in:") and label(Part.IDLE_SYNC) in t for t in texts)
    assert f"{w.ideal_us / 1e3:,.2f} ms ({100 * w.ideal_us / w.measured_us:.1f}%)" in texts
    host = w.parts[Part.IDLE_HOST]
    assert f"+{host / 1e3:,.2f} ms ({100 * host / w.measured_us:.1f}%)" in texts
    assert f"{w.measured_us / 1e3:,.2f} ms" in texts
    assert any("Test GPU H1" in t and "coverage 100.0%" in t for t in texts)
    assert len(_ids(root, "waterfall-bar-")) == len(rows)


def test_explain_charts_write_both_charts_in_both_formats(tmp_path: Path):
    e = explanation()
    names = [p.name for p in explain_charts(e, tmp_path / "out", results())]
    assert names == ["waterfall.png", "waterfall.svg", "kernel_roofline.png", "kernel_roofline.svg"]
    assert [p.name for p in explain_charts(e, tmp_path / "bare")] == ["waterfall.png", "waterfall.svg"]


# --------------------------------------------------------------------------- explain.html


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, Any]]] = []
        self.text: list[str] = []
        self._cells: list[str] | None = None
        self._cell = False
        self.rows: list[list[str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "tr":
            self._cells = []
        elif tag in ("td", "th") and self._cells is not None:
            self._cells.append("")
            self._cell = True

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th"):
            self._cell = False
        elif tag == "tr" and self._cells is not None:
            self.rows.append(self._cells)
            self._cells = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell and self._cells:
            self._cells[-1] += data


def _parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    page.close()
    return page


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    path = write_explain_html(explanation(), results(), tmp_path_factory.mktemp("explain") / "explain.html")
    return path.read_text(encoding="utf-8")


def test_page_is_self_contained_with_both_charts(page: str):
    parsed = _parse(page)
    tags = [tag for tag, _ in parsed.tags]
    assert {"script", "link", "iframe", "object", "embed", "img"}.isdisjoint(tags)
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert not re.search(r"https?://", page)  # no address at all, not even SVG namespaces
    for tag, attrs in parsed.tags:
        for key in ("src", "href", "xlink:href", "action", "data"):
            value = (attrs.get(key) or "").strip().lower()
            assert not value or value.startswith("#"), f"<{tag} {key}={value!r}> points outside the page"
        assert not any(key.startswith("on") for key in attrs), f"<{tag}> carries an event handler"
    csp = [a["content"] for t, a in parsed.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]
    assert tags.count("svg") == 2  # waterfall and kernel roofline, inline
    ids = [a["id"] for _, a in parsed.tags if a.get("id")]
    assert len(ids) == len(set(ids)), "the inline charts repeat element ids"
    assert len([i for i in ids if i.startswith("kernel-bubble-")]) == 6


def test_page_escapes_hostile_kernel_and_op_names(page: str):
    parsed = _parse(page)
    shown = "".join(parsed.text)
    assert HOSTILE_OP.removeprefix("aten::") in shown  # the group's label, as text
    assert short_kernel_name(HOSTILE_KERNEL, 40) in shown
    titles = [a.get("title") for _, a in parsed.tags if a.get("title")]
    assert any(HOSTILE_KERNEL in t for t in titles)  # the full name, in an attribute, intact
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


def test_page_numbers_add_up_to_the_explanation(page: str):
    e = explanation()
    w = e.median.waterfall
    parsed = _parse(page)
    rows = {r[0]: r[1:] for r in parsed.rows if r}
    assert rows[IDEAL][0] == f"{w.ideal_us / 1e3:,.2f}"
    assert rows[MEASURED] == [f"{w.measured_us / 1e3:,.2f}", "100.0%"]
    listed = [IDEAL, *map(label, w.parts), label(Part.UNEXPLAINED)]
    assert sum(float(rows[name][0].replace(",", "")) for name in listed) == pytest.approx(w.measured_us / 1e3,
                                                                                      abs=0.01 * len(listed))
    # The group table: one row per group (fewer than 25), ranked by time, times summing to the kernel time.
    groups = kernel_groups(e)
    table = [r for r in parsed.rows if r and r[0].isdigit()]
    assert [int(r[0]) for r in table] == list(range(1, len(groups) + 1))
    assert [r[2] for r in table] == [label(g.kernel_class) for g in groups]
    assert sum(float(r[5].replace(",", "")) for r in table) == pytest.approx(
        sum(k[4] for k in KERNELS) / 1e3, abs=0.005 * len(table))
    conv = next(r for r in table if r[1].startswith("cudnn_convolution fp16.acc32"))
    assert conv[3:] == ["fp16.acc32", "2", "5.00", f"{100 * 5000 / sum(k[4] for k in KERNELS):.1f}%", "480", "1,000",
                        "3.00", "60%"]
    total = next(r for r in parsed.rows if r and len(r) > 1 and r[1].startswith("top "))
    assert total[1] == f"top {len(groups)} of {len(groups)} groups" and total[6] == "100.0%"
    shown = "".join(parsed.text)
    assert "20% (miscounted)" not in shown and "150% (miscounted)" in shown  # aten::sum beat its bound
    assert "fast_reduce_kernel" in shown and "1 kernel(s) faster than their bound" in shown
    assert "#1, the median of 2 profiled step(s)" in shown
    assert "aten::_amp_update_scale_: 1.5 us" in shown


def test_section_without_a_machine_model_and_with_fewer_rows():
    e = explanation()
    section = explain_section_html(e, None, top=3)
    parsed = _parse(section)
    assert section.startswith("<section id=\"explain\">") and "<html" not in section
    assert [t for t, _ in parsed.tags].count("svg") == 1  # the waterfall only
    assert "No machine model was given" in "".join(parsed.text)
    assert len([r for r in parsed.rows if r and r[0].isdigit()]) == 3
    assert "top 3 of 9 groups" in "".join(parsed.text)
    assert waterfall_svg(e).startswith("<svg") and "xmlns" not in waterfall_svg(e)


def test_write_explain_report_writes_charts_and_page(tmp_path: Path):
    paths = write_explain_report(explanation(), tmp_path, model()).paths
    assert [p.name for p in paths] == ["waterfall.png", "waterfall.svg", "kernel_roofline.png",
                                       "kernel_roofline.svg", "explain.html"]
    assert all(p.stat().st_size > 5_000 for p in paths)
    assert "<h1>cuda:0: where the step's time goes</h1>" in (tmp_path / "explain.html").read_text(encoding="utf-8")
