"""Fleet validation, the per-rank side: a quick probe suite on this rank's device, health facts, links,
and the documents that carry it all to rank 0.

One process per GPU, started by torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) on one host or
many, or one plain process for one device. Nothing here launches or rendezvouses: torch.distributed does.

Each rank's result is a plain JSON document (:func:`rank_document`), at most MAX_RANK_DOCUMENT_BYTES long.
Documents travel as UTF-8 bytes in uint8 tensors over Gloo groups, never as pickled objects, in two steps
so that no process reads one message per GPU of a large fleet: the ranks of a host send theirs to the
host's leader (its lowest rank), which adds the host's P2P matrix and sends one host document to rank 0.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Callable, Iterator, Sequence

import jsonschema
import numpy as np
import torch
import torch.distributed as dist

import pygpuperf
from pygpuperf.core import documents
from pygpuperf.core.documents import parse_json
from pygpuperf.core.errors import UsageError
from pygpuperf.core.results import Measurement, best_of
from pygpuperf.facts import health, links
from pygpuperf.facts.device import device_name, resolve_device
from pygpuperf.measure import collectives, suite
from pygpuperf.measure.backends.portable import default_buffer_bytes
from pygpuperf.measure.probe import RunSettings

RANK_SCHEMA = "pygpuperf-fleet-rank/1"
HOST_SCHEMA = "pygpuperf-fleet-host/1"
# A rank's document is trimmed to fit this (figures and facts need some 5-15 KiB), so a host
# document is bounded by its ranks and rank 0 by its hosts.
MAX_RANK_DOCUMENT_BYTES = 64 * 1024
_REASON_CHARS = 300

# The validation suite: each pattern, and what stands in for it where no backend has it (no native CUDA
# build: torch's matmul for the tensor and FP32 rates). Waivers drop precisions a card lacks.
GPU_SUITE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("memory.hbm.read", ()),
    ("memory.hbm.write", ()),
    ("memory.hbm.copy", ()),
    ("compute.tensor.fp16.acc32", ("compute.library.fp16",)),
    ("compute.tensor.bf16.acc32", ("compute.library.bf16",)),
    ("compute.tensor.tf32.acc32", ("compute.library.tf32",)),
    ("compute.tensor.fp8.acc32", ("compute.library.fp8",)),
    ("compute.tensor.int8.acc32", ("compute.library.int8",)),
    ("compute.cuda.fp32", ("compute.library.fp32",)),
    ("transfer.h2d.pinned", ()),
    ("transfer.d2h.pinned", ()),
    # The device's own cost per kernel; the host-timed modes (launch, single) vary by 5-20 % between samples
    # on a healthy H200, too much to judge a GPU by.
    ("latency.kernel.back_to_back", ()),
    ("latency.kernel.duration", ()),
    ("latency.kernel.graph", ()),
)
CPU_SUITE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("memory.dram.read", ()),
    ("memory.dram.write", ()),
    ("memory.dram.copy", ()),
    ("compute.simd.fp32", ("compute.library.fp32",)),
    ("latency.kernel.back_to_back", ()),
)
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter")
COLLECTIVE_SIZES = collectives.QUICK_SIZES  # 8 KiB, 1 MiB, 64 MiB
P2P_BASE = "transfer.p2p.ce.write"
DEFAULT_BUDGET_S = 120.0
DEFAULT_SAMPLES = 5


# --------------------------------------------------------------------------- launch


@dataclass(frozen=True)
class Launch:
    """Where this process sits: from torchrun's variables, or one process alone."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    launched: bool = False

    @staticmethod
    def from_environment(env: dict[str, str] | None = None) -> "Launch":
        env = dict(os.environ if env is None else env)
        if not all(k in env for k in ("RANK", "WORLD_SIZE")):
            return Launch()
        try:
            rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
            local = int(env.get("LOCAL_RANK", "0"))
            local_world = int(env.get("LOCAL_WORLD_SIZE", "1"))
        except ValueError:
            raise UsageError("RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE must be whole numbers; "
                             "start the command with torchrun") from None
        if not (0 <= rank < world and 0 <= local < max(local_world, 1)):
            raise UsageError(f"RANK {rank} of WORLD_SIZE {world} (LOCAL_RANK {local}) is out of range; "
                             "start the command with torchrun")
        return Launch(rank, world, local, max(local_world, 1), True)


@dataclass(frozen=True)
class FleetSettings:
    device: str | None = None  # --device: cpu, cuda (each rank takes cuda:LOCAL_RANK), cuda:N alone
    serial: bool = False  # the GPUs of a host one at a time, each with an equal share of the budget
    budget_s: float = DEFAULT_BUDGET_S
    samples: int = DEFAULT_SAMPLES
    probes: tuple[str, ...] = ()  # restrict the suite to these names or dotted prefixes
    collective_sizes: tuple[int, ...] = COLLECTIVE_SIZES  # () : no collectives
    p2p: bool = True

    def run_settings(self) -> RunSettings:
        return RunSettings(warmup=1, samples=self.samples, quick=True)


def rank_device(settings: FleetSettings, launch: Launch) -> torch.device:
    """This rank's device: under torchrun a GPU rank takes cuda:LOCAL_RANK; UsageError for one that is not here."""
    spec = settings.device
    if launch.launched and (spec is None or spec == "cuda"):
        if spec is None and not torch.cuda.is_available():
            return torch.device("cpu")
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if launch.local_rank >= count:
            raise UsageError(f"LOCAL_RANK {launch.local_rank}: {count} CUDA GPU(s) visible on this host; start at "
                             "most that many processes per node (--nproc-per-node), or use --device cpu")
        return torch.device("cuda", launch.local_rank)
    if launch.launched and spec not in ("cpu",) and launch.world_size > 1:
        raise UsageError(f"--device {spec}: under torchrun each rank takes its own GPU; use --device cuda or cpu")
    return resolve_device(spec)


# --------------------------------------------------------------------------- the suite


def plan_suite(device: torch.device, probes: Sequence[str] = ()) -> list[suite.PlannedProbe]:
    """The fleet suite for `device` (quick variants, one backend per name), or the named part of it."""
    available = suite.plan(device, "auto", quick=True)
    table = CPU_SUITE if device.type == "cpu" else GPU_SUITE
    chosen: list[suite.PlannedProbe] = []
    for pattern, fallbacks in table:
        for candidate in (pattern, *fallbacks):
            hits = [p for p in available if _matches(p.name, candidate)]
            if hits:
                chosen += [p for p in hits if p not in chosen]
                break
    if probes:
        for pattern in probes:
            if not any(_matches(p.name, pattern) for p in chosen):
                names = sorted({p.name for p in chosen})
                raise UsageError(f"--probes {pattern}: not in the fleet suite for {device.type}; choose from "
                                 f"{', '.join(names)} (or a dotted prefix of them)")
        chosen = [p for p in chosen if any(_matches(p.name, s) for s in probes)]
    return chosen


def _matches(name: str, pattern: str) -> bool:
    return name == pattern or name.startswith(pattern + ".")


@dataclass
class ProbeRecord:
    measurement: Measurement
    seconds: float
    energy_j: float | None


# Stop signals that arrived while this process measured (core.stopping turns them into KeyboardInterrupt):
# the suite waives what is left and the run still gathers and writes what it has.
STOPS: list[KeyboardInterrupt] = []


def _not_run(probe: suite.PlannedProbe, device: torch.device, why: str) -> ProbeRecord:
    m = Measurement.not_run(probe.name, backend=probe.backend.backend_name(device), device=str(device),
                            status="waived", reason=why)
    if probe.variant:
        m.params["variant"] = probe.variant
    return ProbeRecord(m, 0.0, None)


def run_suite(device: torch.device, planned: Sequence[suite.PlannedProbe], settings: RunSettings, budget_s: float,
              on_done: Callable[[ProbeRecord], None] | None = None) -> tuple[list[ProbeRecord], bool]:
    """Each planned probe through the suite's one measuring path, with its wall time and the energy the
    device drew meanwhile. A probe that would start after `budget_s` is not run but waived with the
    reason; returns (records, whether the budget ran out). A stop signal, inside a probe or between two
    (while `on_done` reports one, say), waives the rest and keeps every probe measured before it."""
    records: list[ProbeRecord] = []
    started = time.monotonic()
    exhausted = False
    done: ProbeRecord | None = None  # the latest probe measured, until it is in `records`
    try:
        for probe in planned:
            stopped = STOPS[0] if STOPS else None
            if stopped is not None or time.monotonic() - started >= budget_s:
                exhausted = exhausted or stopped is None
                records.append(_not_run(probe, device, f"not run: {stopped}" if stopped is not None else
                                        f"not run: the suite's time budget ({budget_s:g} s) was spent"))
                continue
            t0 = time.monotonic()
            m = suite.run_one(probe, device, settings)
            # The suite samples the device around each probe: its telemetry holds the joules (counter, else
            # power x time).
            done = ProbeRecord(m, time.monotonic() - t0, m.telemetry.energy_j if m.telemetry is not None else None)
            records.append(done)
            if on_done is not None:
                on_done(done)
    except KeyboardInterrupt as exc:  # a stop signal, in a probe or between two; later ones only wait (core.stopping)
        STOPS.append(exc)
        if done is not None and not any(r is done for r in records):
            records.append(done)
        records += [_not_run(p, device, f"not run: {exc}") for p in planned[len(records):]]
    return records, exhausted


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if values else None


def figure_of(records: Sequence[ProbeRecord]) -> dict[str, Any]:
    """One figure from every variant of one probe name: the best verified one's value and spread, the
    telemetry of the best variant, energy and time over all of them, clock events and the PCIe link's
    best state over all of them (an idle link trains down, so only a loaded one shows what it can)."""
    ms = [r.measurement for r in records]
    best = best_of(ms)
    shown = best or next((m for m in ms if m.status == "ok"), None) or next(
        (m for m in ms if m.status == "error"), ms[0])
    status = shown.status if shown.status != "ok" or shown.verified else "wrong"
    if best is None and shown.status == "ok":
        status = "wrong"
    energies = [r.energy_j for r in records if r.energy_j is not None]
    reasons = sorted({reason for m in ms if m.telemetry for reason in m.telemetry.throttle_reasons})
    generations = [g for m in ms if m.telemetry for g in m.telemetry.pcie_generation]
    widths = [w for m in ms if m.telemetry for w in m.telemetry.pcie_width]
    t = shown.telemetry
    telemetry = None
    if any(m.telemetry for m in ms):
        telemetry = {
            "sm_clock_mhz": _median(t.sm_clock_mhz) if t else None,
            "mem_clock_mhz": _median(t.mem_clock_mhz) if t else None,
            "power_w": _median(t.power_w) if t else None,
            "power_w_max": max((p for m in ms if m.telemetry for p in m.telemetry.power_w), default=None),
            "temperature_c_max": max((c for m in ms if m.telemetry for c in m.telemetry.temperature_c), default=None),
            "energy_j": sum(energies) if energies else None,
            "throttle_reasons": reasons,
            "pcie_generation_max_seen": int(max(generations)) if generations else None,
            "pcie_width_max_seen": int(max(widths)) if widths else None,
        }
    return {
        "value": _finite(shown.value) if status in ("ok", "wrong") else None,
        "unit": shown.unit,
        "cv": _finite(shown.stats.cv),
        "p5": _finite(shown.stats.p5),
        "p95": _finite(shown.stats.p95),
        "n": int(shown.stats.n),
        "backend": shown.backend,
        "variant": str(shown.params.get("variant", "")),
        "variants": len(ms),
        "status": status,
        "reason": " ".join((shown.reason or ("" if shown.verified else shown.verify_detail)).split())[:_REASON_CHARS],
        "seconds": round(sum(r.seconds for r in records), 3),
        "telemetry": telemetry,
    }


def figures_of(records: Sequence[ProbeRecord]) -> dict[str, dict[str, Any]]:
    grouped: dict[str, list[ProbeRecord]] = {}
    for r in records:
        grouped.setdefault(r.measurement.name, []).append(r)
    return {name: figure_of(group) for name, group in grouped.items()}


def _ecc_during(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for kind in ("corrected", "uncorrected"):
        a, b = (h["ecc_errors"].get(f"volatile_{kind}") for h in (before, after))
        out[kind] = b - a if a is not None and b is not None else None
    return out


def rank_document(device: torch.device, launch: Launch, host: str, records: Sequence[ProbeRecord],
                  health_before: dict[str, Any], health_after: dict[str, Any], suite_facts: dict[str, Any],
                  errors: Sequence[str] = ()) -> dict[str, Any]:
    """This rank's result as plain JSON data (`pygpuperf-fleet-rank/1`)."""
    facts = dict(health_after)
    facts["ecc_errors_during_suite"] = _ecc_during(health_before, health_after)
    name = facts.get("name") or device_name(device)
    return {
        "schema": RANK_SCHEMA,
        "rank": launch.rank,
        "local_rank": launch.local_rank,
        "host": host,
        "device": str(device),
        "device_type": device.type,
        "index": device.index,
        "card": str(name),
        "versions": {"pygpuperf": pygpuperf.__version__, "torch": torch.__version__,
                     "driver": facts.get("driver_version")},
        "suite": suite_facts,
        "figures": figures_of(records),
        "health": facts,
        "errors": [" ".join(e.split())[:_REASON_CHARS] for e in errors],
    }


def _rounded(obj: Any) -> Any:
    """Floats to 6 significant digits: far finer than any figure's spread, and a third of the text."""
    if isinstance(obj, float):
        return float(f"{obj:.6g}") if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    return obj


@lru_cache(maxsize=1)
def _rank_validator() -> jsonschema.Draft202012Validator:
    schema = documents.schema("fleet")
    return jsonschema.Draft202012Validator({"$ref": "#/$defs/rank", "$defs": schema["$defs"]})


def rank_problem(doc: Any) -> str | None:
    """Why `doc` is not a valid rank document (its schema in data/fleet.schema.json), or None. Each rank
    checks its own before sending, so rank 0 does not spend milliseconds per GPU of a large fleet on it."""
    error = jsonschema.exceptions.best_match(_rank_validator().iter_errors(doc))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
    return f"rank document not valid at {where}: {error.message[:200]}"


def bounded_json(doc: dict[str, Any], limit: int = MAX_RANK_DOCUMENT_BYTES) -> str:
    """`doc` as compact JSON of at most `limit` bytes: past it, figures lose their telemetry, then their
    reasons; a document still too long keeps only its identity and says so. A document that is not valid
    travels as its rank and the problem."""
    doc = _rounded(doc)
    problem = rank_problem(doc)
    if problem is not None:
        doc = {"schema": RANK_SCHEMA, "rank": doc.get("rank", -1), "invalid": problem}
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False)
    if len(text.encode()) <= limit:
        return text
    trimmed = json.loads(text)
    trimmed.setdefault("errors", []).append(f"document trimmed to fit {limit} bytes")
    for step in ("telemetry", "reason"):
        for figure in trimmed.get("figures", {}).values():
            figure[step] = None if step == "telemetry" else ""
        text = json.dumps(trimmed, separators=(",", ":"), allow_nan=False)
        if len(text.encode()) <= limit:
            return text
    keep = {k: trimmed.get(k) for k in ("schema", "rank", "local_rank", "host", "device", "device_type", "index",
                                        "card", "versions", "suite")}
    keep.update(figures={}, health=health.empty_rank_health("dropped: the document was too long"),
                errors=[f"document over {limit} bytes: figures and facts dropped"])
    return json.dumps(keep, separators=(",", ":"), allow_nan=False)


# --------------------------------------------------------------------------- links


def p2p_matrix(settings: RunSettings, budget_left_s: float) -> dict[str, Any]:
    """GPU-to-GPU copy bandwidth for every ordered pair of the GPUs this process sees (the largest quick
    size, the copy engine), each with the rate NVML says its link carries; waived with one GPU. Pairs that
    would start after `budget_left_s` are left out and said so."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < 2:
        return {"status": "waived", "reason": f"{count} GPU(s) visible to this process; a P2P matrix needs two",
                "gpus": {}, "pairs": {}}
    if budget_left_s <= 0:
        return {"status": "waived", "reason": "the suite's time budget was spent before the P2P matrix",
                "gpus": {}, "pairs": {}}
    device = torch.device("cuda", 0)
    planned = [p for p in suite.plan(device, "auto", quick=True)
               if p.name.startswith("transfer.p2p.") and p.name.endswith(P2P_BASE[len("transfer.p2p."):])]
    last: dict[str, suite.PlannedProbe] = {}
    for p in planned:  # sizes come in ascending order: the largest quick size carries the figure
        last[p.name] = p
    facts = links.link_facts([torch.device("cuda", i) for i in range(count)])
    records, _ = run_suite(device, list(last.values()), settings, budget_left_s)
    pairs: dict[str, Any] = {}
    for name, figure in figures_of(records).items():
        src, dst = name.split(".")[2:4]
        link = facts.get("pairs", {}).get(f"{src}.{dst}", {})
        figure.pop("telemetry", None)
        pairs[f"{src}.{dst}"] = {**figure, "link": link.get("type"),
                                 "expected_gbs": _finite(link.get("gbps_per_direction"))}
    gpus = {i: g.get("bus_id") for i, g in facts.get("gpus", {}).items()}
    return {"status": "ok" if pairs else "waived", "reason": "" if pairs else "no P2P probe for these GPUs",
            "gpus": gpus, "pairs": pairs}


def _collective_rows(measurements: Sequence[Measurement]) -> list[dict[str, Any]]:
    rows = []
    for m in measurements:
        q = m.quantities
        rows.append({
            "op": m.name.split(".", 1)[1],
            "size_bytes": q.size_bytes or 0,
            "busbw_gbs": _finite(m.value),
            "algbw_gbs": _finite(q.algbw_gbs),
            "time_s": _finite(q.time_s),
            "cv": _finite(m.stats.cv),
            "status": m.status if m.status != "ok" or m.verified else "wrong",
            "reason": " ".join((m.reason or ("" if m.verified else m.verify_detail)).split())[:_REASON_CHARS],
            "world_size": q.world_size or 0,
            "hosts": q.hosts or 0,
            "communication_backend": str(m.params.get("communication_backend", "")),
        })
    return rows


# --------------------------------------------------------------------------- the group


def _host_key(host: str) -> int:
    """A 63-bit number naming the host: the ranks compare numbers, not strings."""
    return int.from_bytes(hashlib.sha256(host.encode()).digest()[:8], "little") & ((1 << 63) - 1)


@dataclass
class Layout:
    """The hosts of the group: ranks per host (ascending), this rank's host group and the leaders' group."""

    hosts: list[list[int]]
    host_ranks: list[int]
    host_group: Any = None
    leader_group: Any = None
    leaders: list[int] = field(default_factory=list)

    @property
    def leader(self) -> int:
        return self.host_ranks[0]


def _tensor_device(device: torch.device) -> torch.device:
    return device if dist.get_backend() == "nccl" else torch.device("cpu")


def host_layout(device: torch.device, host: str, timeout: _dt.timedelta) -> Layout:
    """Every rank's host through one all_gather of a number per rank; then Gloo groups of each host and of
    the host leaders, each created by its members alone (no step in which every rank waits on every group)."""
    world = dist.get_world_size()
    where = _tensor_device(device)
    mine = torch.tensor([_host_key(host)], dtype=torch.int64, device=where)
    keys = [torch.zeros(1, dtype=torch.int64, device=where) for _ in range(world)]
    dist.all_gather(keys, mine)
    by_key: dict[int, list[int]] = {}
    for rank, key in enumerate(int(k.item()) for k in keys):
        by_key.setdefault(key, []).append(rank)
    hosts = sorted(by_key.values())
    own = by_key[_host_key(host)]
    layout = Layout(hosts=hosts, host_ranks=own, leaders=[h[0] for h in hosts])
    layout.host_group = dist.new_group(own, timeout=timeout, backend="gloo", use_local_synchronization=True)
    if len(layout.leaders) > 1 and dist.get_rank() in layout.leaders:
        layout.leader_group = dist.new_group(layout.leaders, timeout=timeout, backend="gloo",
                                             use_local_synchronization=True)
    return layout


def gather_texts(text: str, group: Any, members: Sequence[int], dst: int) -> list[str] | None:
    """Every member's `text` at global rank `dst` (None elsewhere): sizes first, then the UTF-8 bytes padded
    to the longest, in one gather of uint8 tensors."""
    payload = text.encode()
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in members]
    dist.all_gather(sizes, torch.tensor([len(payload)], dtype=torch.int64), group=group)
    lengths = [int(s.item()) for s in sizes]
    longest = max(lengths)
    buffer = torch.zeros(longest, dtype=torch.uint8)
    buffer[:len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    if dist.get_rank() != dst:
        dist.gather(buffer, None, dst=dst, group=group)
        return None
    received = [torch.empty(longest, dtype=torch.uint8) for _ in members]
    dist.gather(buffer, received, dst=dst, group=group)
    return [bytes(t[:n].numpy()).decode(errors="replace") for t, n in zip(received, lengths)]


def _parse_rank_text(text: str, rank: int) -> dict[str, Any]:
    try:
        doc = parse_json(text)
        if isinstance(doc, dict):
            return doc
        raise ValueError("not a JSON object")
    except (ValueError, RecursionError) as exc:
        return {"schema": RANK_SCHEMA, "rank": rank, "invalid": f"rank {rank} sent no JSON document: "
                                                                f"{str(exc)[:200]}"}


def host_document(host: str, rank_texts: Sequence[str], ranks: Sequence[int], p2p: dict[str, Any]) -> str:
    docs = [_parse_rank_text(t, r) for t, r in zip(rank_texts, ranks)]
    return json.dumps({"schema": HOST_SCHEMA, "host": host, "ranks": docs, "p2p": p2p},
                      separators=(",", ":"), allow_nan=False)


# --------------------------------------------------------------------------- one rank, start to end


@dataclass
class Gathered:
    """What rank 0 holds at the end: one document per host, the collectives, and the run's facts."""

    hosts: list[dict[str, Any]]
    collectives: list[dict[str, Any]]
    meta: dict[str, Any]


def _timeout(settings: FleetSettings, local_world: int) -> _dt.timedelta:
    # Ranks wait at barriers while others measure: serial turns take the whole budget.
    return _dt.timedelta(seconds=max(1800.0, 3 * settings.budget_s * max(local_world, 1) + 600))


def _budget_share(settings: FleetSettings, local_world: int) -> float:
    return settings.budget_s / local_world if settings.serial else settings.budget_s


@contextmanager
def joined(settings: FleetSettings, launch: Launch, device: torch.device) -> Iterator[None]:
    """Inside: this process is in torchrun's group (nothing to join for one process alone)."""
    if device.type == "cpu" and launch.local_world_size > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // launch.local_world_size))  # ranks share the cores
    if not launch.launched:
        yield
        return
    collectives.init_group(device.type, launch.rank, launch.world_size, device.index or 0,
                           timeout=_timeout(settings, launch.local_world_size))
    try:
        yield
    finally:
        dist.destroy_process_group()


def agree(code: int, device: torch.device) -> int:
    """The highest of every rank's `code`, on every rank (`code` alone without a group). Every rank ends with
    rank 0's verdict this way: torchrun agents whose workers succeeded would otherwise wait minutes at
    their exit barrier for the agent of a rank that failed."""
    if not dist.is_initialized():
        return code
    value = torch.tensor([code], dtype=torch.int64, device=_tensor_device(device))
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return int(value.item())


def run_rank(settings: FleetSettings, launch: Launch, device: torch.device,
             progress: Callable[[str], None] | None = None) -> Gathered | None:
    """Measure this rank and bring every rank's document to rank 0, inside :func:`joined`; returns them on
    rank 0, None elsewhere."""
    say = progress or (lambda text: None)
    grouped = dist.is_initialized()
    return _run_in_group(settings, launch, device, health.host_name(), grouped,
                         _timeout(settings, launch.local_world_size), say)


def _run_in_group(settings: FleetSettings, launch: Launch, device: torch.device, host: str, grouped: bool,
                  timeout: _dt.timedelta, say: Callable[[str], None]) -> Gathered | None:
    layout = host_layout(device, host, timeout) if grouped else Layout(hosts=[[0]], host_ranks=[0], leaders=[0])
    local_world = len(layout.host_ranks)
    local_index = layout.host_ranks.index(launch.rank)
    planned = plan_suite(device, settings.probes)
    share = _budget_share(settings, local_world)
    started = time.monotonic()
    before = health.device_health(device)
    records: list[ProbeRecord] = []
    exhausted = False
    run_settings = settings.run_settings()
    if device.type == "cpu" and local_world > 1 and not settings.serial:  # the host's ranks measure at once
        run_settings = replace(run_settings, size_bytes=default_buffer_bytes(device, local_world))
    for turn in range(local_world if settings.serial else 1):
        if not settings.serial or turn == local_index:
            say(f"rank {launch.rank}: {len(planned)} probe run(s) on {device}")
            records, exhausted = run_suite(device, planned, run_settings, share, on_done=lambda r: say(
                f"rank {launch.rank}: {r.measurement.name} {r.measurement.status} ({r.seconds:.1f} s)"))
        if settings.serial and grouped:
            dist.barrier(group=layout.host_group)  # one GPU of the host at a time
    suite_seconds = time.monotonic() - started
    after = health.device_health(device)
    suite_facts = {"mode": "serial" if settings.serial else "parallel", "budget_s": settings.budget_s,
                   "budget_share_s": share, "seconds": round(suite_seconds, 3), "budget_spent": exhausted,
                   "planned": len(planned), "run": sum(1 for r in records if r.seconds > 0),
                   "samples": run_settings.samples}
    doc = rank_document(device, launch, host, records, before, after, suite_facts)
    text = bounded_json(doc)

    # The host's P2P matrix, by its leader, while the other ranks of the host wait.
    if grouped:
        dist.barrier(group=layout.host_group)
    p2p: dict[str, Any] = {"status": "waived", "reason": "not asked for (--no-p2p)", "gpus": {}, "pairs": {}}
    if launch.rank == layout.leader:
        if device.type != "cuda":
            p2p = {"status": "waived", "reason": f"no P2P copies between {device.type} devices", "gpus": {},
                   "pairs": {}}
        elif settings.p2p:
            say(f"rank {launch.rank}: P2P matrix of host {host}")
            # Its own allowance of the budget, none where the suite spent it.
            p2p = p2p_matrix(run_settings, 0.0 if exhausted else settings.budget_s)
    if grouped:
        dist.barrier(group=layout.host_group)

    rows = _collectives(settings, launch, device, exhausted, grouped, say)
    if not grouped:
        host_text = host_document(host, [text], [launch.rank], p2p)
        return Gathered([parse_json(host_text)], rows, _meta(settings, launch, device, layout, started))
    texts = gather_texts(text, layout.host_group, layout.host_ranks, layout.leader)
    host_texts: list[str] | None = None
    if texts is not None:
        host_text = host_document(host, texts, layout.host_ranks, p2p)
        if layout.leader_group is not None:
            host_texts = gather_texts(host_text, layout.leader_group, layout.leaders, 0)
        else:
            host_texts = [host_text]
    if launch.rank != 0:
        return None
    return Gathered([parse_json(t) for t in host_texts or []], rows, _meta(settings, launch, device, layout, started))


def _collectives(settings: FleetSettings, launch: Launch, device: torch.device, exhausted: bool, grouped: bool,
                 say: Callable[[str], None]) -> list[dict[str, Any]]:
    """all_reduce, all_gather and reduce_scatter busbw across every rank, at a few sizes; every rank takes
    part, rank 0 keeps the figures. Skipped by all alike when any rank's suite ran out of its budget."""
    if not settings.collective_sizes:
        return []
    backend = collectives.backend_name(device.type)
    label = collectives.device_label(device.type, launch.world_size)
    if not grouped or launch.world_size < 2:
        reason = "one rank: collectives need two or more (start with torchrun)"
        return _collective_rows([Measurement.not_run(f"collective.{op}", backend=backend, device=label,
                                                     status="waived", reason=reason) for op in COLLECTIVE_OPS])
    if agree(int(exhausted), device):
        reason = f"not run: a rank's suite had spent the time budget ({settings.budget_s:g} s)"
        return _collective_rows([Measurement.not_run(f"collective.{op}", backend=backend, device=label,
                                                     status="waived", reason=reason) for op in COLLECTIVE_OPS])
    if launch.rank == 0:
        say(f"collectives over {launch.world_size} ranks")
    measured = collectives.measure_collectives(device, COLLECTIVE_OPS, list(settings.collective_sizes),
                                               collectives.QUICK_SETTINGS)
    return _collective_rows(measured) if launch.rank == 0 else []


def _meta(settings: FleetSettings, launch: Launch, device: torch.device, layout: Layout,
          started: float) -> dict[str, Any]:
    return {
        "versions": {"pygpuperf": pygpuperf.__version__, "torch": torch.__version__, "cuda": torch.version.cuda},
        "time_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "launch": "torchrun" if launch.launched else "single",
        "world_size": launch.world_size,
        "hosts": len(layout.hosts),
        "device_type": device.type,
        "communication_backend": dist.get_backend() if dist.is_initialized() else None,
        "mode": "serial" if settings.serial else "parallel",
        "budget_s": settings.budget_s,
        "samples": settings.samples,
        "seconds": round(time.monotonic() - started, 3),
        "collective_sizes": list(settings.collective_sizes),
    }
