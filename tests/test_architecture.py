"""The package's layers: no module imports from a layer above its own, and no import cycles (import-linter)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_layer_contracts_hold():
    command = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if command is None:
        pytest.fail("lint-imports is missing: the [test] extra installs import-linter")
    proc = subprocess.run([command, "--config", str(ROOT / "pyproject.toml")], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_the_folder_tree_shows_the_layers():
    # Every module belongs to a layer: the only modules at the top are the entry points.
    top = sorted(p.name for p in (ROOT / "pygpuperf").glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "collectives.py", "roofline.py"], top
