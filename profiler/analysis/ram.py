"""Host-RAM analysis of DataLoader workers from the run's ``samples`` (pure: dicts in, dicts out, no I/O).

Two questions:

1. Copy-on-read (pytorch/pytorch#13246): workers are forked, so they share the parent's memory pages copy-on-write.
   A dataset that keeps its per-sample metadata as a Python list/dict of Python objects makes every ``__getitem__``
   touch reference counts, i.e. *write* to the object headers; each touched page is then copied into the worker.
   Over an epoch every worker ends up with a private copy of the whole list, and RAM use grows with the number of
   workers. The sign: a worker's private memory (USS) climbing steadily through the run.
2. How much RAM would N workers take? Projected from the measured main process, the private memory of each worker
   and the pages they share.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..record.read import ProcessSeriesView, SamplesView, read, view
from ..thresholds import (  # the judgment thresholds, with their reasons, live in one module
    ASSUMED_WORKER_PRIVATE_BYTES,
    BUILTIN_OBJECT_BYTES_PER_FILE,
    COPY_ON_READ_MIN_COPIED_SHARE,
    COPY_ON_READ_MIN_GROWTH_BYTES,
    COPY_ON_READ_MIN_LATE_SHARE,
    COPY_ON_READ_MIN_MONOTONE_SHARE,
    COPY_ON_READ_MIN_READINGS,
    MIB,
    RAM_HEADROOM_WARN_FRACTION,
)
from .context import Context

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from collections.abc import Mapping

    from ..record import RunRecord
    from ..record.schema import Ram

COPY_ON_READ_FIX = (
    "keep the dataset's per-sample metadata (file names, labels, boxes) in numpy arrays or torch tensors instead "
    "of Python lists/dicts of Python objects; for strings, one byte buffer of all of them concatenated (a uint8 "
    "numpy array) plus an int64 array of offsets, decoding item i as buf[off[i]:off[i + 1]].tobytes().decode(). "
    "Every access to a Python object updates its reference count, which writes to its page, and copy-on-write then "
    "duplicates those pages into each forked worker; a numpy buffer is one object whose data pages are only read, "
    "so they stay shared"
)


@dataclass
class _Series:
    t: list[float]
    v: list[float]
    basis: str


def _samples(samples: SamplesView | Mapping[str, Any]) -> SamplesView:
    """The samples section as its view (tests hand the raw section)."""
    return samples if isinstance(samples, SamplesView) else view(SamplesView, samples)


def _private_series(proc: ProcessSeriesView) -> _Series | None:
    """The process's private memory over time: USS when sampled, else PSS (its fair share of shared pages, which
    still rises as shared pages become private). RSS cannot show copy-on-write: a copied page was resident before."""
    for values, basis in ((proc.uss_bytes, "uss"), (proc.pss_bytes, "pss")):
        if not values:
            continue
        pairs = [(t, v) for t, v in zip(proc.t_s, values) if v is not None]
        if pairs:
            return _Series([p[0] for p in pairs], [float(p[1]) for p in pairs], basis)
    return None


def _slope(t: list[float], v: list[float]) -> float:
    """Least-squares slope of v over t (bytes per second)."""
    n = len(t)
    mt, mv = sum(t) / n, sum(v) / n
    var = sum((x - mt) ** 2 for x in t)
    return sum((x - mt) * (y - mv) for x, y in zip(t, v)) / var if var > 0 else 0.0


def _value_at(s: _Series, when: float) -> float:
    """Linear interpolation of the series at time ``when`` (clamped to its ends)."""
    if when <= s.t[0]:
        return s.v[0]
    for (t0, v0), (t1, v1) in zip(zip(s.t, s.v), zip(s.t[1:], s.v[1:])):
        if t0 <= when <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (when - t0) / (t1 - t0)
    return s.v[-1]


def _rss_at(proc: ProcessSeriesView, when: float) -> float | None:
    """The worker's RSS at its reading nearest ``when`` (RSS is read at every tick, USS only at some)."""
    pairs = [(abs(t - when), float(v)) for t, v in zip(proc.t_s, proc.rss_bytes)
             if v is not None]
    return min(pairs)[1] if pairs else None


def _worker_growth(proc: ProcessSeriesView, object_bound: float | None = None) -> dict | None:
    """The copy-on-read test for one worker; the figures when it matches, else None.

    Copy-on-write copying is shared pages turning private: USS up while RSS stays (the page was resident, shared,
    before). New allocations grow RSS with USS, and are the heap's, not the dataset's objects': only the USS growth
    RSS did not match counts as copied, and it is bounded by what the worker shared at its first reading (RSS less
    USS: no more can turn private) and by ``object_bound`` (what the dataset's objects could hold) where known."""
    s = _private_series(proc)
    if s is None or len(s.v) < COPY_ON_READ_MIN_READINGS or s.t[-1] <= s.t[0]:
        return None
    growth = s.v[-1] - s.v[0]
    slope = _slope(s.t, s.v)
    rises = sum(max(0.0, b - a) for a, b in zip(s.v, s.v[1:]))
    late = s.v[-1] - _value_at(s, (s.t[0] + s.t[-1]) / 2)
    if (slope <= 0 or growth < COPY_ON_READ_MIN_GROWTH_BYTES or rises <= 0
            or growth / rises < COPY_ON_READ_MIN_MONOTONE_SHARE or late / growth < COPY_ON_READ_MIN_LATE_SHARE):
        return None
    rss0, rss1 = _rss_at(proc, s.t[0]), _rss_at(proc, s.t[-1])
    rss_growth = max(0.0, rss1 - rss0) if rss0 is not None and rss1 is not None else 0.0
    copied = growth - rss_growth
    if rss0 is not None:
        copied = min(copied, max(0.0, rss0 - s.v[0]))  # only what was shared can turn private
    if object_bound is not None:
        copied = min(copied, object_bound)
    if copied < COPY_ON_READ_MIN_GROWTH_BYTES or copied < COPY_ON_READ_MIN_COPIED_SHARE * growth:
        return None
    return {"pid": proc.pid, "worker_id": proc.worker_id, "basis": s.basis,
            "growth_bytes": int(growth), "copied_bytes": int(copied), "rss_growth_bytes": int(rss_growth),
            "slope_bytes_per_s": slope, "duration_s": s.t[-1] - s.t[0],
            "start_bytes": int(s.v[0]), "end_bytes": int(s.v[-1])}


def _workers(samples: SamplesView | Mapping[str, Any]) -> list[ProcessSeriesView]:
    return [p for p in _samples(samples).processes if p.role == "worker"]


def detect_copy_on_read(samples: SamplesView | Mapping[str, Any], object_bound: float | None = None) -> dict | None:
    """The pytorch#13246 finding when DataLoader workers' shared pages steadily turn private, else None.

    A worker matches when its USS (PSS when USS was not sampled) has a positive least-squares slope, grew by at least
    ``COPY_ON_READ_MIN_GROWTH_BYTES``, grew mostly monotonically and was still growing in the second half of the run,
    and most of that growth was copying (USS up, RSS not: ``_worker_growth``). ``object_bound``: the bytes the
    dataset's objects could hold, when known (the built-in dataset's), beyond which nothing is claimed.
    """
    workers = _workers(samples)
    hits = [h for h in (_worker_growth(p, object_bound) for p in workers) if h is not None]
    if not hits:
        return None
    copied = sum(h["copied_bytes"] for h in hits) / len(hits)
    growth = sum(h["growth_bytes"] for h in hits) / len(hits)
    rss = sum(h["rss_growth_bytes"] for h in hits) / len(hits)
    slope = sum(h["slope_bytes_per_s"] for h in hits) / len(hits)
    basis = hits[0]["basis"].upper()
    message = (f"{len(hits)} of {len(workers)} DataLoader workers turned pages shared with the main process private, "
               f"steadily: ~{copied / MIB:.0f} MiB copied per worker ({basis} +{growth / MIB:.0f} MiB while RSS "
               f"grew {rss / MIB:.0f} MiB, {slope / MIB:.1f} MiB/s): the dataset's Python objects are being copied "
               "into every worker as it reads them (copy-on-read, pytorch#13246), so RAM use grows with the number "
               "of workers and the length of the epoch")
    return {"kind": "copy_on_read", "workers": hits, "growth_bytes_per_worker": int(copied),
            "private_growth_bytes_per_worker": int(growth), "rss_growth_bytes_per_worker": int(rss),
            "slope_bytes_per_s": slope, "message": message, "fix": COPY_ON_READ_FIX}


def _last(values: list | None) -> float | None:
    for v in reversed(values or []):
        if v is not None:
            return float(v)
    return None


def _peak(values: list | None) -> float | None:
    vals = [v for v in values or [] if v is not None]
    return float(max(vals)) if vals else None


def _budget(samples: SamplesView, procs: list[ProcessSeriesView]) -> int | None:
    """RAM the job could hold: min over ticks of (available + the job's private memory then), carrying each
    process's last private reading forward; the job's own private pages are not in ``available`` but are its to
    reuse. None when the run has no available-RAM series.

    Each process's series is built once and looked up by bisection: linear in ticks x processes, so a 20,000-step
    run with 50,000 ticks takes milliseconds, not minutes."""
    avail, ticks = samples.ram_available_bytes, samples.t_s
    tracked = []
    for p in procs:
        series = _private_series(p)
        if series is not None:
            tracked.append((series, (p.t_s or [series.t[-1]])[-1]))
    best = None
    for t, a in zip(ticks, avail):
        if a is None:
            continue
        ours = 0.0
        for series, last_t in tracked:
            if t < series.t[0] or t > last_t:
                continue
            ours += series.v[bisect.bisect_right(series.t, t) - 1]
        value = a + ours
        best = value if best is None else min(best, value)
    return int(best) if best is not None else None


def project_ram(samples_: SamplesView | Mapping[str, Any], workers_now: int, workers_target: list[int],
                copy_on_read: dict | None | bool = False) -> list[dict]:
    """Projected host RAM for each worker count in ``workers_target``, from this run's measurements.

    projected = main private + N x per-worker private + shared (pages counted once: main RSS - main USS).
    ``fits`` compares the private part with what the job could hold (available RAM + its own private memory);
    ``projected_worst_bytes`` is the copy-on-read worst case where every worker ends up copying the shared pages.
    ``copy_on_read``: the caller's :func:`detect_copy_on_read` result (a finding or None), so detection runs once;
    left at ``False`` (not given), it is detected here.
    """
    samples = _samples(samples_)
    procs = samples.processes
    main = next((p for p in procs if p.role == "main"), None)
    workers = _workers(samples)
    main_series = _private_series(main) if main is not None else None
    main_rss = _last(main.rss_bytes) if main is not None else None
    main_private = main_series.v[-1] if main_series else (main_rss or 0.0)
    shared = max(0.0, (main_rss or 0.0) - main_private) if main_series else 0.0
    worker_series = [s for s in (_private_series(w) for w in workers) if s is not None]
    if worker_series:  # each worker's peak: the projection is about the most RAM held at once
        per_worker = sum(max(s.v) for s in worker_series) / len(worker_series)
        basis = worker_series[0].basis
    elif workers and any(_peak(w.rss_bytes) for w in workers):
        rss_peaks = [_peak(w.rss_bytes) or 0.0 for w in workers]
        per_worker, basis = sum(rss_peaks) / len(rss_peaks), "rss"  # overstates: includes shared pages
    else:
        per_worker, basis = float(ASSUMED_WORKER_PRIVATE_BYTES), "assumed"
    budget = _budget(samples, procs)
    growing = (detect_copy_on_read(samples) if copy_on_read is False else copy_on_read) is not None
    out = []
    for n in workers_target:
        private = main_private + n * per_worker
        row = {"workers": n, "workers_now": workers_now, "projected_bytes": int(private + shared),
               "projected_worst_bytes": int(private + shared + n * shared), "main_bytes": int(main_private),
               "per_worker_bytes": int(per_worker), "shared_bytes": int(shared), "available_bytes": budget,
               "fits": None if budget is None else private <= budget,
               "headroom_bytes": None if budget is None else int(budget - private), "basis": basis, "warning": None}
        warnings = []
        if budget is not None and private > budget:
            warnings.append(f"{n} workers need ~{private / MIB:,.0f} MiB of private RAM but only "
                            f"{budget / MIB:,.0f} MiB is available: expect swapping or the OOM killer")
        elif budget is not None and budget - private < RAM_HEADROOM_WARN_FRACTION * budget:
            warnings.append(f"{n} workers leave under {RAM_HEADROOM_WARN_FRACTION:.0%} of RAM free: the page cache "
                            "that feeds the loader shrinks first, slowing reads")
        if growing:
            warnings.append("worker memory was still growing (copy-on-read): this projection is a lower bound; "
                            "see projected_worst_bytes")
        row["warning"] = "; ".join(warnings) or None
        out.append(row)
    return out


def ram_section(rec: RunRecord, ctx: Context) -> Ram:
    """Host RAM: per-process peaks, /dev/shm, copy-on-read growth, and a projection for other worker counts."""
    r = read(rec)
    s = view(SamplesView, rec.samples)
    # The built-in dataset's only Python objects are its file list: its workers' growth is the heap's, never a copy
    # of those (bounded by what they could hold). A script's objects are not measured: the RSS test alone decides.
    bound = None
    if rec.job_kind == "builtin":
        bound = float(int(r.dataset.files or 0) * BUILTIN_OBJECT_BYTES_PER_FILE)
    cor = detect_copy_on_read(s, bound)  # once: the projection and the finding both use this result
    out: Ram = {"copy_on_read": cor}
    shm = [v for v in s.shm_used_bytes if v is not None]
    out["shm_peak_bytes"] = max(shm) if shm else None
    out["processes"] = [_process_peaks(p) for p in s.processes]
    w = ctx.workers
    targets = sorted({max(1, w), w * 2 or 2, w * 4 or 4, int(ctx.usable_cores) * 2})
    try:
        out["projection"] = project_ram(s, w, targets, copy_on_read=cor) if s.processes else []
    except Exception as e:  # a projection is advice; a record without enough samples must still render
        out["projection"] = []
        out["projection_error"] = f"{type(e).__name__}: {e}"
    procs = out["processes"]
    out["workers_at_once"] = w
    out["worker_processes"] = sum(1 for p in procs if p["role"] == "worker")
    line = ram_line(procs, w, bool(r.job.loader.persistent_workers))
    if line:
        out["summary"] = line
    return out


def _mib(n: float) -> str:
    return f"{n / MIB / 1024:.2f} GiB" if n >= 1024 * MIB else f"{n / MIB:.0f} MiB"


def ram_line(procs: list[dict[str, Any]], workers_at_once: int, persistent: bool) -> str | None:
    """The RAM sentence: the main process's peak and each worker's, with the workers counted as the loader line
    counts them (at once), and the worker processes seen over the window beside it when more (a loader without
    persistent_workers starts its workers again every epoch: 2 workers over three epochs are 6 processes, never 6
    at once). ``procs``: the rows :func:`_process_peaks` built (every key present)."""
    main = next((p for p in procs if p["role"] == "main"), None)
    if not main or not main["peak_rss_bytes"]:
        return None
    workers = [p for p in procs if p["role"] == "worker"]
    uss = [p["peak_uss_bytes"] or 0 for p in workers]
    if workers and all(uss):
        sizes, what = uss, "private (USS)"
    else:
        sizes, what = [p["peak_rss_bytes"] or 0 for p in workers], "resident (RSS, shared pages included)"
    line = f"Host RAM: main process peak {_mib(main['peak_rss_bytes'])} RSS"
    if sizes:
        n = workers_at_once or len(sizes)
        line += f"; {n} worker{'s' if n != 1 else ''} at once"
        if len(sizes) > n:
            why = "" if persistent else ": the loader starts its workers again each epoch (no persistent_workers)"
            line += f" ({len(sizes)} worker processes over the run{why})"
        line += f", up to {_mib(max(sizes))} {what} each"
    return line + "."


def _process_peaks(p: ProcessSeriesView) -> dict[str, Any]:
    def peak(values: list[int | None] | None) -> int | None:
        return max((v for v in (values or []) if v is not None), default=None)

    return {"pid": p.pid, "role": p.role, "worker_id": p.worker_id, "peak_rss_bytes": peak(p.rss_bytes),
            "peak_pss_bytes": peak(p.pss_bytes), "peak_uss_bytes": peak(p.uss_bytes)}
