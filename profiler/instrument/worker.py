"""What runs inside a DataLoader worker (or in the main process when ``num_workers=0``) while profiling.

The DataLoader builds one *fetcher* per worker (``dataset`` + ``collate_fn``); the profiler wraps that fetcher, never
the user's objects:

- the fetcher's ``dataset`` becomes a proxy whose ``__getitem__`` / ``__getitems__`` time each call (for an
  IterableDataset, its iterator is wrapped and each item is timed), so the dataset's own methods still see ``self``
  as the user's object and ``get_worker_info().dataset`` is unchanged;
- the fetcher's ``collate_fn`` is timed the same way;
- ``fetch`` returns the user's batch inside an :class:`Instrumented` envelope carrying a :class:`BatchMeta`. The
  envelope rides the worker's result queue (and the pin-memory thread: it pins what it carries) and the main process
  unwraps it before the user's loop sees anything, so batches, their types and their order are exactly the user's.

Per dataset call we keep one row: wall start/end, the thread's on-CPU and run-queue time, bytes asked for vs bytes
from the block device (clocks.snapshot at both ends), and the named sub-stages' self time (substages.py).
"""
from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from . import clocks, substages

# Columns of BatchMeta.rows (int64), one row per dataset call.
ROW_COLUMNS = ("start", "end", "cpu", "runq", "rchar", "read_bytes", "index", "items", "pixels")


@dataclass
class BatchMeta:
    """What one worker did for one batch. Plain attributes, so it pickles cheaply and pin_memory leaves it alone."""
    worker_id: int  # -1: the main process (num_workers = 0)
    pid: int
    rows: np.ndarray  # int64 (n, len(ROW_COLUMNS))
    stages: dict[str, np.ndarray]  # stage -> int64 self ns per row (rows where it occurred; zero elsewhere)
    collate: tuple[int, int, int, int]  # start, end, cpu ns, runq ns
    io: tuple[int, int]  # /proc/self/io of the process after the batch: (rchar, read_bytes), cumulative; -1 unknown
    skipped: list[tuple[int, str, str]] = field(default_factory=list)  # (index, path, reason) reported by the dataset
    sent_ns: int = 0  # when the worker's queue thread began pickling it (0: never pickled, e.g. num_workers = 0)
    opened: dict[str, int] = field(default_factory=dict)  # folder -> files opened for reading during this batch

    @property
    def items(self) -> int:
        return int(self.rows[:, 7].sum()) if self.rows.size else 0


class Instrumented:
    """The user's batch plus its BatchMeta, from ``fetch`` to the main process's ``__next__`` (which unwraps it)."""

    __slots__ = ("batch", "meta")

    def __init__(self, batch: Any, meta: BatchMeta):
        self.batch, self.meta = batch, meta

    def pin_memory(self, device: Any = None) -> "Instrumented":
        from torch.utils.data._utils.pin_memory import pin_memory

        return Instrumented(pin_memory(self.batch, device), self.meta)

    def __reduce__(self) -> tuple:
        # Pickling happens in the worker's queue-feeder thread: this instant is when the batch started on its way.
        self.meta.sent_ns = time.perf_counter_ns()
        return (Instrumented, (self.batch, self.meta))


class _Recorder:
    """Rows of the batch being fetched, in this thread."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, ...]] = []
        self.stages: list[dict[str, int]] = []
        self.skipped: list[tuple[int, str, str]] = []
        self.opened: dict[str, int] = {}

    def call(self, fn: Any, arg: Any, index: int, items: int) -> Any:
        s0 = clocks.call_snapshot()
        substages.begin_sample()
        try:
            return fn(arg)
        finally:
            named = substages.end_sample()
            s1 = clocks.call_snapshot(end=True)
            # runq, rchar, read_bytes (columns 3-5) are the batch's, shared out in fetch(): share_batch_counters
            self.rows.append((s0[0], s1[0], s1[1] - s0[1], 0, 0, 0, index, items, substages.take_pixels()))
            self.stages.append(named)


_current: _Recorder | None = None
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
    """Once per process (audit hooks cannot be removed; the hook does nothing outside a fetch)."""
    global _audit_installed
    if not _audit_installed:
        import sys

        sys.addaudithook(_audit)
        _audit_installed = True


def die_with_parent() -> None:
    """Ask the kernel to end this (forked) worker the moment its parent dies (PR_SET_PDEATHSIG, Linux).

    Why: a profiled run killed outright (SIGKILL, the OOM killer) leaves its workers running until torch's watchdog
    notices, ~5 s later, still reading and decoding. Only for workers forked by the main thread: the signal follows
    the *thread* that forked, which for the main thread lives as long as the process. Nothing the job can observe
    changes while its main process lives. Best effort: elsewhere it does nothing."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def quiet_peer_gone() -> None:
    """In a worker: no traceback when the main process hangs up in the middle of taking a batch's file descriptor.

    Why: a Ctrl-C (or SIGTERM) that lands while the main process is receiving a batch by file descriptor
    (``rebuild_storage_fd``) cuts the handshake; the worker's multiprocessing resource-sharer thread then prints an
    EOFError/ConnectionResetError traceback through ``sys.excepthook`` — noise about a peer that is stopping on
    purpose, printed under the profiler's one clear line. Only that thread's peer-gone errors are silenced; every
    other exception reaches the hook the worker had."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        from multiprocessing import AuthenticationError

        if issubclass(kind, (EOFError, ConnectionError, AuthenticationError)) and any(
                f.f_code.co_name == "_serve" and f.f_code.co_filename.endswith("resource_sharer.py")
                for f, _ in traceback.walk_tb(tb)):
            return
        previous(kind, exc, tb)

    sys.excepthook = hook


def report_skipped(index: int, path: str, reason: str) -> None:
    """Called by a dataset (the built-in one) for a sample it could not load; listed in the record's skipped files."""
    if _current is not None:
        _current.skipped.append((int(index), str(path), str(reason)))


def _index_of(key: Any) -> int:
    try:
        return int(key)
    except (TypeError, ValueError):
        return -1


class _MapProxy:
    """Stands in for the dataset inside the fetcher only; times each ``__getitem__``."""

    def __init__(self, dataset: Any):
        self._dataset = dataset

    def __getitem__(self, key: Any) -> Any:
        rec = _current
        if rec is None:
            return self._dataset[key]
        return rec.call(self._dataset.__getitem__, key, _index_of(key), 1)

    def __len__(self) -> int:
        return len(self._dataset)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dataset, name)


class _MapProxyItems(_MapProxy):
    """The same for datasets with ``__getitems__`` (one row per call, ``items`` = how many indices it got)."""

    def __getitems__(self, keys: Any) -> Any:
        rec = _current
        if rec is None:
            return self._dataset.__getitems__(keys)
        return rec.call(self._dataset.__getitems__, keys, -1, len(keys))


class _TimedIterator:
    """An IterableDataset's iterator, each ``next()`` timed as one dataset call."""

    def __init__(self, it: Iterator):
        self._it = it

    def __iter__(self) -> "_TimedIterator":
        return self

    def __next__(self) -> Any:
        rec = _current
        if rec is None:
            return next(self._it)
        n0 = len(rec.rows)
        try:
            return rec.call(_next, self._it, -1, 1)
        except StopIteration:
            # The iterator's end is not a sample: drop its row (its time becomes the worker's gap, i.e. other).
            del rec.rows[n0:], rec.stages[n0:]
            raise


def _next(it: Iterator) -> Any:
    return next(it)


class _TimedCollate:
    def __init__(self, fn: Any):
        self.fn = fn
        self.last: tuple[int, int, int, int] = (0, 0, 0, 0)

    def __call__(self, data: Any) -> Any:
        s0 = clocks.snapshot()
        try:
            return self.fn(data)
        finally:
            s1 = clocks.snapshot(end=True)
            self.last = (s0[0], s1[0], s1[1] - s0[1], s1[2] - s0[2])


def _self_io() -> tuple[int, int]:
    try:
        with open("/proc/self/io", "rb") as f:
            lines = f.read().split(b"\n")
        return int(lines[0][7:]), int(lines[4][12:])
    except (OSError, ValueError, IndexError):
        return -1, -1


def _share(total: int, weights: np.ndarray) -> np.ndarray:
    s = weights.sum()
    w = weights / s if s > 0 else np.full(len(weights), 1.0 / len(weights))
    return np.round(total * w).astype(np.int64)


def share_batch_counters(rows: np.ndarray, runq: int, rchar: int, read_bytes: int) -> None:
    """Give each dataset call its share of the batch's run-queue wait (by its off-CPU time: a thread waiting for a
    core is off it), of the bytes it asked to read (by items) and of the bytes from the block device (by its blocked
    time, what is off-CPU and not waiting for a core: a thread blocked on a disk read is off it). Reading /proc's
    schedstat and io around every call would cost ~15 µs a call; around the batch it costs that once."""
    if not rows.size:
        return
    off = np.maximum(rows[:, 1] - rows[:, 0] - rows[:, 2], 0).astype(np.float64)
    if runq > 0:
        rows[:, 3] = np.minimum(_share(runq, off), off)
    if rchar > 0:
        rows[:, 4] = _share(rchar, rows[:, 7].astype(np.float64))
    if read_bytes > 0:
        rows[:, 5] = _share(read_bytes, np.maximum(off - rows[:, 3], 0))


def instrument_fetcher(fetcher: Any, worker_id: int) -> Any:
    """Wrap a torch fetcher (see torch_hooks.py for how it is reached) so ``fetch`` returns Instrumented batches."""
    if hasattr(fetcher, "dataset_iter"):  # IterableDataset
        fetcher.dataset_iter = _TimedIterator(fetcher.dataset_iter)
    else:
        has_items = bool(getattr(fetcher.dataset, "__getitems__", None))
        fetcher.dataset = (_MapProxyItems if has_items else _MapProxy)(fetcher.dataset)
    collate = _TimedCollate(fetcher.collate_fn)
    fetcher.collate_fn = collate
    inner_fetch = fetcher.fetch
    pid = os.getpid()

    def fetch(possibly_batched_index: Any) -> Any:
        global _current
        b0 = clocks.snapshot()
        rec = _current = _Recorder()
        collate.last = (0, 0, 0, 0)
        try:
            batch = inner_fetch(possibly_batched_index)
        finally:
            _current = None
        b1 = clocks.snapshot(end=True)
        rows = np.array(rec.rows, dtype=np.int64).reshape(-1, len(ROW_COLUMNS))
        share_batch_counters(rows, runq=b1[2] - b0[2] - collate.last[3], rchar=b1[3] - b0[3],
                             read_bytes=b1[4] - b0[4])
        stages: dict[str, np.ndarray] = {}
        for i, named in enumerate(rec.stages):
            for name, ns in named.items():
                if name not in stages:
                    stages[name] = np.zeros(len(rec.rows), dtype=np.int64)
                stages[name][i] = ns
        meta = BatchMeta(worker_id, pid, rows, stages, collate.last, _self_io(), rec.skipped, opened=rec.opened)
        return Instrumented(batch, meta)

    fetcher.fetch = fetch
    return fetcher
