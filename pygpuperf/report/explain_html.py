"""explain.html: one explained step as a self-contained page, or as a section for report.html.

The summary numbers, the waterfall from the roofline ideal to the measured step, the kernel
groups on the measured roofline, the kernel groups with the most time and the self-check. Like
report.html: charts inline as SVG, nothing fetched, no scripts, and every string from the
profile escaped (kernel and op names come from someone else's code).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from pygpuperf.explain import attribution, words
from pygpuperf.explain.model import Explanation
from pygpuperf.report import html as report_html
from pygpuperf.report.explain_charts import (IDEAL, MEASURED, KernelGroup, explain_charts, explain_roofline_svg,
                                             kernel_groups, short_kernel_name, waterfall_svg)
from pygpuperf.core.units import format_number as _fmt
from pygpuperf.core.results import MachineModel, Results

TOP_GROUPS = 25
# Kernels this far under their bound are listed by the self-check (attribution.SELF_CHECK_MARGIN).
_SELF_CHECK = attribution.SELF_CHECK_MARGIN
COUNTING = ("FLOPs count an FMA as 2. Bytes are a minimum-traffic estimate (each input read once, each output "
            "written once), so achieved GB/s and intensities are estimates; times are the device's {unit} "
            "durations in the median profiled step.")


_e = report_html.escape


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1e3:,.2f}"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole > 0 else "-"


def _facts(items: Iterable[tuple[str, str]]) -> str:
    return "<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items) + "</dl>"


def _results(machine: Results | MachineModel | None) -> Results | None:
    if machine is None or isinstance(machine, Results):
        return machine
    return Results(meta={"device": {"name": machine.device}}, machine_model=machine)


def _device_name(explanation: Explanation, results: Results | None) -> str:
    device = results.meta.get("device") if results is not None else None
    if isinstance(device, dict) and device.get("name"):
        return str(device["name"])
    return explanation.device


# --------------------------------------------------------------------------- parts


def _summary(explanation: Explanation) -> str:
    step = explanation.median
    w, line = step.waterfall, step.timeline
    walls = [s.timeline.wall_us for s in explanation.steps]
    kernel_us = sum(r.duration_us for r in step.kernels)
    gpu = words.kind_of(explanation.device) == words.GPU
    unit = "kernel" if gpu else "op"
    idle = (f"{_ms(line.idle.total_us)} ms: host-bound {_ms(line.idle.host_bound_us)}, launch gaps "
            f"{_ms(line.idle.launch_gap_us)}, sync {_ms(line.idle.sync_us)}" if gpu else
            f"{_ms(line.idle.total_us)} ms of framework time between ops")
    rows = [
        ("step", f"#{step.index}, the median of {len(walls)} profiled step(s) "
                 f"({_ms(min(walls))}-{_ms(max(walls))} ms)"),
        ("measured", f"{_ms(w.measured_us)} ms"),
        ("roofline ideal", f"{_ms(w.ideal_us)} ms ({_pct(w.ideal_us, w.measured_us)} of measured)"),
        ("coverage", f"{100 * w.coverage:.1f}% of the step named by a ceiling or an idle cause"),
        (f"{unit}s busy", f"{_ms(line.busy_us)} ms ({_pct(line.busy_us, line.wall_us)})"),
        ("idle" if gpu else "between ops", idle),
        (f"{unit}s", f"{len(step.kernels):,} {'launches' if gpu else 'calls'}, {_ms(kernel_us)} ms of {unit} time"),
        ("self-check", f"{len(step.self_check)} {unit}(s) faster than their bound"),
    ]
    return f"<div class=\"facts\"><section><h3>step</h3>{_facts(rows[:4])}</section>" \
           f"<section><h3>timeline</h3>{_facts(rows[4:])}</section></div>"


def _waterfall_table(explanation: Explanation) -> str:
    w = explanation.median.waterfall
    kind = words.kind_of(explanation.device)
    parts = [(name, us) for name, us in w.parts.items() if words.shown(name, kind)]
    rows = [(IDEAL, w.ideal_us), *parts, (attribution.UNEXPLAINED, w.unexplained_us)]
    body = "".join(f"<tr><td>{_e(words.label(name, kind))}</td><td class=\"num\">{_ms(us)}</td>"
                   f"<td class=\"num\">{_pct(us, w.measured_us)}</td></tr>" for name, us in rows)
    return ("<table class=\"waterfall\"><thead><tr><th>from the ideal to the step</th><th class=\"num\">ms</th>"
            f"<th class=\"num\">of measured</th></tr></thead><tbody>{body}<tr class=\"total\"><td>{MEASURED}</td>"
            f"<td class=\"num\">{_ms(w.measured_us)}</td><td class=\"num\">{_pct(w.measured_us, w.measured_us)}"
            "</td></tr></tbody></table>")


def _groups_table(explanation: Explanation, top: int) -> str:
    groups = kernel_groups(explanation)
    if not groups:
        return f"<p>No {words.unit(words.kind_of(explanation.device))} ran in the step.</p>"
    kind = words.kind_of(explanation.device)
    heads = (("#", "num"), (f"{words.unit(kind)} group", ""), ("class", ""), ("precision", ""), (words.calls(kind), "num"),
             ("time ms", "num"), ("share", "num"), ("TFLOP/s", "num"), ("GB/s", "num"), ("bound ms", "num"),
             ("efficiency", "num"))
    parts = ["<table class=\"kernels\"><thead><tr>", "".join(f"<th class=\"{c}\">{_e(h)}</th>" for h, c in heads),
             "</tr></thead><tbody>"]
    for n, g in enumerate(groups[:top], 1):
        names = "\n".join(g.names[:5]) + (f"\n... {len(g.names) - 5} more" if len(g.names) > 5 else "")
        efficiency = g.efficiency
        if efficiency is None:
            eff = "-"
        elif efficiency > _SELF_CHECK:
            eff = f"<span class=\"check-wrong\">{100 * efficiency:.0f}% (miscounted)</span>"
        else:
            eff = f"{100 * efficiency:.0f}%"
        parts.append(
            f"<tr><td class=\"num\">{n}</td><td class=\"name\" title=\"{_e(names)}\">{_e(g.label)}"
            + f" <span class=\"note\">{_e(_kernels_note(g))}</span>"
            + f"</td><td>{_e(words.label(g.kernel_class, kind))}</td><td>{_e(g.precision or '-')}</td>"
            f"<td class=\"num\">{g.launches:,}</td><td class=\"num\">{_ms(g.time_us)}</td>"
            f"<td class=\"num\">{100 * g.share:.1f}%</td><td class=\"num\">{_fmt(g.tflops if g.flops else None)}</td>"
            f"<td class=\"num\">{_fmt(g.gbs if g.bytes else None)}</td><td class=\"num\">{_ms(g.bound_us)}</td>"
            f"<td class=\"num\">{eff}</td></tr>")
    shown = groups[:top]
    parts.append(f"<tr class=\"total\"><td></td><td>top {len(shown)} of {len(groups)} groups</td><td></td><td></td>"
                 f"<td class=\"num\">{sum(g.launches for g in shown):,}</td>"
                 f"<td class=\"num\">{_ms(sum(g.time_us for g in shown))}</td>"
                 f"<td class=\"num\">{100 * sum(g.share for g in shown):.1f}%</td>"
                 "<td></td><td></td><td></td><td></td></tr></tbody></table>")
    return "".join(parts)


def _kernels_note(group: KernelGroup) -> str:
    """The group's kernel with the most time, by its short name, and how many others it has."""
    if not group.names:
        return ""
    more = len(group.names) - 1
    return short_kernel_name(group.names[0], 40) + (f" +{more} more" if more else "")


def _self_check(explanation: Explanation) -> str:
    records = explanation.median.self_check
    kind = words.kind_of(explanation.device)
    if not records:
        return (f"<p>No {words.unit(kind)} ran faster than its roofline bound: every counted FLOP and byte is "
                "plausible.</p>")
    # Launches of one kernel by one op against one ceiling are one line.
    lines: dict[tuple[str, str, str], list[float]] = {}
    for r in records:
        line = lines.setdefault((r.name, r.op, r.ceiling), [0, 0.0, 0.0])
        line[0] += 1
        line[1] += r.duration_us
        line[2] += r.bound_us or 0.0
    items = []
    for (name, op, ceiling), (count, measured, bound) in sorted(lines.items(), key=lambda kv: -kv[1][2]):
        ratio = f" ({bound / measured:.2f}x its time)" if measured > 0 else ""
        items.append(f"<li><span title=\"{_e(name)}\">{_e(short_kernel_name(name))}</span>"
                     f" <span class=\"note\">{_e(op or '-')}</span>: {int(count)} {words.calls(kind)}, "
                     f"{measured:,.1f} us measured, bound {bound:,.1f} us{ratio} at {_e(ceiling or '-')}</li>")
    return (f"<p>These {words.unit(kind, True)} ran faster than the roofline allows for the work counted to them: their FLOP or "
            f"byte count (or the ceiling) is wrong.</p><ul>{''.join(items)}</ul>")


def _unknown_ops(explanation: Explanation) -> str:
    if not explanation.unknown_ops:
        return ""
    unit = words.unit(words.kind_of(explanation.device))
    items = "".join(f"<li>{_e(op)}: {us:,.1f} us of {unit} time per step</li>"
                    for op, us in sorted(explanation.unknown_ops.items(), key=lambda kv: -kv[1]))
    return (f"<h3 id=\"explain-unknown-ops\">Ops with no cost formula</h3><p class=\"note\">Their {unit}s count "
            f"no FLOPs or bytes.</p><ul>{items}</ul>")


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{_e(caption)}</figcaption></figure>"


# --------------------------------------------------------------------------- section and page


def explain_section_html(explanation: Explanation, results: Results | MachineModel | None = None,
                         top: int = TOP_GROUPS) -> str:
    """The explained step as one <section id="explain"> for a page styled like report.html: summary,
    waterfall, kernel roofline (with a machine model in `results`), the `top` kernel groups by time
    and the self-check."""
    results = _results(results)
    device = _device_name(explanation, results)
    w = explanation.median.waterfall
    kind = words.kind_of(explanation.device)
    unit = words.unit(kind)
    empty = [words.label(name, kind) for name, us in w.parts.items() if us == 0 and words.shown(name, kind)]
    parts = [
        "<section id=\"explain\">",
        f"<h2 id=\"explain-summary\">Explained step <span class=\"note\">on {_e(device)}</span></h2>",
        _summary(explanation),
        "<h3 id=\"explain-waterfall\">From the roofline ideal to the measured step</h3>",
        _figure(waterfall_svg(explanation, device),
                f"The ideal is the sum of every {unit}'s roofline bound; each bar adds what one cause spent above "
                "it, down to the measured step." + (f" No time in: {', '.join(empty)}." if empty else "")),
        _waterfall_table(explanation),
        f"<h3 id=\"explain-roofline\">{unit.capitalize()}s on the measured roofline</h3>",
    ]
    roofline = explain_roofline_svg(results, explanation) if results is not None else None
    if roofline is not None:
        parts.append(_figure(roofline, f"One bubble per {unit} group (op, class, precision): area is its share of "
                                       f"the step's {unit} time, colour its class. Groups without FLOPs or bytes "
                                       "(layout transforms, copies) have no place on a log-log roofline."))
    else:
        parts.append("<p>No machine model was given: the roofline needs one (a results.json of "
                     "python -m pygpuperf.roofline on the same device).</p>")
    parts += [
        f"<h3 id=\"explain-kernels\">Top {min(top, len(kernel_groups(explanation)))} {unit} groups by time</h3>",
        f"<p class=\"note\">Efficiency is the group's roofline bound over its time ({unit}s with a bound); hover "
        f"a name for its {unit}s.</p>",
        _groups_table(explanation, top),
        "<h3 id=\"explain-self-check\">Self-check</h3>",
        _self_check(explanation),
        _unknown_ops(explanation),
        f"<p class=\"note\">{_e(COUNTING.format(unit=unit))}</p>",
        "</section>",
    ]
    return "\n".join(part for part in parts if part)


def explain_html(explanation: Explanation, results: Results | MachineModel | None = None,
                 top: int = TOP_GROUPS) -> str:
    """The whole page as text, under report.html's stylesheet and Content-Security-Policy."""
    results = _results(results)
    device = _device_name(explanation, results)
    w = explanation.median.waterfall
    sub = (f"step {_ms(w.measured_us)} ms, roofline ideal {_ms(w.ideal_us)} ms, coverage "
           f"{100 * w.coverage:.1f}%")
    body = (f"<header><h1>{_e(device)}: where the step's time goes</h1><p class=\"sub\">{_e(sub)}</p></header>\n"
            + explain_section_html(explanation, results, top)
            + "\n<footer>Every figure on this page is derived from the step's explain.json.</footer>")
    return report_html.page(f"pygpuperf explain: {device}", body)


def write_explain_html(explanation: Explanation, results: Results | MachineModel | None, path: Path) -> Path:
    """Write explain.html (or whatever `path` names); returns the path."""
    path = Path(path)
    path.write_text(explain_html(explanation, results), encoding="utf-8")
    return path


def write_explain_report(explanation: Explanation, out_dir: Path,
                         machine: Results | MachineModel | None = None) -> list[Path]:
    """Into out_dir: waterfall.png/.svg, kernel_roofline.png/.svg (with a machine model) and explain.html."""
    out_dir = Path(out_dir)
    written = explain_charts(explanation, out_dir, machine)
    written.append(write_explain_html(explanation, machine, out_dir / "explain.html"))
    return written
