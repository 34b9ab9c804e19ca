"""report.html: self-contained, escaped, complete; and rendered by headless Chromium without errors."""

from __future__ import annotations

import collections
import io as _io
import os
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest

from pygpuperf.cli import roofline as roofline_cli
from pygpuperf.facts import datasheets
from pygpuperf.report import chart, datasheet_chart, sweep_chart
from pygpuperf.report.chart import ChartPoint, draw_roofline_charts
from pygpuperf.report.datasheet_chart import draw_datasheet_chart
from pygpuperf.report.html import html_report, write_html_report
from pygpuperf.report.sweep_chart import draw_sweep_chart
from pygpuperf.report.table import summary_rows
from pygpuperf.core.results import Finding, Measurement, Results, Stats, WorkloadResult
from pygpuperf.analyze.machine_model import build_machine_model

HOSTILE = "<script>alert(1)</script>"
HOSTILE_IMG = '<img src="https://example.com/x.png" onerror="document.title=1">'
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _m(name: str, value: float, *, backend: str = "native-cuda", verified: bool = True, flops: float = 0.0,
       nbytes: float = 0.0, params: dict[str, str] | None = None) -> Measurement:
    """A measurement whose median is `value` in its unit: 1 ms samples of the matching work."""
    if name.startswith("compute."):
        flops = flops or value * 1e12 * 1e-3
    else:
        nbytes = nbytes or value * 1e9 * 1e-3
    return Measurement.from_samples(name, sample_seconds=[1e-3, 0.99e-3, 1.01e-3], bytes_read=nbytes,
                                    bytes_written=0.0, flops=flops, backend=backend, device="cuda:0",
                                    verified=verified, params=params)


def h200_results() -> Results:
    ms = [
        _m("memory.hbm.read", 4500.0),
        _m("memory.hbm.copy", 4300.0, backend="torch-cuda"),
        _m("memory.l2.read", 9100.0),
        _m("compute.tensor.fp16.acc32", 870.0),
        _m("compute.cuda.fp32", 66.0),
        _m("compute.library.bf16", 780.0, backend="torch-cuda", params={"variant": "8192"}),
        _m("compute.library.bf16", 700.0, backend="torch-cuda", params={"variant": "4096"}),
        _m("compute.tensor.fp8.acc32", 2500.0, verified=False),  # wrong output: no ceiling
        Measurement.not_run("transfer.h2d.pinned", backend="native-cuda", device="cuda:0", status="waived",
                            reason=f"no pinned memory here {HOSTILE}"),
    ]
    sweep = [(f, min(f * 4.5, 64.0)) for f in (0.5, 2, 8, 32, 128)]
    ms += [_m("compute.sweep", v, nbytes=v * 1e9 / f, flops=v * 1e9, params={"precision": "fp32", "flop_per_byte": f"{f:g}"})
           for f, v in sweep]
    meta = {
        "versions": {"pygpuperf": "0.1.0", "torch": "2.14.1", "python": "3.11"},
        "device": {"type": "cuda", "index": 0, "name": "NVIDIA H200", "compute_capability": "9.0",
                   "multiprocessor_count": 132, "memory_bytes": 150109880320, "ecc_enabled": True},
        "host": {"hostname": HOSTILE_IMG, "cpu_cores": 16},
        "time_utc": "2026-11-30T06:15:08+00:00",
        "counting": "1 GB = 1e9 B; 1 TFLOP = 1e12 FLOP",
        "argv": ["pygpuperf.roofline", "--quick"],
        "suite_seconds": 31.0,
    }
    r = Results(meta=meta, measurements=ms)
    r.machine_model = build_machine_model("cuda:0", ms)
    r.findings = [
        Finding("warning", "Clocks were held back by the power cap while 2 probes ran.",
                {"sm_clock_mhz": {"compute.tensor.fp16.acc32": 1830.0}}, "Check cooling and power limits."),
        Finding("error", HOSTILE, {"detail": HOSTILE_IMG}, f"Never run {HOSTILE}"),
        Finding("info", "The sweep's cache knees agree with the reported sizes."),
    ]
    r.workloads = [WorkloadResult(f"resnet50 {HOSTILE}", "cuda:0", {"batch_size": "256", "precision": "fp16-amp"},
                                  Stats.of([0.044, 0.045, 0.0442]), 5768.0, 6.2e12, 1.0e11, 140.2, 62.0,
                                  compute_ceiling="tensor.fp16.acc32", memory_ceiling="hbm",
                                  attainable_tflops=279.0, fraction_of_attainable=0.5, notes=["bytes are an estimate"])]
    return r


class _Page(HTMLParser):
    """Every start tag with its attributes, and the page's text as a browser would show it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    page.close()
    return page


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    return write_html_report(h200_results(), tmp_path_factory.mktemp("report") / "report.html",
                             overlays=[ChartPoint("gemm_4096", 300.0, 650.0, "kernel")])


def test_report_is_self_contained(report: Path):
    page = _parse(report.read_text(encoding="utf-8"))
    tags = [tag for tag, _ in page.tags]
    assert {"script", "link", "iframe", "object", "embed", "img"}.isdisjoint(tags)
    for tag, attrs in page.tags:
        for key in ("src", "href", "xlink:href", "action", "data"):
            value = (attrs.get(key) or "").strip().lower()
            assert not value or value.startswith(("#", "data:")), f"<{tag} {key}={value!r}> points outside the page"
        assert not any(key.startswith("on") for key in attrs), f"<{tag}> carries an event handler"
    assert "@import" not in report.read_text(encoding="utf-8") and "url(http" not in report.read_text(encoding="utf-8")
    csp = [a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]
    assert tags.count("svg") >= 2  # roofline and datasheet charts inline
    ids = [a["id"] for _, a in page.tags if a.get("id")]
    assert len(ids) == len(set(ids)), "the inline charts repeat element ids"


def test_report_escapes_every_string_from_the_results(report: Path):
    text = report.read_text(encoding="utf-8")
    assert "<script" not in text.lower() and "<img" not in text.lower()
    page = _parse(text)
    shown = "".join(page.text)
    # The hostile strings are there, as text: finding title, its evidence and suggestion, a waiver
    # reason, the workload's name, a meta value.
    assert shown.count(HOSTILE) >= 4
    assert HOSTILE_IMG in shown


def test_report_holds_findings_workloads_and_key_numbers(report: Path):
    results = h200_results()
    shown = " ".join(" ".join(_parse(report.read_text(encoding="utf-8")).text).split())
    for finding in results.findings:
        assert finding.title in shown
    assert "Check cooling and power limits." in shown
    assert "NVIDIA H200" in shown and "H200 SXM" in shown  # device and its datasheet card
    assert "4,500" in shown and "9,100" in shown and "870" in shown  # medians as measured
    assert "achieved 140 TFLOP/s" in shown and "of attainable 50%" in shown  # the workload on the roofline
    assert "WRONG" in shown and "waived" in shown and "best of 2 verified: 8192" in shown
    # The flags and percentages of the tables come from summary_rows.
    card = datasheets.datasheet_for("NVIDIA H200")
    hbm = next(r for r in summary_rows(results) if r.name == "memory.hbm.read")
    assert hbm.datasheet == datasheets.datasheet_value(card, "memory.hbm.read")
    assert f"{hbm.percent:.0f}%" in shown
    assert "gemm_4096" in report.read_text(encoding="utf-8")  # the overlay reached the roofline


def test_summary_rows_match_the_terminal_table_rules():
    rows = summary_rows(h200_results())
    assert [r.family for r in rows] == sorted(r.family for r in rows)
    assert not any(r.name == "compute.sweep" for r in rows)  # series, not rows
    by_key = {(r.name, r.backend): r for r in rows}
    assert by_key[("compute.library.bf16", "torch-cuda")].value == pytest.approx(780.0)
    wrong = by_key[("compute.tensor.fp8.acc32", "native-cuda")]
    assert wrong.check == "WRONG" and wrong.percent is None
    waived = by_key[("transfer.h2d.pinned", "native-cuda")]
    assert waived.check == "waived" and waived.p5 is None and HOSTILE in waived.note


def test_report_without_machine_model_or_datasheet_still_renders():
    r = Results(meta={"device": {"name": "Some Unknown Card"}, "counting": ""})
    page = _parse(html_report(r))
    shown = "".join(page.text)
    assert "No roof was measured." in shown and "No findings." in shown and "No workload ran." in shown
    assert not any(tag == "svg" for tag, _ in page.tags)


def test_report_inlines_the_charts_it_is_given_and_draws_the_rest(tmp_path: Path):
    r = h200_results()
    drawn = {"roofline": draw_roofline_charts(r, tmp_path)[1],
             "datasheet": draw_datasheet_chart(r, tmp_path / "datasheet.png")[1],
             "sweep": draw_sweep_chart(r, tmp_path / "sweep.png")[1]}
    assert drawn["roofline"] and drawn["datasheet"] and drawn["sweep"] is None  # h200_results has no sweep
    assert html_report(r, charts=drawn) == html_report(r)  # the chart files' drawings, byte for byte
    given = html_report(r, charts={"roofline": '<svg id="given"></svg>'})
    assert '<svg id="given"></svg>' in given and 'id="roofline-figure_1"' not in given
    assert 'id="datasheet-figure_1"' in given  # a chart not given is drawn for the page


def _counted(builds: collections.Counter, name: str, build: Any) -> Any:
    def counting(*args: Any, **kwargs: Any) -> Any:
        builds[name] += 1
        return build(*args, **kwargs)
    return counting


def test_the_main_command_builds_each_chart_once_and_a_failed_one_leaves_a_finding(tmp_path: Path, monkeypatch):
    builds: collections.Counter = collections.Counter()
    for module, name in ((chart, "roofline_figure"), (sweep_chart, "sweep_figure"),
                         (datasheet_chart, "datasheet_figure")):
        monkeypatch.setattr(module, name, _counted(builds, name, getattr(module, name)))
    r = h200_results()
    written = roofline_cli._write_reports(r, tmp_path / "ok", {})
    assert [p.name for p in written] == ["results.json", "results.csv", "roofline.png", "roofline.svg",
                                         "datasheet.png", "report.html"]
    assert builds == {"roofline_figure": 1, "sweep_figure": 1, "datasheet_figure": 1}
    assert (tmp_path / "ok" / "report.html").read_text(encoding="utf-8") == html_report(h200_results())

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError("no space left on the disk")

    monkeypatch.setattr(roofline_cli, "draw_roofline_charts", broken)
    r = h200_results()
    written = roofline_cli._write_reports(r, tmp_path / "broken", {})
    assert [p.name for p in written] == ["results.json", "results.csv", "datasheet.png", "report.html"]
    failed = [f for f in r.findings if f.title.startswith("Writing")]
    assert len(failed) == 1 and failed[0].severity == "error" and "the roofline chart" in failed[0].title
    assert "no space left on the disk" in (tmp_path / "broken" / "results.json").read_text(encoding="utf-8")
    page = (tmp_path / "broken" / "report.html").read_text(encoding="utf-8")
    assert 'id="roofline-figure_1"' in page and "no space left on the disk" in page  # drawn by the page instead


# --------------------------------------------------------------------------- headless Chromium


def _chromium() -> str:
    found = next((path for path in map(shutil.which, CHROMIUM_NAMES) if path), None)
    if found is None:
        if "CI" in os.environ:
            pytest.fail("CI is set but Chromium is not installed; .ci/run installs the Debian package 'chromium'")
        pytest.skip("Chromium is not installed (apt-get install chromium); CI runs this test")
    return found


def _sync_playwright() -> Any:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if "CI" in os.environ:
            pytest.fail("CI is set but Playwright is not installed; the [test] extra installs it")
        pytest.skip("Playwright is not installed (pip install -e '.[test]'); CI runs this test")
    return sync_playwright


def render(binary: str, page: Path, width: int = 1280, height: int = 2400) -> dict[str, Any]:
    """Load `page` in headless Chromium through Playwright: its text, element counts, chart sizes,
    a PNG screenshot, and every request, console error, page exception and dialog it caused."""
    requests: list[str] = []
    errors: list[str] = []
    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    with _sync_playwright()() as playwright:
        # The system Chromium, never a downloaded one; Playwright adds --headless and the pipe.
        browser = playwright.chromium.launch(
            executable_path=binary, headless=True, timeout=60_000,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--no-default-browser-check", "--disable-extensions"])
        try:
            tab = browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=1).new_page()
            tab.on("request", lambda request: requests.append(request.url))
            # Console errors include the browser's own log entries at level error (Log.entryAdded).
            tab.on("console", lambda message: errors.append(f"console {message.type}: {message.text}")
                   if message.type in ("error", "assert") else None)
            tab.on("pageerror", lambda error: errors.append(f"exception: {error}"))
            tab.on("dialog", on_dialog)
            tab.goto(page.as_uri(), wait_until="load", timeout=60_000)
            state: dict[str, Any] = tab.evaluate("""() => ({
                text: document.body.innerText,
                title: document.title,
                scripts: document.scripts.length,
                charts: [...document.querySelectorAll('figure svg')].map(s => {
                    const r = s.getBoundingClientRect(); return [r.width, r.height]; }),
                tables: document.querySelectorAll('table').length})""")
            state["screenshot"] = tab.screenshot(type="png", timeout=60_000)
        finally:
            browser.close()
    state["requests"] = requests
    state["errors"] = errors
    state["dialogs"] = dialogs
    return state


def test_report_renders_in_headless_chromium(report: Path):
    state = render(_chromium(), report)
    assert state["errors"] == [], "the browser reported errors"
    assert state["dialogs"] == [] and state["scripts"] == 0 and state["title"] == "pygpuperf: NVIDIA H200"
    assert state["requests"] == [report.as_uri()], "the page asked for more than itself"
    text = state["text"]
    for expected in ("NVIDIA H200", "Findings (3)", "Clocks were held back by the power cap", HOSTILE, "4,500",
                     "resnet50", "Measured vs datasheet", "tensor.fp16.acc32"):
        assert expected in text, f"{expected!r} is not on the rendered page"
    assert state["tables"] >= 4
    assert len(state["charts"]) >= 2 and all(w > 500 and h > 200 for w, h in state["charts"]), state["charts"]
    pixels = matplotlib.image.imread(_io.BytesIO(state["screenshot"]), format="png")
    assert pixels.shape[:2] == (2400, 1280)
    rgb = pixels[..., :3]
    inked = (rgb.min(axis=2) < 0.9).mean()  # share of pixels that are not (near) white
    assert 0.01 < inked < 0.6, f"{inked:.3f} of the screenshot is inked: blank or unstyled"
    assert len({tuple(p) for p in (rgb[::7, ::7].reshape(-1, 3) * 255).round().astype(int)}) > 50
