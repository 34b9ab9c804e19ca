"""The fleet report from fleet.json's document: fleet.csv (pandas), fleet.html (a Jinja2 template with
autoescape: per-GPU table, heatmaps against the fleet median and the expected figure, the P2P matrices
as PNG inside the page) and a summary on the terminal (rich).

Every string in the document may come from another host: the template escapes all of it, the page
fetches nothing and runs no script.
"""

from __future__ import annotations

import base64
import io
import json
import math
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pygpuperf.core import documents
from pygpuperf.core.units import figure as _fmt
from pygpuperf.report import templating

DOCUMENT = "fleet.json"
KIND = "pygpuperf-fleet/1 document"
# Rows the page and the terminal show (failing GPUs first); fleet.csv has every one.
MAX_HTML_ROWS = 500
MAX_TERMINAL_ROWS = 40
MAX_TERMINAL_FIGURES = 6
MAX_P2P_CHARTS = 8
MAX_FINDINGS_SHOWN = 200
_FAMILY_ORDER = ("memory", "compute", "transfer", "latency")
_VERDICT_ORDER = {"fail": 0, "no verdict": 1, "pass": 2}
_VERDICT_STYLE = {"fail": "bold red", "no verdict": "yellow", "pass": "green"}
_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


# --------------------------------------------------------------------------- common


def figure_names(doc: dict[str, Any]) -> list[str]:
    """Every figure a GPU was judged on, memory first, then compute, transfers and latencies."""
    names = {n for v in doc["verdicts"] for n in v["figures"]}

    def order(name: str) -> tuple:
        family = name.split(".", 1)[0]
        return (_FAMILY_ORDER.index(family) if family in _FAMILY_ORDER else len(_FAMILY_ORDER), name)

    return sorted(names, key=order)


def _ordered_verdicts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(doc["verdicts"], key=lambda v: (_VERDICT_ORDER.get(v["verdict"], 3), v["rank"]))


def _goodness(entry: dict[str, Any], key: str) -> float | None:
    """The ratio `key` with higher meaning better whatever the figure (latency ratios are inverted)."""
    ratio = entry.get(key)
    if ratio is None or not math.isfinite(ratio) or ratio <= 0:
        return None
    return 1.0 / ratio if entry.get("unit") == "ns" else ratio


def _cell_color(goodness: float | None, floor: bool = False) -> str:
    """White at 1 (the median or the expected figure), deepening to red at 20 % worse, to green at 10 % better;
    with `floor` (a minimum to reach, not a centre) one pale green for everything at or above it."""
    if goodness is None:
        return "#eeeeee"
    if floor and goodness >= 1:
        return "#e6f4ea"
    if goodness < 1:
        t = min(1.0, (1 - goodness) / 0.2)
        return f"#{255:02x}{int(255 - 150 * t):02x}{int(255 - 150 * t):02x}"
    t = min(1.0, (goodness - 1) / 0.1)
    return f"#{int(255 - 90 * t):02x}{255:02x}{int(255 - 90 * t):02x}"


# --------------------------------------------------------------------------- CSV


def fleet_frame(doc: dict[str, Any]) -> pd.DataFrame:
    """One row per GPU: identity, verdict, each figure with its ratio to the fleet median and the expected
    figure, and the health facts."""
    by_rank = {r["rank"]: r for r in doc["ranks"]}
    names = figure_names(doc)
    rows = []
    for v in doc["verdicts"]:
        r = by_rank.get(v["rank"], {})
        h = r.get("health", {})
        row: dict[str, Any] = {
            "rank": v["rank"], "host": v["host"], "local_rank": r.get("local_rank"), "device": v["device"],
            "card": v["card"], "uuid": v["uuid"], "serial": h.get("serial"), "pci_bus_id": v["pci_bus_id"],
            "numa_node": h.get("numa_node"), "verdict": v["verdict"], "reasons": "; ".join(v["reasons"]),
            "notes": "; ".join(v["notes"]),
        }
        for name in names:
            entry = v["figures"].get(name, {})
            row[f"{name} [{entry.get('unit', '')}]".replace(" []", "")] = entry.get("value")
            row[f"{name} vs median"] = entry.get("vs_median")
            row[f"{name} vs expected"] = entry.get("vs_expected")
        ecc = h.get("ecc_errors") or {}
        remap = h.get("row_remapping") or {}
        pages = h.get("retired_pages") or {}
        pcie = h.get("pcie") or {}
        links = h.get("gpu_links") or {}
        row.update({
            "ecc_volatile_uncorrected": ecc.get("volatile_uncorrected"),
            "ecc_aggregate_uncorrected": ecc.get("aggregate_uncorrected"),
            "ecc_volatile_corrected": ecc.get("volatile_corrected"),
            "row_remap_pending": remap.get("pending"), "row_remap_failed": remap.get("failed"),
            "retired_pages_pending": pages.get("pending"),
            "pcie_generation_max": pcie.get("generation_max"), "pcie_width_max": pcie.get("width_max"),
            "gpu_links_down": links.get("down"), "power_limit_w": h.get("power_limit_w"),
            "power_limit_default_w": h.get("power_limit_default_w"), "temperature_c": h.get("temperature_c"),
            "clock_event_reasons": ";".join(h.get("clock_event_reasons") or []),
        })
        rows.append(row)
    frame = pd.DataFrame(rows)
    # Identifiers stay whole numbers where some are missing (pandas would turn them into floats).
    for column in ("local_rank", "numa_node"):
        if column in frame:
            frame[column] = frame[column].astype("Int64")
    return frame


# --------------------------------------------------------------------------- charts


def p2p_chart_png(host: dict[str, Any]) -> str | None:
    """A host's P2P matrix (GB/s per ordered pair, source rows, destination columns) as base64 PNG, drawn in
    memory; None without measured pairs."""
    pairs = {k: v for k, v in (host.get("p2p") or {}).get("pairs", {}).items() if v.get("value") is not None}
    if not pairs:
        return None
    indices = sorted({int(i) for key in pairs for i in key.split(".")})
    position = {g: i for i, g in enumerate(indices)}
    grid = [[math.nan] * len(indices) for _ in indices]
    for key, figure in pairs.items():
        src, dst = (int(i) for i in key.split("."))
        grid[position[src]][position[dst]] = figure["value"]
    size = 1.2 + 0.55 * len(indices)
    fig = Figure(figsize=(size + 1.6, size))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(grid, cmap="viridis")
    finite = [v for row in grid for v in row if math.isfinite(v)]
    low, high = min(finite), max(finite)
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            if math.isfinite(value):  # dark text on viridis' bright end, light on its dark end
                bright = high > low and (value - low) / (high - low) > 0.6
                ax.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=7,
                        color="black" if bright or high == low else "white")
    ax.set_xticks(range(len(indices)), [str(i) for i in indices])
    ax.set_yticks(range(len(indices)), [str(i) for i in indices])
    ax.set_xlabel("destination GPU")
    ax.set_ylabel("source GPU")
    ax.set_title(f"P2P copy GB/s: {str(host.get('host'))[:40]}", fontsize=9)
    fig.colorbar(image, ax=ax, label="GB/s")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _p2p_hosts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The hosts whose matrices are drawn: the worst first (lowest pair against its link's rate)."""
    def worst(host: dict[str, Any]) -> float:
        ratios = [p["value"] / p["expected_gbs"] for p in host["p2p"].get("pairs", {}).values()
                  if p.get("value") is not None and p.get("expected_gbs")]
        return min(ratios) if ratios else math.inf

    measured = [h for h in doc["hosts"] if h["p2p"].get("pairs")]
    return sorted(measured, key=worst)[:MAX_P2P_CHARTS]


# --------------------------------------------------------------------------- HTML


def _heat_rows(verdicts: Sequence[dict[str, Any]], names: Sequence[str], key: str) -> list[dict[str, Any]]:
    rows = []
    for v in verdicts:
        cells = []
        for name in names:
            entry = v["figures"].get(name)
            ratio = entry.get(key) if entry else None
            good = _goodness(entry, key) if entry else None
            text = "-" if ratio is None else f"{100 * ratio:.0f}%"
            cells.append({"text": text, "color": _cell_color(good, floor=key == "vs_expected"),
                          "title": f"{name}: {_fmt(entry['value'])} {entry['unit']}" if entry else name})
        rows.append({"rank": v["rank"], "host": v["host"], "where": v["pci_bus_id"] or v["device"], "cells": cells})
    return rows


def fleet_html(doc: dict[str, Any]) -> str:
    """fleet.html's text."""
    names = figure_names(doc)
    verdicts = _ordered_verdicts(doc)
    shown = verdicts[:MAX_HTML_ROWS]
    units = {}
    for v in doc["verdicts"]:
        for name, entry in v["figures"].items():
            units.setdefault(name, entry.get("unit", ""))
    gpu_rows = [{
        "rank": v["rank"], "host": v["host"], "where": v["pci_bus_id"] or v["device"], "card": v["card"],
        "uuid": (v["uuid"] or "-")[:12], "uuid_full": v["uuid"] or "", "verdict": v["verdict"], "reasons": v["reasons"], "notes": v["notes"],
        "values": [_fmt(v["figures"][n]["value"]) if n in v["figures"] else "-" for n in names],
    } for v in shown]
    charts = [{"host": h["host"], "png": png} for h in _p2p_hosts(doc) if (png := p2p_chart_png(h))]
    cards = [{"card": card, "gpus": group["gpus"], "figures": [
        {"name": name, "unit": s["unit"], "n": s["n"], "median": _fmt(s["median"]),
         "spread": f"{100 * s['spread']:.1f}%", "sample_cv": f"{100 * s['sample_cv']:.1f}%",
         "straggler": f"{100 * s['straggler_share']:.1f}%" if s["stragglers_judged"] else "too few GPUs",
         "expected": _fmt(s["expected"]["expected"]) if s.get("expected") else "-",
         "datasheet": _fmt(s["expected"]["datasheet"]) if s.get("expected") else "-"}
        for name, s in group["figures"].items()]} for card, group in doc["cards"].items()]
    template = templating.environment().get_template("fleet.html.j2")
    return template.render(
        csp=templating.CSP, meta=doc["meta"], verdict=doc["verdict"], thresholds=doc["thresholds"],
        findings=doc["findings"][:MAX_FINDINGS_SHOWN], findings_total=len(doc["findings"]),
        names=names, units=units, gpu_rows=gpu_rows, total=len(verdicts), shown=len(shown),
        median_rows=_heat_rows(shown, names, "vs_median"), expected_rows=_heat_rows(shown, names, "vs_expected"),
        charts=charts, cards=cards,
        collectives=[{**c, "busbw": _fmt(c["busbw_gbs"]), "algbw": _fmt(c["algbw_gbs"]),
                      "time_us": _fmt(c["time_s"] * 1e6) if c["time_s"] is not None else "-"}
                     for c in doc["collectives"]],
        p2p_waived=[h for h in doc["hosts"] if h["p2p"].get("status") != "ok"][:20],
    )


# --------------------------------------------------------------------------- terminal


def summary_table(doc: dict[str, Any]) -> Table:
    """Per GPU: verdict, the first figures as % of the fleet median, and why."""
    names = figure_names(doc)[:MAX_TERMINAL_FIGURES]
    table = Table(box=box.SIMPLE_HEAD, title="fleet: % of the fleet median per figure (- not measured)",
                  title_justify="left")
    for column in ("rank", "host", "GPU", "verdict"):
        table.add_column(column, no_wrap=True, max_width=18 if column == "host" else None)
    for name in names:
        table.add_column(name.replace("compute.", "").replace("memory.", "").replace("transfer.", "")
                         .replace("latency.", "lat."), justify="right", no_wrap=True)
    table.add_column("why", overflow="fold", min_width=40)
    verdicts = _ordered_verdicts(doc)
    for v in verdicts[:MAX_TERMINAL_ROWS]:
        cells = []
        for name in names:
            entry = v["figures"].get(name)
            ratio = entry.get("vs_median") if entry else None
            text = "-" if ratio is None else f"{100 * ratio:.0f}%"
            if entry and entry.get("state") != "ok":
                text += " " + {"noisy": "noisy", "below": "low", "straggler": "slow"}[entry["state"]]
            cells.append(text)
        why = "; ".join(v["reasons"] or v["notes"])[:160]
        table.add_row(str(v["rank"]), escape(str(v["host"])[:24]), escape(str(v["pci_bus_id"] or v["device"])),
                      f"[{_VERDICT_STYLE[v['verdict']]}]{v['verdict']}[/]", *cells, escape(why))
    if len(verdicts) > MAX_TERMINAL_ROWS:
        table.caption = f"{len(verdicts) - MAX_TERMINAL_ROWS} more GPU(s) in fleet.csv"
    return table


def print_fleet_summary(doc: dict[str, Any], console: Console, findings: int = 15) -> None:
    console.print(summary_table(doc))
    shown = doc["findings"][:findings]
    if shown:
        console.print("Findings", style="bold")
    for f in shown:
        console.print(f"  [{_SEVERITY_STYLE[f['severity']]}]{f['severity']:7s}[/] {escape(f['title'])}",
                      highlight=False)
    if len(doc["findings"]) > findings:
        console.print(f"  ... {len(doc['findings']) - findings} more in fleet.json", highlight=False)
    v = doc["verdict"]
    style = "bold green" if v["passed"] else "bold red"
    console.print(f"[{style}]{'PASS' if v['passed'] else 'FAIL'}[/]: {escape(v['summary'])}", highlight=False)


# --------------------------------------------------------------------------- files


def write_document(doc: dict[str, Any], path: Path) -> Path:
    """fleet.json, validated against data/fleet.schema.json before it is written (a writer bug must not leave
    an unreadable file), then moved into place in one step. The rank documents in it were each validated
    against the same schema by the rank that sent it, so they are not checked a second time here: at
    milliseconds each that would be most of the cost of a large fleet's report."""
    documents.check_document({**doc, "ranks": []}, "fleet", f"{path} being written", KIND)
    documents.atomic_write_with(path, lambda f: json.dump(doc, f, separators=(",", ":"), allow_nan=False))
    return path


def write_fleet_reports(doc: dict[str, Any], out: Path) -> list[Path]:
    """fleet.json, fleet.csv and fleet.html in `out`; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = [write_document(doc, out / DOCUMENT)]
    documents.atomic_write(out / "fleet.csv", fleet_frame(doc).to_csv(index=False))
    written.append(out / "fleet.csv")
    documents.atomic_write(out / "fleet.html", fleet_html(doc))
    written.append(out / "fleet.html")
    return written
