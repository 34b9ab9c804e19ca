"""A comparison of cards (pygpuperf.compare) as terminal tables and sentences."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pygpuperf.compare import _FACT_ROWS, FAMILIES, Comparison, Entry, _num, _pcie


def _fact_text(e: Entry, name: str) -> str:
    if name == "pcie":
        return _pcie(e) or "-"
    value = e.fact(name)
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,}"
    return f"{value:,}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def print_comparison(c: Comparison, console: Console) -> None:
    labels = [escape(e.label) for e in c.entries]
    first = labels[0]
    for family in FAMILIES:
        rows = [r for r in c.rows if r.family == family]
        if not rows:
            continue
        table = Table(title=f"{family} (ratios against {first})", title_justify="left")
        table.add_column("ceiling", no_wrap=True)
        table.add_column("unit", no_wrap=True)
        for i, label in enumerate(labels):
            table.add_column(label, justify="right")
            if i:
                table.add_column("ratio", justify="right")
        for row in rows:
            cells = [escape(row.key), row.unit]
            for i, (value, ratio) in enumerate(zip(row.values, row.ratios)):
                cells.append(_num(value) if value is not None else "-")
                if i:
                    cells.append(f"{ratio:.2f}" if ratio is not None else "-")
            table.add_row(*cells)
        console.print(table)
    if any(e.card for e in c.entries):
        table = Table(title="datasheet facts", title_justify="left")
        table.add_column("fact", no_wrap=True)
        for label in labels:
            table.add_column(label, justify="right")
        for name, words in _FACT_ROWS:
            table.add_row(words, *[escape(_fact_text(e, name)) for e in c.entries])
        console.print(table)
    if c.statements:
        console.print("\n[bold]What differs[/bold]")
        for s in c.statements:
            console.print(f"  - {escape(s)}")
