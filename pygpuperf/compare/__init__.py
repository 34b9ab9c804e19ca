"""Ceilings of cards side by side, ratios against the first, and what the differences mean in words.

Each argument is a results.json written by `python -m pygpuperf.roofline` (its measured machine
model; a folder holding one works too) or `datasheet:<card>` (a model from vendor figures;
`--list` names the cards). Ratios are against the first argument. `--json` prints a
machine-readable comparison.

Exit codes: 0 done, 2 bad input (one line naming the fix).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


from pygpuperf.analyze.machine_model import load_model
from pygpuperf.facts import datasheets
from pygpuperf.analyze.conclude import HALF_RATE_RATIO, SAME_RATE_RATIO
from pygpuperf.core.errors import UsageError
from pygpuperf.core.results import Ceiling, MachineModel
from pygpuperf.core.units import figure as _num, times as _times

FAMILIES = ("compute", "memory", "links", "latency", "communication")
# Two figures this far apart are worth a sentence; host links only from here on.
NOTABLE_RATIO = 1.1
LINK_NOTABLE_RATIO = 1.5
# Winners closer than this are level.
LEVEL_RATIO = 1.02
_LABEL_LENGTH = 60
# Compute rows in this order: the tensor units first, then what a library reaches, then vector units.
_COMPUTE_ORDER = ("tensor", "library", "cuda", "simd")
# Facts shown per card, with the words for them.
_FACT_ROWS = (("segment", "segment"), ("architecture", "architecture"), ("memory_type", "memory"),
              ("memory_gb", "memory GB"), ("multiprocessors", "SMs / CUs"), ("boost_clock_mhz", "boost clock MHz"),
              ("pcie", "host link"), ("gpu_link_gbs_total", "GPU link GB/s (both ways)"), ("tdp_w", "TDP W"))

_USES = {
    "amp_training": "AMP training (FP16 or BF16 with FP32 accumulate)",
    "inference_fp8_int8": "FP8/INT8 inference",
    "memory_bound": "memory-bound work (small-batch decoding, elementwise and normalization kernels)",
}


@dataclass
class Entry:
    """One side of the comparison: a measured or a datasheet machine model, and the card's facts if known."""

    label: str
    spec: str  # the argument as given
    origin: str  # "measured" or "datasheet"
    model: MachineModel
    card: dict[str, Any] | None = None

    def value(self, family: str, key: str) -> float | None:
        ceiling = getattr(self.model, family).get(key)
        return ceiling.value if ceiling is not None else None

    def fact(self, name: str) -> Any | None:
        return datasheets.datasheet_fact(self.card, name)


@dataclass
class Row:
    family: str
    key: str
    unit: str
    values: list[float | None]
    ratios: list[float | None]  # value / the first entry's value


@dataclass
class Verdict:
    """Which entry has the highest ceiling for one use."""

    use: str  # key of _USES
    winner: str | None
    value: float | None = None
    unit: str = ""
    basis: str = ""  # the ceiling it was judged on
    runner_up: str | None = None
    ratio: float | None = None  # winner / runner-up
    within_noise: bool = False  # the two measured figures are closer than their combined spread


@dataclass
class Comparison:
    entries: list[Entry]
    rows: list[Row] = field(default_factory=list)
    statements: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)


def load_entry(spec: str) -> Entry:
    """An Entry from `datasheet:<card>` or a results.json path (or a folder holding one). Raises UsageError."""
    loaded = load_model(spec)
    label = loaded.name if loaded.origin == "datasheet" else f"{loaded.name} (measured)"
    return Entry(label=label, spec=spec, origin=loaded.origin, model=loaded.model, card=loaded.card)


def _unique_labels(entries: list[Entry]) -> None:
    seen: dict[str, int] = {}
    for e in entries:
        seen[e.label] = seen.get(e.label, 0) + 1
        if seen[e.label] > 1:
            e.label = f"{e.label} #{seen[e.label]}"


def _row_order(family: str, key: str) -> tuple:
    head = key.split(".", 1)[0]
    rank = _COMPUTE_ORDER.index(head) if family == "compute" and head in _COMPUTE_ORDER else len(_COMPUTE_ORDER)
    return rank, key


def _rows(entries: list[Entry]) -> list[Row]:
    rows = []
    for family in FAMILIES:
        keys = sorted({k for e in entries for k in getattr(e.model, family)}, key=lambda k: _row_order(family, k))
        for key in keys:
            values = [e.value(family, key) for e in entries]
            unit = next(getattr(e.model, family)[key].unit for e in entries if key in getattr(e.model, family))
            first = values[0]
            ratios = [v / first if v is not None and first else None for v in values]
            rows.append(Row(family, key, unit, values, ratios))
    return rows


def _accumulate_statement(e: Entry) -> str | None:
    acc16, acc32 = e.value("compute", "tensor.fp16.acc16"), e.value("compute", "tensor.fp16.acc32")
    if not (acc16 and acc32):
        return None
    ratio = acc32 / acc16
    if ratio <= HALF_RATE_RATIO:
        share = "half" if abs(ratio - 0.5) <= 0.05 else f"{ratio:.0%} of"
        return (f"{e.label}'s FP16 tensor rate with FP32 accumulate is {share} its FP16-accumulate rate; "
                f"AMP training there gets {_num(acc32)} of the {_num(acc16)} TFLOP/s headline.")
    if ratio >= SAME_RATE_RATIO:
        return (f"{e.label} runs FP16 tensor math with FP32 accumulate at its full rate ({_num(acc32)} TFLOP/s), "
                "so AMP training gets the headline figure.")
    return (f"{e.label}'s FP16 tensor rate with FP32 accumulate is {ratio:.0%} of its FP16-accumulate rate "
            f"({_num(acc32)} vs {_num(acc16)} TFLOP/s).")


def _memory_value(e: Entry) -> float | None:
    key = e.model.dram_key()
    return e.value("memory", key) if key else None


def _memory_statement(first: Entry, other: Entry) -> str | None:
    a, b = _memory_value(first), _memory_value(other)
    if not (a and b):
        return None
    types = [str(e.fact("memory_type") or "") for e in (first, other)]
    kind = "HBM" if all(t.startswith("HBM") for t in types) else "memory"
    ratio = b / a
    figures = f"({_num(b)} vs {_num(a)} GB/s)"
    key_a, key_b = first.model.dram_key(), other.model.dram_key()
    if within_noise(first.model.memory.get(key_a or ""), other.model.memory.get(key_b or "")):
        return (f"{other.label} and {first.label} have the same {kind} bandwidth within their measured spread "
                f"{figures}.")
    if ratio >= NOTABLE_RATIO:
        return (f"{other.label} has {_times(ratio)} the {kind} bandwidth of {first.label} {figures}: "
                f"memory-bound steps run up to {_times(ratio)} faster.")
    if ratio <= 1 / NOTABLE_RATIO:
        return (f"{other.label} has {_times(ratio)} the {kind} bandwidth of {first.label} {figures}: "
                f"memory-bound steps take up to {_times(1 / ratio)} as long.")
    return f"{other.label} and {first.label} have about the same {kind} bandwidth {figures}."


def _pcie(e: Entry) -> str | None:
    gen, width = e.fact("pcie_generation"), e.fact("pcie_width")
    return f"PCIe Gen{gen} x{width}" if gen and width else None


def _link_statement(first: Entry, other: Entry) -> str | None:
    a, b = first.value("links", "h2d.pinned"), other.value("links", "h2d.pinned")
    if not (a and b):
        return None
    ratio = b / a
    if 1 / LINK_NOTABLE_RATIO < ratio < LINK_NOTABLE_RATIO:
        return None
    buses = [_pcie(e) for e in (other, first)]
    how = f"; {buses[0]} vs {buses[1]}" if all(buses) and buses[0] != buses[1] else ""
    return (f"{other.label} copies from pinned host memory at {_times(ratio)} the rate of {first.label} "
            f"({_num(b)} vs {_num(a)} GB/s per direction{how}): input pipelines that stream from the host "
            "and offloaded weights or optimizer state feel it.")


def _gpu_link_statements(entries: list[Entry]) -> list[str]:
    links = {e.label: e.fact("gpu_link_gbs_total") for e in entries}
    if not any(v for v in links.values()):
        return []
    return [f"{label} has no NVLink or other GPU-to-GPU link: multi-GPU training exchanges gradients over PCIe."
            for label, gbs in links.items() if gbs == 0]


def _best(entries: list[Entry], keys: tuple[str, ...]) -> list[tuple[float, str, Entry]]:
    """Per entry, its highest compute ceiling among `keys`, best first."""
    found = []
    for e in entries:
        figures = [(e.value("compute", k), k) for k in keys if e.value("compute", k)]
        if figures:
            value, key = max(figures, key=lambda t: t[0])  # on a tie, the first key listed
            found.append((value, key, e))
    return sorted(found, key=lambda t: -t[0])


# Two measured figures whose ratio lies within this many combined CVs (in log terms) are the same.
NOISE_SIGMAS = 2.0


def _ceiling(e: Entry, basis: str) -> Ceiling | None:
    """The ceiling a verdict was judged on: "tensor.fp16.acc32" (compute) or "memory.hbm"."""
    family, _, key = basis.partition(".")
    if family == "memory":
        return e.model.memory.get(key)
    return e.model.compute.get(basis)


def within_noise(a: Ceiling | None, b: Ceiling | None) -> bool:
    """Whether two measured ceilings differ by less than their combined sample spread: a difference
    that would come and go between two runs of the same card. Datasheet figures have no spread."""
    if a is None or b is None or a.cv is None or b.cv is None or a.value <= 0 or b.value <= 0:
        return False
    band = max(math.log(LEVEL_RATIO), NOISE_SIGMAS * math.hypot(a.cv, b.cv))
    return abs(math.log(a.value / b.value)) <= band


def _verdict(use: str, ranked: list[tuple[float, str, Entry]], unit_of) -> Verdict:
    if not ranked:
        return Verdict(use, None)
    value, key, winner = ranked[0]
    verdict = Verdict(use, winner.label, value, unit_of(winner, key), key)
    if len(ranked) > 1:
        second_value, second_key, second = ranked[1]
        verdict.runner_up = second.label
        verdict.ratio = value / second_value
        verdict.within_noise = within_noise(_ceiling(winner, key), _ceiling(second, second_key))
    return verdict


def _verdict_statement(v: Verdict) -> str | None:
    if v.winner is None:
        return None
    use = _USES[v.use]
    if v.runner_up is None:
        return f"For {use} only {v.winner} has a figure: {_num(v.value)} {v.unit} ({v.basis})."
    if v.within_noise:
        return (f"For {use} {v.winner} and {v.runner_up} are the same within their measured spread "
                f"({_times(v.ratio)} apart, {v.basis}): no winner.")
    if v.ratio < LEVEL_RATIO:
        return f"For {use} {v.winner} and {v.runner_up} are level ({_num(v.value)} {v.unit}, {v.basis})."
    return (f"For {use} {v.winner} wins: {_num(v.value)} {v.unit} ({v.basis}), "
            f"{_times(v.ratio)} {v.runner_up}.")


def _verdicts(entries: list[Entry]) -> list[Verdict]:
    def compute_unit(e: Entry, key: str) -> str:
        return e.model.compute[key].unit

    amp = _best(entries, ("tensor.fp16.acc32", "tensor.bf16.acc32"))
    if not amp:  # no tensor probe ran: what torch's matmuls reached
        amp = _best(entries, ("library.fp16", "library.bf16"))
    inference = _best(entries, ("tensor.fp8.acc32", "tensor.fp8.acc16", "tensor.int8.acc32"))
    memory = sorted(((_memory_value(e), f"memory.{e.model.dram_key()}", e) for e in entries if _memory_value(e)),
                    key=lambda t: -t[0])
    return [_verdict("amp_training", amp, compute_unit),
            _verdict("inference_fp8_int8", inference, compute_unit),
            _verdict("memory_bound", memory, lambda e, key: "GB/s")]


def compare(entries: list[Entry]) -> Comparison:
    """Side-by-side rows, ratios against the first entry, and the differences that matter in words."""
    if len(entries) < 2:
        raise UsageError("give two or more results files or datasheet:<card> entries to compare")
    _unique_labels(entries)
    result = Comparison(entries=entries, rows=_rows(entries))
    first = entries[0]
    statements = [s for s in (_accumulate_statement(e) for e in entries) if s]
    for other in entries[1:]:
        statements += [s for s in (_memory_statement(first, other), _link_statement(first, other)) if s]
    statements += _gpu_link_statements(entries)
    result.verdicts = _verdicts(entries)
    statements += [s for s in (_verdict_statement(v) for v in result.verdicts) if s]
    lacking = [e.label for e in entries if not _best([e], ("tensor.fp8.acc32", "tensor.fp8.acc16", "tensor.int8.acc32"))]
    if lacking and len(lacking) < len(entries):
        statements.append(f"{', '.join(lacking)} {'has' if len(lacking) == 1 else 'have'} no FP8 or INT8 tensor "
                          "rate here, so quantized inference runs at 16-bit rates there.")
    origins = {e.origin for e in entries}
    if origins == {"measured", "datasheet"}:
        statements.append("Measured ceilings are what a card sustains; datasheet figures are vendor peaks, which "
                          "measurements reach some 85-95 % of: compare ratios with that margin in mind.")
    result.statements = statements
    return result


def comparison_dict(c: Comparison) -> dict[str, Any]:
    """The comparison as plain JSON-able data."""
    def clean(v: float | None) -> float | None:
        return v if v is not None and math.isfinite(v) else None

    families: dict[str, list[dict[str, Any]]] = {f: [] for f in FAMILIES}
    for row in c.rows:
        families[row.family].append({"key": row.key, "unit": row.unit, "values": [clean(v) for v in row.values],
                                     "ratios": [clean(r) for r in row.ratios]})
    return {
        "schema": "pygpuperf-compare/1",
        "ratios_against": c.entries[0].label,
        "entries": [{"label": e.label, "spec": e.spec, "origin": e.origin, "device": e.model.device,
                     "datasheet": e.card["key"] if e.card else None,
                     "facts": {n: f["value"] for n, f in e.card["facts"].items()} if e.card else {}}
                    for e in c.entries],
        "families": families,
        "statements": c.statements,
        "verdicts": [{"use": v.use, "winner": v.winner, "value": clean(v.value), "unit": v.unit, "basis": v.basis,
                      "runner_up": v.runner_up, "ratio": clean(v.ratio), "within_noise": v.within_noise}
                     for v in c.verdicts],
    }
