"""Which memory each op call of a step reads and writes: the input of the kernel-time model's reuse estimate.

One extra step runs under :class:`AccessTraceMode`, a torch dispatch mode that records, for
every aten op call that moves data, the storages it reads and writes (their base address and
the bytes of the view touched) and wraps the call in a ``pygpuperf::call#<i>`` profiler range.
Profiling that step ties each kernel to its call (:func:`capture_accesses`); the kernels of the
explained steps are then matched to that step's kernels by name, in launch order
(:func:`attach`). The step runs as a user runs it otherwise (same kernels, same order); the
mode slows the host only, and that step's times are not used.

Storages of the model's parameters, buffers and gradients are *resident*: their bytes do not
grow with the batch (what :mod:`pygpuperf.analyze.kernel_time` needs to move a step to another
batch size).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from pygpuperf.analyze.kernel_time import Access
from pygpuperf.explain.costs import moves_no_data
from pygpuperf.explain.model import CallAccesses, KernelRecord

CALL_PREFIX = "pygpuperf::call#"


def _touched_bytes(t: torch.Tensor) -> int:
    """Bytes of the view an op touches: its elements, at most its storage (an expanded view repeats elements)."""
    storage = t.untyped_storage()
    return min(t.numel() * t.element_size(), storage.nbytes())


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [x for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def _written_inputs(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[list[torch.Tensor], set[int]]:
    """Inputs the op's schema marks as written (in-place and out= arguments), and which of them it does
    not read first (out= arguments)."""
    written: list[torch.Tensor] = []
    write_only: set[int] = set()
    schema = getattr(func, "_schema", None)
    if schema is None:
        return written, write_only
    for position, argument in enumerate(schema.arguments):
        info = argument.alias_info
        if info is None or not info.is_write:
            continue
        value = kwargs.get(argument.name) if argument.kwarg_only else (
            args[position] if position < len(args) else kwargs.get(argument.name))
        for t in _tensors(value):
            written.append(t)
            if argument.kwarg_only and argument.name.startswith("out"):
                write_only.add(id(t))
    return written, write_only


class AccessTraceMode(TorchDispatchMode):
    """Records every data-moving aten call's storage reads and writes; `mark` wraps each call in a
    ``pygpuperf::call#<i>`` profiler range so the kernels it launches can be traced back to it."""

    def __init__(self, resident: Callable[[], set[int]] | None = None, mark: bool = True) -> None:
        super().__init__()
        self.calls: list[CallAccesses] = []
        self._raw: list[tuple[str, list[tuple[int, int, bool]]]] = []
        self._resident = resident
        self._mark = mark

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        namespace = getattr(func, "namespace", "aten")
        name = f"{namespace}::{func.__name__.split('.')[0]}" if hasattr(func, "__name__") else str(func)
        if namespace == "profiler" or moves_no_data(name):  # the ranges this mode opens, views, allocations
            return func(*args, **kwargs)
        written, write_only = _written_inputs(func, args, kwargs)
        reads = [t for t in _tensors((args, kwargs)) if id(t) not in write_only]
        index = len(self._raw)
        from torch.autograd.profiler import record_function

        with record_function(f"{CALL_PREFIX}{index}") if self._mark else nullcontext():
            out = func(*args, **kwargs)
        accesses = [(_storage_key(t), _touched_bytes(t), False) for t in reads]
        written_ids = {id(t) for t in written}
        accesses += [(_storage_key(t), _touched_bytes(t), True) for t in written]
        accesses += [(_storage_key(t), _touched_bytes(t), True) for t in _tensors(out) if id(t) not in written_ids]
        self._raw.append((name, [a for a in accesses if a[1] > 0 and a[0] != 0]))
        return out

    def finish(self) -> list[CallAccesses]:
        """The calls recorded, each access marked resident where its storage is one of `resident()`'s
        (read after the step: parameters, buffers and gradients exist by then)."""
        resident = self._resident() if self._resident is not None else set()
        self.calls = [CallAccesses(i, name, tuple(Access(key, nbytes, write, key in resident)
                                                  for key, nbytes, write in raw))
                      for i, (name, raw) in enumerate(self._raw)]
        return self.calls


def resident_storages(modules: Iterable[torch.nn.Module]) -> Callable[[], set[int]]:
    """A function giving the storages of the modules' parameters, buffers and gradients (called after a step)."""
    modules = list(modules)

    def storages() -> set[int]:
        keys: set[int] = set()
        for module in modules:
            for p in module.parameters():
                keys.add(_storage_key(p))
                if p.grad is not None:
                    keys.add(_storage_key(p.grad))
            for b in module.buffers():
                keys.add(_storage_key(b))
        return keys

    return storages


def call_of(ancestors: Iterable[str]) -> int | None:
    """The call index of the innermost ``pygpuperf::call#<i>`` range among a kernel's enclosing range names."""
    for name in ancestors:
        if name.startswith(CALL_PREFIX):
            try:
                return int(name[len(CALL_PREFIX):])
            except ValueError:
                return None
    return None


@dataclass
class Attached:
    """How a step's kernels were tied to traced calls: the calls, and each kernel's call (None: no match)."""

    calls: list[CallAccesses]
    kernel_calls: list[int | None]

    @property
    def matched_share(self) -> float:
        return sum(c is not None for c in self.kernel_calls) / len(self.kernel_calls) if self.kernel_calls else 0.0


def attach(kernels: Sequence[KernelRecord], traced_kernels: Sequence[KernelRecord],
           traced_calls: Sequence[int | None], calls: Sequence[CallAccesses]) -> Attached:
    """Tie each of `kernels` (an explained step, in launch order) to the call that launched the same kernel in
    the traced step (`traced_kernels` with their `traced_calls`), matching kernel names in order: the two steps
    run the same code, so their kernel sequences agree wherever the libraries picked the same kernels."""
    def order(records: Sequence[KernelRecord]) -> list[int]:
        return sorted(range(len(records)), key=lambda i: (records[i].launch_us if records[i].launch_us is not None
                                                          else records[i].start_us, records[i].start_us))

    mine, theirs = order(kernels), order(traced_kernels)
    matcher = difflib.SequenceMatcher(None, [kernels[i].name for i in mine],
                                      [traced_kernels[j].name for j in theirs], autojunk=False)
    kernel_calls: list[int | None] = [None] * len(kernels)
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            kernel_calls[mine[block.a + k]] = traced_calls[theirs[block.b + k]]
    return Attached(list(calls), kernel_calls)
