"""The terminal summary: ceilings per family, the workload's position, then findings."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from pygpuperf.facts import datasheets
from pygpuperf.analyze import diagnostics, transfers
from pygpuperf.facts import peaks
from pygpuperf.core.units import figure as _fmt, format_bytes, format_number
from pygpuperf.core.results import Measurement, Results, best_per_backend, is_series_point

# Workload parameters worth a place in the one-line summary (all of them are in results.json).
_WORKLOAD_KEYS = ("batch_size", "image_size", "precision", "memory_format")
_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


# Share of the datasheet figure below which a row is flagged, by family: the findings' thresholds.
_LOW_SHARE = {"memory": diagnostics.BANDWIDTH_SHARE, "compute": diagnostics.TENSOR_SHARE,
              "transfer": transfers.LINK_EFFICIENCY_FLOOR, "collective": transfers.LINK_EFFICIENCY_FLOOR}


def datasheet_flag(name: str, percent: float | None) -> str:
    """'low' or 'above datasheet' against the card's figure; '' when fine or not comparable."""
    if percent is None:
        return ""
    if percent > 100 * peaks.PEAK_MARGIN:  # above the datasheet: a probe bug, not a record
        return "above datasheet"
    low = _LOW_SHARE.get(name.split(".", 1)[0])
    return "low" if low is not None and percent < 100 * low else ""


@dataclass(frozen=True)
class SummaryRow:
    """One row of the measurement summary: the best variant of one probe on one backend."""

    family: str  # "memory", "compute", ...
    name: str
    backend: str
    value: float
    unit: str
    p5: float | None  # None where the probe did not run
    p95: float | None
    cv: float | None
    datasheet: float | None
    percent: float | None  # of the datasheet figure
    flag: str  # datasheet_flag(), and "noisy" where the samples spread more than NOISY_CV
    check: str  # "verified", "WRONG", "waived" or "error"
    note: str  # why waived or failed, which variant was best, where a derived figure came from


def summary_rows(results: Results) -> list[SummaryRow]:
    """The rows of the terminal table and the HTML page, as data: family, name, backend order."""
    card = datasheets.datasheet_for(results.device_name() or "")
    listed = [m for m in results.measurements if not is_series_point(m.name)]  # sweep points are a series
    failed = Counter((m.name, m.backend) for m in listed if not m.usable and m.status != "waived")
    rows = []
    for m, variants in sorted(best_per_backend(listed), key=lambda r: (r[0].name.split(".")[0], r[0].name,
                                                                       r[0].backend)):
        sheet = datasheets.datasheet_value(card, m.name)
        ran = m.status == "ok"
        notes = [m.reason] if m.reason else []
        bad = failed[(m.name, m.backend)]
        if variants - bad > 1 or (bad and m.usable):  # "best of" counts the verified variants only
            notes.append(f"best of {variants - bad} verified: {_variant_label(m)}".rstrip(": ")
                         + (f" ({bad} failed)" if bad else ""))
        if m.params.get("derived_from"):
            notes.append(_derived_note(m))
        percent = 100 * m.value / sheet if sheet and m.usable else None
        flags = [f for f in (datasheet_flag(m.name, percent), "noisy" if m.noisy else "") if f]
        rows.append(SummaryRow(
            family=m.name.split(".")[0], name=m.name, backend=m.backend, value=m.value, unit=m.unit,
            p5=m.stats.p5 if ran else None, p95=m.stats.p95 if ran else None,
            cv=m.stats.cv if ran and math.isfinite(m.stats.cv) else None,
            datasheet=sheet, percent=percent, flag=", ".join(flags),
            check=m.status if m.status in ("waived", "error") else ("verified" if m.verified else "WRONG"),
            note="; ".join(notes)))
    return rows


def _variant_label(m: Measurement) -> str:
    """Which variant a row's figure comes from: its name, else the transfer size it was swept at."""
    if "variant" in m.params:
        return str(m.params["variant"])
    size = m.quantities.size_bytes or m.quantities.bytes
    if size:
        return format_bytes(size)
    return str(m.params.get("size_bytes") or m.params.get("bytes") or "")  # a size given as text


def _derived_note(m: Measurement) -> str:
    """Where a derived figure came from, e.g. 'sweep plateau, knee 32 KiB/worker (64 KiB)'."""
    total, workers = m.quantities.capacity_bytes, m.quantities.workers or 1
    if total is None:
        return "sweep plateau"
    knee = format_bytes(total) if workers <= 1 else f"{format_bytes(total / workers)}/worker ({format_bytes(total)})"
    return f"sweep plateau, knee {knee}"


def link_fit_lines(results: Results) -> list[str]:
    """One line per transfer swept over sizes: asymptotic bandwidth, fixed cost, n_half."""
    model = results.machine_model
    if model is None:
        return []
    return [f"  {key}: {format_number(fit.bandwidth_gbs)} GB/s asymptotic, {format_number(fit.latency_us, 2)} us per copy, "
            f"half of it at {format_bytes(fit.n_half_bytes)} ({fit.points} sizes, {fit.backend}, fit within "
            f"{100 * fit.rms_relative_error:.0f}%)" for key, fit in sorted(model.link_fits.items())]


def p2p_table(results: Results) -> Table | None:
    """The GPU-pair matrix: best one-way and both-ways figures against the link's rate."""
    rows = transfers.p2p_efficiency_rows(results.measurements, results.meta.get("links"))
    if not rows:
        return None
    table = Table(title="GPU to GPU", title_justify="left")
    for column in ("src", "dst", "link", "link GB/s", "best one-way", "%", "both ways", "%", "P2P", "best by"):
        table.add_column(column, justify="left" if column in ("link", "P2P", "best by") else "right")
    for r in rows:
        eff = r["efficiency"]
        bidir_eff = r["bidir_efficiency"]
        table.add_row(str(r["src"]), str(r["dst"]), escape(r["link"]), format_number(r["theoretical_gbps"]),
                      format_number(r["best_gbps"]), format_number(100 * eff if eff else None, 0), format_number(r["bidir_gbps"]),
                      format_number(100 * bidir_eff if bidir_eff else None, 0), escape(r["p2p_access"] or "-"),
                      escape(f"{r['best_source'] or '-'} ({r['best_backend'] or '-'})"))
    return table


_CHECK_STYLE = {"verified": "[green]verified[/green]", "WRONG": "[bold red]WRONG[/bold red]",
                "waived": "[dim]waived[/dim]", "error": "[red]error[/red]"}


# Below this many columns the table keeps the essentials: the spread and datasheet columns go.
NARROW_WIDTH = 120


def measurement_table(results: Results, width: int | None = None) -> Table:
    """The measurement summary as a rich Table. Numbers are never cut: number columns keep the width
    of their widest cell. In a terminal narrower than NARROW_WIDTH the table drops its vertical rules,
    the p5-p95 and datasheet columns and the notes of the check column (which variant won, why a
    probe was waived), says native/torch for the backend (the title names the device) and puts a
    datasheet flag beside the check: results.json and report.html have the rest."""
    card = datasheets.datasheet_for(results.device_name() or "")
    title = results.device_name() or "device"
    if card:
        title += f"  (datasheet: {card['name']})"
    rows = summary_rows(results)
    narrow = width is not None and width < NARROW_WIDTH
    cells = []
    for r in rows:
        flag = f"[yellow]{r.flag}[/yellow]" if r.flag else ""
        check = _CHECK_STYLE[r.check]
        if narrow:
            check += f" {flag}" if flag else ""
        elif r.note:
            check += f" [dim]{escape(r.note[:80])}[/dim]"
        cells.append({
            "probe": r.name, "backend": r.backend.split("-", 1)[0] if narrow else r.backend,
            "median": format_number(r.value), "unit": r.unit,
            "p5-p95": f"{format_number(r.p5)}-{format_number(r.p95)}" if r.p5 is not None else "-",
            "CV": f"{100 * r.cv:.1f}%" if r.cv is not None else "-",
            "datasheet": format_number(r.datasheet), "%": format_number(r.percent, 0), "flag": flag, "check": check,
        })
    columns = [("probe", "left"), ("backend", "left"), ("median", "right"), ("unit", "left"), ("p5-p95", "right"),
               ("CV", "right"), ("datasheet", "right"), ("%", "right"), ("flag", "left"), ("check", "left")]
    dropped = {"p5-p95", "datasheet", "%", "flag"} if narrow else set()
    if not any(r.datasheet is not None for r in rows):
        dropped |= {"datasheet", "%"}
    if not any(r.flag for r in rows):
        dropped.add("flag")
    table = Table(title=title, title_justify="left", show_lines=False, box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD)
    for column, justify in columns:
        if column in dropped:
            continue
        if column == "check":  # its first word (verified, WRONG, waived, error) is never cut
            table.add_column(column, justify=justify, overflow="fold", ratio=1, min_width=8)
        else:  # names, numbers and short words: never cut
            widest = max([len(column)] + [len(Text.from_markup(c[column]).plain) for c in cells])
            table.add_column(column, justify=justify, no_wrap=True, min_width=widest)
    family = None
    for r, c in zip(rows, cells):
        if family is not None and r.family != family:
            table.add_section()
        family = r.family
        table.add_row(*(c[column] for column, _ in columns if column not in dropped))
    return table


def print_summary(results: Results, console: Console) -> None:
    console.print(measurement_table(results, console.width))
    fits = link_fit_lines(results)
    if fits:
        console.print("[bold]Transfers fitted as time = latency + size / bandwidth[/bold]")
        for line in fits:
            console.print(escape(line))
    pairs_table = p2p_table(results)
    if pairs_table is not None:
        console.print(pairs_table)
    collective_runs = [m for m in results.measurements if m.name.startswith("collective.")]
    if collective_runs:
        console.print(collectives_table(collective_runs, title="collectives (nccl-tests definitions)"))
    model = results.machine_model
    if model is not None:
        for key, ridge in model.ridge_points.items():
            console.print(f"  ridge point {key.replace('/', ' vs ')}: {ridge:.1f} FLOP/B")
    for w in results.workloads:
        console.print(
            f"\n[bold]{w.name}[/bold] ({', '.join(f'{k}={w.params[k]}' for k in _WORKLOAD_KEYS if k in w.params)}): "
            f"{format_number(w.samples_per_second)} samples/s, step {1e3 * w.step_time.median:.2f} ms "
            f"(CV {100 * w.step_time.cv:.1f}%), {format_number(w.achieved_tflops, 2)} TFLOP/s achieved at "
            f"{format_number(w.intensity)} FLOP/B (counted); roofline allows {format_number(w.attainable_tflops, 2)} TFLOP/s "
            f"against {w.compute_ceiling} / {w.memory_ceiling}"
            + (f" -> {100 * w.fraction_of_attainable:.0f}%" if w.fraction_of_attainable else "")
        )
    if results.findings:
        console.print("\n[bold]Findings[/bold]")
        for f in results.findings:
            console.print(f"  [{_SEVERITY_STYLE.get(f.severity, '')}]{f.severity:7s}[/] {escape(f.title)}")
            if f.suggestion:
                console.print(f"          [dim]{escape(f.suggestion)}[/dim]")
    console.print(f"\n[dim]{results.meta.get('counting', '')}[/dim]")


def collectives_table(measurements: Sequence[Measurement], title: str = "collectives") -> Table:
    """A rich Table: one row per op and size with time, algbw and busbw (nccl-tests' columns)."""
    table = Table(title=title, title_justify="left")
    for column in ("op", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "busbw p5-p95", "CV", "check"):
        table.add_column(column, justify="left" if column in ("op", "check") else "right", no_wrap=column != "check")
    op = None
    for m in measurements:
        this_op = m.name.split(".", 1)[1]
        if op is not None and this_op != op:
            table.add_section()
        op = this_op
        if m.status != "ok":
            table.add_row(this_op, "-", "-", "-", "-", "-", "-", f"[dim]{m.status}[/dim] {escape(m.reason[:80])}")
            continue
        check = "[green]verified[/green]" if m.verified else "[bold red]WRONG[/bold red]"
        q = m.quantities
        table.add_row(this_op, format_bytes(q.size_bytes) if q.size_bytes is not None else "-",
                      _fmt(q.time_s * 1e6) if q.time_s is not None else "-",
                      _fmt(q.algbw_gbs) if q.algbw_gbs is not None else "-", _fmt(m.value),
                      f"{_fmt(m.stats.p5)}-{_fmt(m.stats.p95)}", f"{100 * m.stats.cv:.1f}%", check)
    return table
