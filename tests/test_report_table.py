"""The terminal summary table: every number whole, in a wide log and in an 80-column terminal."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from pygpuperf.core import documents
from pygpuperf.report.table import NARROW_WIDTH, format_number, measurement_table, summary_rows

H200 = Path(__file__).parents[1] / "benchmarks" / "results" / "nvidia-h200_2026-11-30_explain-run_results.json"


@pytest.fixture(scope="module")
def h200():
    return documents.load_results(H200)


@pytest.mark.parametrize("width", [80, 100, NARROW_WIDTH, 150])
def test_every_median_and_check_shows_in_full(h200, width):
    console = Console(width=width, record=True, color_system=None)
    console.print(measurement_table(h200, width))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= width
    lines = text.splitlines()
    for row in summary_rows(h200):
        backend = row.backend if width >= NARROW_WIDTH else row.backend.split("-", 1)[0]  # "native": the title names the device
        line = next(line for line in lines if f" {row.name} " in line and f" {backend} " in line)
        assert f" {format_number(row.value)} " in line, (row.name, line)  # never "0.…" or "4,6…"
        assert row.check in line, (row.name, line)
    assert ("datasheet" in lines[2]) == (width >= NARROW_WIDTH)  # only wide tables have room for it
