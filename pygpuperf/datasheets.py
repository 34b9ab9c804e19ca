"""Machine models built from datasheet figures alone, for cards nobody has measured here.

A datasheet model has the shape of a measured one (pygpuperf.results.MachineModel, keys as
MachineModel.from_measurements makes them) with origin "datasheet": every ceiling's backend is
"datasheet" and its source names the document, its version and how the figure was read
(e.g. "with sparsity, halved"). Vendor figures are peaks; measured ceilings reach some 85-95 %.
"""

from __future__ import annotations

from typing import Any

from pygpuperf import peaks
from pygpuperf.results import Ceiling, MachineModel, unit_for

BACKEND = "datasheet"

# Measurement family -> MachineModel table; memory keys keep only the level ("memory.hbm" -> "hbm").
_TABLES = {"compute": "compute", "memory": "memory", "transfer": "links"}


class UnknownCardError(KeyError):
    """No datasheet entry has this key; the message lists the ones there are."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


def card_keys() -> list[str]:
    """Slugs of every card in the datasheet table, e.g. "h200-sxm", "rtx3090"."""
    return [card["key"] for card in peaks.datasheet_document()["cards"]]


def card(key: str) -> dict[str, Any]:
    """The datasheet entry of a card slug. Raises UnknownCardError naming the known slugs."""
    for entry in peaks.datasheet_document()["cards"]:
        if entry["key"] == key:
            return entry
    raise UnknownCardError(f"no datasheet entry {key!r}; known cards: {', '.join(card_keys())}")


def describe_source(entry: dict[str, Any]) -> str:
    """One line naming the document behind a value or fact, and how the figure was read."""
    doc = peaks.datasheet_source(entry["source"])
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
    if "memory_gb" in sizes:  # decimal GB: the smaller reading of a vendor's "80 GB"
        model.capacity["memory"] = Ceiling(sizes["memory_gb"]["value"] * 1e9, "B",
                                           describe_source(sizes["memory_gb"]), BACKEND)
    return model


def facts(card_key: str) -> dict[str, Any]:
    """The card's facts as plain values: memory type and size, clocks, SMs, links, power, segment."""
    return {name: fact["value"] for name, fact in card(card_key)["facts"].items()}
