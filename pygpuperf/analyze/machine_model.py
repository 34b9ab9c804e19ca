"""Machine models built from datasheet figures alone, for cards nobody has measured here.

A datasheet model has the shape of a measured one (pygpuperf.core.results.MachineModel, keys as
analyze.machine_model.build_machine_model makes them) with origin "datasheet": every ceiling's backend is
"datasheet" and its source names the document, its version and how the figure was read
(e.g. "with sparsity, halved"). Vendor figures are peaks; measured ceilings reach some 85-95 %.
"""

from __future__ import annotations

import copy
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Iterable

from pygpuperf.core import documents
from pygpuperf.core.errors import UsageError
from pygpuperf.core.validation import CEILING_FAMILIES, check_machine_model, one_line
from pygpuperf.facts import datasheets
from pygpuperf.analyze.transfers import fit_measurements, link_fits
from pygpuperf.core.results import (MEMORY_CEILING_OPS, Ceiling, LinkFit, MachineModel, Measurement, is_series_point,
                                    unit_for)

BACKEND = "datasheet"

# Measurement family -> MachineModel table; memory keys keep only the level ("memory.hbm" -> "hbm").
_TABLES = {"compute": "compute", "memory": "memory", "transfer": "links"}


class UnknownCardError(KeyError):
    """No datasheet entry has this key; the message lists the ones there are."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


def card_keys() -> list[str]:
    """Slugs of every card in the datasheet table, e.g. "h200-sxm", "rtx3090"."""
    return [card["key"] for card in datasheets.datasheet_document()["cards"]]


def card(key: str) -> dict[str, Any]:
    """The datasheet entry of a card slug. Raises UnknownCardError naming the known slugs."""
    for entry in datasheets.datasheet_document()["cards"]:
        if entry["key"] == key:
            return entry
    raise UnknownCardError(f"no datasheet entry {key!r}; known cards: {', '.join(card_keys())}")


def describe_source(entry: dict[str, Any]) -> str:
    """One line naming the document behind a value or fact, and how the figure was read."""
    doc = datasheets.datasheet_source(entry["source"])
    text = f"{doc['title']}, {doc['version']}"
    return f"{text}: {entry['note']}" if entry.get("note") else text


def machine_model(card_key: str) -> MachineModel:
    """A MachineModel from the datasheet entry alone: compute, memory and host-link ceilings."""
    entry = card(card_key)
    model = MachineModel(device=entry["name"], origin="datasheet")
    for name, value in entry["values"].items():
        family, _, rest = name.partition(".")
        table = getattr(model, _TABLES[family])
        key = rest.split(".", 1)[0] if family == "memory" else rest
        table[key] = Ceiling(float(value["value"]), unit_for(name), describe_source(value), BACKEND)
    model.fill_ridge_points()
    sizes = entry["facts"]
    if "l2_cache_mib" in sizes:
        model.capacity["l2"] = Ceiling(sizes["l2_cache_mib"]["value"] * 2**20, "B",
                                       describe_source(sizes["l2_cache_mib"]), BACKEND)
    for key, fact in (("compute_units", "multiprocessors"), ("clock_mhz", "boost_clock_mhz"), ("board_power_w", "tdp_w")):
        if fact in sizes:
            model.facts[key] = float(sizes[fact]["value"])
    if "memory_gb" in sizes:  # decimal GB: the smaller reading of a vendor's "80 GB"
        model.capacity["memory"] = Ceiling(sizes["memory_gb"]["value"] * 1e9, "B",
                                           describe_source(sizes["memory_gb"]), BACKEND)
    return model


# --------------------------------------------------------------------------- achievable ceilings

ACHIEVABLE = "achievable"
_MATRIX_KEYS = ("compute.library.fp16", "compute.library.fp16acc16", "compute.library.bf16", "compute.library.tf32",
                "compute.library.fp8", "compute.library.int8")


def _kind(key: str) -> str:
    """What a figure's efficiency is shared with: main memory, matrix math or vector math."""
    return "memory" if key.startswith("memory.") else "matrix" if key in _MATRIX_KEYS else "vector"


def family(card_key: str) -> str:
    """The card's architecture family ("Hopper", "Ampere", "Ada Lovelace"), from the datasheet's architecture."""
    return str(facts(card_key).get("architecture", "")).split(" (")[0].strip()


def _fractions(exclude: Collection[str]) -> list[tuple[str, str, float]]:
    """(family, key, published / datasheet) of every published figure the datasheet table also gives,
    cards in `exclude` left out."""
    out = []
    for key, figures in datasheets.achievable_document()["cards"].items():
        if key in exclude or key not in card_keys():
            continue
        sheet = card(key)["values"]
        for name, entry in figures.items():
            if name in sheet and float(sheet[name]["value"]) > 0:
                out.append((family(key), name, float(entry["value"]) / float(sheet[name]["value"])))
    return out


def family_of(model: MachineModel) -> str | None:
    """The architecture family of a measured or datasheet model's card, where the datasheet table knows it."""
    sheet = datasheets.datasheet_for(model.device) or next(
        (c for c in datasheets.datasheet_document()["cards"] if c["name"] == model.device), None)
    return family(sheet["key"]) if sheet else None


def achievable_fraction(card_key: str, name: str, exclude: Collection[str] = ()) -> tuple[float, str] | None:
    """(published / datasheet, what it was learned from) for a figure of the card: the median over the cards
    of its family with the same figure, else with the same kind of figure (main memory, matrix, vector), else
    over every card the same way; None where no card has one."""
    fractions = _fractions(set(exclude) | {card_key})
    mine = family(card_key)
    for scope, wanted in ((mine, name), (mine, _kind(name)), (None, name), (None, _kind(name))):
        found = [f for fam, key, f in fractions
                 if (scope is None or fam == scope) and (key == wanted or _kind(key) == wanted)]
        if found:
            where = f"{scope} cards" if scope else "all cards"
            return statistics.median(found), f"median published/datasheet of {len(found)} {wanted} figure(s), {where}"
    return None


def achievable_model(card_key: str, held_out: bool = False, exclude: Collection[str] = ()) -> MachineModel:
    """The card's datasheet model with what kernels achieve in place of peaks: the published achievable figure
    of each main-memory, library-GEMM and vector ceiling (data/achievable.json), else the datasheet figure
    times the fraction published figures reach on its architecture family (:func:`achievable_fraction`).
    `held_out` ignores the card's own published figures (leave-one-card-out validation); `exclude` leaves
    other cards out of the fractions."""
    model = machine_model(card_key)
    model.origin = ACHIEVABLE
    published = {} if held_out else datasheets.achievable_figures(card_key)
    skip = set(exclude) | ({card_key} if held_out else set())
    for name, value in card(card_key)["values"].items():
        if name not in datasheets.ACHIEVABLE_KEYS:
            continue
        fam, _, rest = name.partition(".")
        table, key = getattr(model, _TABLES[fam]), rest.split(".", 1)[0] if fam == "memory" else rest
        if name in published:
            entry = published[name]
            doc = datasheets.achievable_source(entry["source"])
            table[key] = Ceiling(float(entry["value"]), unit_for(name), f"{doc['title']}, {doc['version']}", ACHIEVABLE)
            continue
        fraction = achievable_fraction(card_key, name, skip)
        if fraction is not None:
            table[key] = Ceiling(float(value["value"]) * fraction[0], unit_for(name),
                                 f"datasheet x {fraction[0]:.2f} ({fraction[1]})", ACHIEVABLE)
    model.fill_ridge_points()
    return model


def achievable_view(model: MachineModel, levels: Collection[str] | None = None) -> MachineModel:
    """The model as kernels achieve it: each matrix ceiling at the library's GEMM rate of its precision where
    that is known and lower (what a framework's GEMMs reach), and only the memory `levels` given (the ones
    both cards of a prediction have, so that a kernel's bytes are priced alike on both)."""
    view = copy.deepcopy(model)
    for key in [k for k in view.compute if k.startswith("tensor.")]:
        _, dtype, accumulate = key.split(".")
        dtype_key = "tf32" if dtype == "fp32" else dtype
        library = view.compute.get(f"library.{dtype_key}" + ("acc16" if accumulate == "acc16" else "")) \
            or view.compute.get(f"library.{dtype_key}")
        if library is not None and 0 < library.value < view.compute[key].value:
            view.compute[key] = library
    if levels is not None:
        view.memory = {level: c for level, c in view.memory.items() if level in levels}
    view.fill_ridge_points()
    return view


def facts(card_key: str) -> dict[str, Any]:
    """The card's facts as plain values: memory type and size, clocks, SMs, links, power, segment."""
    return {name: fact["value"] for name, fact in card(card_key)["facts"].items()}


def build_machine_model(device: str, measurements: Iterable[Measurement]) -> MachineModel:
    """Best usable figure per ceiling: memory levels take the best of their streams
    (read/write/copy/...); sweep points and bank-conflict cases are evidence, not ceilings.
    A noisy measurement (CV above NOISY_CV) sets a ceiling only where nothing quieter measured it.
    Transfers measured at several sizes also get a latency + bandwidth fit (link_fits)."""
    measurements = list(measurements)  # read twice: ceilings, then the transfer fits
    model = MachineModel(device=device)
    quiet: set[tuple[str, str]] = set()  # (table, key) already set by a measurement that is not noisy
    for m in sorted(measurements, key=lambda m: m.noisy):  # quiet ones first
        if not m.usable or is_series_point(m.name):
            continue
        family, _, rest = m.name.partition(".")
        lower = False
        if family == "compute":
            key, table = rest, model.compute
        elif family == "memory" and rest.split(".")[-1] in MEMORY_CEILING_OPS:
            key, table = rest.split(".", 1)[0], model.memory
        elif family == "transfer":
            key, table = rest, model.links
        elif family == "latency":
            key, table, lower = rest, model.latency, True
        elif family == "collective":
            key, table = rest, model.communication
        else:
            continue
        best = table.get(key)
        if m.noisy and (family, key) in quiet:
            continue  # a noisy figure never displaces a quiet one, however high
        better = best is None or (m.value < best.value if lower else m.value > best.value)
        if better:
            table[key] = Ceiling(m.value, m.unit, m.name, m.backend, m.stats.cv)
            if not m.noisy:
                quiet.add((family, key))
    model.link_fits = link_fits(measurements)
    model.memory_fits = memory_size_fits(measurements)
    model.fill_ridge_points()
    return model


SIZE_SWEEP = "memory.size.sweep"


def memory_size_fits(measurements: Iterable[Measurement]) -> dict[str, LinkFit]:
    """memory.size.sweep fitted per level and op ("hbm.copy", "l2.read"): time per kernel = t0 + bytes / bandwidth."""
    groups: dict[str, list[Measurement]] = {}
    for m in measurements:
        if m.name == SIZE_SWEEP and m.usable and m.params.get("level") and m.params.get("op"):
            groups.setdefault(f"{m.params['level']}.{m.params['op']}", []).append(m)
    fits = {key: fit_measurements(group) for key, group in sorted(groups.items())}
    return {key: fit for key, fit in fits.items() if fit is not None}



DATASHEET_PREFIX = "datasheet:"


@dataclass
class LoadedModel:
    """A machine model a command was given: from `datasheet:<card>` or from a run's results.json."""

    name: str  # the card key, or the measured device's name (one printable line)
    spec: str  # the argument as given
    origin: str  # "datasheet" or "measured"
    model: MachineModel
    card: dict[str, Any] | None  # the card's datasheet entry, where the table knows it


def load_model(spec: str) -> LoadedModel:
    """The machine model `spec` names: "datasheet:<card>", or a results.json written by the roofline
    command (or a folder holding one), its values checked (pygpuperf.core.validation). A run stopped
    before it was concluded gets its model built from its measurements. Raises UsageError, one line."""
    if spec.startswith(DATASHEET_PREFIX):
        key = spec[len(DATASHEET_PREFIX):]
        try:
            return LoadedModel(key, spec, "datasheet", machine_model(key), card(key))
        except UnknownCardError:
            raise UsageError(f"{one_line(spec, 80)}: no such card; use one of "
                             f"{', '.join(DATASHEET_PREFIX + k for k in card_keys())}") from None
    path = Path(spec)
    if path.is_dir() and (path / "results.json").is_file():
        path = path / "results.json"
    fix = f"give a results.json written by python -m pygpuperf.roofline, or {DATASHEET_PREFIX}<card>"
    if not path.is_file():
        raise UsageError(f"{one_line(spec, 120)}: no such results file; {fix}")
    try:
        results = documents.load_results(path)
        name = _device_name(results.meta)
        model = results.machine_model or build_machine_model(name, results.measurements)
        check_machine_model(model, one_line(path, 120))
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError, RecursionError) as exc:
        # Not valid JSON or schema, or valid yet unusable (an integer too large for a float, a zero ceiling).
        raise UsageError(f"{one_line(exc)}; {fix}") from None
    if not any(getattr(model, family) for family in CEILING_FAMILIES):
        raise UsageError(f"{one_line(path, 120)}: has no measured ceilings; re-run python -m pygpuperf.roofline "
                         "without --probes, or with the families it needs")
    return LoadedModel(name, spec, "measured", model, datasheets.datasheet_for(name))


def _device_name(meta: Any) -> str:
    device = meta.get("device") if isinstance(meta, dict) else None
    name = device.get("name") if isinstance(device, dict) else None
    return one_line(name, 60) if isinstance(name, str) and name.strip() else "unnamed device"
