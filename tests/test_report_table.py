"""The terminal summary table: every number whole, in a wide log and in an 80-column terminal."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from pygpuperf.core import documents
from pygpuperf.report.table import NARROW_WIDTH, format_number, measurement_table, summary_rows

H200 = Path(__file__).parents[1] / "benchmarks" / "reference" / "machines" / "nvidia-h200_2026-11-30_compute-transfers_results.json"


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


def test_best_of_counts_only_verified_variants_and_says_how_many_failed():
    from pygpuperf.core.results import Measurement, Results
    from pygpuperf.report.table import summary_rows

    def variant(name, gbs, verified):
        return Measurement.from_samples("memory.hbm.copy", sample_seconds=[1e-3] * 5, bytes_read=gbs * 1e6,
                                        bytes_written=0, flops=0, backend="native-cuda", device="cuda:0",
                                        verified=verified, params={"variant": name})

    results = Results(meta={"device": {"name": "synthetic"}},
                      measurements=[variant("a", 4000, True), variant("b", 4100, True), variant("c", 9000, False)])
    row, = summary_rows(results)
    assert row.value == pytest.approx(4100) and row.check == "verified"
    assert "best of 2 verified: b (1 failed)" in row.note
