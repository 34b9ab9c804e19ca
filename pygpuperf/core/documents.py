"""Reading and writing results: JSON (validated), CSV and a pandas DataFrame.

Results files, and the explain.json and published-figures files other commands read, are
untrusted input: they are parsed as plain JSON (never pickle or eval), bounded in size, and
validated against their schema in data/.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import uuid
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Callable, TextIO

import jsonschema
import pandas as pd

from pygpuperf.core.results import Results, measurement_dict, per_watt

MAX_RESULTS_BYTES = 256 * 1024 * 1024


class ResultsFileError(ValueError):
    """A results file that cannot be used; the message says which file and why."""


@lru_cache(maxsize=None)
def schema(name: str) -> dict[str, Any]:
    """A JSON schema shipped in pygpuperf/data (results, explain, findings, prediction, compare, batch_sweep, ...)."""
    text = resources.files("pygpuperf").joinpath(f"data/{name}.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def results_schema() -> dict[str, Any]:
    return schema("results")


def _reject_constant(name: str) -> None:
    raise ValueError(f"non-standard JSON constant {name}")


def _finite_float(text: str) -> float:
    """JSON numbers beyond a double (1e400) would parse as infinity: no measurement is infinite."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _bounded_int(text: str) -> int:
    """Integers past 2**63 count nothing real here and would overflow a float."""
    value = int(text)
    if abs(value) >= 2**63:
        raise ValueError(f"integer {text[:40]}... is out of range")
    return value


def parse_json(text: str) -> Any:
    """Plain JSON with no NaN, Infinity or out-of-range numbers; ValueError otherwise."""
    return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_bounded_int)


def _most_specific(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """Into a oneOf/anyOf failure, down to the deepest error of the branch that matched best: "'points'
    is a required property at machine_model/link_fits/h2d.pinned" rather than the whole object."""
    while error.context:
        error = max(error.context, key=lambda e: (len(e.absolute_path), e.validator != "type"))
    return error


@lru_cache(maxsize=None)
def _validator(schema_name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema(schema_name))


def check_document(doc: Any, schema_name: str, origin: str, kind: str) -> None:
    """Raise ResultsFileError (one line naming `origin` and where) unless `doc` matches data/<schema_name>.schema.json."""
    error = jsonschema.exceptions.best_match(_validator(schema_name).iter_errors(doc))
    if error is not None:
        error = _most_specific(error)
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise ResultsFileError(f"{origin}: not a valid {kind} at {where}: {error.message[:300]}")


def validate_document(doc: Any, origin: str = "document") -> None:
    """Raise ResultsFileError unless `doc` is a valid pygpuperf/1 results document."""
    check_document(doc, "results", origin, "pygpuperf/1 results file")


def load_document(path: str | os.PathLike, schema_name: str, kind: str) -> Any:
    """An untrusted JSON file, bounded in size, parsed as plain JSON and validated against
    data/<schema_name>.schema.json; ResultsFileError (one line naming the file) otherwise."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_RESULTS_BYTES:
            raise ResultsFileError(f"{path}: {size} bytes is larger than a {kind} can be")
        doc = parse_json(path.read_text(encoding="utf-8"))
    except ResultsFileError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsFileError(f"{path}: cannot read: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise ResultsFileError(f"{path}: not valid JSON: {str(exc)[:200]}") from None
    check_document(doc, schema_name, str(path), kind)
    return doc


def load_results(path: str | os.PathLike) -> Results:
    """Load and validate a results.json."""
    results = Results.from_dict(load_document(path, "results", "pygpuperf/1 results file"))
    model, device = results.machine_model, results.meta.get("device")
    if model is not None and (not model.capacity or not model.facts) and isinstance(device, dict):
        model.fill_capacity(device)  # files written before the model kept sizes and chip facts
    return results


def to_json(results: Results) -> str:
    doc = results.to_dict()
    validate_document(doc, "results being written")  # a writer bug must not produce an unreadable file
    return json.dumps(doc, indent=2, allow_nan=False)


def to_frame(results: Results) -> pd.DataFrame:
    """One row per measurement, with the columns of results.csv."""
    rows = []
    for m in results.measurements:
        rows.append(
            {
                "name": m.name,
                "backend": m.backend,
                "device": m.device,
                "status": m.status,
                "value": m.value,
                "unit": m.unit,
                "median": m.stats.median,
                "p5": m.stats.p5,
                "p95": m.stats.p95,
                "mean": m.stats.mean,
                "cv": m.stats.cv,
                "n": m.stats.n,
                "bytes_read": m.bytes_read,
                "bytes_written": m.bytes_written,
                "flops": m.flops,
                "verified": m.verified,
                "sm_clock_mhz": m.telemetry.median_sm_clock_mhz() if m.telemetry else None,
                "energy_j": m.telemetry.energy_j if m.telemetry else None,
                "value_per_watt": per_watt(m.value, m.telemetry),
                "throttle_reasons": ";".join(m.telemetry.throttle_reasons) if m.telemetry else "",
                "reason": m.reason,
                "params": ";".join(f"{k}={v}" for k, v in sorted(m.document_params().items())),
            }
        )
    return pd.DataFrame(rows)


def write_results(results: Results, out_dir: Path) -> dict[str, Path]:
    """Write results.json and results.csv; returns their paths. Writes atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "results.json", "csv": out_dir / "results.csv"}
    atomic_write(paths["json"], to_json(results))
    atomic_write(paths["csv"], to_frame(results).to_csv(index=False))
    return paths


class Checkpoint:
    """results.json rewritten after every probe, each measurement serialized once: a full dump per probe grows
    with the run (some 13 s over the H200's default suite of 483 measurements). Measurements must only be
    appended between writes (as the suite does); anything that changes one afterwards writes with
    :func:`write_checkpoint`."""

    def __init__(self, out_dir: Path) -> None:
        self.path = out_dir / "results.json"
        self._texts: list[str] = []
        self._slot = f"pygpuperf:measurements:{uuid.uuid4().hex}"  # no argv or name can hold it by chance

    def write(self, results: Results) -> Path:
        for m in results.measurements[len(self._texts):]:
            self._texts.append(json.dumps(measurement_dict(m), allow_nan=False))
        doc = results.to_dict(measurements=False)
        doc["measurements"] = self._slot
        text = json.dumps(doc, allow_nan=False).replace(json.dumps(self._slot), "[" + ",".join(self._texts) + "]", 1)
        atomic_write(self.path, text)
        return self.path


def write_checkpoint(results: Results, out_dir: Path) -> Path:
    """results.json as it stands mid-run (after each probe): raw measurements, no conclusions yet.

    Not validated on the way out (that costs more than a short probe); the final write is."""
    path = out_dir / "results.json"
    atomic_write(path, json.dumps(results.to_dict(), allow_nan=False))
    return path


def _finite(value: Any) -> Any:
    """`value` as plain JSON in one pass: every NaN or infinity as null (JSON has no spelling for them),
    tuples as lists, keys and anything else JSON cannot hold as strings."""
    if value is None or isinstance(value, (str, int)):  # bool is an int
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {_json_key(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return str(value)


def _json_key(key: Any) -> str:
    """A dict key as json.dumps spells it (True as "true", None as "null"), where str() would not."""
    if key is True or key is False:
        return "true" if key else "false"
    return "null" if key is None else str(key)


def write_document(path: Path, doc: Any, schema_name: str, kind: str) -> Path:
    """The one writer of pygpuperf's documents: `doc` as plain JSON, checked against
    data/<schema_name>.schema.json, written atomically. A document that fails its schema is still
    written, beside it as <name>.invalid.json (nothing measured is lost), and ResultsFileError says why."""
    plain = _finite(doc)
    text = json.dumps(plain, indent=1, allow_nan=False, ensure_ascii=False) + "\n"
    try:
        check_document(plain, schema_name, str(path), kind)
    except ResultsFileError:
        atomic_write(path.with_name(path.stem + ".invalid.json"), text)
        raise
    atomic_write(path, text)
    return path


def atomic_write(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step: a reader sees the old file or the new, never half of one."""
    atomic_write_with(path, lambda f: f.write(text))


def atomic_write_with(path: Path, write: Callable[[TextIO], Any]) -> None:
    """Replace `path` with what `write` writes into a text file beside it, in one step (streamed: a large
    document is never held whole in memory)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
