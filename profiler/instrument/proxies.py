"""The per-call path: the timed stand-ins for a fetcher's dataset (or its iterator) and collate_fn, the recorder
they append to, and the calibration of their own cost.

The DataLoader builds one *fetcher* per worker (``dataset`` + ``collate_fn``); the profiler wraps that fetcher, never
the user's objects (torch_hooks.instrument_fetcher):

- the fetcher's ``dataset`` becomes a proxy whose ``__getitem__`` / ``__getitems__`` time each call (for an
  IterableDataset, its iterator is wrapped and each item is timed), so the dataset's own methods still see ``self``
  as the user's object and ``get_worker_info().dataset`` is unchanged;
- the fetcher's ``collate_fn`` is timed the same way;
- ``fetch`` returns the user's batch inside an :class:`~.batch.Instrumented` envelope carrying a BatchMeta
  (fetch.py). The envelope rides the worker's result queue (and the pin-memory thread: it pins what it carries) and
  the main process unwraps it before the user's loop sees anything, so batches, their types and their order are
  exactly the user's. (A ``num_workers=0`` map-style fetch is written out instead: inline_fetch.py.)

NOTE [ Clock reads on the hot path ]
    Per dataset call we keep one row: wall start/end, the thread's on-CPU and run-queue time, bytes asked for vs
    bytes from the block device, and the named sub-stages' self time (substages.py). The per-call path is the hot
    path (every sample of every batch): two wall-clock reads and five ints appended to a flat list, nothing else
    (~0.2 µs; the written-out map fetch, inline_fetch.inline_map_fetch: one read and one int, ~0.1 µs; no dict, no
    thread-local lookup, no /proc read, no object the garbage collector tracks). The thread's on-CPU clock (a system
    call, ~0.25-0.5 µs, more than the rest of the call's path) is read only at the end of a call that took
    CALL_CPU_FROM_NS or longer; a shorter call is taken as on a core, and what its batch's clock says it was not is
    shared out when the rows are built (derived.call_cpu). Run-queue wait and bytes read are read once per batch and
    shared out over its calls, and the batch's columns are built from the raw lists only when the main process reads
    them after the window, never on the way. Where both clocks time one span, the order of the reads is NOTE
    [ Wall clock outside, on-CPU clock inside ] (derived.py).

NOTE [ The profiler's own time ]
    The instrumentation's own time per fetch is kept in ``BatchMeta.own_ns``: measured around its own per-batch work
    (fetch.py), plus the calls times the per-call cost calibrated once per process (:func:`call_cost_ns`; the
    written-out fetch's, inline_fetch.inline_call_costs), plus the on-CPU clock reads times their calibrated cost
    (:func:`clock_cost_ns`). It is reported and, where the fetch ran inside the main thread's wait
    (``num_workers=0``), taken out of the wait before attribution.

NOTE [ The current recorder ]
    ``_current`` (this module's global) is the recorder of the batch being fetched in this thread, or None outside a
    fetch: the proxies read it as a plain global (the cheapest lookup on the per-call path), so it lives here, next
    to its readers. Only fetch.py and inline_fetch.py set it (``proxies._current = ...``, once per batch), and every
    fetch sets it back to None at its end or when it raises (fetch.abandon).
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Iterator

from .batch import NO_COLLATE, SAMPLING, index_of
from .derived import CALL_CPU_FROM_NS, NO_CPU


class Recorder:
    """Raw rows of the batch being fetched, in this thread: batch.CALL_FIELDS ints per dataset call, appended by the
    proxies, and how many of those calls read the on-CPU clock (its cost is counted in the fetch's own time)."""

    __slots__ = ("calls", "skipped", "opened", "cpu_reads", "long_clocks")

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.long_clocks: list[int] = []  # the written-out fetch's (row, clock) pairs (BatchMeta.long_clocks)
        self.skipped: list[tuple[int, str, str]] = []
        self.opened: dict[str, int] = {}
        self.cpu_reads = 0


_current: Recorder | None = None
# Folders a batch's dataset calls opened files in, at most this many per batch: enough to name where a job's data
# lives (a few roots) without letting a dataset that opens files in thousands of folders grow every BatchMeta.
MAX_FOLDERS_PER_BATCH = 8
_audit_installed = False


def _audit(event: str, args: tuple) -> None:
    """sys.addaudithook callback: files opened for reading while a batch is being fetched (``open`` event of
    builtins.open / io.open / os.open — what PIL, numpy, torch.load and tarfile use). C libraries opening files
    themselves (LMDB, HDF5) are not seen."""
    rec = _current
    if rec is None or event != "open":
        return
    path, mode = args[0], args[1]
    if not isinstance(path, (str, bytes)) or (mode is not None and any(c in mode for c in "wax+")):
        return
    folder = os.path.dirname(os.path.abspath(os.fsdecode(path)))
    if folder in rec.opened or len(rec.opened) < MAX_FOLDERS_PER_BATCH:
        rec.opened[folder] = rec.opened.get(folder, 0) + 1


def install_audit() -> None:
    """Once per process, at its first timed fetch (begin_fetch), and never under the monitor (SAMPLING: its windows name
    no folders). Why not at the hooks' install: an audit hook cannot be removed, and once there it is called for every
    audited event of the process, ~0.3-0.5 µs each (the event's arguments built, a Python call), whether a fetch is
    under way or not: a batch's unpickling in the main process (its classes, the shared-memory socket) and its sending
    from a worker are ~25 events per batch with workers (counted 2026-12-06; at ~0.3-0.5 µs each, an estimated ~1 % of
    the light loop's ~1,500 µs per batch). The main process of a loader with workers fetches nothing, so it never
    installs it."""
    global _audit_installed
    if not _audit_installed and not SAMPLING[0]:
        sys.addaudithook(_audit)
        _audit_installed = True


def report_skipped(index: int, path: str, reason: str) -> None:
    """Called by a dataset (the built-in one) for a sample it could not load; listed in the record's skipped files."""
    if _current is not None:
        _current.skipped.append((int(index), str(path), str(reason)))


_perf = time.perf_counter_ns
_cpu = time.thread_time_ns


class MapProxy:
    """Stands in for the dataset inside the fetcher only; times each ``__getitem__``.

    The hot path, written out in each proxy rather than shared through a helper (one Python frame is ~0.1 µs of a
    ~0.3 µs budget): the wall clock at both ends, and the thread's on-CPU clock at the end only of a call that took
    CALL_CPU_FROM_NS or longer (see there; call_cpu turns the readings into each call's on-CPU time).
    """

    # torch's fetcher asks ``hasattr(dataset, "__getitems__") and dataset.__getitems__``: None answers both without
    # the AttributeError that __getattr__ would raise from the user's dataset on every batch (~1 µs). MapProxyItems
    # has the real one.
    __getitems__: Any = None

    def __init__(self, dataset: Any):
        self._dataset = dataset

    def __getitem__(self, key: Any) -> Any:
        rec = _current
        if rec is None:
            return self._dataset[key]
        t0 = _perf()
        try:
            return self._dataset[key]
        finally:
            t1 = _perf()
            if t1 - t0 < CALL_CPU_FROM_NS:
                rec.calls += (t0, t1, NO_CPU, key if key.__class__ is int else index_of(key), 1)
            else:
                rec.calls += (t0, t1, _cpu(), key if key.__class__ is int else index_of(key), 1)
                rec.cpu_reads += 1

    def __len__(self) -> int:
        return len(self._dataset)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dataset, name)


class MapProxyItems(MapProxy):
    """The same for datasets with ``__getitems__`` (one row per call, ``items`` = how many indices it got)."""

    def __getitems__(self, keys: Any) -> Any:
        rec = _current
        if rec is None:
            return self._dataset.__getitems__(keys)
        t0 = _perf()
        try:
            return self._dataset.__getitems__(keys)
        finally:
            t1 = _perf()  # a call for a whole batch: always long enough to read the on-CPU clock
            rec.calls += (t0, t1, _cpu(), -1, len(keys))
            rec.cpu_reads += 1


class TimedIterator:
    """An IterableDataset's iterator, each ``next()`` timed as one dataset call."""

    def __init__(self, it: Iterator):
        self._it = it

    def __iter__(self) -> "TimedIterator":
        return self

    def __next__(self) -> Any:
        rec = _current
        if rec is None:
            return next(self._it)
        t0 = _perf()
        try:
            return next(self._it)
        except StopIteration:
            t0 = -1  # the iterator's end is not a sample: no row (its time becomes the worker's gap, i.e. other)
            raise
        finally:
            if t0 >= 0:
                t1 = _perf()
                if t1 - t0 < CALL_CPU_FROM_NS:
                    rec.calls += (t0, t1, NO_CPU, -1, 1)
                else:
                    rec.calls += (t0, t1, _cpu(), -1, 1)
                    rec.cpu_reads += 1


class TimedCollate:
    """The fetcher's collate_fn, timed: ``last`` = (wall start, wall end, on-CPU ns, on-CPU clock at its start)."""

    def __init__(self, fn: Any):
        self.fn = fn
        self.last: tuple[int, int, int, int] = NO_COLLATE

    def __call__(self, data: Any) -> Any:
        if _current is None:  # a fetch outside any batch record (NOTE [ Monitor sampling ], batch.py): untimed
            return self.fn(data)
        t0 = _perf()
        c0 = _cpu()
        try:
            return self.fn(data)
        finally:
            c1 = _cpu()
            self.last = (t0, _perf(), c1 - c0, c0)


_call_cost_ns: int | None = None
# Repeats of each calibration loop; each loop's own minimum is kept, then the minima are subtracted. Load only ever
# inflates a loop's time, so each minimum tends to its quiet value, where the minimum of a difference of two loops
# that load inflates unequally does not (under CI's load it came out 0 for a ~100 ns cost). 15 repeats: ~6 ms for
# call_cost_ns and ~5 ms for inline_call_costs, once per process.
CALIBRATION_REPEATS = 15
_clock_cost_ns = 0


def call_cost_ns() -> int:
    """The per-call path's own cost in this process (ns), calibrated once: a proxy over a list timed against the same
    list indexed directly, each timed as the minimum of CALIBRATION_REPEATS runs (a fixed cost that load only ever
    inflates). The same calibration times one read of the on-CPU clock (:func:`clock_cost_ns`)."""
    global _call_cost_ns, _current, _clock_cost_ns
    if _call_cost_ns is None:
        data = list(range(256))
        proxy = MapProxy(data)
        saved = _current
        proxied = direct = clocked = 1 << 62
        try:
            for _ in range(CALIBRATION_REPEATS):
                _current = Recorder()
                t = _perf()
                for i in data:
                    proxy[i]
                t1 = _perf()
                for i in data:
                    data[i]
                t2 = _perf()
                for i in data:
                    _cpu()
                t3 = _perf()
                proxied, direct, clocked = min(proxied, t1 - t), min(direct, t2 - t1), min(clocked, t3 - t2)
        finally:
            _current = saved
        _call_cost_ns = max(0, (proxied - direct) // len(data))
        _clock_cost_ns = max(0, (clocked - direct) // len(data))
    return _call_cost_ns


def clock_cost_ns() -> int:
    """One read of the thread's on-CPU clock (ns): what a long call's timing adds to the per-call path."""
    call_cost_ns()
    return _clock_cost_ns

