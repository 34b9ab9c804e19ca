"""Planning and running the probe suite over the backends."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Callable, Iterable

import torch

from pygpuperf.facts import nvml
from pygpuperf.measure.backends.base import Backend
from pygpuperf.measure.backends.collectives import CollectiveBackend
from pygpuperf.measure.probe import RunSettings
from pygpuperf.measure.backends.native import NativeBackend
from pygpuperf.measure.backends.portable import TRANSFER_BYTES, PortableBackend
from pygpuperf.core.errors import UsageError
from pygpuperf.core.results import Measurement

BACKEND_CHOICES = ("all", "auto", "native", "torch")


@dataclass(frozen=True)
class PlannedProbe:
    name: str
    backend: Backend
    variant: str = ""

    def label(self, device: torch.device) -> str:
        variant = f" {self.variant}" if self.variant else ""
        return f"{self.name}{variant} [{self.backend.backend_name(device)}]"


def backends() -> list[Backend]:
    """Native first: where both have a probe, 'auto' takes the native one."""
    return [NativeBackend(), PortableBackend(), CollectiveBackend()]


def _matches(name: str, pattern: str) -> bool:
    return name == pattern or name.startswith(pattern + ".")


def plan(
    device: torch.device,
    backend_choice: str = "all",
    selection: Iterable[str] | None = None,
    quick: bool = False,
    everything: bool = False,
    full: bool = False,
) -> list[PlannedProbe]:
    """Which probe runs on which backend, one entry per implementation variant.

    all: every backend that has the name (native figures next to torch's);
    auto: each name once, from the first backend that has it (native, then torch);
    native/torch: only that backend.
    `selection` holds names or dotted prefixes; one that matches nothing is a UsageError.
    Without a selection only the probes a backend runs by default are planned (collectives need
    several GPUs, or asking for on a CPU); `everything` plans every probe there is (for --list).
    `full` tries every variant of every search (the default tries the ones that win on this
    architecture: :func:`_default_search`).
    """
    if backend_choice not in BACKEND_CHOICES:
        raise UsageError(f"--backend {backend_choice}: choose one of {', '.join(BACKEND_CHOICES)}")
    planned: list[PlannedProbe] = []
    seen: set[str] = set()
    for backend in backends():
        if backend_choice in ("native", "torch") and backend.family != backend_choice:
            continue
        for name in backend.probe_names(device):
            if backend_choice == "auto" and name in seen:
                continue
            if not selection and not everything and not backend.by_default(name, device):
                continue
            seen.add(name)
            planned.append(PlannedProbe(name, backend))
    if selection:
        selection = list(selection)
        for pattern in selection:
            if not any(_matches(p.name, pattern) for p in planned):
                raise UsageError(
                    f"unknown probe {pattern!r} for {device.type}; run 'python -m pygpuperf.roofline --list' to see names"
                )
        planned = [p for p in planned if any(_matches(p.name, s) for s in selection)]
    expanded = [
        PlannedProbe(p.name, p.backend, variant)
        for p in planned
        for variant in (p.backend.variants(p.name, device, quick) if not p.backend.waiver(p.name, device) else [""])
    ]
    return expanded if full or quick or everything else _default_search(expanded, device)


@lru_cache(maxsize=1)
def _variant_search() -> dict:
    text = resources.files("pygpuperf").joinpath("data/variant_search.json").read_text(encoding="utf-8")
    return json.loads(text)


def _architecture(device: torch.device) -> str | None:
    if device.type != "cuda":
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return f"{major}.{minor}"


def _default_search(planned: list[PlannedProbe], device: torch.device) -> list[PlannedProbe]:
    """The default suite: each variant search of this architecture tries the variants that won it, in
    that order (data/variant_search.json), and the torch reference copies beside the native transfer
    sweeps run at a few sizes, and the native sweeps stop at the size where copies have reached their plateau;
    everything else, and any architecture not in the table, as planned."""
    table = _variant_search()
    order = table["searches"].get(_architecture(device) or "", {})
    references = set(table["reference_sizes"]["sizes"])
    largest = TRANSFER_BYTES[table["transfer_sizes"]["largest"]]
    largest_pageable = TRANSFER_BYTES[table["transfer_sizes"]["largest_pageable"]]
    native_transfers = {p.name for p in planned if p.name.startswith("transfer.") and p.backend.family == "native"}
    searched = {p.name for p in planned if p.variant in order.get(p.name, ())}  # a winner of its search is planned
    kept = []
    for p in planned:
        wanted = order.get(p.name)
        if wanted is not None and p.variant and p.variant not in wanted and p.name in searched:
            continue  # a variant that lost this search on this architecture
        if p.name in native_transfers and p.backend.family != "native" and p.variant and p.variant not in references:
            continue
        limit = largest_pageable if ".pageable" in p.name else largest
        if p.name in native_transfers and p.backend.family == "native" and TRANSFER_BYTES.get(p.variant, 0) > limit:
            continue  # past the plateau: the copy rate and the latency fit are settled below it
        kept.append(p)
    # Each search tries its variants in the order they won; probes keep their place in the suite.
    first = {}
    for i, p in enumerate(kept):
        first.setdefault((p.name, p.backend.family), i)
    wins = {(name, v): rank for name, variants in order.items() for rank, v in enumerate(variants)}
    return sorted(kept, key=lambda p: (first[(p.name, p.backend.family)], wins.get((p.name, p.variant), 0)))


def run_one(probe: PlannedProbe, device: torch.device, settings: RunSettings) -> Measurement:
    """Measure one planned probe. A waiver or an error becomes a Measurement, not an exception."""
    backend_name = probe.backend.backend_name(device)
    reason = probe.backend.waiver(probe.name, device)
    if reason:
        return Measurement.not_run(probe.name, backend=backend_name, device=str(device), status="waived", reason=reason)
    try:
        with nvml.sampling(device) as sampler:
            measurement = probe.backend.measure(probe.name, device, settings.for_probe(probe.name), probe.variant)
        measurement.telemetry = sampler.telemetry if sampler.active else None
        if probe.variant:  # every backend's result says which variant it is
            measurement.params.setdefault("variant", probe.variant)
        return measurement
    except Exception as exc:  # noqa: BLE001 - a stop (KeyboardInterrupt) still ends the run
        # One probe's failure, whatever it is (out of memory, a library error, a bug in the probe), is that
        # probe's result: the run goes on with the others.
        if device.type == "cuda":
            torch.cuda.empty_cache()
        message = " ".join(str(exc).split())[:500]
        if not isinstance(exc, (RuntimeError, ValueError)):
            message = f"{type(exc).__name__}: {message}"
        return Measurement.not_run(probe.name, backend=backend_name, device=str(device), status="error", reason=message)


def run(
    probes: list[PlannedProbe],
    device: torch.device,
    settings: RunSettings,
    into: list[Measurement],
    on_start: Callable[[PlannedProbe], None] | None = None,
    on_done: Callable[[Measurement], None] | None = None,
) -> list[Measurement]:
    """Run probes in order, appending to `into` as each finishes so an interrupt keeps them.
    Consecutive probes of a backend that measures together (collectives) run in one go."""
    i = 0
    while i < len(probes):
        probe = probes[i]
        if on_start:
            on_start(probe)
        if probe.backend.together and not probe.backend.waiver(probe.name, device):
            group = [probe]
            while i + len(group) < len(probes) and probes[i + len(group)].backend is probe.backend:
                group.append(probes[i + len(group)])
            for measurement in _run_together(group, device, settings, into):
                if on_done:
                    on_done(measurement)
            i += len(group)
            continue
        measurement = run_one(probe, device, settings)
        into.append(measurement)
        if on_done:
            on_done(measurement)
        i += 1
    return into


def _run_together(group: list[PlannedProbe], device: torch.device, settings: RunSettings,
                  into: list[Measurement]) -> list[Measurement]:
    """The measurements of one go of a together-backend; a failure leaves an error measurement for
    each probe that got none (a stop is raised again after what was measured is in `into`)."""
    backend, start = group[0].backend, len(into)
    try:
        backend.measure_together([p.name for p in group], device, settings, into)
    except (RuntimeError, ValueError, OSError) as exc:  # a rank that failed: keep the rest of the run
        message = " ".join(str(exc).split())[:500]
        done = {m.name for m in into[start:]}
        into += [Measurement.not_run(p.name, backend=backend.backend_name(device), device=str(device),
                                     status="error", reason=message) for p in group if p.name not in done]
    return into[start:]