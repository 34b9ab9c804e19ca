"""The memory hierarchy from a sweep: plateaus, knees, cache bandwidths and capacities.

A ``memory.sweep`` probe measures read bandwidth at one footprint per point. Plotted
log-log, the series is a staircase: a plateau per level (L1, L2, L3, DRAM/HBM) and a
knee where the footprint outgrows a cache. This module finds them (:func:`detect_levels`),
turns the first plateaus into ``memory.l1.read`` / ``memory.l2.read`` / ``memory.l3.read``
measurements (:func:`derive_cache_measurements`) and compares the knees with the sizes the
device reports (:func:`capacity_checks`).

Detection method (:func:`detect_levels`), on x = log2(size), y = ln(bandwidth):

1. Noise: sigma from the median |difference| of neighbouring points (transitions are a
   minority the median ignores), at least ``MIN_NOISE``: neighbouring sweep points wander
   a few percent even when each one is steady. At ``MAX_NOISE`` (a loaded machine) no
   plateau can be trusted and no level is reported.
2. Segmentation: the optimal partition of the series into segments, each flat (a
   constant) or a ramp (a straight line), minimising
   ``sum(residual^2) / sigma^2 + PENALTY * ln(n) * (parameters + 1)`` by dynamic
   programming over all breakpoints (a BIC-style criterion; the +1 pays for the break).
   Noise alone does not pay for an extra segment, and a gradual transition is cheaper as
   one ramp than as a staircase of small flats. Then once more with sigma re-estimated
   from the differences inside the levels found, which no longer include the steps.
3. Plateau candidates: segments of at least two points that are flat, or ramps shallower
   than ``MAX_PLATEAU_SLOPE`` per octave (a sagging level, such as an L3 under contention).
   Neighbours whose medians differ by less than ``min_step``, or by less than
   ``SIGNIFICANCE`` standard errors of the two medians, are one level split by an outlier
   and are joined.
4. Shoulders: a short level squeezed between two big steps (a GPU's L2 seen through
   per-SM windows) can hide inside the ramps; a run of at least two points that agree
   within 3 sigma and sit ``BIG_STEP`` away from the levels on both sides becomes one.
5. Short levels need big steps: a candidate spanning less than ``MIN_SPAN_OCTAVES`` that
   is not ``BIG_STEP`` away from both neighbours is the soft shoulder of a gradual
   transition, not a level, and is dropped.
6. Cache levels fall in bandwidth: a plateau not ``min_step`` above the next kept one
   (start-up effects at tiny windows, contention) is an artifact and is dropped.
7. Knee: the size where the series, leaving a plateau, first falls ``KNEE_FALL`` below it,
   interpolated linearly in log-log. That is the capacity: a cache serves everything up to
   its size and starts missing beyond it, so the capacity is where the fall begins, not
   its middle (on an H200 the fall past L1 is not even monotone: L2 serves part of it).
   When the series jumps straight from one plateau to the next, the capacity is only known
   to lie in that gap, which the level reports as its range. The last plateau has no knee, unless the sweep ended inside
   its fall (``TAIL_POINTS`` points ending ``TAIL_DROP`` lower): then the knee is taken
   against the end of the series.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from pygpuperf.core.units import format_bytes
from pygpuperf.core.results import Measurement, ParamValue, Stats

SWEEP = "memory.sweep"
LATENCY_SWEEP = "latency.sweep"
DERIVED_FROM = "derived_from"

# Detection defaults (see the module docstring).
MIN_NOISE = 0.03  # ln units: sweep points wander ~3 % between neighbours even when each is steady
MAX_NOISE = 0.15  # noisier than this (a loaded machine), a series has no trustworthy plateaus
PENALTY = 1.5  # x ln(n) per parameter; 1 is BIC, more is more conservative
MIN_STEP = 1.1  # adjacent levels closer than 10 % are one level
MIN_PLATEAU_POINTS = 2
# A line through two points fits anything, an outlier included: ramps need three.
MIN_RAMP_POINTS = 3
# A ramp this shallow (ln units per octave, ~10 %) is a sagging level, not a transition.
MAX_PLATEAU_SLOPE = 0.1
# A level spanning less than this many octaves must stand BIG_STEP apart from its neighbours.
MIN_SPAN_OCTAVES = 1.0
BIG_STEP = 1.5
# Points of a shoulder agree within this many sigma.
SHOULDER_SIGMAS = 3.0
# Two plateaus are distinct levels only if their medians differ by this many standard errors.
SIGNIFICANCE = 4.0
# A last plateau followed by at least TAIL_POINTS points that end TAIL_DROP below it gets a
# knee although the sweep stopped before the next plateau.
TAIL_POINTS = 2
TAIL_DROP = 1.5
# The capacity is where bandwidth has fallen this far below its plateau (15 %): clear of
# a few % noise, early in the fall.
KNEE_FALL = 0.85

# A detected capacity this far from the reported size is worth a warning.
CAPACITY_TOLERANCE = 0.10

# L1 data cache + shared memory per SM (bytes) by compute capability: the most an SM's
# L1 can hold when no shared memory is carved out (vendor tuning guides).
_GPU_L1_BYTES_PER_SM = {
    (7, 0): 128 << 10,
    (7, 5): 96 << 10,
    (8, 0): 192 << 10,
    (8, 6): 128 << 10,
    (8, 7): 192 << 10,
    (8, 9): 128 << 10,
    (9, 0): 256 << 10,
}


@dataclass(frozen=True)
class Level:
    """One plateau of a sweep and the knee that ends it."""

    bandwidth: float  # median of the plateau's points
    first_size: float  # smallest size on the plateau
    last_size: float  # largest size on the plateau
    capacity: float | None  # size where the series falls to the next plateau; None for the last level
    indices: tuple[int, ...] = ()  # positions of the plateau's points in the input sequences
    # The range the capacity is known to within: the gap between the two plateaus when the
    # series jumps straight from one to the other (a sharp step), else the knee itself.
    capacity_low: float | None = None
    capacity_high: float | None = None

    @property
    def points(self) -> int:
        return len(self.indices)

    def to_dict(self) -> dict[str, Any]:
        return {"bandwidth": self.bandwidth, "first_size": self.first_size, "last_size": self.last_size,
                "capacity": self.capacity, "capacity_low": self.capacity_low, "capacity_high": self.capacity_high,
                "points": self.points}


# --------------------------------------------------------------------------- detection

Span = list[int]  # an inclusive [first, last] range of points in sorted order


@dataclass
class _Segment:
    begin: int  # first point (sorted order)
    end: int  # one past the last point
    slope: float  # ln units per octave; 0 for a flat segment


def _noise_of_differences(d: np.ndarray) -> float | None:
    """Per-point noise (ln units) from differences of neighbouring points on one level: for
    Gaussian noise their median |d| is 0.6745 x sqrt(2) x sigma; the median ignores the few
    large differences that are steps."""
    if d.size < 3:
        return None
    return float(np.clip(np.median(np.abs(d)) / 0.6745 / math.sqrt(2), MIN_NOISE, MAX_NOISE))


def _within_level_differences(x: np.ndarray, y: np.ndarray, segments: list[_Segment]) -> np.ndarray:
    """Neighbour differences inside level-like segments, detrended by the segment's slope."""
    parts = [np.diff(y[seg.begin: seg.end]) - seg.slope * np.diff(x[seg.begin: seg.end])
             for seg in segments if abs(seg.slope) <= MAX_PLATEAU_SLOPE and seg.end - seg.begin >= 2]
    return np.concatenate(parts) if parts else np.empty(0)


def _fit_costs(x: np.ndarray, y: np.ndarray, i: int, j: int) -> tuple[float, float, float]:
    """Residual sums of squares of points [i, j) as a constant and as a line, and the line's slope."""
    xs, ys = x[i:j], y[i:j]
    yc = ys - ys.mean()
    flat = float(yc @ yc)
    xc = xs - xs.mean()
    sxx = float(xc @ xc)
    if sxx <= 0:
        return flat, flat, 0.0
    slope = float(xc @ yc) / sxx
    return flat, max(flat - slope * slope * sxx, 0.0), slope


def _segment(x: np.ndarray, y: np.ndarray, sigma: float, penalty: float) -> list[_Segment]:
    """Optimal flat/ramp partition (step 2) by dynamic programming over breakpoints."""
    n = x.size
    unit = penalty * math.log(max(n, 2))
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    choice: list[tuple[int, float]] = [(0, 0.0)] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):
            flat, ramp, slope = _fit_costs(x, y, i, j)
            flat_cost = best[i] + flat / sigma**2 + 2 * unit
            if flat_cost < best[j]:
                best[j], choice[j] = flat_cost, (i, 0.0)
            if j - i >= MIN_RAMP_POINTS:
                ramp_cost = best[i] + ramp / sigma**2 + 3 * unit
                if ramp_cost < best[j]:
                    best[j], choice[j] = ramp_cost, (i, slope)
    segments: list[_Segment] = []
    j = n
    while j > 0:
        i, slope = choice[j]
        segments.append(_Segment(i, j, slope))
        j = i
    return segments[::-1]


def _median(y: np.ndarray, span: Span) -> float:
    return float(np.median(y[span[0]: span[1] + 1]))


def _distinct(a: Span, b: Span, y: np.ndarray, step: float, sigma: float) -> bool:
    """Whether two plateaus are different levels: `step` apart, and further apart than
    their medians' noise explains (SIGNIFICANCE standard errors)."""
    spread = SIGNIFICANCE * sigma * math.sqrt(1 / (a[1] - a[0] + 1) + 1 / (b[1] - b[0] + 1))
    return abs(_median(y, a) - _median(y, b)) >= max(step, spread)


def _merge_close(plateaus: list[Span], y: np.ndarray, step: float, sigma: float) -> list[Span]:
    """Join neighbouring plateaus that are not distinct levels (gap included): one level and an outlier."""
    merged: list[Span] = []
    for p in plateaus:
        if merged and not _distinct(merged[-1], p, y, step, sigma):
            merged[-1] = [merged[-1][0], p[1]]
        else:
            merged.append(list(p))
    return merged


def _stands_apart(level: float, neighbours: list[float], big: float) -> bool:
    return all(abs(level - other) >= big for other in neighbours)


def _find_shoulders(plateaus: list[Span], y: np.ndarray, sigma: float, big: float) -> list[Span]:
    """Step 4: short levels hiding in the gaps between two plateaus."""
    found = sorted(plateaus)
    while True:
        added = False
        for left, right in zip(found, found[1:]):
            lo, hi = left[1] + 1, right[0] - 1  # the gap's points, inclusive
            best: Span | None = None
            for i in range(lo, hi):
                j = i
                while j + 1 <= hi and np.ptp(y[i: j + 2]) <= SHOULDER_SIGMAS * sigma:
                    j += 1
                if j > i and (best is None or j - i > best[1] - best[0]):
                    best = [i, j]
            if best is None:
                continue
            if _stands_apart(_median(y, best), [_median(y, left), _median(y, right)], big):
                found = sorted(found + [best])
                added = True
                break
        if not added:
            return found


def _drop_short(plateaus: list[Span], x: np.ndarray, y: np.ndarray, big: float) -> list[Span]:
    """Step 5: a short candidate must stand a big step apart from both neighbours."""
    kept = list(plateaus)
    changed = True
    while changed:
        changed = False
        for k, p in enumerate(kept):
            if x[p[1]] - x[p[0]] >= MIN_SPAN_OCTAVES - 1e-9:
                continue
            sides = [_median(y, kept[k + d]) for d in (-1, 1) if 0 <= k + d < len(kept)]
            if not _stands_apart(_median(y, p), sides, big):
                del kept[k]
                changed = True
                break
    return kept


def _falling(plateaus: list[Span], y: np.ndarray, step: float) -> list[Span]:
    """Step 6: keep plateaus standing `step` above every larger-footprint plateau kept."""
    kept: list[Span] = []
    for p in reversed(plateaus):
        if not kept or _median(y, p) >= _median(y, kept[-1]) + step:
            kept.append(p)
    return kept[::-1]


def _crossing(x: np.ndarray, y: np.ndarray, lo: int, hi: int, threshold: float) -> tuple[float, float, float]:
    """Where y first falls below `threshold` between points lo and hi: (x interpolated
    linearly in log-log, x of the last point above, x of the first point below)."""
    for k in range(lo, hi):
        if y[k] >= threshold > y[k + 1]:
            t = (y[k] - threshold) / (y[k] - y[k + 1])
            return float(x[k] + t * (x[k + 1] - x[k])), float(x[k]), float(x[k + 1])
    # Noise hid the crossing: the middle of the gap, bracketed by the gap.
    return float((x[lo] + x[hi]) / 2), float(x[lo]), float(x[hi])


def detect_levels(
    sizes: Sequence[float],
    bandwidths: Sequence[float],
    *,
    min_step: float = MIN_STEP,
    penalty: float = PENALTY,
) -> list[Level]:
    """Plateaus and knees of a bandwidth-vs-size series, smallest size first (method: module docstring).

    `sizes` need not be sorted; non-finite or non-positive points are ignored. Level.indices
    refer to positions in the inputs. Returns [] when no plateau stands out (a steady slope).
    """
    if len(sizes) != len(bandwidths):
        raise ValueError(f"{len(sizes)} sizes but {len(bandwidths)} bandwidths")
    if min_step <= 1:
        raise ValueError(f"min_step must be above 1, got {min_step}")
    s = np.asarray(sizes, dtype=np.float64)
    b = np.asarray(bandwidths, dtype=np.float64)
    keep = np.flatnonzero(np.isfinite(s) & np.isfinite(b) & (s > 0) & (b > 0))
    order = keep[np.argsort(s[keep], kind="stable")]
    if order.size == 0:
        return []
    if order.size == 1:
        only = int(order[0])
        return [Level(float(b[only]), float(s[only]), float(s[only]), None, (only,))]
    x, y = np.log2(s[order]), np.log(b[order])

    sigma = _noise_of_differences(np.diff(y)) or MIN_NOISE
    segments = _segment(x, y, sigma, penalty)
    refined = _noise_of_differences(_within_level_differences(x, y, segments))
    if refined is not None and refined < sigma:
        sigma = refined
        segments = _segment(x, y, sigma, penalty)
    if sigma >= MAX_NOISE:
        return []  # neighbours jump by tens of percent: no plateau in this series can be trusted

    step, big = math.log(min_step), math.log(max(BIG_STEP, min_step))
    plateaus = [[seg.begin, seg.end - 1] for seg in segments
                if seg.end - seg.begin >= MIN_PLATEAU_POINTS and abs(seg.slope) <= MAX_PLATEAU_SLOPE]
    plateaus = _merge_close(plateaus, y, step, sigma)
    plateaus = _find_shoulders(plateaus, y, sigma, big)
    plateaus = _merge_close(_drop_short(plateaus, x, y, big), y, step, sigma)
    plateaus = _falling(plateaus, y, step)
    return [_level(k, plateaus, x, y, s, b, order) for k in range(len(plateaus))]


def _level(k: int, plateaus: list[Span], x: np.ndarray, y: np.ndarray, s: np.ndarray, b: np.ndarray,
           order: np.ndarray) -> Level:
    """Plateau k as a Level, with its knee (step 7)."""
    first, last = plateaus[k]
    here = _median(y, plateaus[k])
    # Where the fall ends: the next plateau, else the end of a sweep that stopped inside it.
    end: tuple[int, float] | None = None
    if k + 1 < len(plateaus):
        end = (plateaus[k + 1][0], _median(y, plateaus[k + 1]))
    elif last + TAIL_POINTS < x.size and here - y[-1] >= math.log(TAIL_DROP):
        end = (x.size - 1, float(y[-1]))
    capacity = low = high = None
    if end is not None:
        # From the plateau's start: a sagging plateau may already end below the threshold.
        knee, below, above = _crossing(x, y, first, end[0], here + math.log(KNEE_FALL))
        # Known to within the gap only when the series jumps from plateau to plateau there.
        sharp = below == x[last] and above == x[end[0]] and k + 1 < len(plateaus)
        capacity = float(2.0**knee)
        low, high = (float(2.0**below), float(2.0**above)) if sharp else (capacity, capacity)
    indices = tuple(int(i) for i in order[first: last + 1])
    return Level(bandwidth=float(np.median(b[list(indices)])), first_size=float(s[order[first]]),
                 last_size=float(s[order[last]]), capacity=capacity, indices=indices,
                 capacity_low=low, capacity_high=high)


# --------------------------------------------------------------------------- sweep series


def device_type_of(m: Measurement) -> str:
    """'cpu', 'cuda', ... from a measurement's device string ('cuda:0')."""
    return m.device.split(":", 1)[0]


def _level_names(device_type: str, mode: str) -> tuple[str, ...]:
    """Which cache each plateau of a sweep mode is, in order (the last plateau is memory, never named).

    CPU private windows walk L1, L2 and L3; a GPU's per-SM windows see L1 first and its
    shared window (L1 bypassed) sees L2 first.
    """
    if device_type == "cpu":
        return ("l1", "l2", "l3") if mode == "l1" else ()
    return {"l1": ("l1",), "l2": ("l2",)}.get(mode, ())


def _footprint(m: Measurement) -> int | None:
    """Bytes a sweep point cycles through: footprint_bytes (a pointer chase may say chain_bytes)."""
    q = m.quantities
    return q.footprint_bytes if q.footprint_bytes is not None else q.chain_bytes


def _sweep_groups(measurements: Iterable[Measurement], name: str) -> dict[tuple[str, str], list[Measurement]]:
    """Measured points of a sweep per (backend, mode), sorted by footprint."""
    groups: dict[tuple[str, str], list[Measurement]] = {}
    for m in measurements:
        if m.name != name or m.status != "ok" or not math.isfinite(m.value) or DERIVED_FROM in m.params:
            continue
        if _footprint(m) is None:
            continue
        groups.setdefault((m.backend, m.params.get("mode", "")), []).append(m)
    for points in groups.values():
        points.sort(key=lambda m: _footprint(m) or 0)
    return groups


def _latency_levels(sizes: Sequence[float], ns: Sequence[float]) -> list[Level]:
    """Latency plateaus: detected on the reciprocal (rises become falls), reported back in ns."""
    levels = detect_levels(sizes, [1.0 / v if v > 0 else math.nan for v in ns])
    return [dataclasses.replace(lv, bandwidth=1.0 / lv.bandwidth) for lv in levels]


def sweep_series(measurements: Iterable[Measurement]) -> dict[str, list[dict[str, Any]]]:
    """The sweeps as plain lists, one series per (backend, mode), with their detected levels.

    {"bandwidth": [{"backend", "mode", "device_type", "unit", "footprint_bytes": [...],
    "window_bytes": [...], "value": [...], "verified": [...], "levels": [{..., "name"}]}],
    "latency": [same, value in ns]}. Level "name" is "l1"/"l2"/"l3" for a cache level, else "".
    """
    measurements = list(measurements)
    out: dict[str, list[dict[str, Any]]] = {"bandwidth": [], "latency": []}
    for key, name, unit in (("bandwidth", SWEEP, "GB/s"), ("latency", LATENCY_SWEEP, "ns")):
        for (backend, mode), points in sorted(_sweep_groups(measurements, name).items()):
            sizes = [float(_footprint(m) or 0) for m in points]
            values = [m.value for m in points]
            device_type = device_type_of(points[0])
            if key == "bandwidth":
                levels = detect_levels(sizes, values)
                names = _level_names(device_type, mode)
            else:
                levels = _latency_levels(sizes, values)
                names = ("l1", "l2", "l3") if device_type == "cpu" else ("l1", "l2")
            level_dicts = []
            for k, level in enumerate(levels):
                entry = level.to_dict()
                entry["name"] = names[k] if level.capacity is not None and k < len(names) else ""
                level_dicts.append(entry)
            out[key].append({
                "backend": backend,
                "mode": mode,
                "device_type": device_type,
                "unit": unit,
                "footprint_bytes": sizes,
                "window_bytes": [float(m.quantities.window_bytes or _footprint(m) or 0) for m in points],
                "workers": [_workers(m) for m in points],
                "value": values,
                "verified": [m.verified for m in points],
                "levels": level_dicts,
            })
    return out


def _workers(m: Measurement) -> int:
    """Private windows the footprint is made of: footprint / window (1 for a shared window),
    else the probe's worker count, else 1."""
    footprint, window = _footprint(m), m.quantities.window_bytes
    if footprint and window:
        return max(1, round(footprint / window))
    return m.quantities.workers or 1


# --------------------------------------------------------------------------- derived measurements


def _median_point(points: list[Measurement]) -> Measurement:
    """The plateau point whose value is the median (the lower middle for an even count)."""
    ranked = sorted(points, key=lambda m: m.value)
    return ranked[(len(ranked) - 1) // 2]


def derived_sources(device_type: str) -> dict[str, str]:
    """Figures read off a sweep's plateaus rather than measured by a probe of their own, and that
    sweep: what ``--probes memory.l3.read`` has to run. GPUs measure their latency points directly."""
    levels = ("l1", "l2", "l3") if device_type == "cpu" else ("l1", "l2")
    memory = {f"memory.{level}.read": SWEEP for level in levels}
    if device_type != "cpu":
        return memory
    latency = {f"latency.{level}": LATENCY_SWEEP for level in ("l1", "l2", "l3", "dram")}
    return {**memory, **latency}


def source_probe(name: str, device_type: str) -> str:
    """The probe that measures `name`: itself, or the sweep a derived figure comes from."""
    return derived_sources(device_type).get(name, name)


def derive_cache_measurements(measurements: Iterable[Measurement], device_meta: dict[str, Any]) -> list[Measurement]:
    """Cache-level measurements from the plateaus of each backend's sweeps.

    memory.sweep -> GPU: memory.l1.read from mode "l1"'s first plateau, memory.l2.read from
    mode "l2"'s first plateau; CPU: memory.l1/l2/l3.read from the private-window sweep's
    first three plateaus. A plateau is only a cache level when a knee ends it (the last
    plateau is main memory). latency.sweep on a CPU -> latency.l1/l2/l3 likewise, and
    latency.dram from its last plateau when that lies beyond the L3 (GPU probes report
    their named latency points themselves).

    Each derived measurement carries the plateau's median point's statistics, is verified
    only if every plateau point is, and says where it came from in params (derived_from,
    plateau and capacity figures), so nothing counts it as a probe of its own.
    """
    measurements = list(measurements)
    device_type = str(device_meta.get("type") or "")
    derived: list[Measurement] = []
    for (backend, mode), points in _sweep_groups(measurements, SWEEP).items():
        names = _level_names(device_type or device_type_of(points[0]), mode)
        sizes = [float(_footprint(m) or 0) for m in points]
        levels = detect_levels(sizes, [m.value for m in points])
        for k, level in enumerate(levels[: len(names)]):
            if level.capacity is None:
                break  # the last plateau: main memory, not a cache
            derived.append(_derived(f"memory.{names[k]}.read", level, k, len(levels),
                                    [points[i] for i in level.indices], mode, SWEEP))
    for (backend, mode), points in _sweep_groups(measurements, LATENCY_SWEEP).items():
        if (device_type or device_type_of(points[0])) != "cpu":
            continue
        sizes = [float(_footprint(m) or 0) for m in points]
        levels = _latency_levels(sizes, [m.value for m in points])
        l3 = float(device_meta.get("l3_cache_bytes") or 0)
        for k, level in enumerate(levels):
            if level.capacity is not None and k < 3:
                name = f"latency.l{k + 1}"
            elif k == len(levels) - 1 and k >= 1 and level.first_size > l3:
                name = "latency.dram"
            else:
                continue
            derived.append(_derived(name, level, k, len(levels), [points[i] for i in level.indices], mode,
                                    LATENCY_SWEEP))
    return derived


def _given(m: Measurement, key: str) -> ParamValue:
    """A quantity of `m` as its params gave it: the number, else the text it held, else ""."""
    value = getattr(m.quantities, key)
    return value if value is not None else m.params.get(key, "")


def _derived(name: str, level: Level, index: int, count: int, plateau: list[Measurement], mode: str,
             sweep: str) -> Measurement:
    """One plateau as a measurement of its own (see derive_cache_measurements)."""
    source = _median_point(plateau)
    workers = _workers(source)
    unverified = [str(m.params.get("variant", m.quantities.footprint_bytes or "?")) for m in plateau if not m.verified]
    detail = (f"all {len(plateau)} plateau points verified" if not unverified else
              f"{len(unverified)} of {len(plateau)} plateau points not verified: {', '.join(unverified)}")
    params = {
        DERIVED_FROM: sweep,
        "mode": mode,
        "level_index": f"{index + 1} of {count}",
        "source_variant": source.params.get("variant", ""),
        "window_bytes": _given(source, "window_bytes"),
        "footprint_bytes": _given(source, "footprint_bytes"),
        "plateau_first_bytes": int(level.first_size),
        "plateau_last_bytes": int(level.last_size),
        "plateau_points": level.points,
        "plateau_median": f"{level.bandwidth:.6g}",
        "workers": workers,
    }
    if level.capacity is not None:
        params.update({
            "capacity_bytes": int(round(level.capacity)),
            "capacity_per_worker_bytes": int(round(level.capacity / workers)),
            # The range the knee is known to within (the gap of a sharp step, else the knee).
            "capacity_low_bytes": int(round(level.capacity_low or level.capacity)),
            "capacity_high_bytes": int(round(level.capacity_high or level.capacity)),
        })
    return Measurement(
        name=name,
        value=source.value,
        unit=source.unit,
        stats=Stats(**vars(source.stats)),
        bytes_read=source.bytes_read,
        bytes_written=source.bytes_written,
        flops=source.flops,
        operations=source.operations,
        backend=source.backend,
        device=source.device,
        verified=not unverified,
        verify_detail=detail,
        params=params,
        sample_seconds=list(source.sample_seconds),
        telemetry=source.telemetry,
    )


# --------------------------------------------------------------------------- capacity evidence


@dataclass
class CapacityCheck:
    """A detected cache capacity next to the size the device reports, ready for a finding.

    Sizes are per worker (an SM, a CPU thread) for private levels and in total for shared ones.
    """

    level: str  # "l1", "l2", "l3"
    backend: str
    mode: str
    scope: str  # "per worker" or "total"
    detected_bytes: float  # the knee
    detected_low_bytes: float  # the range the knee is known to within
    detected_high_bytes: float
    expected_bytes: float | None
    expected_source: str  # where the expected size came from; "" when unknown
    bandwidth_gbps: float
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def relative_difference(self) -> float | None:
        """(detected - expected) / expected, or None without an expected size."""
        if not self.expected_bytes:
            return None
        return (self.detected_bytes - self.expected_bytes) / self.expected_bytes

    def differs(self, tolerance: float = CAPACITY_TOLERANCE) -> bool:
        """The expected size lies more than `tolerance` outside the range the knee is known to within.

        That range is the knee itself where the fall was measured, and the whole gap where the
        series jumps from plateau to plateau: a sweep in sqrt(2) steps cannot place a sharp
        knee closer than its step, and that is not a discrepancy of the device.
        """
        if not self.expected_bytes:
            return False
        return not (self.detected_low_bytes * (1 - tolerance) <= self.expected_bytes
                    <= self.detected_high_bytes * (1 + tolerance))




def _expected_capacity(level: str, device_meta: dict[str, Any]) -> tuple[float | None, str, str]:
    """(expected bytes, source, scope) for a detected level on this device."""
    if device_meta.get("type") == "cpu":
        key, scope = {"l1": ("l1d_cache_bytes_per_cpu", "per worker"), "l2": ("l2_cache_bytes_per_cpu", "per worker"),
                      "l3": ("l3_cache_bytes", "total")}[level]
        value = device_meta.get(key)
        return (float(value), f"meta device.{key} (sysfs)", scope) if value else (None, "", scope)
    if level == "l1":
        cc = str(device_meta.get("compute_capability") or "")
        try:
            major, minor = (int(v) for v in cc.split("."))
        except ValueError:
            return None, "", "per worker"
        size = _GPU_L1_BYTES_PER_SM.get((major, minor))
        return (float(size), f"L1/shared memory per SM of compute capability {cc}", "per worker") if size else (
            None, "", "per worker")
    value = device_meta.get("l2_cache_bytes")
    return (float(value), "meta device.l2_cache_bytes (driver)", "total") if value else (None, "", "total")


def capacity_checks(measurements: Iterable[Measurement], device_meta: dict[str, Any]) -> list[CapacityCheck]:
    """One check per derived cache measurement: its knee against the size the device reports."""
    checks: list[CapacityCheck] = []
    for m in measurements:
        if m.params.get(DERIVED_FROM) != SWEEP or not m.name.startswith("memory.") or m.status != "ok":
            continue
        level = m.name.split(".")[1]
        expected, source, scope = _expected_capacity(level, device_meta)
        q = m.quantities
        if q.capacity_bytes is None or q.capacity_low_bytes is None or q.capacity_high_bytes is None:
            continue  # the last plateau: main memory, no knee
        workers = q.workers or 1
        share = workers if scope == "per worker" else 1
        total, low, high = float(q.capacity_bytes), float(q.capacity_low_bytes), float(q.capacity_high_bytes)
        checks.append(CapacityCheck(
            level=level, backend=m.backend, mode=m.params.get("mode", ""), scope=scope,
            detected_bytes=total / share, detected_low_bytes=low / share, detected_high_bytes=high / share,
            expected_bytes=expected, expected_source=source, bandwidth_gbps=m.value,
            evidence={"workers": workers, "capacity_bytes": total,
                      "plateau_bytes": [float(q.plateau_first_bytes or 0), float(q.plateau_last_bytes or 0)],
                      "verified": m.verified},
        ))
    return checks


def describe_capacity(check: CapacityCheck) -> str:
    """'32 KiB', or '724 KiB to 1 MiB' / '45.3 to 64 MiB' where a sharp step leaves only that range."""
    low, high = format_bytes(check.detected_low_bytes), format_bytes(check.detected_high_bytes)
    if low == high:
        return format_bytes(check.detected_bytes)
    if low.split()[1] == high.split()[1]:
        return f"{low.split()[0]} to {high}"
    return f"{low} to {high}"

