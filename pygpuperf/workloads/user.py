"""The user's own step: ``path/to/file.py:make_step``, timed and accounted like the built-in workloads.

The file is imported as a module of its own (a fresh, unique name on every load) and
``make_step`` is called with the keyword arguments its signature accepts, among
``device``, ``batch_size`` and any others given. It returns one of:

* a callable doing one step (samples per step: the batch size, where one is known);
* a ``(step, samples_per_step)`` tuple;
* a dict with "step" and optionally "samples_per_step", "params" (recorded with the result),
  "notes", "count_step" (an eager form of the step to count FLOPs and bytes from, where
  "step" replays a graph or compiled code), "close" (run when the workload is closed) and
  "modules" (the models the step runs: module paths for the explainer, and their parameters as
  what does not grow with the batch).
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping

import torch

from pygpuperf.core.errors import UsageError
from pygpuperf.workloads.base import BuiltWorkload, Workload
from pygpuperf.workloads.knobs import (
    BATCH_SIZE,
    CUDNN_BENCHMARK,
    FP16_ACCUMULATION,
    TF32,
    KnobSpec,
    flag_params,
    set_global_flags,
)

DEFAULT_FUNCTION = "make_step"
_RESULT_KEYS = ("step", "samples_per_step", "params", "notes", "count_step", "close", "modules")
_FORM = "give path/to/file.py:function, e.g. train.py:make_step"
_load_counter = itertools.count()


@dataclass(frozen=True)
class StepSource:
    """Where a user step comes from: a Python file and the function in it that makes the step."""

    path: Path
    function: str

    def __str__(self) -> str:
        return f"{self.path}:{self.function}"


def parse_step_spec(spec: str | Path | StepSource) -> StepSource:
    """"file.py:function" (or "file.py", for make_step) -> StepSource; UsageError for any other form.

    The function is after the last colon, so a Windows drive letter stays in the path.
    """
    if isinstance(spec, StepSource):
        return spec
    text = str(spec).strip()
    path_text, colon, function = text.rpartition(":")
    if not colon or not function.isidentifier():
        path_text, function = text, DEFAULT_FUNCTION
    if not path_text:
        raise UsageError(f"user step {text!r}: no file named; {_FORM}")
    path = Path(path_text).expanduser()
    if path.suffix != ".py":
        raise UsageError(f"user step {text!r}: {path} is not a .py file; {_FORM}")
    return StepSource(path, function)


def _import_file(path: Path) -> ModuleType:
    """Import `path` as a module with a name of its own, its folder importable while it loads."""
    stem = re.sub(r"\W", "_", path.stem)
    name = f"pygpuperf_user_step_{stem}_{next(_load_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path}: Python cannot load it as a module; {_FORM}")
    module = importlib.util.module_from_spec(spec)
    # Registered before running, as imports are: dataclasses and pickling look modules up by name.
    sys.modules[name] = module
    folder = str(path.parent.resolve())
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    return module


def accepted_keywords(function: Callable[..., Any]) -> set[str] | None:
    """The keyword arguments the function's signature takes; None when it takes any (**kwargs, or no
    signature to read)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}


def step_keywords(spec: str | Path | StepSource) -> set[str] | None:
    """The keywords the step function `spec` names accepts (None: any, it takes **kwargs)."""
    source = parse_step_spec(spec)
    return accepted_keywords(getattr(_import_file(source.path), source.function))


def _accepted(function: Callable[..., Any], offered: Mapping[str, Any], source: StepSource) -> dict[str, Any]:
    """The offered keyword arguments the function's signature takes; UsageError for ones it needs and lacks."""
    named = accepted_keywords(function)
    if named is None:  # it takes anything: offer everything
        return dict(offered)
    parameters = inspect.signature(function).parameters.values()
    passed = {k: v for k, v in offered.items() if k in named}
    missing = [p.name for p in parameters
               if p.default is inspect.Parameter.empty and p.name not in passed
               and p.kind is not inspect.Parameter.VAR_POSITIONAL]
    if missing:
        raise UsageError(
            f"{source}: {source.function}() needs {', '.join(missing)}, which pygpuperf does not pass; "
            "give it a default or pass it as a keyword argument"
        )
    return passed


def _default_batch(function: Callable[..., Any]) -> int | None:
    """The function's own default batch_size, where it has an integer one."""
    try:
        parameter = inspect.signature(function).parameters.get("batch_size")
    except (TypeError, ValueError):
        return None
    if parameter is None:
        return None
    default = parameter.default
    return default if isinstance(default, int) and not isinstance(default, bool) else None


def _check_samples(value: Any, source: StepSource) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{source}: samples_per_step must be a positive integer, got {value!r}; "
                         "return (step, number_of_samples) or {'step': ..., 'samples_per_step': n}")
    return value


def _unpack(result: Any, source: StepSource) -> dict[str, Any]:
    """make_step's result as a dict of _RESULT_KEYS; UsageError naming the accepted forms otherwise."""
    forms = "return a callable doing one step, a (step, samples_per_step) tuple or a dict with 'step'"
    if isinstance(result, Mapping):
        unknown = sorted(set(map(str, result)) - set(_RESULT_KEYS))
        if unknown:
            raise UsageError(f"{source}: returned dict has unknown keys {', '.join(unknown)}; "
                             f"use only {', '.join(_RESULT_KEYS)}")
        if "step" not in result:
            raise UsageError(f"{source}: returned dict has no 'step'; {forms}")
        unpacked = dict(result)
    elif isinstance(result, tuple):
        if len(result) != 2:
            raise UsageError(f"{source}: returned a tuple of {len(result)} items; {forms}")
        unpacked = {"step": result[0], "samples_per_step": result[1]}
    elif callable(result):
        unpacked = {"step": result}
    else:
        raise UsageError(f"{source}: {source.function}() returned {type(result).__name__}; {forms}")
    for key in ("step", "count_step", "close"):
        if unpacked.get(key) is not None and not callable(unpacked[key]):
            raise UsageError(f"{source}: '{key}' is a {type(unpacked[key]).__name__}, not a callable; "
                             f"make '{key}' a function taking no arguments")
    if unpacked.get("params") is not None and not isinstance(unpacked["params"], Mapping):
        raise UsageError(f"{source}: 'params' must be a dict of name to value")
    modules = unpacked.get("modules")
    if modules is not None and (isinstance(modules, torch.nn.Module) or
                                not all(isinstance(m, torch.nn.Module) for m in modules)):
        raise UsageError(f"{source}: 'modules' must be a list or tuple of torch.nn.Module")
    notes = unpacked.get("notes")
    if notes is not None and (isinstance(notes, str) or not all(isinstance(n, str) for n in notes)):
        raise UsageError(f"{source}: 'notes' must be a list of strings")
    return unpacked


def load_user_step(spec: str | Path | StepSource, device: torch.device | str, batch_size: int | None = None,
                   **kwargs: Any) -> BuiltWorkload:
    """Import the file of "path/to/file.py:make_step", call make_step and wrap its step as a BuiltWorkload.

    make_step gets, of device, batch_size (when given) and `kwargs`, those its signature
    accepts (all of them if it takes **kwargs). Bad paths, a missing function, missing
    required arguments and results of the wrong shape raise UsageError; errors raised by
    the user's code itself pass through unchanged.
    """
    source = parse_step_spec(spec)
    if not source.path.is_file():
        what = "is a folder" if source.path.is_dir() else "does not exist"
        raise UsageError(f"user step {source}: {source.path} {what}; {_FORM}")
    module = _import_file(source.path)
    function = getattr(module, source.function, None)
    if function is None:
        defined = sorted(n for n, v in vars(module).items()
                         if inspect.isfunction(v) and v.__module__ == module.__name__ and not n.startswith("_"))
        hint = f"functions there: {', '.join(defined)}" if defined else "it defines no functions"
        raise UsageError(f"{source.path} has no {source.function}(); define it or name another ({hint})")
    if not callable(function):
        raise UsageError(f"{source}: {source.function} is a {type(function).__name__}, not a function")

    device = torch.device(device)
    offered: dict[str, Any] = {"device": device, **kwargs}
    if batch_size is not None:
        offered["batch_size"] = batch_size
    passed = _accepted(function, offered, source)
    unpacked = _unpack(function(**passed), source)

    samples = unpacked.get("samples_per_step")
    notes = list(unpacked.get("notes") or [])
    if samples is None:
        samples = passed.get("batch_size", _default_batch(function))
        if samples is None:
            samples = 1
            notes.append(f"{source.function}() gave no samples_per_step and takes no batch size: "
                         "samples/s counts steps")
    samples = _check_samples(samples, source)

    params = {"source": str(source), "samples_per_step": str(samples)}
    params.update({name: str(value) for name, value in passed.items() if name != "device"})
    params.update({str(k): str(v) for k, v in (unpacked.get("params") or {}).items()})
    ignored = sorted(set(offered) - set(passed) - {"device"})
    if ignored:
        notes.append(f"{source.function}() does not take {', '.join(ignored)}: not passed")
    built = BuiltWorkload(step=unpacked["step"], samples_per_step=samples, params=params, notes=notes,
                          count_step=unpacked.get("count_step"), modules=tuple(unpacked.get("modules") or ()))
    if unpacked.get("close") is not None:
        built.on_close.append(unpacked["close"])
    return built


class UserWorkload(Workload):
    """A user step as a Workload, so run_workload times it like the built-in ones.

    The global-flag knobs (tf32, cudnn_benchmark, fp16_accumulation) are applied around
    the user's step and restored on close; every other knob goes to make_step.
    """

    def __init__(self, spec: str | Path, name: str | None = None, description: str | None = None,
                 **kwargs: Any) -> None:
        self.source = parse_step_spec(spec)
        self.name = name or f"user:{self.source.path.name}:{self.source.function}"
        self.description = description or f"user step from {self.source}"
        self.kwargs = kwargs

    def knob_specs(self) -> tuple[KnobSpec, ...]:
        return (BATCH_SIZE, TF32, CUDNN_BENCHMARK, FP16_ACCUMULATION)

    def build(self, device: torch.device, batch_size: int | None = None, **knobs: Any) -> BuiltWorkload:
        arguments = {**self.kwargs, **knobs}
        flags = {spec.name: spec.parse(arguments.pop(spec.name, None))
                 for spec in (TF32, CUDNN_BENCHMARK, FP16_ACCUMULATION)}
        restore = set_global_flags(**flags)
        try:
            built = load_user_step(self.source, device, batch_size=batch_size, **arguments)
        except BaseException:
            restore()
            raise
        built.on_close.insert(0, restore)  # after the user's own close
        built.params.update(flag_params(flags, torch.device(device)))
        return built
