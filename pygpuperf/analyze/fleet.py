"""Fleet validation, the analysis: rank documents in, findings and a verdict per GPU out. Pure: reads
nothing but the documents, the datasheet table and the thresholds it is given.

- Stragglers: a figure more than X % worse than the median of the same card type across the fleet, X
  being K_SIGMA times the measured noise (the spread across GPUs from the median absolute deviation, or
  the median sample CV, whichever is larger), held between MIN_ and MAX_STRAGGLER_SHARE, and stated.
- Expected figures: datasheet x an achievable fraction (the shares the single-card findings use), the
  default minimum a GPU must reach; a thresholds file sets its own minimums per card model.
- Health: uncorrectable ECC errors, pending or failed row remapping, pending page retirement, GPU links
  down, a PCIe link below its maximum generation or width while a transfer ran: each fails the GPU.
  Clock events, a lowered power limit and link error counters are warnings.
- A figure whose samples spread more than the noise tolerance (CV) supports no verdict: a GPU with
  nothing failing but such a figure gets "no verdict", and says why.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from functools import lru_cache
from typing import Any, Iterable, Sequence

import numpy as np

from pygpuperf.analyze import diagnostics, transfers
from pygpuperf.core.results import NOISY_CV
from pygpuperf.core.units import figure as _fmt
from pygpuperf.facts import datasheets
from pygpuperf.facts.nvml import held_clock_reasons
from pygpuperf.facts.health import empty_rank_health

SCHEMA_ID = "pygpuperf-fleet/1"
THRESHOLDS_SCHEMA_ID = "pygpuperf-fleet-thresholds/1"
RANK_SCHEMA_ID = "pygpuperf-fleet-rank/1"

# A straggler lies this many noise widths below the median; 1.4826 x MAD estimates one standard deviation.
K_SIGMA = 3.0
MAD_TO_SIGMA = 1.4826
MIN_STRAGGLER_SHARE = 0.02  # below this a difference is within run-to-run variation of a healthy card
MAX_STRAGGLER_SHARE = 0.5  # beyond this the fleet is too noisy to tell a straggler: the noise finding says so
MIN_GROUP_FOR_STRAGGLERS = 3  # with two GPUs neither is "the" slow one

# Achievable share of the datasheet figure, by figure prefix: the shares the single-card findings use
# (analyze.diagnostics, analyze.transfers). A memory level is held to it by its best stream, as there: one
# op may run lower (torch's copy_ reached 89 % of an H200's 4.8 TB/s, its fill_ 98 %). torch's matmul (the
# stand-in without a native build) measures the library as much as the card (torch._int_mm: 46 % of an
# H200's INT8 rate), so it is judged against the fleet alone.
ACHIEVABLE_SHARE = (
    ("memory.", diagnostics.BANDWIDTH_SHARE),
    ("compute.tensor.", diagnostics.TENSOR_SHARE),
    ("compute.cuda.", diagnostics.TENSOR_SHARE),
    ("transfer.", transfers.LINK_EFFICIENCY_FLOOR),
)
DEFAULT_TOLERANCES: dict[str, Any] = {
    "straggler_percent": None,  # None: K_SIGMA x the measured noise
    "noisy_cv": NOISY_CV,
    "stragglers_fail": True,
    "datasheet_minimums": True,  # cards a thresholds file does not name are held to datasheet x share
    "ecc_uncorrected": 0,  # volatile uncorrectable ECC errors a GPU may show
}
# Findings listing GPUs name at most this many; the count says how many there are.
MAX_NAMED = 20

_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


# --------------------------------------------------------------------------- expectations and thresholds


def achievable_share(figure: str) -> float | None:
    for prefix, share in ACHIEVABLE_SHARE:
        if figure.startswith(prefix):
            return share
    return None


def lower_is_better(unit: str | None) -> bool:
    return unit == "ns"


@lru_cache(maxsize=4096)
def _datasheet(card_name: str) -> dict[str, Any] | None:
    return datasheets.datasheet_for(card_name)


@lru_cache(maxsize=65536)
def _expected(card_name: str, figure: str) -> tuple[tuple[str, Any], ...] | None:
    card = _datasheet(card_name)
    share = achievable_share(figure)
    value = datasheets.datasheet_value(card, figure) if card else None
    if card is None or value is None or share is None:
        return None
    return (("card", card["key"]), ("datasheet", value), ("share", share), ("expected", value * share))


def expected_figure(card_name: str, figure: str) -> dict[str, Any] | None:
    """{datasheet, share, expected, card} for a figure of a card the datasheet table knows, else None."""
    found = _expected(card_name, figure)
    return dict(found) if found else None


def default_thresholds() -> dict[str, Any]:
    """The default threshold set as a thresholds document: per datasheet card, each figure the datasheet
    has at datasheet x its achievable share (memory by level: its best stream)."""
    cards: dict[str, Any] = {}
    for card in datasheets.datasheet_document()["cards"]:
        minimum = {}
        for figure, entry in card["values"].items():
            share = achievable_share(figure)
            if share is None:
                continue
            # A memory level ("memory.hbm") holds its best stream, as the datasheet's figure does.
            minimum[figure] = round(float(entry["value"]) * share, 3)
        cards[card["key"]] = {"minimum": dict(sorted(minimum.items()))}
    return {"schema": THRESHOLDS_SCHEMA_ID, "cards": cards, "tolerances": dict(DEFAULT_TOLERANCES)}


def check_thresholds(doc: dict[str, Any], origin: str) -> None:
    """Values beyond the schema's reach: figures named like measurements, minimums positive."""
    for card, entry in doc.get("cards", {}).items():
        for table in ("minimum", "maximum"):
            for figure, value in entry.get(table, {}).items():
                if figure.split(".", 1)[0] not in ("memory", "compute", "transfer", "latency", "collective"):
                    raise ValueError(f"{origin}: cards/{card}/{table}/{figure}: not a measurement name "
                                     "(memory.*, compute.*, transfer.*, latency.*)")
                if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                    raise ValueError(f"{origin}: cards/{card}/{table}/{figure}: {value!r} is not a positive figure")


class Thresholds:
    """Minimums (and maximums for figures where lower is better) per GPU, and the tolerances."""

    def __init__(self, doc: dict[str, Any] | None = None, source: str = "default"):
        self.doc = doc or {"schema": THRESHOLDS_SCHEMA_ID, "cards": {}, "tolerances": {}}
        self.source = source
        self.tolerances = {**DEFAULT_TOLERANCES, **self.doc.get("tolerances", {})}

    def _entry(self, card_name: str) -> dict[str, Any]:
        cards = self.doc.get("cards", {})
        sheet = _datasheet(card_name)
        for key in (card_name, sheet["key"] if sheet else None, "*"):
            if key is not None and key in cards:
                return cards[key]
        return {}

    def named(self, card_name: str) -> list[str]:
        """The figures a thresholds file names for this card."""
        entry = self._entry(card_name) if self.source != "default" else {}
        return sorted({*entry.get("minimum", {}), *entry.get("maximum", {})})

    def limits(self, card_name: str, figure: str, unit: str | None) -> tuple[float | None, str, bool]:
        """(limit, where it came from, whether it holds the memory level's best stream rather than this
        figure) for one figure of one card: a minimum, or a maximum where lower is better; (None, "", False)
        where nothing holds it. A minimum named for a level ("memory.hbm"), like the datasheet's figure,
        holds the level's best stream."""
        entry = self._entry(card_name)
        table = "maximum" if lower_is_better(unit) else "minimum"
        if figure in entry.get(table, {}):
            return float(entry[table][figure]), "thresholds", False
        level = _level(figure) if figure.startswith("memory.") else None
        if level and level in entry.get(table, {}):
            return float(entry[table][level]), "thresholds", True
        if table == "minimum" and self.tolerances.get("datasheet_minimums", True):
            expected = _expected(card_name, level or figure)
            if expected is not None:
                return dict(expected)["expected"], "datasheet", bool(level)
        return None, "", False


# --------------------------------------------------------------------------- documents


_NUMBER = (int, float)
_STATUSES = ("ok", "waived", "error", "wrong")
# What the analysis reads of a rank's health, and the types it takes them as (None always allowed).
_HEALTH_FIELDS = {
    "ecc_errors": ("volatile_corrected", "volatile_uncorrected", "aggregate_corrected", "aggregate_uncorrected"),
    "ecc_errors_during_suite": ("corrected", "uncorrected"),
    "retired_pages": ("single_bit", "double_bit", "pending"),
    "row_remapping": ("corrected_rows", "uncorrected_rows", "pending", "failed"),
    "pcie": ("generation", "width", "generation_max", "width_max"),
    "gpu_links": ("total", "active", "down"),
}


def _is_number(value: Any) -> bool:
    return isinstance(value, _NUMBER) and not isinstance(value, bool) and math.isfinite(value)


def rank_problem(doc: Any) -> str | None:
    """Why a rank document cannot be used (one line), or None. Each rank validated its document against
    the schema before sending it (measure.fleet.rank_problem); this checks, in microseconds rather than
    milliseconds per GPU, every field the analysis reads, so that a document from another version or a
    damaged message becomes a stub rather than an exception."""
    if not isinstance(doc, dict):
        return "not a JSON object"
    if "invalid" in doc:
        return str(doc["invalid"])[:300]
    if doc.get("schema") != RANK_SCHEMA_ID:
        return f"schema {str(doc.get('schema'))[:40]!r}, not {RANK_SCHEMA_ID} (another pygpuperf version?)"
    for key, kind in (("rank", int), ("host", str), ("device", str), ("device_type", str), ("card", str),
                      ("figures", dict), ("health", dict), ("errors", list)):
        if not isinstance(doc.get(key), kind) or (kind is int and isinstance(doc[key], bool)):
            return f"{key} is missing or not a {kind.__name__}"
    for name, figure in doc["figures"].items():
        if not isinstance(figure, dict) or figure.get("status") not in _STATUSES or \
                not isinstance(figure.get("unit"), str):
            return f"figure {str(name)[:60]} is not a figure"
        for key in ("value", "cv"):
            if figure.get(key) is not None and not _is_number(figure[key]):
                return f"figure {str(name)[:60]}: {key} is not a number"
        telemetry = figure.get("telemetry")
        if telemetry is not None and not (isinstance(telemetry, dict) and isinstance(
                telemetry.get("throttle_reasons", []), list)):
            return f"figure {str(name)[:60]}: telemetry is not an object"
        if telemetry and any(telemetry.get(k) is not None and not _is_number(telemetry[k])
                             for k in ("pcie_generation_max_seen", "pcie_width_max_seen")):
            return f"figure {str(name)[:60]}: the PCIe link seen is not a number"
    h = doc["health"]
    for key, fields in _HEALTH_FIELDS.items():
        part = h.get(key)
        if not isinstance(part, dict):
            return f"health/{key} is not an object"
        for f in fields:
            value = part.get(f)
            if value is not None and not (isinstance(value, bool) or _is_number(value)):
                return f"health/{key}/{f} is not a number or a flag"
    for key in ("power_limit_w", "power_limit_default_w"):
        if h.get(key) is not None and not _is_number(h[key]):
            return f"health/{key} is not a number"
    errors = (h.get("gpu_links") or {}).get("errors")
    if errors is not None and not (isinstance(errors, dict) and all(_is_number(v) for v in errors.values())):
        return "health/gpu_links/errors is not a table of counts"
    return None


def stub_rank(rank: int, host: str, problem: str) -> dict[str, Any]:
    """A rank whose document could not be used: no figures, the problem as its error."""
    facts = empty_rank_health("the rank's document could not be used")
    return {"schema": RANK_SCHEMA_ID, "rank": rank, "local_rank": None, "host": host, "device": "unknown",
            "device_type": "unknown", "index": None, "card": "unknown", "versions": {}, "suite": {},
            "figures": {}, "health": facts, "errors": [problem[:300]], "invalid": True}


def ranks_of(hosts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every rank of the host documents, checked; one that is not a valid document becomes a stub."""
    out = []
    for host in hosts:
        name = str(host.get("host", "?"))[:200]
        for i, doc in enumerate(host.get("ranks", [])):
            problem = rank_problem(doc)
            if problem is None:
                out.append(doc)
            else:
                rank = doc.get("rank") if isinstance(doc, dict) and isinstance(doc.get("rank"), int) else -1 - i
                out.append(stub_rank(rank, name, problem))
    out.sort(key=lambda d: d["rank"])
    return out


# --------------------------------------------------------------------------- statistics


def noise_of(values: Sequence[float], cvs: Sequence[float]) -> dict[str, float]:
    """The spread across GPUs (MAD-based, relative to the median) and the median sample CV."""
    a = np.asarray(values, dtype=np.float64)
    median = float(np.median(a))
    mad = float(np.median(np.abs(a - median)))
    spread = MAD_TO_SIGMA * mad / median if median > 0 else 0.0
    sample_cv = float(np.median(cvs)) if len(cvs) else 0.0
    return {"median": median, "mad": mad, "spread": spread, "sample_cv": sample_cv}


def straggler_share(spread: float, sample_cv: float, fixed_percent: float | None = None) -> tuple[float, str]:
    """X as a share, and how it was set."""
    if fixed_percent is not None:
        return fixed_percent / 100.0, "set by the thresholds file"
    noise = max(spread, sample_cv)
    share = min(max(K_SIGMA * noise, MIN_STRAGGLER_SHARE), MAX_STRAGGLER_SHARE)
    which = "spread across the fleet (MAD)" if spread >= sample_cv else "sample CV"
    return share, f"{K_SIGMA:g} x the {which} of {100 * noise:.1f}%, held to {100 * MIN_STRAGGLER_SHARE:g}-" \
                  f"{100 * MAX_STRAGGLER_SHARE:g}%"


def noun_for(device_types: Iterable[str]) -> str:
    """What the judged devices are called: GPUs, or devices where all of them are CPUs."""
    return "GPU" if any(t != "cpu" for t in device_types) else "device"


def _usable(figure: dict[str, Any]) -> bool:
    return figure.get("status") == "ok" and figure.get("value") is not None and figure["value"] > 0


def card_key(doc: dict[str, Any]) -> str:
    return str(doc.get("card") or "unknown")


def card_statistics(ranks: Sequence[dict[str, Any]], thresholds: Thresholds) -> dict[str, Any]:
    """Per card type and figure: the fleet median, its noise, the straggler share X and the expected figure."""
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    cvs: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    units: dict[tuple[str, str], str] = {}
    counts: dict[str, int] = defaultdict(int)
    kinds: dict[str, str] = {}
    for doc in ranks:
        card = card_key(doc)
        counts[card] += 1
        kinds.setdefault(card, str(doc.get("device_type")))
        for name, figure in doc["figures"].items():
            if _usable(figure):
                values[card][name].append(float(figure["value"]))
                if figure.get("cv") is not None:
                    cvs[card][name].append(float(figure["cv"]))
                units[(card, name)] = figure["unit"]
    fixed = thresholds.tolerances.get("straggler_percent")
    out: dict[str, Any] = {}
    for card in counts:
        figures = {}
        for name, vals in sorted(values[card].items()):
            noise = noise_of(vals, cvs[card][name])
            share, how = straggler_share(noise["spread"], noise["sample_cv"], fixed)
            unit = units[(card, name)]
            figures[name] = {"unit": unit, "n": len(vals), **noise, "straggler_share": share, "straggler_basis": how,
                             "stragglers_judged": len(vals) >= MIN_GROUP_FOR_STRAGGLERS,
                             "expected": expected_figure(card, name) if kinds[card] != "cpu" else None}
        out[card] = {"gpus": counts[card], "device_type": kinds[card], "figures": figures}
    return out


# --------------------------------------------------------------------------- judging one GPU


def label(doc: dict[str, Any]) -> str:
    """A GPU as people find it: rank, host and PCI bus id (or device)."""
    where = doc.get("health", {}).get("pci_bus_id") or doc.get("device")
    return f"rank {doc['rank']} ({doc.get('host')}, {where})"


# Memory repairs a GPU reports: (health fact, its flag, the failure, finding id, what it means, the fix).
_MEMORY_REPAIRS = (
    ("row_remapping", "failed", "row remapping failed", "row_remap",
     "a row remapping failed: the memory has no spare rows left where it needs one.", "Replace the GPU (RMA)."),
    ("row_remapping", "pending", "row remapping pending", "row_remap",
     "a row remapping is pending: the memory runs with a bad row until the GPU is reset.",
     "Drain the GPU and reset it (with the vendor tool, e.g. nvidia-smi -r on NVIDIA cards) to apply the remap."),
    ("retired_pages", "pending", "page retirement pending", "retired_pages",
     "a page retirement is pending until the GPU is reset.", "Drain the GPU and reset it to retire the page."),
)


def _finding(severity: str, kind: str, title: str, suggestion: str = "", ranks: Iterable[int] = (),
             host: str | None = None, figure: str | None = None, evidence: dict[str, Any] | None = None,
             count: int | None = None) -> dict[str, Any]:
    ranks = list(ranks)
    return {"severity": severity, "kind": kind, "title": title, "suggestion": suggestion,
            "ranks": ranks[:MAX_NAMED], "count": len(ranks) if count is None else count, "host": host,
            "figure": figure, "evidence": evidence or {}}


class _Judge:
    """The verdict of one GPU, built up reason by reason."""

    def __init__(self, doc: dict[str, Any]):
        self.doc = doc
        self.fail: list[str] = []
        self.unsure: list[str] = []
        self.notes: list[str] = []
        self.figures: dict[str, dict[str, Any]] = {}

    def verdict(self) -> str:
        return "fail" if self.fail else "no verdict" if self.unsure else "pass"


def _level(name: str) -> str:
    return ".".join(name.split(".")[:2])


def _best_streams(figures: dict[str, dict[str, Any]]) -> dict[str, float]:
    """The fastest usable stream of each memory level ("memory.hbm") of one GPU."""
    best: dict[str, float] = {}
    for name, figure in figures.items():
        if name.startswith("memory.") and _usable(figure):
            best[_level(name)] = max(best.get(_level(name), 0.0), float(figure["value"]))
    return best


def _judge_figures(j: _Judge, stats: dict[str, Any], thresholds: Thresholds, findings: list[dict[str, Any]],
                   noisy: dict[int, list[str]], budget: dict[int, list[str]]) -> None:
    doc, card = j.doc, card_key(j.doc)
    tol = thresholds.tolerances
    for name in thresholds.named(card):  # what a thresholds file asks for must have been measured
        figure = doc["figures"].get(name)
        if figure is None and name.count(".") == 1 and name.startswith("memory."):
            if any(n.startswith(name + ".") and f.get("status") != "waived" for n, f in doc["figures"].items()):
                continue  # a level: any of its streams answers
        if figure is None or figure.get("status") == "waived":
            j.unsure.append(f"{name} was not measured" + (f" ({figure['reason']})" if figure else ""))
    best_stream = _best_streams(doc["figures"])
    for name, figure in doc["figures"].items():
        status = figure.get("status")
        if status == "waived":
            if "budget" in (figure.get("reason") or ""):
                budget[doc["rank"]].append(name)
            continue
        if status == "wrong":
            j.fail.append(f"{name} computed a wrong result")
            findings.append(_finding("error", "wrong_result", f"{label(doc)}: {name} computed a wrong result, so "
                                     "the GPU is suspect.", "Take the GPU out of service and run its tests.",
                                     [doc["rank"]], doc.get("host"), name, {"detail": figure.get("reason")}))
            continue
        if status == "error" or not _usable(figure):
            j.fail.append(f"{name} failed: {figure.get('reason') or 'no figure'}")
            findings.append(_finding("error", "probe_error", f"{label(doc)}: the {name} probe failed: "
                                     f"{figure.get('reason') or 'no figure'}.", "Re-run the fleet command on "
                                     "this host; a failure that persists points at the GPU or its driver.",
                                     [doc["rank"]], doc.get("host"), name))
            continue
        value, unit = float(figure["value"]), figure.get("unit")
        low_better = lower_is_better(unit)
        group = stats[card]["figures"].get(name, {})
        median = group.get("median")
        limit, limit_source, of_level = thresholds.limits(card, name, unit)
        if of_level and best_stream.get(_level(name), value) > value:
            limit = None  # the level's best stream answers for it (see ACHIEVABLE_SHARE)
        expected = (group.get("expected") or {}).get("expected")
        entry = {"value": value, "unit": unit, "cv": figure.get("cv"),
                 "vs_median": value / median if median else None,
                 "vs_expected": value / expected if expected else None, "limit": limit, "state": "ok"}
        j.figures[name] = entry
        is_noisy = figure.get("cv") is not None and figure["cv"] > tol["noisy_cv"]
        below = limit is not None and (value > limit if low_better else value < limit)
        straggler = False
        if group.get("stragglers_judged") and median:
            share = group["straggler_share"]
            straggler = value > median * (1 + share) if low_better else value < median * (1 - share)
        if is_noisy:
            entry["state"] = "noisy"
            noisy[doc["rank"]].append(name)
            j.unsure.append(f"{name} is too noisy to judge (CV {100 * figure['cv']:.0f}% > "
                            f"{100 * tol['noisy_cv']:.0f}%)")
            continue
        if below:
            entry["state"] = "below"
            word = "expected" if limit_source == "datasheet" else "minimum"
            j.fail.append(f"{name} {_fmt(value)} {unit} {'above' if low_better else 'below'} its {word} "
                          f"{_fmt(limit)}")
            how = (f"datasheet {_fmt((group.get('expected') or {}).get('datasheet'))} x "
                   f"{(group.get('expected') or {}).get('share', 0):.0%} achievable" if limit_source == "datasheet"
                   else f"the {thresholds.source} thresholds")
            findings.append(_finding(
                "error", "below_expected" if limit_source == "datasheet" else "below_minimum",
                f"{label(doc)}: {name} is {_fmt(value)} {unit}, {'above' if low_better else 'below'} the "
                f"{_fmt(limit)} {unit} a {card} should reach ({how}).",
                "Check the GPU's clocks, power limit and cooling (the figure's telemetry in fleet.json), then "
                "re-run; a GPU that stays low goes back to its vendor.",
                [doc["rank"]], doc.get("host"), name, {"value": value, "limit": limit, "source": limit_source,
                                                        "unit": unit}))
        if straggler:
            entry["state"] = "below" if below else "straggler"
            share = group["straggler_share"]
            off = (value / median - 1) if low_better else (1 - value / median)
            if tol.get("stragglers_fail", True):
                j.fail.append(f"{name} straggles {100 * off:.1f}% behind the fleet median")
            findings.append(_finding(
                "error" if tol.get("stragglers_fail", True) else "warning", "straggler",
                f"{label(doc)}: {name} is {_fmt(value)} {unit}, {100 * off:.1f}% "
                f"{'above' if low_better else 'below'} the median {_fmt(median)} of {group['n']} {card} "
                f"{noun_for([stats[card]['device_type']])}s "
                f"(stragglers: more than {100 * share:.1f}%).",
                "Compare its clocks, temperature and power with its neighbours' in fleet.json; re-run it alone "
                "with --serial to tell a slow card from a shared bottleneck.",
                [doc["rank"]], doc.get("host"), name, {"value": value, "median": median, "share": share,
                                                        "unit": unit}))


def _judge_health(j: _Judge, thresholds: Thresholds, findings: list[dict[str, Any]],
                  throttled: dict[str, list[int]], power: list[int], link_errors: list[int]) -> None:
    doc = j.doc
    h = doc["health"]
    rank, host = doc["rank"], doc.get("host")
    ecc = h.get("ecc_errors") or {}
    during = h.get("ecc_errors_during_suite") or {}
    allowed = int(thresholds.tolerances.get("ecc_uncorrected", 0))
    volatile = ecc.get("volatile_uncorrected")
    if (volatile or 0) > allowed or (during.get("uncorrected") or 0) > 0:
        j.fail.append(f"{volatile} uncorrectable ECC error(s) since the driver loaded")
        findings.append(_finding("error", "ecc", f"{label(doc)}: {volatile} uncorrectable ECC error(s) since the "
                                 "driver loaded" + (f", {during['uncorrected']} during the suite" if during.get(
                                     "uncorrected") else "") + ".",
                                 "Drain the GPU; reset it and watch the counters; replace it if they climb.",
                                 [rank], host, None, {"ecc_errors": ecc, "during_suite": during}))
    elif (ecc.get("aggregate_uncorrected") or 0) > 0:
        j.notes.append(f"{ecc['aggregate_uncorrected']} uncorrectable ECC error(s) over the card's life")
        findings.append(_finding("warning", "ecc", f"{label(doc)}: {ecc['aggregate_uncorrected']} uncorrectable "
                                 "ECC error(s) over the card's life, none since the driver loaded.",
                                 "Watch the counters; retired pages or remapped rows should have contained them.",
                                 [rank], host, None, {"ecc_errors": ecc}))
    for key, flag, fail, finding_id, what, advice in _MEMORY_REPAIRS:
        state = h.get(key) or {}
        if state.get(flag):
            j.fail.append(fail)
            findings.append(_finding("error", finding_id, f"{label(doc)}: {what}", advice, [rank], host, None,
                                     {key: state}))
    gl = h.get("gpu_links") or {}
    if (gl.get("down") or 0) > 0:
        j.fail.append(f"{gl['down']} of {gl['total']} GPU links down")
        findings.append(_finding("error", "gpu_links", f"{label(doc)}: {gl['down']} of its {gl['total']} GPU "
                                 "links are down.", "Check the board and the fabric; a link that stays down "
                                 "halves collective bandwidth or worse.", [rank], host, None, {"gpu_links": gl}))
    if any((gl.get("errors") or {}).get(k, 0) > 0 for k in ("recovery", "replay", "crc_flit", "crc_data")):
        link_errors.append(rank)
        j.notes.append("GPU link error counters are non-zero")
    pcie = h.get("pcie") or {}
    for name, figure in doc["figures"].items():
        t = figure.get("telemetry") or {}
        if not name.startswith("transfer.") or figure.get("status") != "ok":
            continue
        gen, width = t.get("pcie_generation_max_seen"), t.get("pcie_width_max_seen")
        gen_max, width_max = pcie.get("generation_max"), pcie.get("width_max")
        slow = []
        if gen and gen_max and gen < gen_max:
            slow.append(f"Gen{gen} of Gen{gen_max}")
        if width and width_max and width < width_max:
            slow.append(f"x{width} of x{width_max}")
        if slow:
            j.fail.append(f"PCIe link ran at {' and '.join(slow)} during {name}")
            findings.append(_finding("error", "pcie_degraded", f"{label(doc)}: its PCIe link ran at "
                                     f"{' and '.join(slow)} while {name} moved data: a degraded link.",
                                     "Reseat the GPU or its riser, check the slot's BIOS setting and the link "
                                     "error counters; the host link's bandwidth falls with it.",
                                     [rank], host, name, {"seen": {"generation": gen, "width": width},
                                                          "max": {"generation": gen_max, "width": width_max}}))
            break
    reasons = dict.fromkeys(held_clock_reasons(  # each once, in the order the figures show them
        r for figure in doc["figures"].values() for r in (figure.get("telemetry") or {}).get("throttle_reasons") or []))
    for reason in reasons:
        throttled[reason].append(rank)
        j.notes.append(f"clocks held back by {reason.replace('_', ' ')}")
    limit, default = h.get("power_limit_w"), h.get("power_limit_default_w")
    if limit and default and limit < default * diagnostics.POWER_LIMIT_SHARE:
        power.append(rank)
        j.notes.append(f"power limit {limit:g} W below its default {default:g} W")


# --------------------------------------------------------------------------- links


def _link_findings(hosts: Sequence[dict[str, Any]], collectives: Sequence[dict[str, Any]],
                   by_bus: dict[tuple[str, str], _Judge], findings: list[dict[str, Any]]) -> list[str]:
    """Findings on the collectives and each host's P2P matrix; returns the failures no single GPU carries."""
    fleet_failures: list[str] = []
    wrong = [c for c in collectives if c["status"] in ("wrong", "error")]
    for c in wrong:
        fleet_failures.append(f"collective {c['op']} at {c['size_bytes']} B: {c['status']}")
    if wrong:
        findings.append(_finding("error", "collective", f"{len(wrong)} collective measurement(s) failed or "
                                 "computed wrong results: " + ", ".join(f"{c['op']} {c['size_bytes']} B ({c['status']}"
                                                                     f": {c['reason'][:80]})" for c in wrong[:5]) + ".",
                                 "Run python -m pygpuperf.collectives on the same ranks to narrow it down.",
                                 evidence={"failed": wrong[:MAX_NAMED]}))
    measured = [c for c in collectives if c["status"] == "ok" and c["busbw_gbs"] is not None]
    if measured:
        top: dict[str, dict[str, Any]] = {}
        for c in measured:  # each op at its largest message (all_gather's is rounded to whole elements per rank)
            if c["op"] not in top or c["size_bytes"] > top[c["op"]]["size_bytes"]:
                top[c["op"]] = c
        world = measured[0]["world_size"]
        findings.append(_finding("info", "collective", f"Collectives over {world} ranks on "
                                 f"{measured[0]['hosts']} host(s), busbw at the largest message: " + ", ".join(
                                     f"{op} {_fmt(c['busbw_gbs'])} GB/s ({c['size_bytes']} B)" for op, c in top.items())
                                 + ".", evidence={op: {"size_bytes": c["size_bytes"], "busbw_gbs": c["busbw_gbs"]}
                                                  for op, c in top.items()}))
    for host in hosts:
        p2p = host.get("p2p") or {}
        low = []
        for pair, figure in sorted((p2p.get("pairs") or {}).items()):
            src_bus = (p2p.get("gpus") or {}).get(pair.split(".")[0])
            judge = by_bus.get((str(host.get("host")), str(src_bus)))
            if figure.get("status") in ("wrong", "error"):
                arrow = pair.replace(".", "->")
                reason = f"P2P copy GPU {arrow} {figure['status']}: {figure.get('reason', '')[:120]}"
                (judge.fail if judge else fleet_failures).append(reason)
                low.append((pair, figure, None))
                continue
            expected = figure.get("expected_gbs")
            if figure.get("status") == "ok" and expected and figure.get("value") is not None and \
                    figure["value"] < expected * transfers.LINK_EFFICIENCY_FLOOR:
                reason = (f"P2P copy GPU {pair.replace('.', '->')} at {_fmt(figure['value'])} GB/s, below "
                          f"{transfers.LINK_EFFICIENCY_FLOOR:.0%} of the {_fmt(expected)} GB/s its "
                          f"{figure.get('link') or 'link'} carries")
                (judge.fail if judge else fleet_failures).append(reason)
                low.append((pair, figure, expected))
        if low:
            findings.append(_finding("error", "p2p", f"Host {host.get('host')}: {len(low)} GPU pair(s) copy below "
                                     f"{transfers.LINK_EFFICIENCY_FLOOR:.0%} of their link's rate or fail: " +
                                     ", ".join(f"GPU {p.replace('.', '->')} {_fmt(f.get('value'))} GB/s" for p, f, _ in low[:8]) + ".",
                                     "Check the GPU links (the vendor tool, e.g. nvidia-smi nvlink -s) or the PCIe topology between "
                                     "those GPUs.", host=str(host.get("host")),
                                     evidence={"pairs": {p: {"value": f.get("value"), "expected_gbs": e}
                                                         for p, f, e in low[:MAX_NAMED]}}))
    return fleet_failures


# --------------------------------------------------------------------------- the whole fleet


def analyze(hosts: Sequence[dict[str, Any]], collectives: Sequence[dict[str, Any]] = (),
            thresholds: Thresholds | None = None) -> dict[str, Any]:
    """Findings, per-GPU verdicts and the fleet's verdict from host documents (each with its ranks and
    P2P matrix) and the collectives' rows."""
    thresholds = thresholds or Thresholds()
    ranks = ranks_of(hosts)
    stats = card_statistics(ranks, thresholds)
    findings: list[dict[str, Any]] = []
    noisy: dict[int, list[str]] = defaultdict(list)
    budget: dict[int, list[str]] = defaultdict(list)
    throttled: dict[str, list[int]] = defaultdict(list)
    power: list[int] = []
    link_errors: list[int] = []
    unavailable: dict[str, list[int]] = defaultdict(list)
    judges = []
    for doc in ranks:
        j = _Judge(doc)
        if doc.get("invalid"):
            j.unsure.append(doc["errors"][0] if doc["errors"] else "no usable document")
            findings.append(_finding("error", "document", f"{label(doc)}: {j.unsure[0]}",
                                     "Check that every rank runs the same pygpuperf version.", [doc["rank"]],
                                     doc.get("host")))
        else:
            _judge_figures(j, stats, thresholds, findings, noisy, budget)
            if budget.get(doc["rank"]):  # a suite cut short validates only part of the GPU
                j.unsure.append(f"{len(budget[doc['rank']])} probe(s) not run within the time budget")
            _judge_health(j, thresholds, findings, throttled, power, link_errors)
            if doc["health"].get("source") is None:
                unavailable[doc["health"].get("reason") or "not available"].append(doc["rank"])
            if not j.figures and not j.fail:
                j.unsure.append("no figure was measured")
        judges.append(j)
    by_bus = {(str(j.doc.get("host")), str(j.doc["health"].get("pci_bus_id"))): j for j in judges
              if j.doc["health"].get("pci_bus_id")}
    fleet_failures = _link_findings(hosts, collectives, by_bus, findings)
    findings += _fleet_findings(stats, thresholds, noisy, budget, throttled, power, link_errors, unavailable,
                                {j.doc["rank"]: j.doc for j in judges})
    verdicts = [{
        "rank": j.doc["rank"], "host": j.doc.get("host"), "card": card_key(j.doc), "device": j.doc.get("device"),
        "uuid": j.doc["health"].get("uuid"), "pci_bus_id": j.doc["health"].get("pci_bus_id"),
        "verdict": j.verdict(), "reasons": (j.fail or j.unsure)[:MAX_NAMED], "notes": j.notes[:MAX_NAMED],
        "figures": j.figures,
    } for j in judges]
    counts = {v: sum(1 for x in verdicts if x["verdict"] == v) for v in ("pass", "fail", "no verdict")}
    passed = counts["fail"] == 0 and counts["no verdict"] == 0 and not fleet_failures and bool(verdicts)
    findings.sort(key=lambda f: (_SEVERITY_ORDER[f["severity"]], f["kind"], f["ranks"][:1]))
    return {
        "ranks": ranks,
        "cards": stats,
        "findings": findings,
        "verdicts": verdicts,
        "verdict": {"passed": passed, **{k.replace(" ", "_"): n for k, n in counts.items()},
                    "gpus": len(verdicts), "fleet_failures": fleet_failures[:MAX_NAMED], "exit_code": 0 if passed else 1,
                    "thresholds": thresholds.source, "tolerances": thresholds.tolerances,
                    "summary": _summary(counts, fleet_failures, len(verdicts), noun_for(r["device_type"] for r in ranks))},
    }


def _summary(counts: dict[str, int], fleet_failures: list[str], gpus: int, noun: str = "GPU") -> str:
    if not gpus:
        return "No rank sent a document: nothing to judge."
    parts = [f"{counts['pass']} of {gpus} {noun}(s) pass"]
    if counts["fail"]:
        parts.append(f"{counts['fail']} fail")
    if counts["no verdict"]:
        parts.append(f"{counts['no verdict']} without a verdict (measurements too noisy or missing)")
    if fleet_failures:
        parts.append(f"{len(fleet_failures)} link check(s) fail")
    return ", ".join(parts) + "."


def _names(ranks: Sequence[int], docs: dict[int, dict[str, Any]]) -> str:
    shown = ", ".join(label(docs[r]) for r in ranks[:5] if r in docs)
    return shown + (f" and {len(ranks) - 5} more" if len(ranks) > 5 else "")


def _fleet_findings(stats: dict[str, Any], thresholds: Thresholds, noisy: dict[int, list[str]],
                    budget: dict[int, list[str]], throttled: dict[str, list[int]], power: list[int],
                    link_errors: list[int], unavailable: dict[str, list[int]],
                    docs: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """One finding per kind across the fleet, naming the first GPUs and counting the rest."""
    out = []
    tol = thresholds.tolerances
    fleet_noun = noun_for(g["device_type"] for g in stats.values())
    for card, group in stats.items():
        noun = noun_for([group["device_type"]])
        judged = {n: f for n, f in group["figures"].items() if f["stragglers_judged"]}
        if not judged:
            if group["figures"]:
                out.append(_finding("info", "straggler_threshold", f"{group['gpus']} {card} {noun}(s): too few to name "
                                    f"stragglers (at least {MIN_GROUP_FOR_STRAGGLERS} of one card type are needed).",
                                    evidence={"card": card}))
            continue
        shares = [f["straggler_share"] for f in judged.values()]
        capped = [n for n, f in judged.items() if f["straggler_share"] >= MAX_STRAGGLER_SHARE]
        basis = ("set by the thresholds file" if tol.get("straggler_percent") is not None else
                 f"{K_SIGMA:g} x the measured noise per figure: the spread across the fleet ({MAD_TO_SIGMA:g} x MAD / median) or "
                 f"the median sample CV, whichever is larger, at least {100 * MIN_STRAGGLER_SHARE:g}%")
        out.append(_finding(
            "warning" if capped else "info", "straggler_threshold",
            f"Stragglers among {group['gpus']} {card} {noun}s are those more than {100 * min(shares):.1f}"
            + (f"-{100 * max(shares):.1f}" if max(shares) > min(shares) else "")
            + f"% worse than the fleet median ({basis})"
            + (f"; {', '.join(capped)} vary too much to tell a straggler" if capped else "") + ".",
            evidence={"card": card, "straggler_percent": {n: round(100 * f["straggler_share"], 2)
                                                          for n, f in judged.items()},
                      "spread_percent": {n: round(100 * f["spread"], 2) for n, f in judged.items()},
                      "sample_cv_percent": {n: round(100 * f["sample_cv"], 2) for n, f in judged.items()}}))
    if noisy:
        ranks = sorted(noisy)
        which = Counter(name for names in noisy.values() for name in names).most_common(4)
        out.append(_finding(
            "warning", "noisy", f"{len(ranks)} {fleet_noun}(s) measured too noisily for a verdict (CV above "
            f"{100 * tol['noisy_cv']:.0f}%): {_names(ranks, docs)}, in "
            + ", ".join(f"{name} ({count})" for name, count in which)
            + "; those figures support neither pass nor fail.",
            f"Something else ran on those {fleet_noun}s or hosts, or their clocks moved: re-run on idle machines, "
            f"with --serial to keep the {fleet_noun}s of a host from sharing the host's memory and links.", ranks,
            evidence={"figures": {str(r): noisy[r] for r in ranks[:MAX_NAMED]}, "noisy_cv": tol["noisy_cv"]}))
    if budget:
        ranks = sorted(budget)
        out.append(_finding("warning", "budget", f"{len(ranks)} {fleet_noun}(s) ran out of the time budget before every "
                            f"probe ran: {_names(ranks, docs)}; the probes left out are not judged, so those "
                            f"{fleet_noun}s have no verdict.",
                            "Give --budget-s more time (or drop --serial) to measure every figure.", ranks,
                            evidence={"figures": {str(r): budget[r] for r in ranks[:MAX_NAMED]}}))
    for reason, ranks in sorted(throttled.items()):
        out.append(_finding("warning", "throttling", f"Clocks were held back by {reason.replace('_', ' ')} on "
                            f"{len(ranks)} GPU(s) while probes ran: {_names(ranks, docs)}.",
                            "Check cooling, power delivery and power limits before comparing their figures.",
                            ranks, evidence={"reason": reason}))
    if power:
        out.append(_finding("warning", "power_limit", f"{len(power)} GPU(s) run with a power limit below their "
                            f"default: {_names(power, docs)}.", "Restore the default limit (the vendor tool, e.g. nvidia-smi -pl) "
                            "unless it was lowered on purpose.", power,
                            evidence={str(r): {"limit_w": docs[r]["health"]["power_limit_w"],
                                               "default_w": docs[r]["health"]["power_limit_default_w"]}
                                      for r in power[:MAX_NAMED]}))
    if link_errors:
        out.append(_finding("warning", "gpu_link_errors", f"{len(link_errors)} GPU(s) count GPU-link errors "
                            f"(replay, recovery or CRC): {_names(link_errors, docs)}.",
                            "Counters climbing between runs point at a bad link or connector.", link_errors,
                            evidence={str(r): docs[r]["health"]["gpu_links"]["errors"]
                                      for r in link_errors[:MAX_NAMED]}))
    for reason, ranks in unavailable.items():
        out.append(_finding("info", "facts_not_available", f"Health facts are not available for {len(ranks)} "
                            f"rank(s): {reason}.", "", ranks))
    return out


def fleet_document(hosts: Sequence[dict[str, Any]], collectives: Sequence[dict[str, Any]], meta: dict[str, Any],
                   thresholds: Thresholds | None = None) -> dict[str, Any]:
    """fleet.json (`pygpuperf-fleet/1`): the run's facts, every rank, the links and the analysis."""
    thresholds = thresholds or Thresholds()
    result = analyze(hosts, collectives, thresholds)
    return {
        "schema": SCHEMA_ID,
        "meta": meta,
        "thresholds": {"source": thresholds.source, "tolerances": thresholds.tolerances},
        "hosts": [{"host": str(h.get("host", "?"))[:200],
                   "ranks": [d["rank"] for d in h.get("ranks", []) if isinstance(d, dict) and isinstance(
                       d.get("rank"), int)],
                   "p2p": h.get("p2p") or {"status": "waived", "reason": "none sent", "gpus": {}, "pairs": {}}}
                  for h in hosts],
        "ranks": result["ranks"],
        "collectives": list(collectives),
        "cards": result["cards"],
        "findings": result["findings"],
        "verdicts": result["verdicts"],
        "verdict": result["verdict"],
    }


def hosts_from_document(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The host documents a fleet.json was made from (its ranks under their hosts), to judge them again."""
    by_rank = {r["rank"]: r for r in doc["ranks"]}
    return [{"schema": "pygpuperf-fleet-host/1", "host": h["host"], "p2p": h["p2p"],
             "ranks": [by_rank[r] for r in h["ranks"] if r in by_rank]} for h in doc["hosts"]]
