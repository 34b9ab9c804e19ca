"""The compact reference data under benchmarks/reference/, from which every documented table is generated.

    python benchmarks/reference.py add --card CARD RUN_DIR [RUN_DIR ...]

add: compacts a fresh run into benchmarks/reference/ and records it in index.json. RUN_DIR holds a
results.json (the main command's: it becomes the card's machine model) and/or explain.json files as
`python -m pygpuperf.explain ... --out FOLDER` writes them (RUN_DIR/explain.json, RUN_DIR/*/explain.json or
RUN_DIR/fixes/*/explain.json; each folder named by the explain command's arguments). A profile becomes
profiles/CARD/CONFIGURATION.json.xz; the profile it replaces moves to profiles/CARD/earlier/ while it still
holds the latest measurement of a fix, and is dropped otherwise. It exits 1 when the folder outgrows its budget.

The first reference data was extracted once from the raw archive of the project's first runs, which the
repository's history keeps (benchmarks/results/ at commit 3d39aaf).

What a compact file keeps: a results.json without per-sample times, telemetry or sweep points (the machine
model, the ceilings and their statistics stay; a machine model's run keeps the best variant of each probe
only); an explain.json without its findings, causes and self-check (the current code recomputes them), its
kernels' modelled FLOPs, bytes and bounds to 9 significant digits, xz-compressed (a third smaller than gzip). Both stay valid documents of
their schema.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gzip
import json
import lzma
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

REFERENCE = Path(__file__).resolve().parent / "reference"
ROOT = REFERENCE.parents[1]
INDEX = REFERENCE / "index.json"
BUDGET_BYTES = 5_000_000
# Profile sets: the steps explained with --try-fixes (fix table, cause coverage, cross-card pairs), the steps
# priced against published figures, and the steps priced at other batch sizes.
FIXES, PUBLISHED, BATCH = "fixes", "published", "batch"
# What a compact profile leaves out: the current code recomputes each of them from the rest.
DROPPED_PROFILE_KEYS = ("findings", "causes", "self_check")
ROUNDED_KERNEL_KEYS, ROUNDED_DIGITS = ("flops", "bytes", "bound_us", "fixed_us"), 9


# --------------------------------------------------------------------------- reading and writing


def read_json(path: Path) -> Any:
    """A JSON file, compressed where its name ends in .xz or .gz."""
    return json.loads(unpacked_bytes(path))


def unpacked_bytes(path: Path) -> bytes:
    data = Path(path).read_bytes()
    suffix = Path(path).suffix
    return lzma.decompress(data) if suffix == ".xz" else gzip.decompress(data) if suffix == ".gz" else data


def write_json_xz(path: Path, doc: Any) -> None:
    """`doc` as xz-compressed JSON; the same document gives the same bytes (xz keeps no time stamp)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    path.write_bytes(lzma.compress(text, preset=9 | lzma.PRESET_EXTREME))


def write_json(path: Path, doc: Any, dense: bool = False) -> None:
    """`doc` as JSON, indented (or `dense`: no spaces, one line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, separators=(",", ":")) if dense else json.dumps(doc, indent=1)
    path.write_text(text + "\n", encoding="utf-8")


@contextlib.contextmanager
def plain(path: Path) -> Iterator[Path]:
    """A JSON file to hand to code that reads a path: `path` itself, or a .json.xz (.json.gz) unpacked into a
    temporary folder for as long as the block runs."""
    path = Path(path)
    if path.suffix not in (".xz", ".gz"):
        yield path
        return
    with tempfile.TemporaryDirectory() as folder:
        unpacked = Path(folder) / path.name.rsplit(".", 1)[0]
        unpacked.write_bytes(unpacked_bytes(path))
        yield unpacked


def load_profile(path: Path):
    """A profile (explain.json or .json.xz) as pygpuperf's Explanation, validated as the tools validate it."""
    return load_explained_profile(path)[0]


def load_explained_profile(path: Path):
    """A profile (explain.json or .json.xz) as pygpuperf's Explanation and its --try-fixes Trials."""
    from pygpuperf.compare.explained import load_explained

    with plain(path) as p:
        return load_explained(p)


def compact_profile(doc: dict) -> dict:
    """An explain.json without what the current code recomputes, its kernels' modelled FLOPs, bytes and
    bounds to ROUNDED_DIGITS significant digits (far below any difference a table shows)."""
    doc = {k: v for k, v in doc.items() if k not in DROPPED_PROFILE_KEYS}
    doc["kernels"] = [{k: _rounded(v) if k in ROUNDED_KERNEL_KEYS else v for k, v in r.items()}
                      for r in doc.get("kernels", [])]
    return doc


def _rounded(value: Any) -> Any:
    return float(f"{value:.{ROUNDED_DIGITS}g}") if isinstance(value, float) else value


def compact_results(doc: dict, best_only: bool = False) -> dict:
    """A results document without what only its charts and audits read: per-sample times, telemetry, sweep
    points (the machine model keeps what the sweeps gave); `best_only` keeps only the best variant of each
    probe on each backend (the ceilings a machine model is built from)."""
    from pygpuperf.core.results import Results, best_per_backend

    doc = dict(doc)
    measurements = [m for m in doc["measurements"] if not m["name"].endswith(".sweep")]
    if best_only:
        loaded = Results.from_dict(dict(doc, measurements=measurements)).measurements
        best = {id(m) for m, _ in best_per_backend(loaded)}
        measurements = [d for d, m in zip(measurements, loaded) if id(m) in best]
    doc["measurements"] = [dict(m, sample_seconds=[], telemetry=None) for m in measurements]
    return doc


# --------------------------------------------------------------------------- the index


def load_index() -> dict:
    if INDEX.is_file():
        return json.loads(INDEX.read_text(encoding="utf-8"))
    return {"machines": [], "profiles": [], "extracts": []}


def save_index(index: dict) -> None:
    for key in ("machines", "profiles", "extracts"):
        index[key] = sorted(index.get(key, []), key=lambda e: (e.get("set", ""), e["card"], e["recorded"], e["file"]))
    write_json(INDEX, index)


def profiles_of(index: dict, which: str, card: str | None = None) -> list[dict]:
    """The profiles of one set (FIXES, PUBLISHED, BATCH), oldest first."""
    return sorted((e for e in index["profiles"] if e["set"] == which and card in (None, e["card"])),
                  key=lambda e: (e["recorded"], e["file"]))


def latest_profiles(index: dict, card: str) -> dict[str, dict]:
    """Each configuration's latest --try-fixes profile on `card`."""
    return {e["configuration"]: e for e in profiles_of(index, FIXES, card)}


def cards(index: dict) -> list[str]:
    return sorted({e["card"] for e in index["profiles"]} | {e["card"] for e in index["machines"]})


def machine_model_entry(index: dict, card: str) -> dict | None:
    """The card's measured machine model: its latest results.json kept as one."""
    models = [e for e in index["machines"] if e["card"] == card and e.get("role") == "machine-model"]
    return max(models, key=lambda e: e["recorded"]) if models else None


def reference_size() -> int:
    return sum(p.stat().st_size for p in REFERENCE.rglob("*") if p.is_file())


# --------------------------------------------------------------------------- names


def configuration_of(folder: str, settings: dict | None = None) -> str:
    """A step's configuration from the folder its explain command wrote (named by its arguments, cut to 60
    characters: "resnet50-train-amp_--memory-format_nchw_--try-fixes_amp") as those arguments without the
    fixes and the profiled steps' count: "resnet50-train-amp --memory-format nchw"."""
    key = re.sub(r"_--steps_\d+", "", folder.split("_--try-fixes")[0]).rstrip("_-")
    head, *args = key.split("_--")
    source = (settings or {}).get("source", "")
    if source and re.sub(r"[/:. ,]", "_", source) == head:  # a user's step: its file and function
        head = source
    return " ".join([head] + ["--" + a.replace("_", " ") for a in args])


def indexed(path: Path) -> dict | None:
    """The index entry of a file in this folder (None for a file elsewhere)."""
    path = Path(path).resolve()
    if not path.is_relative_to(REFERENCE) or not INDEX.is_file():
        return None
    name = path.relative_to(REFERENCE).as_posix()
    return next((e for key in ("machines", "profiles", "extracts") for e in load_index()[key] if e["file"] == name),
                None)


def slug(configuration: str) -> str:
    """A file name for a configuration, without dots: "resnet50-train-amp--memory-format-nchw"."""
    text = configuration.replace(" --", "--").replace(" ", "-")
    return re.sub(r"[^A-Za-z0-9_-]", "_", text).strip("_-")


def git_commit(*args: str) -> str:
    """Short hash from `git log` (`args`), or "" outside a git checkout."""
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = out.stdout.split()
    return lines[-1] if out.returncode == 0 and lines else ""  # the oldest: the commit that added it


def _utc(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _measured_fix_names(doc: dict) -> set[str]:
    return {f["name"] for f in doc.get("fixes") or []}


# --------------------------------------------------------------------------- add


def _profile_entry(doc: dict, file: Path, card: str, device: str, configuration: str, recorded: str, run: str,
                   commit: str, torch: str | None, which: str) -> dict:
    return {"file": file.relative_to(REFERENCE).as_posix(), "set": which, "card": card, "device": device,
            "configuration": configuration, "recorded": recorded, "run": run, "commit": commit, "torch": torch,
            "fixes": [f["name"] for f in doc.get("fixes") or []], "settings": doc.get("settings", {})}


def place_profile(index: dict, doc: dict, entry: dict) -> list[str]:
    """Write a --try-fixes profile as its configuration's latest on its card (entry["file"] is set here);
    the one it replaces moves to earlier/ while it still holds a fix no later run measured (a fix measured
    twice in one run counts its worse measurement, so a run's profiles stay together), and goes otherwise.
    Returns what it did, one line each."""
    card, configuration = entry["card"], entry["configuration"]
    done = []
    same = [e for e in profiles_of(index, FIXES, card) if e["configuration"] == configuration]
    newer = [e for e in same if e["recorded"] > entry["recorded"]]
    name = slug(configuration)
    if newer:  # an older run added after a newer one: it goes straight to earlier/
        target = _free(REFERENCE / "profiles" / card / "earlier" / f"{name}_{entry['recorded'][:10]}.json.xz")
    else:
        target = REFERENCE / "profiles" / card / f"{name}.json.xz"
    for e in same:
        if e["file"] == target.relative_to(REFERENCE).as_posix() and not newer:
            moved = _free(REFERENCE / "profiles" / card / "earlier" / f"{name}_{e['recorded'][:10]}.json.xz")
            moved.parent.mkdir(parents=True, exist_ok=True)
            (REFERENCE / e["file"]).rename(moved)
            done.append(f"moved {e['file']} -> {moved.relative_to(REFERENCE).as_posix()}")
            e["file"] = moved.relative_to(REFERENCE).as_posix()
    write_json_xz(target, compact_profile(doc))
    entry["file"] = target.relative_to(REFERENCE).as_posix()
    index["profiles"].append(entry)
    done.append(f"wrote {entry['file']}")
    # Drop the earlier profiles whose every fix a later run of the configuration measured again.
    runs = [e for e in profiles_of(index, FIXES, card) if e["configuration"] == configuration]
    for e in runs:
        later = set().union(*(set(r["fixes"]) for r in runs if r["run"] > e["run"]))
        if later and not set(e["fixes"]) - later:
            (REFERENCE / e["file"]).unlink(missing_ok=True)
            index["profiles"].remove(e)
            done.append(f"dropped {e['file']} (a later profile measured each of its fixes)")
    return done


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _free(path: Path) -> Path:
    """`path`, or the first of path-2, path-3, ... (before its suffixes) that does not exist."""
    stem, suffixes = path.name.split(".", 1)
    n = 2
    while path.exists():
        path = path.with_name(f"{stem}-{n}.{suffixes}")
        n += 1
    return path


def _run_profiles(run: Path) -> list[Path]:
    found = [run / "explain.json", *sorted(run.glob("*/explain.json")), *sorted(run.glob("fixes/*/explain.json"))]
    return [p for p in dict.fromkeys(found) if p.is_file()]


def add(card: str, runs: list[Path]) -> int:
    import torch

    index = load_index()
    commit = git_commit("rev-parse", "--short", "HEAD")
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # one run: this call
    for run in runs:
        if not run.is_dir():
            print(f"{run}: no such folder", file=sys.stderr)
            return 2
        results = run / "results.json"
        meta = {}
        if results.is_file():
            doc = json.loads(results.read_text(encoding="utf-8"))
            meta = doc.get("meta", {})
            recorded = meta.get("time_utc") or _utc(results.stat().st_mtime)
            target = _free(REFERENCE / "machines" / f"{card}_{recorded[:10]}_results.json")
            write_json(target, compact_results(doc, best_only=True), dense=True)
            versions = meta.get("versions", {})
            index["machines"].append({"file": target.relative_to(REFERENCE).as_posix(), "card": card,
                                      "device": (meta.get("device") or {}).get("name", ""), "role": "machine-model",
                                      "recorded": recorded, "commit": commit, "torch": versions.get("torch"),
                                      "driver": versions.get("driver")})
            print(f"wrote {_shown(target)}")
        device = (meta.get("device") or {}).get("name") or (torch.cuda.get_device_name() if torch.cuda.is_available()
                                                            else card)
        version = (meta.get("versions") or {}).get("torch") or torch.__version__
        for path in _run_profiles(run):
            doc = json.loads(path.read_text(encoding="utf-8"))
            configuration = configuration_of(path.parent.name if path.parent != run else run.name, doc.get("settings"))
            entry = _profile_entry(doc, REFERENCE, card, device, configuration, _utc(path.stat().st_mtime), started,
                                   commit, version, FIXES)
            for line in place_profile(index, doc, entry):
                print(line)
    save_index(index)
    size = reference_size()
    print(f"benchmarks/reference/ holds {size / 1e6:.2f} MB (budget {BUDGET_BYTES / 1e6:.0f} MB); "
          "python benchmarks/tables.py regenerates the tables")
    if size > BUDGET_BYTES:
        print("over budget: drop profiles/*/earlier/ files the tables can spare before committing", file=sys.stderr)
        return 1
    return 0


# The card whose default suite the documented ceilings table shows.
H200 = "nvidia-h200"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("add", help="compact a fresh run into benchmarks/reference/")
    a.add_argument("--card", required=True, help="the card's name in the reference, e.g. nvidia-h100-80gb-hbm3")
    a.add_argument("runs", type=Path, nargs="+", metavar="RUN_DIR")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", args.card):
        parser.error(f"--card {args.card!r}: lower-case letters, digits, '.', '_' and '-' only")
    return add(args.card, args.runs)


if __name__ == "__main__":
    raise SystemExit(main())
