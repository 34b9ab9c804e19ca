"""The vendor datasheet table (data/datasheets.json, validated against data/datasheets.schema.json):
the '% of datasheet' column's figures and every card's facts, each naming its source document."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

import jsonschema

MAX_DATASHEET_BYTES = 4 * 1024 * 1024


class DatasheetError(ValueError):
    """The datasheet table cannot be used; the message says where and why."""


@lru_cache(maxsize=1)
def datasheets_schema() -> dict[str, Any]:
    text = resources.files("pygpuperf").joinpath("data/datasheets.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def validate_datasheets(doc: Any, origin: str = "datasheets.json") -> None:
    """Raise DatasheetError unless `doc` is a valid datasheet table whose every source id resolves
    and whose card keys and match prefixes are unambiguous."""
    validator = jsonschema.Draft202012Validator(datasheets_schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(doc))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise DatasheetError(f"{origin}: not a valid datasheet table at {where}: {error.message[:300]}")
    sources = doc["sources"]
    keys: set[str] = set()
    prefixes: dict[str, str] = {}
    for card in doc["cards"]:
        key = card["key"]
        if key in keys:
            raise DatasheetError(f"{origin}: card key {key!r} appears twice")
        keys.add(key)
        for table in ("facts", "values"):
            for name, entry in card[table].items():
                if entry["source"] not in sources:
                    raise DatasheetError(f"{origin}: {key} {table}/{name} cites source {entry['source']!r}, "
                                         "which the sources table does not list")
        for prefix in card["match"]:
            for other, owner in prefixes.items():
                if owner != key and _overlap(prefix, other):
                    raise DatasheetError(f"{origin}: match prefix {prefix!r} of {key} overlaps {other!r} of {owner}")
            prefixes[prefix] = key


def _matches(device_name: str, pattern: str) -> bool:
    """A match entry is a name prefix, or with a trailing '$' the exact name (the L4 is a prefix of the L40S)."""
    return device_name == pattern[:-1] if pattern.endswith("$") else device_name.startswith(pattern)


def _overlap(a: str, b: str) -> bool:
    """Whether some device name would match both entries."""
    if a.endswith("$") and b.endswith("$"):
        return a == b
    if a.endswith("$") or b.endswith("$"):
        exact, prefix = (a, b) if a.endswith("$") else (b, a)
        return _matches(exact[:-1], prefix)
    return a.startswith(b) or b.startswith(a)


def parse_datasheets(text: str, origin: str = "datasheets.json") -> dict[str, Any]:
    """Parse and validate a datasheet table (plain JSON; nothing in it is executed)."""
    if len(text) > MAX_DATASHEET_BYTES:
        raise DatasheetError(f"{origin}: {len(text)} characters is larger than a datasheet table can be")
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise DatasheetError(f"{origin}: not valid JSON: {str(exc)[:200]}") from None
    validate_datasheets(doc, origin)
    return doc


def _reject_constant(name: str) -> None:
    raise ValueError(f"non-standard JSON constant {name}")


@lru_cache(maxsize=1)
def datasheet_document() -> dict[str, Any]:
    """The validated datasheet table shipped with pygpuperf."""
    text = resources.files("pygpuperf").joinpath("data/datasheets.json").read_text(encoding="utf-8")
    return parse_datasheets(text, "pygpuperf/data/datasheets.json")


def _datasheets() -> list[dict[str, Any]]:
    return datasheet_document()["cards"]


def datasheet_for(device_name: str) -> dict[str, Any] | None:
    """The datasheet entry whose match list names this device, or None for an unknown card."""
    for card in _datasheets():
        if any(_matches(device_name, m) for m in card["match"]) and not any(
                _matches(device_name, x) for x in card.get("exclude", ())):
            return card
    return None


def datasheet_value(card: dict[str, Any] | None, measurement_name: str) -> float | None:
    """Datasheet figure for a measurement; memory levels match on 'memory.<level>'."""
    if card is None:
        return None
    values = card["values"]
    if measurement_name in values:
        return float(values[measurement_name]["value"])
    parts = measurement_name.split(".")
    if parts[0] == "memory" and len(parts) >= 2:
        key = ".".join(parts[:2])
        if key in values:
            return float(values[key]["value"])
    return None


def datasheet_fact(card: dict[str, Any] | None, name: str) -> Any | None:
    """A fact of a card ("memory_type", "boost_clock_mhz", ...), or None where the table has none."""
    if card is None or name not in card["facts"]:
        return None
    return card["facts"][name]["value"]


def datasheet_source(source_id: str) -> dict[str, str]:
    """The document a source id names: publisher, title, version, url."""
    return datasheet_document()["sources"][source_id]


# --------------------------------------------------------------------------- published achievable figures

# Keys of the achievable table, as the datasheet table names the same figures.
ACHIEVABLE_KEYS = ("memory.hbm", "compute.library.fp16", "compute.library.fp16acc16", "compute.library.bf16",
                   "compute.library.tf32", "compute.library.fp32", "compute.library.fp8", "compute.library.int8",
                   "compute.cuda.fp32")


@lru_cache(maxsize=1)
def achievable_document() -> dict[str, Any]:
    """The validated table of published achievable figures (data/achievable.json): what public benchmarks
    measured per card (STREAM-type bandwidth, the vendor library's large-GEMM rate), each naming its source."""
    root = resources.files("pygpuperf").joinpath("data")
    schema = json.loads(root.joinpath("achievable.schema.json").read_text(encoding="utf-8"))
    doc = json.loads(root.joinpath("achievable.json").read_text(encoding="utf-8"), parse_constant=_reject_constant)
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(doc))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise DatasheetError(f"pygpuperf/data/achievable.json: not valid at {where}: {error.message[:300]}")
    for key, figures in doc["cards"].items():
        for name, entry in figures.items():
            if entry["source"] not in doc["sources"]:
                raise DatasheetError(f"pygpuperf/data/achievable.json: {key} {name} cites source "
                                     f"{entry['source']!r}, which the sources table does not list")
    return doc


def achievable_figures(card_key: str) -> dict[str, dict[str, Any]]:
    """The card's published achievable figures by key ("memory.hbm", "compute.library.bf16"), or {}."""
    return achievable_document()["cards"].get(card_key, {})


def achievable_source(source_id: str) -> dict[str, str]:
    return achievable_document()["sources"][source_id]
