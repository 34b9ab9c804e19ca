"""pygpuperf: measure what a GPU or CPU really delivers, and explain model speed on that roofline.

``pygpuperf.explain(step_fn, machine_model, device)`` explains a step; the other subpackages load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Attributes that load their submodule on first use, so `import pygpuperf` stays cheap.
_LAZY = ("core", "facts", "measure", "analyze", "workloads", "explain", "predict", "compare", "report")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return importlib.import_module(f"pygpuperf.{name}")
    raise AttributeError(f"module 'pygpuperf' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
