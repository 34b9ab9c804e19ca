"""The repository stays a product: a small tracked tree, compact reference data that every documented table is
generated from, no raw device outputs named by the docs, and the reference's intake on new runs."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "benchmarks" / "reference"
TRACKED_LIMIT = 10_000_000
REFERENCE_LIMIT = 5_000_000
# The tables that generate in seconds; the fix table and the published figures explain or price dozens of
# profiles again (minutes on a small CPU), so `python benchmarks/tables.py --check` checks those.
FAST_TABLES = ("h200-suite", "plain-loop", "batch-prediction")

sys.path.insert(0, str(ROOT / "benchmarks"))


def _tracked() -> list[Path]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, timeout=60)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / name for name in out.stdout.decode("utf-8", "replace").split("\0") if name]


def test_the_tracked_tree_is_small():
    files = [p for p in _tracked() if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    largest = sorted(files, key=lambda p: -p.stat().st_size)[:5]
    assert total <= TRACKED_LIMIT, (f"{total / 1e6:.1f} MB tracked; the largest: "
                                    + ", ".join(f"{p.relative_to(ROOT)} {p.stat().st_size / 1e6:.1f} MB" for p in largest))


def test_the_reference_data_fits_its_budget():
    sizes = {p: p.stat().st_size for p in REFERENCE.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert sizes, "benchmarks/reference/ is empty"
    assert sum(sizes.values()) <= REFERENCE_LIMIT, f"{sum(sizes.values()) / 1e6:.2f} MB in benchmarks/reference/"


def test_the_docs_name_no_raw_results():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    naming = [p.relative_to(ROOT).as_posix() for p in docs if p.is_file()
              and "benchmarks/results" in p.read_text(encoding="utf-8")]
    assert naming == []


def test_the_index_and_the_files_agree():
    """Every file the index lists is there, and every data file there is listed (the tables and the
    README are generated or written, not recorded)."""
    index = json.loads((REFERENCE / "index.json").read_text(encoding="utf-8"))
    listed = {e["file"] for key in ("machines", "profiles", "extracts") for e in index[key]}
    present = {p.relative_to(REFERENCE).as_posix() for p in REFERENCE.rglob("*") if p.is_file()}
    data = {f for f in present if f.split("/")[0] in ("machines", "profiles", "extracts", "published")}
    assert listed - present == set()
    assert data - listed == set()
    for e in index["profiles"]:
        assert e["recorded"] and e["configuration"] and e["card"] and "settings" in e, e["file"]


def test_the_marked_tables_match_the_reference_data():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tables.py"), "--check", "--only", *FAST_TABLES],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture
def scratch_reference(tmp_path, monkeypatch):
    """reference.py working on an empty copy of the reference folder."""
    import reference

    folder = tmp_path / "reference"
    monkeypatch.setattr(reference, "REFERENCE", folder)
    monkeypatch.setattr(reference, "INDEX", folder / "index.json")
    return reference


def _run(root: Path, profile: Path, folder: str, fixes: list[str], hour: int) -> Path:
    """A run folder as the explain command writes one, fixes/FOLDER/explain.json written at `hour`, from a
    reference profile with its fixes renamed to `fixes`."""
    import reference

    doc = reference.read_json(profile)
    doc["fixes"] = [dict(doc["fixes"][0], name=name) for name in fixes]
    path = root / "fixes" / folder / "explain.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc), encoding="utf-8")
    os.utime(path, (1.8e9 + 3600 * hour, 1.8e9 + 3600 * hour))
    return root


def test_add_files_a_run_by_card_and_configuration(scratch_reference, tmp_path):
    reference = scratch_reference
    profile = REFERENCE / "profiles" / "nvidia-h200" / "dcgan-train.json.xz"
    first = _run(tmp_path / "first", profile, "dcgan-train_--try-fixes_batch_size", ["amp", "batch_size"], 1)
    shutil.copy(REFERENCE / "machines" / "nvidia-h200_2026-12-01_machine-model_results.json", first / "results.json")
    assert reference.main(["add", "--card", "test-card", str(first)]) == 0
    index = reference.load_index()
    (machine,) = index["machines"]
    assert machine["card"] == "test-card" and machine["role"] == "machine-model" and machine["device"] == "NVIDIA H200"
    (entry,) = index["profiles"]
    assert entry["file"] == "profiles/test-card/dcgan-train.json.xz" and entry["configuration"] == "dcgan-train"
    assert entry["fixes"] == ["amp", "batch_size"] and entry["settings"]["workload"] == "dcgan-train"
    _, loaded = reference.load_explained_profile(reference.REFERENCE / entry["file"])  # still a valid explain.json
    assert [f.name for f in loaded.fixes] == ["amp", "batch_size"]

    # A later run of the configuration becomes its latest; the earlier one keeps the fix only it measured.
    second = _run(tmp_path / "second", profile, "dcgan-train_--try-fixes_batch_size", ["batch_size"], 2)
    assert reference.main(["add", "--card", "test-card", str(second)]) == 0
    files = [e["file"] for e in reference.profiles_of(reference.load_index(), reference.FIXES, "test-card")]
    assert len(files) == 2 and files[1] == "profiles/test-card/dcgan-train.json.xz"
    assert files[0].startswith("profiles/test-card/earlier/dcgan-train_")
    # A third that measures that fix again leaves the earlier profile nothing to hold: it goes.
    third = _run(tmp_path / "third", profile, "dcgan-train_--try-fixes_amp", ["amp"], 3)
    assert reference.main(["add", "--card", "test-card", str(third)]) == 0
    kept = reference.profiles_of(reference.load_index(), reference.FIXES, "test-card")
    assert [e["fixes"] for e in kept] == [["batch_size"], ["amp"]]
    assert sorted(p.relative_to(reference.REFERENCE).as_posix() for p in (reference.REFERENCE / "profiles").rglob("*.xz")) \
        == sorted(e["file"] for e in kept)


def test_a_configuration_is_named_by_the_explain_commands_arguments():
    import reference

    assert reference.configuration_of("resnet50-train-amp_--memory-format_nchw_--try-fixes_amp_chan") \
        == "resnet50-train-amp --memory-format nchw"
    assert reference.configuration_of("unet-train_--steps_4_--try-fixes_batch_size") == "unet-train"
    source = {"source": "benchmarks/heldout/llm_decode.py:make_step"}
    assert reference.configuration_of("benchmarks_heldout_llm_decode_py_make_step_--batch-size_1_--", source) \
        == "benchmarks/heldout/llm_decode.py:make_step --batch-size 1"
    assert reference.slug("resnet50-train-amp --memory-format nchw") == "resnet50-train-amp--memory-format-nchw"
