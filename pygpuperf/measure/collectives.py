"""Collective bandwidth: all_reduce, all_gather, reduce_scatter and broadcast through
torch.distributed (NCCL on CUDA GPUs, Gloo on the CPU); `python -m pygpuperf.collectives` runs it.

Counted as nccl-tests counts (doc/PERFORMANCE.md): S is the size of the whole array (for
all_gather the gathered output, for reduce_scatter the input of one rank, so each rank holds
S / n of the result), t the time of one operation on the slowest rank, algbw = S / t and
busbw = algbw x factor: 2(n-1)/n for all_reduce, (n-1)/n for all_gather and reduce_scatter,
1 for broadcast. busbw is the measurement's value, so it can be held against link bandwidth
whatever the number of ranks.

Two ways to start it, with the same measuring code (:func:`measure_collectives`):
in one command on one host, :func:`run_collectives` spawns one process per GPU (two on the
CPU); under torchrun (``torchrun --nproc-per-node 8 -m pygpuperf.collectives``), every
launched rank measures and rank 0 reports, on one host or many.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
import re
import signal
import socket
import statistics
import tempfile
import threading
import time
from abc import abstractmethod
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch
import torch.distributed as dist

from pygpuperf.core.timing import sample_seconds
from pygpuperf.measure.probe import RunSettings
from pygpuperf.measure.probe import Probe, Work
from pygpuperf.core.units import format_bytes
from pygpuperf.core.results import Measurement, Results

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
SIZES = tuple(1 << p for p in range(13, 31))  # 8 KiB .. 1 GiB
QUICK_SIZES = (8 * KiB, 1 * MiB, 64 * MiB)
# nccl-tests' defaults: 5 warm-up and 20 timed iterations.
SETTINGS = RunSettings(warmup=5, samples=20)
QUICK_SETTINGS = RunSettings(warmup=2, samples=10, quick=True)
COUNTING = "nccl-tests: algbw = S / t, busbw = algbw x factor"

_DTYPE = torch.float32
_ITEM = 4
_ROOT = 0  # broadcast's source rank
# Verification looks at this many elements at a time, bounding its temporary memory.
_VERIFY_CHUNK = 16 * MiB
_LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


# --------------------------------------------------------------------------- counting


def bus_factor(op: str, world_size: int) -> float:
    """nccl-tests' busbw correction factor for `op` over `world_size` ranks."""
    if world_size < 1:
        raise ValueError(f"world size must be at least 1, got {world_size}")
    n = world_size
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    if op == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")


def bandwidths(op: str, size_bytes: float, seconds: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s of one operation on S = `size_bytes` that took `seconds`."""
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * bus_factor(op, world_size)


def message_bytes(op: str, size_bytes: int, world_size: int) -> int:
    """S actually moved for a requested size: whole fp32 elements, and for all_gather and
    reduce_scatter a multiple of the ranks (each holds S / n), as nccl-tests rounds it."""
    unit = _ITEM * world_size if op in ("all_gather", "reduce_scatter") else _ITEM
    return size_bytes - size_bytes % unit


_SIZE = re.compile(r"^\s*(\d+)\s*(b|k|kib|m|mib|g|gib)?\s*$", re.IGNORECASE)
_SIZE_SCALE = {"": 1, "b": 1, "k": KiB, "kib": KiB, "m": MiB, "mib": MiB, "g": GiB, "gib": GiB}


def parse_size(text: str) -> int:
    """'64KiB', '1MiB', '1G', '65536' -> bytes (binary units). Raises ValueError."""
    match = _SIZE.match(text)
    if match is None or int(match.group(1)) == 0:
        raise ValueError(f"size {text!r}: write a positive whole number of bytes, KiB, MiB or GiB, e.g. 8KiB, 1GiB")
    return int(match.group(1)) * _SIZE_SCALE[(match.group(2) or "").lower()]


def message_sizes(quick: bool = False, max_size: int | None = None, sizes: Sequence[int] | None = None) -> list[int]:
    """Message sizes to measure: 8 KiB..1 GiB in powers of two (quick: 8 KiB, 1 MiB, 64 MiB), or
    `sizes`, without those above `max_size`. Raises ValueError when none is left."""
    candidates = list(sizes) if sizes is not None else list(QUICK_SIZES if quick else SIZES)
    if not candidates or any(s <= 0 for s in candidates):
        raise ValueError(f"message sizes must be positive, got {candidates}")
    chosen = [s for s in candidates if max_size is None or s <= max_size]
    if not chosen:
        raise ValueError(f"no message size at or below {format_bytes(max_size or 0)}; the smallest is "
                         f"{format_bytes(min(candidates))}")
    return sorted(set(chosen))


# --------------------------------------------------------------------------- data


def _values(rank: int, first: int, count: int, device: torch.device) -> torch.Tensor:
    """Elements first..first+count of rank's input: integers 1..15 as fp32 from a hash of
    (rank, index). Never zero, sums of them are exact, any rank can rebuild any other rank's
    data chunk by chunk, and the same on every device (unlike a device RNG)."""
    h = torch.arange(first, first + count, dtype=torch.int64, device=device)
    # Every product stays below 2**63: no int64 overflow.
    h = (h * 0x9E3779B1 + (rank + 1) * 0x85EBCA6B) & 0xFFFFFFFF
    h = h ^ (h >> 16)
    h = (h * 0x7FEB352D) & 0xFFFFFFFF
    h = h ^ (h >> 15)
    h = (h * 0x2C1B3C6D) & 0xFFFFFFFF
    h = h ^ (h >> 16)
    return (h % 15 + 1).to(_DTYPE)


def _sum_of_ranks(world_size: int, first: int, count: int, device: torch.device) -> torch.Tensor:
    total = _values(0, first, count, device)
    for r in range(1, world_size):
        total += _values(r, first, count, device)
    return total


def _mismatches(got: torch.Tensor, want: torch.Tensor) -> int:
    return int((got != want).sum().item())  # NaN != x: poison always counts


def _chunks(count: int) -> Iterable[tuple[int, int]]:
    for first in range(0, count, _VERIFY_CHUNK):
        yield first, min(_VERIFY_CHUNK, count - first)


# --------------------------------------------------------------------------- operations


class _Collective(Probe):
    """One collective on one message size, on this rank, as a probe: setup -> poison -> (prepare,
    run) x warm-up and samples -> verify -> teardown. Its work is the message size S; busbw is S / t
    times :func:`bus_factor`."""

    op: str
    function: str  # the torch.distributed call, for params
    checks: str  # what wrong() compares, for the verification detail

    def __init__(self, size_bytes: int, rank: int, world_size: int, device: torch.device) -> None:
        self.size_bytes = message_bytes(self.op, size_bytes, world_size)
        self.rank, self.world_size, self.device = rank, world_size, device
        self.name = f"collective.{self.op}"
        self.description = f"{self.function} through torch.distributed"

    def setup(self, device: torch.device | None = None, settings: RunSettings | None = None) -> None:
        """Allocate; fill inputs with this rank's data."""
        self.allocate()

    @abstractmethod
    def allocate(self) -> None: ...

    def work(self) -> Work:
        return Work(bytes_read=float(self.size_bytes))

    def prepare(self) -> None:
        """Untimed work before each run."""

    def before_sample(self) -> None:
        self.prepare()

    @abstractmethod
    def wrong(self) -> int:
        """Elements of this rank's output that differ from the expected result."""

    def verify(self) -> tuple[bool, str]:
        wrong = self.wrong()
        return wrong == 0, f"this rank matches: {self.checks}" if wrong == 0 else f"{wrong} elements wrong here"

    def teardown(self) -> None:
        """Drop every tensor (also after a setup that failed half way)."""
        for key, value in list(vars(self).items()):
            if isinstance(value, torch.Tensor):
                setattr(self, key, None)


class _AllReduce(_Collective):
    op, function = "all_reduce", "all_reduce(SUM)"
    checks = "every rank holds the sum of all ranks' inputs"

    def allocate(self) -> None:
        self.count = self.size_bytes // _ITEM
        self.input = _values(self.rank, 0, self.count, self.device)
        self.buffer = torch.empty_like(self.input)

    def prepare(self) -> None:
        # all_reduce works in place: every run starts from the input, so sums stay exact and
        # the last timed run is the one verified.
        self.buffer.copy_(self.input)

    def run(self) -> None:
        dist.all_reduce(self.buffer, op=dist.ReduceOp.SUM)

    def poison(self) -> None:
        self.buffer.fill_(math.nan)

    def wrong(self) -> int:
        return sum(_mismatches(self.buffer[f:f + c], _sum_of_ranks(self.world_size, f, c, self.device))
                   for f, c in _chunks(self.count))


class _AllGather(_Collective):
    op, function = "all_gather", "all_gather_single"
    checks = "every rank holds every rank's input in rank order"

    def allocate(self) -> None:
        self.part = self.size_bytes // (_ITEM * self.world_size)
        self.input = _values(self.rank, 0, self.part, self.device)
        self.output = torch.empty(self.part * self.world_size, dtype=_DTYPE, device=self.device)

    def run(self) -> None:
        # all_gather_into_tensor before torch 2.12.
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gather(self.output, self.input)

    def poison(self) -> None:
        self.output.fill_(math.nan)

    def wrong(self) -> int:
        wrong = 0
        for r in range(self.world_size):
            block = self.output[r * self.part:(r + 1) * self.part]
            wrong += sum(_mismatches(block[f:f + c], _values(r, f, c, self.device)) for f, c in _chunks(self.part))
        return wrong


class _ReduceScatter(_Collective):
    op, function = "reduce_scatter", "reduce_scatter_single(SUM)"
    checks = "rank k holds block k of the sum of all ranks' inputs"

    def allocate(self) -> None:
        self.part = self.size_bytes // (_ITEM * self.world_size)
        self.input = _values(self.rank, 0, self.part * self.world_size, self.device)
        self.output = torch.empty(self.part, dtype=_DTYPE, device=self.device)

    def run(self) -> None:
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        scatter(self.output, self.input, op=dist.ReduceOp.SUM)

    def poison(self) -> None:
        self.output.fill_(math.nan)

    def wrong(self) -> int:
        offset = self.rank * self.part
        return sum(_mismatches(self.output[f:f + c], _sum_of_ranks(self.world_size, offset + f, c, self.device))
                   for f, c in _chunks(self.part))


class _Broadcast(_Collective):
    op, function = "broadcast", f"broadcast(src={_ROOT})"
    checks = f"every rank holds rank {_ROOT}'s input"

    def allocate(self) -> None:
        self.count = self.size_bytes // _ITEM
        if self.rank == _ROOT:
            self.buffer = _values(_ROOT, 0, self.count, self.device)
        else:
            self.buffer = torch.empty(self.count, dtype=_DTYPE, device=self.device)

    def run(self) -> None:
        dist.broadcast(self.buffer, src=_ROOT)

    def poison(self) -> None:
        if self.rank != _ROOT:  # the root's buffer is the source: the receivers' copies are the output
            self.buffer.fill_(math.nan)

    def wrong(self) -> int:
        return sum(_mismatches(self.buffer[f:f + c], _values(_ROOT, f, c, self.device)) for f, c in _chunks(self.count))


_COLLECTIVES: dict[str, type[_Collective]] = {c.op: c for c in (_AllReduce, _AllGather, _ReduceScatter, _Broadcast)}


# --------------------------------------------------------------------------- measuring


def _barrier(device: torch.device) -> None:
    if device.type == "cuda":
        dist.barrier(device_ids=[device.index])
    else:
        dist.barrier()


def _reduce(values: Sequence[float], op: dist.ReduceOp, dtype: torch.dtype, device: torch.device) -> list[float]:
    t = torch.tensor(list(values), dtype=dtype, device=device)
    dist.all_reduce(t, op=op)
    return t.tolist()


def _sample_seconds(coll: _Collective, device: torch.device, settings: RunSettings) -> list[float]:
    """This rank's time of each sample, one operation per sample, through the one timing loop. On a GPU
    the ranks meet once, then the GPU spins while the host queues every sample, so the events time the
    operations back to back (as nccl-tests' loop does); on the CPU the ranks meet before each sample."""
    on_gpu = device.type == "cuda"

    def before() -> None:
        coll.prepare()
        if not on_gpu:
            _barrier(device)  # every rank starts the sample together

    return sample_seconds(coll.run, device, settings.warmup, settings.samples, before_sample=before, spin=on_gpu,
                          before_timing=(lambda: _barrier(device)) if on_gpu else None)


def _group_facts(device: torch.device) -> dict[str, object]:
    names: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(names, socket.gethostname())
    return {"world_size": dist.get_world_size(), "hostnames": sorted(set(map(str, names))),
            "communication_backend": str(dist.get_backend()), "device_type": device.type}


def backend_name(device_type: str) -> str:
    return f"torch-{device_type}"


def device_label(device_type: str, world_size: int) -> str:
    return f"{device_type} x{world_size}"


def measure_collectives(
    device: torch.device,
    ops: Sequence[str] = OPS,
    sizes: Sequence[int] = SIZES,
    settings: RunSettings = SETTINGS,
    on_done: Callable[[Measurement], None] | None = None,
) -> list[Measurement]:
    """Measure `ops` at each of `sizes` in the initialized default process group; this rank's
    tensors live on `device`. Every rank must call it with the same arguments and gets the same
    figures: per sample the slowest rank's time, verified only when every rank's output is right."""
    if not dist.is_initialized():
        raise RuntimeError("measure_collectives needs an initialized process group (torch.distributed)")
    if settings.samples < 1 or settings.warmup < 0:
        raise ValueError(f"need samples >= 1 and warmup >= 0, got {settings.samples} and {settings.warmup}")
    for op in ops:
        bus_factor(op, 2)  # unknown names fail before any rank measures
    rank, world = dist.get_rank(), dist.get_world_size()
    facts = _group_facts(device)
    backend, label = backend_name(device.type), device_label(device.type, world)
    if world < 2:
        reason = "a collective needs at least two ranks; launch two or more processes"
        return [Measurement.not_run(f"collective.{op}", backend=backend, device=label, status="waived", reason=reason)
                for op in ops]
    timing = ("CUDA events on each rank, samples queued back to back" if device.type == "cuda"
              else "perf_counter after a barrier on each rank")
    measurements = []
    for op in ops:
        for size in sizes:
            coll = _COLLECTIVES[op](size, rank, world, device)
            name = f"collective.{op}"
            if coll.size_bytes == 0:
                m = Measurement.not_run(name, backend=backend, device=label, status="waived",
                                        reason=f"{size} B holds no whole fp32 element per rank for {world} ranks")
            else:
                m = _measure_one(coll, device, settings, backend, label, facts, timing)
            measurements.append(m)
            if on_done is not None:
                on_done(m)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return measurements


def _measure_one(coll: _Collective, device: torch.device, settings: RunSettings, backend: str, label: str,
                 facts: dict[str, object], timing: str) -> Measurement:
    name = f"collective.{coll.op}"
    error = ""
    try:
        coll.setup(device, settings)
    except RuntimeError as exc:  # torch.OutOfMemoryError too: the other ranks must hear of it
        error = " ".join(str(exc).split())[:300]
    failed = _reduce([1.0 if error else 0.0], dist.ReduceOp.MAX, torch.float64, device)[0]
    if failed:
        coll.teardown()
        reason = f"setup failed on rank {coll.rank}: {error}" if error else "setup failed on another rank"
        return Measurement.not_run(name, backend=backend, device=label, status="error", reason=reason)
    try:
        if not settings.poison_after_runs:
            coll.poison()
        own = _sample_seconds(coll, device, settings)
        slowest = _reduce(own, dist.ReduceOp.MAX, torch.float64, device)
        if settings.poison_after_runs:  # test hook: verification must then fail
            coll.poison()
        wrong = int(_reduce([coll.wrong()], dist.ReduceOp.SUM, torch.int64, device)[0])
    finally:
        coll.teardown()
    world = coll.world_size
    factor = bus_factor(coll.op, world)
    detail = (f"all {world} ranks match: {coll.checks}" if wrong == 0
              else f"{wrong} elements wrong over {world} ranks; expected: {coll.checks}")
    m = Measurement.from_samples(
        name,
        sample_seconds=slowest,
        bytes_read=coll.work().bytes_read,  # the message size S: algbw = S / t
        bytes_written=0.0,
        flops=0.0,
        backend=backend,
        device=label,
        verified=wrong == 0,
        verify_detail=detail,
        bus_factor=factor,  # busbw = algbw x factor, the value
    )
    # The params need the value (algbw = value / factor); replace() files their numbers as quantities.
    return dataclasses.replace(m, params={
        "op": coll.function,
        "size_bytes": coll.size_bytes,
        "algbw_gbs": m.value / factor,  # median of per-sample S / t
        "time_s": statistics.median(slowest),  # median of per-sample slowest-rank times
        "world_size": world,
        "hosts": len(facts["hostnames"]),  # type: ignore[arg-type]
        "communication_backend": str(facts["communication_backend"]),
        "dtype": "fp32",
        "timing": f"{timing}; each sample is the slowest rank's time",
        "counting": COUNTING,
    })


# --------------------------------------------------------------------------- launching


def launched_by_torchrun() -> bool:
    """True in a process torchrun (or another launcher setting RANK and WORLD_SIZE) started."""
    return all(v in os.environ for v in ("RANK", "WORLD_SIZE"))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_group(device_type: str, rank: int, world_size: int, local_rank: int, init_method: str | None = None,
               timeout: _dt.timedelta | None = None) -> torch.device:
    """Join the default group (env:// under torchrun unless `init_method` says otherwise): NCCL bound to this
    rank's GPU, or Gloo on the CPU; returns the rank's device."""
    if device_type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", init_method=init_method, rank=rank, world_size=world_size, timeout=timeout,
                                device_id=device)
        return device
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size, timeout=timeout)
    return torch.device("cpu")


def _measure_in_group(device: torch.device, ops: Sequence[str], sizes: Sequence[int], settings: RunSettings,
                      progress: bool, on_done: Callable[[Measurement], None] | None = None) -> list[Measurement]:
    if not progress or dist.get_rank() != 0:
        return measure_collectives(device, ops, sizes, settings, on_done=on_done)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task("collectives", total=len(ops) * len(sizes))

        def done(m: Measurement) -> None:
            bar.update(task, advance=1, description=f"{m.name} {m.quantities.size_bytes or ''} B")
            if on_done is not None:
                on_done(m)

        return measure_collectives(device, ops, sizes, settings, on_done=done)


def _watch_parent(parent: int) -> None:
    """End this rank when the process that spawned it is gone (killed with -9, say): a rank left
    alone would wait in its collective forever."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="pygpuperf-parent-watch", daemon=True).start()


def _write_partial(out_path: str, measurements: Sequence[Measurement]) -> None:
    """Rank 0's measurements so far, replaced atomically after each one: the parent keeps them on a stop."""
    tmp = f"{out_path}.{os.getpid()}.tmp"
    Path(tmp).write_text(json.dumps(Results(meta={}, measurements=list(measurements)).to_dict()), encoding="utf-8")
    os.replace(tmp, out_path)


def _spawned_rank(rank: int, world_size: int, device_type: str, port: int, ops: Sequence[str], sizes: Sequence[int],
                  settings: RunSettings, out_path: str, progress: bool, parent: int) -> None:
    # The parent decides when to stop (Ctrl-C reaches the whole process group): the ranks ignore
    # SIGINT and end on the parent's SIGTERM, or when the parent is gone.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _watch_parent(parent)
    if device_type == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))  # the ranks share this host's cores
    device = init_group(device_type, rank, world_size, rank, f"tcp://127.0.0.1:{port}")
    try:
        done: list[Measurement] = []

        def keep(m: Measurement) -> None:
            done.append(m)
            if rank == 0:  # plain JSON through the result model: no pickle between processes
                _write_partial(out_path, done)

        _measure_in_group(device, ops, sizes, settings, progress, keep)
    finally:
        dist.destroy_process_group()


def default_world_size(device_type: str) -> int:
    """Every visible GPU for 'cuda'; two processes on the CPU."""
    if device_type == "cuda":
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    return 2


# Seconds the ranks get to leave after SIGTERM before they are killed.
_RANK_GRACE_S = 5.0


def _end_ranks(context) -> None:
    """SIGTERM every rank still running, then SIGKILL what is left after a grace period."""
    for process in context.processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + _RANK_GRACE_S
    for process in context.processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()


def _read_partial(out_path: str) -> list[Measurement]:
    if not os.path.exists(out_path):
        return []
    doc = json.loads(Path(out_path).read_text(encoding="utf-8"))
    return Results.from_dict({"findings": [], "workloads": [], **doc}).measurements


def run_collectives(
    device_type: str = "cuda",
    world_size: int | None = None,
    ops: Sequence[str] = OPS,
    sizes: Sequence[int] | None = None,
    quick: bool = False,
    max_size: int | None = None,
    settings: RunSettings | None = None,
    progress: bool = False,
    into: list[Measurement] | None = None,
) -> list[Measurement]:
    """Measure collectives on this host: one spawned process per GPU (default: every visible
    GPU; on the CPU two processes), rendezvous on a free localhost port; rank 0's measurements,
    also appended to `into`.

    A stop (KeyboardInterrupt, :class:`pygpuperf.core.stopping.Stopped`) ends every rank, appends the
    measurements rank 0 had finished to `into`, and is raised again. With fewer than two GPUs
    each op comes back waived with the reason.
    """
    into = [] if into is None else into
    if device_type not in ("cuda", "cpu"):
        raise ValueError(f"device type {device_type!r}: collectives run on 'cuda' (NCCL) or 'cpu' (Gloo)")
    for op in ops:
        bus_factor(op, 2)
    chosen = message_sizes(quick, max_size, sizes)
    settings = settings or (QUICK_SETTINGS if quick else SETTINGS)
    visible = default_world_size("cuda") if device_type == "cuda" else 0
    if world_size is None:
        world_size = default_world_size(device_type)
    if device_type == "cuda" and (visible < 2 or world_size > visible):
        reason = (f"needs two or more CUDA GPUs; {visible} visible" if visible < 2
                  else f"{world_size} ranks asked for, {visible} GPUs visible")
        waived = [Measurement.not_run(f"collective.{op}", backend=backend_name("cuda"),
                                      device=device_label("cuda", world_size), status="waived", reason=reason)
                  for op in ops]
        into += waived
        return waived
    if world_size < 2:
        raise ValueError(f"world size {world_size}: a collective needs at least two ranks")
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="pygpuperf-collectives-") as folder:
        out_path = os.path.join(folder, "rank0.json")
        context = mp.start_processes(_spawned_rank, args=(world_size, device_type, _free_port(), tuple(ops),
                                                          tuple(chosen), settings, out_path, progress, os.getpid()),
                                     nprocs=world_size, join=False, start_method="spawn")
        try:
            while not context.join(timeout=0.5):
                pass
        except KeyboardInterrupt:
            _end_ranks(context)
            into += _read_partial(out_path)
            raise
        except BaseException:
            _end_ranks(context)
            raise
        measured = _read_partial(out_path)
    into += measured
    return measured


def run_launched(
    device_type: str,
    ops: Sequence[str] = OPS,
    sizes: Sequence[int] = SIZES,
    settings: RunSettings = SETTINGS,
    progress: bool = False,
) -> tuple[list[Measurement], dict[str, object]]:
    """In a process torchrun started: join the group from RANK, WORLD_SIZE, LOCAL_RANK and
    MASTER_ADDR/PORT, measure, leave. Returns (measurements, group facts) on every rank."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = init_group(device_type, rank, world, local_rank)
    try:
        facts = _group_facts(device)
        measurements = _measure_in_group(device, ops, sizes, settings, progress)
    finally:
        dist.destroy_process_group()
    return measurements, facts
