"""The roofline chart (log-log): measured memory and compute roofs, and the model's point."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from pygpuperf.results import Results  # noqa: E402

# Compute roofs drawn, in order; the rest stay in the table to keep the chart readable.
_MAX_COMPUTE_ROOFS = 6
_ROOF_STYLES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (1, 3)))


def roofline_chart(results: Results, path: Path) -> Path | None:
    """Write the chart; returns None when there is no memory roof to draw against."""
    model = results.machine_model
    if model is None or not model.memory:
        return None
    x = np.logspace(-2, 4, 400)  # FLOP per byte
    fig, ax = plt.subplots(figsize=(9, 6), dpi=120)
    top_compute = max((c.value for c in model.compute.values()), default=None)
    for level, roof in sorted(model.memory.items(), key=lambda kv: -kv[1].value):
        y = x * roof.value * 1e9 / 1e12
        if top_compute:
            y = np.minimum(y, top_compute)
        ax.plot(x, y, lw=1.6, label=f"{level}: {roof.value:,.0f} GB/s ({roof.backend})")
    compute = sorted(model.compute.items(), key=lambda kv: -kv[1].value)[:_MAX_COMPUTE_ROOFS]
    # Roofs often sit within a few percent of each other: name them in the legend, not on the lines.
    for (key, roof), style in zip(compute, _ROOF_STYLES):
        ax.axhline(roof.value, ls=style, lw=1.0, color="0.35",
                   label=f"{key}: {roof.value:,.1f} {roof.unit} ({roof.backend})")
    for w in results.workloads:
        if w.intensity and w.achieved_tflops > 0:
            ax.plot([w.intensity], [w.achieved_tflops], "o", ms=8, label=f"{w.name}: {w.achieved_tflops:.2f} TFLOP/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte, counted)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"Measured roofline: {results.meta.get('device', {}).get('name', model.device)}")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
