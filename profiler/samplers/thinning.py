"""Keeping the sampler's series bounded however long the run: halve them, and the sampling rate, when full.

Why: the sampler ticks at 10 Hz for as long as the job runs. A day-long run would keep ~860,000 ticks of a dozen
series (hundreds of MB in the main process, as much again in run.json), while a plot or a windowed average needs a
few thousand points. So once a series holds ``MAX_TICKS`` points, every pair of neighbours becomes one point and
the sampler ticks half as often from then on: the series stay evenly spaced, cover the whole run and never hold
more than ``MAX_TICKS`` points (``samples.interval_s`` is the final spacing, ``samples.halvings`` how often). The
record then gets exactly ``MAX_TICKS // 2`` points per series (``to_points``), so its size stops depending on how
far the run got between two halvings.

How a pair becomes one point, by what the series means:
- ``last``: timestamps (a reading at t covers the interval that ends at t);
- ``mean``: rates and utilisations over equal intervals (CPU %, disk and PCIe rates, GPU utilisation): the mean of
  two is the rate over both;
- ``max``: levels whose peak is what a report quotes (RSS/PSS/USS, RAM used, page cache, shm, GPU memory);
- ``min``: levels whose low point matters (RAM available).
A missing reading (None) never wins over a present one.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Points per series before halving. Why 4,000: 6.7 minutes at 10 Hz in full resolution, and after any number of
#: halvings at least 2,000 evenly spaced points, more than a plot's width in pixels; ~0.5 MB of run.json at most.
MAX_TICKS = 4000

_HOW = ("last", "mean", "max", "min")


def _pair(a: Any, b: Any, how: str) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    if how == "last":
        return b
    if how == "max":
        return max(a, b)
    if how == "min":
        return min(a, b)
    m = (a + b) / 2
    return round(m, 1) if isinstance(a, float) or isinstance(b, float) else m


def halve(values: Sequence[Any], how: str) -> list[Any]:
    """Every pair of neighbours as one value (``how``: last | mean | max | min); an odd last value is kept as is."""
    if how not in _HOW:
        raise ValueError(f"how must be one of {_HOW}, got {how!r}")
    n = len(values)
    out = [_pair(values[i], values[i + 1], how) for i in range(0, n - 1, 2)]
    if n % 2:
        out.append(values[-1])
    return out


def halve_rows(rows: Sequence[Sequence[float]], how: str = "mean") -> list[list[float]]:
    """``halve`` for per-tick rows (CPU % per core): element by element; rows of different lengths (a CPU came
    online) are kept as the later row."""
    n = len(rows)
    out: list[list[float]] = []
    for i in range(0, n - 1, 2):
        a, b = rows[i], rows[i + 1]
        out.append([_pair(x, y, how) for x, y in zip(a, b)] if len(a) == len(b) else list(b))
    if n % 2:
        out.append(list(rows[-1]))
    return out


def _reduce(values: Sequence[Any], how: str) -> Any:
    present = [v for v in values if v is not None]
    if not present:
        return None
    if how == "last":
        return present[-1]
    if how == "max":
        return max(present)
    if how == "min":
        return min(present)
    m = sum(present) / len(present)
    return round(m, 1) if any(isinstance(v, float) for v in present) else m


def to_points(values: Sequence[Any], m: int, how: str) -> list[Any]:
    """``values`` as exactly ``m`` points (unchanged when it has no more): consecutive groups of neighbours, each
    reduced by ``how`` like ``halve``. Groups differ in size by at most one, so after a halving (n < 2m) each point
    stands for one or two readings."""
    if how not in _HOW:
        raise ValueError(f"how must be one of {_HOW}, got {how!r}")
    n = len(values)
    if n <= m:
        return list(values)
    return [_reduce(values[i * n // m:(i + 1) * n // m], how) for i in range(m)]


def rows_to_points(rows: Sequence[Sequence[float]], m: int) -> list[list[float]]:
    """``to_points`` for per-tick rows (CPU % per core), element by element, means."""
    n = len(rows)
    if n <= m:
        return [list(r) for r in rows]
    out: list[list[float]] = []
    for i in range(m):
        group = rows[i * n // m:(i + 1) * n // m]
        width = len(group[-1])
        same = [r for r in group if len(r) == width]
        out.append([_reduce([r[j] for r in same], "mean") for j in range(width)])
    return out
