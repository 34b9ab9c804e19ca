"""explain.html: one explained step as a self-contained page, or as a section for report.html.

The summary numbers, the waterfall from the roofline ideal to the measured step, the kernel
groups on the measured roofline, the kernel groups with the most time and the self-check. Like
report.html: rendered from the explanation (what explain.json holds) through the templates in
report/templates, charts inline as SVG, nothing fetched, no scripts, and every string from the
profile autoescaped (kernel and op names come from someone else's code).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, NamedTuple

from pygpuperf.explain import attribution, words
from pygpuperf.trials import host_clock
from pygpuperf.trials.record import Trials
from pygpuperf.diagnose import Diagnosis
from pygpuperf.explain.model import Explanation
from pygpuperf.report import templating
from pygpuperf.report.explain_charts import (IDEAL, MEASURED, draw_explain_charts, explain_roofline_svg, kernel_groups,
                                             short_kernel_name, waterfall_svg)
from pygpuperf.core.results import MachineModel, Results
from pygpuperf.core.vocabulary import Part

TOP_GROUPS = 25
# Kernels this far under their bound are listed by the self-check (attribution.SELF_CHECK_MARGIN).
_SELF_CHECK = attribution.SELF_CHECK_MARGIN
COUNTING = ("FLOPs count an FMA as 2. Bytes are a minimum-traffic estimate (each input read once, each output "
            "written once), so achieved GB/s and intensities are estimates; times are the device's {unit} "
            "durations in the median profiled step.")


def _results(machine: Results | MachineModel | None) -> Results | None:
    if machine is None or isinstance(machine, Results):
        return machine
    return Results(meta={"device": {"name": machine.device}}, machine_model=machine)


def _group_rows(explanation: Explanation, top: int) -> tuple[list[dict[str, Any]], int]:
    """The `top` kernel groups by time, as the table shows them, and how many groups there are."""
    groups = kernel_groups(explanation)
    kind = words.kind_of(explanation.device)
    rows = []
    for g in groups[:top]:
        names = "\n".join(g.names[:5]) + (f"\n... {len(g.names) - 5} more" if len(g.names) > 5 else "")
        more = len(g.names) - 1
        # The group's kernel with the most time, by its short name, and how many others it has.
        note = short_kernel_name(g.names[0], 40) + (f" +{more} more" if more else "") if g.names else ""
        rows.append({"label": g.label, "names": names, "note": note,
                     "class_label": words.label(g.kernel_class, kind), "precision": g.precision,
                     "launches": g.launches, "time_us": g.time_us, "share": g.share,
                     "tflops": g.tflops if g.flops else None, "gbs": g.gbs if g.bytes else None,
                     "bound_us": g.bound_us, "efficiency": g.efficiency,
                     "miscounted": g.efficiency is not None and g.efficiency > _SELF_CHECK})
    return rows, len(groups)


def _self_check_lines(explanation: Explanation) -> list[dict[str, Any]]:
    """Launches of one kernel by one op against one ceiling are one line, most bound time first."""
    lines: dict[tuple[str, str, str], list[float]] = {}
    for r in explanation.median.self_check:
        line = lines.setdefault((r.name, r.op, r.ceiling), [0, 0.0, 0.0])
        line[0] += 1
        line[1] += r.duration_us
        line[2] += r.bound_us or 0.0
    return [{"name": name, "short": short_kernel_name(name), "op": op, "ceiling": ceiling, "count": int(count),
             "measured_us": measured, "bound_us": bound}
            for (name, op, ceiling), (count, measured, bound) in sorted(lines.items(), key=lambda kv: -kv[1][2])]


def _cause_rows(diagnosis: Diagnosis | None, trials: Trials | None, kind: str) -> list[dict[str, Any]]:
    """The named causes of the median step, largest first, each with its fix's prediction and, where
    --try-fixes measured that fix (`trials`), the measured step."""
    causes = diagnosis.causes if diagnosis is not None else None
    if causes is None:
        return []
    measured = {f.name: f for f in (trials.fixes if trials is not None else ()) if f.status == "measured"}
    rows = []
    for c in causes.items:
        trial = measured.get(c.fix.trial) if c.fix is not None else None
        rows.append({"title": c.title, "advice": c.advice, "us": c.us, "share": c.share, "kernels": len(c.kernels),
                     "part": words.label(c.part, kind) if c.part and c.part != "ideal" else "inside the ideal",
                     "fix": c.fix.words() if c.fix is not None else "",
                     "measured_us": trial.measured_step_us if trial is not None else None})
    return rows


def explain_view(explanation: Explanation, results: Results | MachineModel | None = None, top: int = TOP_GROUPS,
                 source: str | None = None, charts: Mapping[str, str | None] | None = None,
                 diagnosis: Diagnosis | None = None, trials: Trials | None = None) -> dict[str, Any]:
    """What explain_section.html.j2 renders: the explanation's numbers, its charts as inline SVG
    (the kernel roofline with a machine model in `results`), the fixes --try-fixes tried (`trials`) and
    `source`, the document it came from when the section sits on another document's page. `charts` are the
    page markups draw_explain_charts made while writing the chart files (drawn here otherwise)."""
    results = _results(results)
    device = (results.device_name() if results is not None else None) or explanation.device
    step = explanation.median
    w = step.waterfall
    kind = words.kind_of(explanation.device)
    groups, count = _group_rows(explanation, top)
    parts = [(name, us) for name, us in w.parts.items() if words.shown(name, kind)]
    if charts is not None:
        waterfall, roofline = charts["waterfall"], charts["roofline"]
    else:
        waterfall = waterfall_svg(explanation, device)
        roofline = explain_roofline_svg(results, explanation) if results is not None else None
    return {
        "device": device, "gpu": kind == words.GPU, "unit": words.unit(kind), "units": words.unit(kind, True),
        "calls": words.calls(kind), "source": source,
        "index": step.index, "walls": [s.timeline.wall_us for s in explanation.steps],
        "waterfall": w, "timeline": step.timeline,
        "records": len(step.kernels), "record_us": sum(r.duration_us for r in step.kernels),
        "faster": len(step.self_check),
        "waterfall_svg": templating.svg(waterfall),
        "empty_parts": [words.label(name, kind) for name, us in parts if us == 0],
        "waterfall_rows": [(words.label(name, kind), us)
                           for name, us in [(IDEAL, w.ideal_us), *parts, (Part.UNEXPLAINED, w.unexplained_us)]],
        "measured_label": MEASURED,
        "roofline_svg": templating.svg(roofline),
        "groups": groups, "group_count": count,
        "self_check": _self_check_lines(explanation),
        "unknown_ops": sorted(explanation.unknown_ops.items(), key=lambda kv: -kv[1]),
        "causes": _cause_rows(diagnosis, trials, kind),
        "fixes": [f.to_dict() for f in (trials.fixes if trials is not None else ())],
        "host_pace": host_clock.host_pace_line(trials),
        "counting": COUNTING.format(unit=words.unit(kind)),
    }


# --------------------------------------------------------------------------- section and page


def explain_section_html(explanation: Explanation, results: Results | MachineModel | None = None,
                         top: int = TOP_GROUPS, source: str | None = None, diagnosis: Diagnosis | None = None,
                         trials: Trials | None = None) -> str:
    """The explained step as one <section id="explain"> for a page styled like report.html: summary,
    waterfall, kernel roofline (with a machine model in `results`), the `top` kernel groups by time
    and the self-check."""
    return templating.render("explain_section.html.j2",
                             explain=explain_view(explanation, results, top, source, diagnosis=diagnosis,
                                                  trials=trials))


def explain_html(explanation: Explanation, results: Results | MachineModel | None = None,
                 top: int = TOP_GROUPS, charts: Mapping[str, str | None] | None = None,
                 diagnosis: Diagnosis | None = None, trials: Trials | None = None) -> str:
    """The whole page as text, under report.html's stylesheet and Content-Security-Policy; the
    explanation's findings follow the section."""
    view = explain_view(explanation, results, top, charts=charts, diagnosis=diagnosis, trials=trials)
    return templating.render("explain.html.j2", title=f"pygpuperf explain: {view['device']}", explain=view,
                             findings=templating.finding_views(diagnosis.findings if diagnosis else ()))


def write_explain_html(explanation: Explanation, results: Results | MachineModel | None, path: Path,
                       charts: Mapping[str, str | None] | None = None, diagnosis: Diagnosis | None = None,
                       trials: Trials | None = None) -> Path:
    """Write explain.html (or whatever `path` names); returns the path."""
    path = Path(path)
    path.write_text(explain_html(explanation, results, charts=charts, diagnosis=diagnosis, trials=trials),
                    encoding="utf-8")
    return path


class ExplainReport(NamedTuple):
    paths: list[Path]  # the files written
    charts: dict[str, str | None]  # each chart's page markup (as draw_explain_charts gives it), drawn once


def write_explain_report(explanation: Explanation, out_dir: Path, machine: Results | MachineModel | None = None,
                         diagnosis: Diagnosis | None = None, trials: Trials | None = None) -> ExplainReport:
    """Into out_dir: waterfall.png/.svg, kernel_roofline.png/.svg (with a machine model) and explain.html,
    with the charts' markup for another page that shows the same section."""
    out_dir = Path(out_dir)
    written, charts = draw_explain_charts(explanation, out_dir, machine)
    written.append(write_explain_html(explanation, machine, out_dir / "explain.html", charts, diagnosis, trials))
    return ExplainReport(written, charts)
