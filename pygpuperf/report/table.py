"""The terminal summary: ceilings per family, the workload's position, then findings."""

from __future__ import annotations

import math

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pygpuperf import peaks, transfers
from pygpuperf.hierarchy import format_bytes
from pygpuperf.results import Measurement, Results, best_per_backend, is_series_point

# Workload parameters worth a place in the one-line summary (all of them are in results.json).
_WORKLOAD_KEYS = ("batch_size", "image_size", "precision", "memory_format")
_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}" if abs(value) >= 1 else f"{value:.3g}"


def _check(m: Measurement) -> str:
    if m.status == "waived":
        return "[dim]waived[/dim]"
    if m.status == "error":
        return "[red]error[/red]"
    return "[green]verified[/green]" if m.verified else "[bold red]WRONG[/bold red]"


def _derived_note(m: Measurement) -> str:
    """Where a derived figure came from, e.g. 'sweep plateau, knee 32 KiB/worker (64 KiB)'."""
    total = float(m.params.get("capacity_bytes", "nan"))
    workers = int(m.params.get("workers", "1"))
    knee = format_bytes(total) if workers <= 1 else f"{format_bytes(total / workers)}/worker ({format_bytes(total)})"
    return f"[dim]sweep plateau, knee {knee}[/dim]" if math.isfinite(total) else "[dim]sweep plateau[/dim]"


def _variant_label(m: Measurement) -> str:
    if "variant" in m.params:
        return m.params["variant"]
    size = m.params.get("size_bytes") or m.params.get("bytes")
    return format_bytes(float(size)) if size else ""


def link_fit_lines(results: Results) -> list[str]:
    """One line per transfer swept over sizes: asymptotic bandwidth, fixed cost, n_half."""
    model = results.machine_model
    if model is None:
        return []
    return [f"  {key}: {_fmt(fit.bandwidth_gbs)} GB/s asymptotic, {_fmt(fit.latency_us, 2)} us per copy, "
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
        table.add_row(str(r["src"]), str(r["dst"]), escape(r["link"]), _fmt(r["theoretical_gbps"]),
                      _fmt(r["best_gbps"]), _fmt(100 * eff if eff else None, 0), _fmt(r["bidir_gbps"]),
                      _fmt(100 * bidir_eff if bidir_eff else None, 0), escape(r["p2p_access"] or "-"),
                      escape(f"{r['best_source'] or '-'} ({r['best_backend'] or '-'})"))
    return table


def measurement_table(results: Results) -> Table:
    card = peaks.datasheet_for(results.meta.get("device", {}).get("name", ""))
    title = results.meta.get("device", {}).get("name", "device")
    if card:
        title += f"  (datasheet: {card['name']})"
    table = Table(title=title, title_justify="left", show_lines=False)
    for column, justify in (("probe", "left"), ("backend", "left"), ("median", "right"), ("unit", "left"),
                            ("p5-p95", "right"), ("CV", "right"), ("datasheet", "right"), ("%", "right"),
                            ("check", "left")):
        table.add_column(column, justify=justify, no_wrap=column != "check")
    family = None
    # Sweep points are a series (chart and JSON), not table rows.
    listed = [m for m in results.measurements if not is_series_point(m.name)]
    rows = sorted(best_per_backend(listed), key=lambda r: (r[0].name.split(".")[0], r[0].name, r[0].backend))
    for m, variants in rows:
        this_family = m.name.split(".")[0]
        if family is not None and this_family != family:
            table.add_section()
        family = this_family
        sheet = peaks.datasheet_value(card, m.name)
        pct = 100 * m.value / sheet if sheet and m.usable else None
        spread = f"{_fmt(m.stats.p5)}-{_fmt(m.stats.p95)}" if m.status == "ok" else "-"
        cv = f"{100 * m.stats.cv:.1f}%" if m.status == "ok" and math.isfinite(m.stats.cv) else "-"
        check = _check(m) if m.status == "ok" else f"{_check(m)} {escape(m.reason[:60])}"
        if variants > 1:
            check += f" best of {variants}: {_variant_label(m)}"
        if m.params.get("derived_from"):
            check += f" {_derived_note(m)}"
        table.add_row(m.name, m.backend, _fmt(m.value), m.unit, spread, cv, _fmt(sheet), _fmt(pct, 0), check)
    return table


def print_summary(results: Results, console: Console) -> None:
    console.print(measurement_table(results))
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
        from pygpuperf.collectives import collectives_table

        console.print(collectives_table(collective_runs, title="collectives (nccl-tests definitions)"))
    model = results.machine_model
    if model is not None:
        dram = model.dram_key()
        for key in sorted(model.compute):
            ridge = model.ridge_point(key, dram) if dram else None
            if ridge:
                console.print(f"  ridge point {key} vs {dram}: {ridge:.1f} FLOP/B")
    for w in results.workloads:
        console.print(
            f"\n[bold]{w.name}[/bold] ({', '.join(f'{k}={w.params[k]}' for k in _WORKLOAD_KEYS if k in w.params)}): "
            f"{_fmt(w.samples_per_second)} samples/s, step {1e3 * w.step_time.median:.2f} ms "
            f"(CV {100 * w.step_time.cv:.1f}%), {_fmt(w.achieved_tflops, 2)} TFLOP/s achieved at "
            f"{_fmt(w.intensity)} FLOP/B (counted); roofline allows {_fmt(w.attainable_tflops, 2)} TFLOP/s "
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
