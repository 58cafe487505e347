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


def _reduce(values: Sequence[Any], how: str) -> Any:
    """One point for a group of neighbours (``how``: last | mean | max | min); a missing reading never wins."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    if how == "last":
        return present[-1]
    if how == "max":
        return max(present)
    if how == "min":
        return min(present)
    if len(present) == 1:
        return present[0]
    m = sum(present) / len(present)
    return round(m, 1) if any(isinstance(v, float) for v in present) else m


def _reduce_rows(group: Sequence[Sequence[float]]) -> list[float]:
    """One row for a group of per-tick rows (CPU % per core), element by element, means; rows of another width (a
    CPU came online) give way to the last row's."""
    width = len(group[-1])
    same = [r for r in group if len(r) == width]
    return [_reduce([r[j] for r in same], "mean") for j in range(width)]


def _check(how: str) -> None:
    if how not in _HOW:
        raise ValueError(f"how must be one of {_HOW}, got {how!r}")


def halve(values: Sequence[Any], how: str) -> list[Any]:
    """Every pair of neighbours as one value (``how``: last | mean | max | min); an odd last value is kept as is."""
    _check(how)
    return [_reduce(values[i:i + 2], how) for i in range(0, len(values), 2)]


def halve_rows(rows: Sequence[Sequence[float]]) -> list[list[float]]:
    """``halve`` for per-tick rows (CPU % per core), element by element."""
    return [_reduce_rows(rows[i:i + 2]) for i in range(0, len(rows), 2)]


def _groups(n: int, m: int) -> list[slice]:
    """``m`` consecutive groups covering ``n`` items, sizes differing by at most one."""
    return [slice(i * n // m, (i + 1) * n // m) for i in range(m)]


def to_points(values: Sequence[Any], m: int, how: str) -> list[Any]:
    """``values`` as exactly ``m`` points (unchanged when it has no more): consecutive groups of neighbours, each
    reduced by ``how`` like ``halve``. After a halving (n < 2m) each point stands for one or two readings."""
    _check(how)
    if len(values) <= m:
        return list(values)
    return [_reduce(values[g], how) for g in _groups(len(values), m)]


def rows_to_points(rows: Sequence[Sequence[float]], m: int) -> list[list[float]]:
    """``to_points`` for per-tick rows (CPU % per core), element by element, means."""
    if len(rows) <= m:
        return [list(r) for r in rows]
    return [_reduce_rows(rows[g]) for g in _groups(len(rows), m)]


def fit_series(d: dict[str, Any], how_by_key: dict[str, str], m: int) -> dict[str, Any]:
    """A dict of series (one process's, the GPU's) with each series in ``how_by_key`` as at most ``m`` points."""
    return {k: to_points(v, m, how_by_key[k]) if k in how_by_key and isinstance(v, list) else v for k, v in d.items()}
