"""Names of GPU-to-GPU measurements: one name per ordered device pair.

A pair probe is implemented once under a base name (``transfer.p2p.ce.write``) and
measured for every ordered pair (i, j) under ``transfer.p2p.<i>.<j>.ce.write``, so the
results hold a matrix. Native pair probes run on the source device and take the
destination and the transfer size as their variant, ``"<dst>/<size>"``.
"""

from __future__ import annotations

import re

PAIR_PREFIX = "transfer.p2p."
_PAIR_NAME = re.compile(r"^transfer\.p2p\.(\d+)\.(\d+)\.(.+)$")


def is_pair_base(name: str) -> bool:
    """A base name that expands to one name per ordered pair (not yet expanded)."""
    return name.startswith(PAIR_PREFIX) and _PAIR_NAME.match(name) is None


def pair_name(base: str, src: int, dst: int) -> str:
    return f"{PAIR_PREFIX}{src}.{dst}.{base[len(PAIR_PREFIX):]}"


def expand(base: str, device_count: int) -> list[str]:
    """Every ordered pair of distinct devices; none with fewer than two."""
    return [pair_name(base, i, j) for i in range(device_count) for j in range(device_count) if i != j]


def split(name: str) -> tuple[str, int, int] | None:
    """(base name, source, destination) of an expanded pair name, else None."""
    match = _PAIR_NAME.match(name)
    if match is None:
        return None
    src, dst, mode = match.groups()
    return PAIR_PREFIX + mode, int(src), int(dst)


def native_variant(dst: int, size: str) -> str:
    return f"{dst}/{size}"


def parse_native_variant(variant: str) -> tuple[int, str]:
    """(destination, size) from a native pair probe's variant ``"<dst>/<size>"``."""
    dst, _, size = variant.partition("/")
    return int(dst), size
