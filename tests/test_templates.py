"""The HTML pages render from documents through the package's Jinja2 templates: every string a
document carries comes out escaped, the templates ship inside the package, each page names the
document it derives from, and no chart goes through a temporary file."""

from __future__ import annotations

import dataclasses
import fnmatch
import inspect
import json
import sys
import tempfile
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path

import pytest

from pygpuperf.core.results import Ceiling, Finding, LinkFit, Measurement, Results, Stats, WorkloadResult
from pygpuperf.diagnose import Diagnosis
from pygpuperf.explain import attribution
from pygpuperf.explain.model import ExplainedStep, Explanation, Idle, KernelRecord, Timeline, Waterfall
from pygpuperf.core.vocabulary import KernelClass
from pygpuperf.report import templating
from pygpuperf.report.explain_html import explain_html, explain_section_html
from pygpuperf.report.html import html_report
from pygpuperf.report.predict_report import prediction_html, write_prediction_report
from pygpuperf.core.vocabulary import Part

sys.path.insert(0, str(Path(__file__).parent))
from test_html_report import h200_results  # noqa: E402
from test_hierarchy import gpu_sweeps, latency_points, results_with  # noqa: E402
from test_predict import _model, _profile, _with_throughput  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("report.html.j2", "explain.html.j2", "prediction.html.j2")
TAGGED: list[str] = []
NESTED = '<script>alert("nested")</script>'  # inside an object of the evidence: shown as its JSON


def hostile(field: str) -> str:
    """A string that would run script or load an image if it reached a page unescaped; `field` tags it."""
    text = f'<script>alert("{field}")</script><img src=x onerror=\'{field}\'> & [/] {field}'
    TAGGED.append(text)
    return text


@dataclasses.dataclass
class LaterFinding(Finding):
    """A finding with a field added after the templates were written."""

    cause: str = ""


class _Page(HTMLParser):
    """The page's text and attribute values, as a browser reads them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.text: list[str] = []
        self.attrs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += [v for _, v in attrs if v]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _read(text: str) -> tuple[str, _Page]:
    page = _Page()
    page.feed(text)
    page.close()
    return "".join(page.text), page


def _assert_escaped(text: str, strings: list[str]) -> None:
    """No hostile markup became a tag; each hostile string is on the page whole, as text or an attribute."""
    assert "<script" not in text.lower() and "<img" not in text.lower()
    shown, page = _read(text)
    assert {"script", "img"}.isdisjoint(page.tags)
    missing = [s for s in strings if s not in shown and s not in page.attrs]
    assert not missing, f"never reached the page (or not as text): {missing}"


# --------------------------------------------------------------------------- documents with hostile strings


def hostile_results() -> Results:
    r = h200_results()
    r.meta["device"]["name"] = hostile("device.name")
    r.meta["host"]["hostname"] = hostile("host.hostname")
    r.meta["versions"]["pygpuperf"] = hostile("versions.pygpuperf")
    r.meta[hostile("meta.section")] = {hostile("meta.key"): hostile("meta.value")}
    r.meta["argv"] = ["pygpuperf.roofline", hostile("meta.argv")]
    r.meta["time_utc"] = hostile("meta.time_utc")
    r.meta["counting"] = hostile("meta.counting")
    r.measurements.append(Measurement.not_run("transfer.d2h.pinned", backend=hostile("measurement.backend"),
                                              device="cuda:0", status="waived", reason=hostile("measurement.reason")))
    r.findings = [LaterFinding(hostile("finding.severity"), hostile("finding.title"),
                               {hostile("evidence.key"): hostile("evidence.value"),
                                "nested": {"list": [NESTED]}},
                               hostile("finding.suggestion"), cause=hostile("finding.later_field"))]
    r.workloads = [WorkloadResult(hostile("workload.name"), hostile("workload.device"),
                                  {hostile("workload.param"): hostile("workload.value")},
                                  Stats.of([0.01, 0.011, 0.012]), 100.0, 1e12, 1e10, 100.0, 100.0,
                                  compute_ceiling=hostile("workload.compute_ceiling"),
                                  memory_ceiling=hostile("workload.memory_ceiling"), notes=[hostile("workload.note")])]
    model = r.machine_model
    model.compute["cuda." + hostile("ceiling.key")] = Ceiling(50.0, hostile("ceiling.unit"),
                                                              hostile("ceiling.source"), hostile("ceiling.backend"))
    model.link_fits[hostile("link.key")] = LinkFit("transfer.h2d.pinned", hostile("link.backend"), 50.0, 2.0,
                                                   1e5, 12, 0.02, 1e3, 1e9)
    return r


def hostile_explanation() -> tuple[Explanation, Diagnosis]:
    kernel = KernelRecord(hostile("kernel.name"), 0.0, 100.0, op=hostile("kernel.op"), kernel_class=KernelClass.MEMORY_BOUND,
                          precision=hostile("kernel.precision"), flops=1e6, bytes=1e9, bound_us=300.0,
                          ceiling=hostile("kernel.ceiling"))
    line = Timeline(wall_us=200.0, busy_us=100.0, idle=Idle(host_bound_us=100.0))
    parts = dict.fromkeys(attribution.WATERFALL_PARTS, 0.0)
    parts[Part.IDLE_HOST] = 100.0
    step = ExplainedStep(0, [kernel], line, Waterfall(100.0, parts, 200.0, 0.0, 1.0), attribution.self_check([kernel]))
    e = Explanation(hostile("explanation.device"), [step], step, {hostile("unknown_op"): 3.0})
    found = (LaterFinding("warning", hostile("explain.finding.title"), {"k": hostile("explain.evidence")},
                          cause=hostile("explain.finding.later_field")),)
    return e, Diagnosis(None, found)


def hostile_predictions() -> list[dict]:
    """prediction.json's documents, after a write: non-finite figures are null."""
    change = {"category": hostile("prediction.category"), "source_ms": 4.0, "target_ms": 2.0, "delta_ms": -2.0}
    doc = {"source": hostile("prediction.source"), "target": hostile("prediction.target"), "source_step_ms": 10.0,
           "step_ms": 8.0, "samples_per_step": 64, "source_samples_per_step": 64, "throughput_per_s": 8000.0,
           "source_throughput_per_s": 6400.0, "ratio_to_source": 1.25, "waterfall": [change], "carried_ms": 0.0,
           "notes": [hostile("prediction.note")], "confidence": hostile("prediction.confidence"),
           "eur_per_hour": 2.0, "samples_per_eur": None}
    return [doc, {**doc, "target": hostile("prediction.second_target"), "throughput_per_s": None,
                  "ratio_to_source": None, "notes": []}]


def test_every_document_string_on_report_html_comes_out_escaped():
    TAGGED.clear()
    results, (explanation, diagnosis), predictions = hostile_results(), hostile_explanation(), hostile_predictions()
    strings = [s for s in TAGGED if "explanation.device" not in s and "explain.finding" not in s
               and "explain.evidence" not in s]  # the report names the run's device; explain findings join the run's
    text = html_report(results, explanation=explanation, predictions=predictions, diagnosis=diagnosis)
    _assert_escaped(text, strings)
    assert json.dumps({"list": [NESTED]}) in _read(text)[0]


def test_every_document_string_on_explain_html_comes_out_escaped():
    TAGGED.clear()
    explanation, diagnosis = hostile_explanation()
    _assert_escaped(explain_html(explanation, None, diagnosis=diagnosis), list(TAGGED))


def test_every_document_string_on_prediction_html_comes_out_escaped():
    TAGGED.clear()
    predictions = hostile_predictions()
    text = prediction_html(predictions)
    _assert_escaped(text, [s for s in TAGGED if "second_target" not in s] + [predictions[1]["target"]])
    shown = " ".join(_read(text)[0].split())
    assert "8,000 samples/s (1.25x)" in shown and "- samples/s (-x)" in shown  # null figures read as "-"


def test_a_new_finding_field_and_its_evidence_show_without_a_template_change():
    r = h200_results()
    r.findings = [LaterFinding("info", "A finding from later.", {"ratio": 0.5, "sizes_bytes": 2 ** 20},
                               cause="the cause, a field the templates do not name")]
    shown = " ".join(" ".join(_read(html_report(r))[1].text).split())
    assert "cause the cause, a field the templates do not name" in shown
    assert "ratio 0.5" in shown and "sizes_bytes 1 MiB" in shown  # evidence as a table, values formatted


# --------------------------------------------------------------------------- sources and sections


def test_each_page_names_the_document_it_derives_from():
    results, explanation = h200_results(), _explanation()
    predictions = _predictions()
    report = " ".join(_read(html_report(results, explanation=explanation, predictions=predictions))[0].split())
    assert ("Every figure on this page is derived from the run's results.json, the explained step's from "
            "explain/explain.json, the predictions' from explain/prediction.json.") in report
    assert "Every figure of this section is derived from explain/explain.json." in report
    assert "Every figure of this section is derived from explain/prediction.json." in report
    plain = " ".join(_read(html_report(results))[0].split())
    assert "Every figure on this page is derived from the run's results.json." in plain
    assert "Explained step" not in plain and "Predicted on other cards" not in plain
    assert "derived from the step's explain.json" in _read(explain_html(explanation, results))[0]
    assert "derived from prediction.json" in _read(prediction_html(predictions))[0]


def test_report_renders_its_sections_from_documents_not_html():
    parameters = inspect.signature(html_report).parameters
    assert "sections" not in parameters and {"explanation", "predictions"} <= set(parameters)
    results, explanation = h200_results(), _explanation()
    # prediction.json as written and read back: the report renders from those documents.
    predictions = json.loads(json.dumps(_predictions()))
    text = html_report(results, explanation=explanation, predictions=predictions)
    section = explain_section_html(explanation, results, source="explain/explain.json")
    assert section in text  # the same template, from the same explanation
    assert text.index('id="roofline"') < text.index('<section id="explain">') < text.index('<section id="prediction">')
    assert text.index('<section id="prediction">') < text.index('id="datasheet"')


def _explanation() -> Explanation:
    return _with_throughput(_profile(), batch=128)


def _predictions() -> list[dict]:
    from pygpuperf.predict import predict, prediction_documents

    profile = _explanation()
    return prediction_documents([predict(profile, _model(), _model(hbm=2000.0), target_name="faster")], {})


# --------------------------------------------------------------------------- templates and charts


def test_templates_are_found_through_the_package():
    env = templating.environment()
    names = env.list_templates()
    for page in PAGES:
        assert page in names
    files = resources.files("pygpuperf").joinpath(templating.TEMPLATES)
    for name in names:
        # What an installed wheel holds: package data, read through importlib.resources.
        assert files.joinpath(name).read_text(encoding="utf-8") == env.loader.get_source(env, name)[0]
    assert type(env.loader).__name__ == "PackageLoader" and env.loader.package_name == "pygpuperf"


def test_the_wheel_and_sdist_take_the_templates():
    """scikit-build-core copies the whole package folder into the wheel; nothing may exclude the templates."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    build = config["tool"]["scikit-build"]
    assert "pygpuperf" in build["wheel"]["packages"]
    assert "jinja2" in " ".join(config["project"]["dependencies"]).lower()
    template = f"pygpuperf/{templating.TEMPLATES}/report.html.j2"
    excluded = build.get("wheel", {}).get("exclude", []) + build.get("sdist", {}).get("exclude", [])
    assert not any(fnmatch.fnmatch(template, p) or template.startswith(p.rstrip("/") + "/") for p in excluded)
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").split() if (ROOT / ".gitignore").exists() else []
    assert not any(fnmatch.fnmatch(Path(template).name, p) for p in ignored)


def test_autoescape_is_on_and_only_matplotlib_svg_is_markup():
    env = templating.environment()
    assert env.from_string("{{ x }}").render(x="<b>&") == "&lt;b&gt;&amp;"
    assert env.get_template("report.html.j2").environment.autoescape("report.html.j2") is True
    with pytest.raises(ValueError):
        templating.svg("<script>alert(1)</script>")
    assert str(templating.svg("<svg></svg>")) == "<svg></svg>"


def test_filters_format_once_for_every_page():
    assert templating.number(4500.0) == "4,500" and templating.number(None) == "-"
    assert templating.ms(12345.0) == "12.35" and templating.ms(float("nan")) == "-"
    assert templating.share(1.0, 4.0) == "25.0%" and templating.share(1.0, 0.0) == "-"
    assert templating.percent(0.5) == "50%" and templating.percent(98.4, 0, 1) == "98%"
    assert templating.signed(2.0) == "+2.00" and templating.signed(-2.0) == "-2.00"
    assert templating.fact(150109880320, "memory_bytes") == "140 GiB" and templating.fact(True) == "yes"


def test_no_chart_goes_through_a_temporary_file(monkeypatch, tmp_path: Path):
    def refuse(*args, **kwargs):
        raise AssertionError("a chart went through a file")

    results = results_with(gpu_sweeps(16 * 1024) + latency_points())
    for name in ("TemporaryDirectory", "NamedTemporaryFile", "mkstemp", "mkdtemp"):
        monkeypatch.setattr(tempfile, name, refuse)
    monkeypatch.setattr(Path, "read_text", refuse)
    text = html_report(results, explanation=_explanation(), predictions=_predictions())
    assert 'id="hierarchy"' in text and 'id="sweep-figure_1"' in text  # the sweep chart, drawn in memory
    monkeypatch.undo()
    read_text = Path.read_text
    # prediction.svg is written, never read back (the schema prediction.json is checked against may be read)
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: refuse() if self.suffix == ".svg"
                        else read_text(self, *a, **k))
    from pygpuperf.predict import predict

    docs = write_prediction_report([predict(_explanation(), _model(), _model(hbm=2000.0))], {}, tmp_path).docs
    monkeypatch.undo()
    svg = (tmp_path / "prediction.svg").read_text(encoding="utf-8")
    page = (tmp_path / "prediction.html").read_text(encoding="utf-8")
    assert svg[svg.index("<svg"):].count("<path") == page.count("<path")  # the page holds the file's drawing
    assert docs == json.loads((tmp_path / "prediction.json").read_text(encoding="utf-8"))
