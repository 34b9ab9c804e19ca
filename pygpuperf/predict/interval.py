"""The 80 % interval of a prediction on another card, from the validation residuals (data/prediction_spread.json).

Each part of the predicted step carries the spread its kind of prediction showed in validation, as a standard
deviation of log(predicted / measured):

- a kernel class (tensor_gemm, memory_bound, ...) predicted between cards of one architecture family: the
  spread of that class's predicted time against the other card's own profile on real pairs;
- a target of another family, or one not measured (its ceilings from published or datasheet figures): the
  spread of published figures predicted leave-one-card-out, added in quadrature;
- the host, where it takes HOST_SHARE of the step or more: the target's CPU is unknown, so the step carries the
  spread host-bound real pairs showed, in proportion to the host's share.

The kernel classes' spreads add up by their shares of the predicted step (their errors are not independent: one
card's clock moves them together). `benchmarks/validate_predictions.py --write-spread` writes the file from the
reference data; the same harness reports how often the intervals cover the outcome.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Mapping

Z80 = 1.2816  # the standard normal's 90th percentile: an 80 % two-sided interval
HOST_SHARE = 0.5  # from this share of the step on, the host (unknown on the target) adds its spread
SPREAD_SCHEMA = "pygpuperf/prediction-spread/1"


@dataclass(frozen=True)
class Spread:
    per_class: Mapping[str, float]  # sigma of log error per kernel class and idle part, one family
    other: float  # sigma added (in quadrature) for a target of another family or without a measured model
    host: float  # sigma per unit host share, from the host's share HOST_SHARE on
    default_class: float  # sigma of a part no validation row covered

    @staticmethod
    def from_dict(doc: Mapping) -> "Spread":
        if doc.get("schema") != SPREAD_SCHEMA:
            raise ValueError(f"prediction spread: schema {doc.get('schema')!r}, this version reads {SPREAD_SCHEMA}")
        return Spread(dict(doc["per_class"]), float(doc["other"]), float(doc["host"]), float(doc["default_class"]))

    def to_dict(self) -> dict:
        return {"schema": SPREAD_SCHEMA, "per_class": dict(sorted(self.per_class.items())), "other": self.other,
                "host": self.host, "default_class": self.default_class}


@lru_cache(maxsize=1)
def shipped() -> Spread:
    text = resources.files("pygpuperf").joinpath("data/prediction_spread.json").read_text(encoding="utf-8")
    return Spread.from_dict(json.loads(text))


def sigma(parts_us: Mapping[str, float], step_us: float, host_us: float | None, same_family_measured: bool,
          spread: Spread, host_known: bool = False) -> tuple[float, list[str]]:
    """(sigma of log(step), why it is that wide) for a predicted step made of `parts_us` (category -> µs);
    `host_known`: the target's host was given, so a host-bound step adds no spread of its own."""
    total = sum(parts_us.values()) or 1.0
    kernels = sum(us / total * spread.per_class.get(str(c), spread.default_class) for c, us in parts_us.items())
    doubts = []
    variance = kernels ** 2
    if not same_family_measured:
        variance += spread.other ** 2
        doubts.append("the target is of another architecture family, or priced from published or datasheet figures")
    share = min(host_us / step_us, 1.0) if host_us and step_us > 0 else 0.0
    if share >= HOST_SHARE and not host_known:
        variance += (spread.host * share) ** 2
        doubts.append(f"the host takes {100 * share:.0f} % of the step: the target's CPU, not known here, sets its pace")
    return math.sqrt(variance), doubts


def bounds(value: float, sigma_log: float) -> tuple[float, float]:
    """The 80 % interval of a value whose log has standard deviation `sigma_log`."""
    return value * math.exp(-Z80 * sigma_log), value * math.exp(Z80 * sigma_log)
