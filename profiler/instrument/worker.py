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
from the block device, and the named sub-stages' self time (substages.py).

The per-call path is the hot path (every sample of every batch): two wall-clock reads and five ints appended to a
flat list, nothing else (~0.2 µs; the written-out map fetch, :func:`inline_map_fetch`: one read and one int, ~0.1
µs; no dict, no thread-local lookup, no /proc read, no object the garbage collector tracks). The thread's on-CPU
clock (a system call, ~0.25-0.5 µs, more than the rest of the call's path) is read only at the end of a call that
took CALL_CPU_FROM_NS or longer; a shorter call is taken as on a core, and what its batch's clock says it was not is
shared out when the rows are built (:func:`call_cpu`). Run-queue wait and bytes read are read once per batch and
shared out over its calls, and the batch's columns (the ``rows`` array, the stage columns) are built from the raw
lists only when the main process reads them after the window, never on the way. The instrumentation's own time per
fetch is kept in ``BatchMeta.own_ns`` (measured around its own per-batch work, plus the calls times the per-call
cost calibrated once per process, :func:`call_cost_ns`, and the on-CPU clock reads times their calibrated cost), so
it can be reported and, where the fetch ran inside the main thread's wait (``num_workers=0``), taken out of the wait
before attribution.
"""
from __future__ import annotations

import os
import struct
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from . import clocks, substages
from .lean_check import StretchCheck

# Columns of BatchMeta.rows (int64), one row per dataset call.
ROW_COLUMNS = ("start", "end", "cpu", "runq", "rchar", "read_bytes", "index", "items", "pixels")
# BatchMeta.calls is flat: these ints per dataset call (one flat sequence, where a tuple per call was one more
# tracked object until the next collection: 32 a batch made the profiled loop collect ten times as often as the plain
# one), packed as int64 bytes (pack_calls says why). ``cpu`` is the thread's on-CPU clock at the call's end, or NO_CPU.
CALL_FIELDS = ("start", "end", "cpu", "index", "items")
NO_CPU = -1
# A dataset call this long or longer reads the thread's on-CPU clock at its end; a shorter one does not. Why 10 µs:
# time off a core comes in pieces far longer than that (a preemption is a time slice, ~ms; a disk read, a page fault
# from storage or a wait for the GIL held by another thread is tens of µs or more), so a shorter call ran on a core,
# and the clock would cost 3-5 % of a 10 µs call but a quarter of the profiler's whole per-call path for the ~2 µs
# call of an in-memory dataset. The batch's clock is read at its ends all the same, so whatever off-core time hid in
# short calls is still counted (call_cpu shares it out over them), never lost.
CALL_CPU_FROM_NS = 10_000


# BatchMeta.marks: every per-batch int but the calls', in one tuple (see BatchMeta for why), in this order.
MARKS = ("start_wall", "start_cpu",  # when the fetch began: wall, the thread's on-CPU clock (the first calls count
         # from it)
         "end_wall", "end_cpu",  # after the last call (the collate's start, else the fetch's end): wall, on-CPU clock
         "runq", "rchar", "read_bytes",  # the fetch thread's run-queue ns, rchar, read_bytes over the whole fetch
         "collate_start", "collate_end", "collate_cpu",  # the collate's wall start, end and on-CPU ns (0s: none)
         "io_rchar", "io_read_bytes",  # /proc/self/io of the worker after the batch, cumulative (-1: unknown or not
         # read: the main process, NOT_READ_IO)
         "gap_start", "gap_end", "gap_cpu", "gap_runq")  # the worker between its previous fetch and this one: wall
# start, wall end, on-CPU ns, run-queue ns (zeros: not known: its first fetch, or a batch made in the main process)
_M = {name: i for i, name in enumerate(MARKS)}
NO_GAP = (0, 0, 0, 0)


@dataclass(slots=True)
class BatchMeta:
    """What one worker did for one batch, as recorded (flat lists and tuples: cheap to build and to pickle).

    The derived views (``rows``, ``stages``, ``collate``, ``items``) are computed on first use in the main process.

    Why slots and one tuple of ints (``marks``) rather than a field per figure: every object a batch leaves behind
    that the garbage collector tracks counts towards its next collection, and a BatchMeta is kept for every measured
    batch. With a ``__dict__`` and six small tuples per batch, a light ``num_workers=0`` loop collected five times as
    often as the plain loop, each young collection walking every kept record (~0.4 µs per BatchMeta): ~10 µs per
    batch, the largest part of the profiler's cost there. Now a batch keeps two tracked objects: this and ``marks``,
    which the collector untracks the first time it sees it (it holds only ints); ``calls`` is bytes (pack_calls)."""
    worker_id: int  # -1: the main process (num_workers = 0)
    pid: int
    calls: bytes | Sequence[Any]  # flat, CALL_FIELDS per dataset call: start, end, thread CPU clock at its end
    # (NO_CPU: not read, a call shorter than CALL_CPU_FROM_NS), index, items; the compact form (below): each call's
    # end, then each call's key. Packed as int64 bytes (pack_calls; call_values reads either form)
    marks: tuple[int, ...]  # MARKS, in that order
    stage_events: Sequence[tuple[int, str, int]] = ()  # (call row, stage, self ns)
    pixel_events: Sequence[tuple[int, int]] = ()  # (call row, decoded pixels)
    skipped: list[tuple[int, str, str]] | tuple[()] = ()  # (index, path, reason) reported by the dataset
    sent_ns: int = 0  # when the worker's queue thread began pickling it (0: never pickled, e.g. num_workers = 0)
    opened: dict[str, int] = field(default_factory=dict)  # folder -> files opened for reading during this batch
    n_items: int = 0  # samples the dataset calls returned (one per call, or len(keys) per __getitems__)
    own_ns: int = 0  # the instrumentation's own time in this fetch (see the module docstring)
    # The written-out map fetch's compact form (inline_map_fetch): ``calls`` holds each call's end (a call starts
    # where the previous one ended, the first at the fetch's start) and then each call's key (its index), and
    # ``long_clocks`` (row, on-CPU clock) the calls that read the clock. False: ``calls`` is CALL_FIELDS-wide.
    compact: bool = False
    long_clocks: Sequence[int] = ()
    # The fetch thread's /proc/thread-self/io at the fetch's start and end, unparsed, where ``marks`` does not hold
    # its rchar yet (a batch fetched in the main process: its rchar is parsed when read, after the window); b"":
    # parsed.
    thread_io_start: bytes = b""
    thread_io_end: bytes = b""
    _derived_views: tuple[np.ndarray, int, int] | None = field(default=None, repr=False, compare=False)
    _stage_views: dict[str, np.ndarray] | None = field(default=None, repr=False, compare=False)

    @property
    def cpu_start(self) -> tuple[int, int]:
        """(wall, thread CPU clock) when the fetch began."""
        return self.marks[0], self.marks[1]

    @property
    def cpu_end(self) -> tuple[int, int]:
        """(wall, thread CPU clock) after the last call: the collate's start, else the fetch's end."""
        return self.marks[2], self.marks[3]

    @property
    def counters(self) -> tuple[int, int, int]:
        """The fetch thread's run-queue ns, rchar and read_bytes over the whole fetch."""
        if self.thread_io_end:  # marks' rchar holds the profiler's own reads in between, to take out
            return (self.marks[4], clocks.parse_rchar(self.thread_io_end) - clocks.parse_rchar(self.thread_io_start)
                    - self.marks[5], self.marks[6])
        return self.marks[4], self.marks[5], self.marks[6]

    @property
    def collate_span(self) -> tuple[int, int, int]:
        """Start, end and on-CPU ns of the collate (0s: none)."""
        return self.marks[7], self.marks[8], self.marks[9]

    @property
    def io(self) -> tuple[int, int]:
        """/proc/self/io of the worker after the batch: (rchar, read_bytes), cumulative; -1: unknown or not read."""
        return self.marks[10], self.marks[11]

    @property
    def gap(self) -> tuple[int, int, int, int]:
        """The worker between its previous fetch and this one: wall start, wall end, on-CPU ns, run-queue ns."""
        return self.marks[12], self.marks[13], self.marks[14], self.marks[15]

    @property
    def items(self) -> int:
        return self.n_items

    @property
    def _derived(self) -> tuple[np.ndarray, int, int]:
        if self._derived_views is None:
            self._derived_views = self._derive()
        return self._derived_views

    def _derive(self) -> tuple[np.ndarray, int, int]:
        """(rows, the collate's run-queue share, the collate's start): the fetch cut into its calls and its collate
        end to end (join_calls), its run-queue wait shared over them by their off-CPU time (a thread waiting for a
        core is off it), then rchar by items and read_bytes by blocked time (share_batch_counters)."""
        n = self.n_calls
        rows = np.zeros((n, len(ROW_COLUMNS)), dtype=np.int64)
        c0, c1, ccpu = self.collate_span
        if n:
            clock = self._fill_calls(rows)
            c0 = join_calls(rows, self.cpu_start[0], c0)
            rows[:, 2] = call_cpu(rows[:, 0], rows[:, 1], clock, self.cpu_start, self.cpu_end)
            for r, px in self.pixel_events:
                if 0 <= r < n:
                    rows[r, 8] += px
        runq, rchar, read_bytes = self.counters
        collate_off = max(0, c1 - c0 - ccpu)
        collate_runq = 0
        if runq > 0:
            off = np.maximum(rows[:, 1] - rows[:, 0] - rows[:, 2], 0).sum() if n else 0
            collate_runq = min(collate_off, int(round(runq * collate_off / (off + collate_off)))) \
                if off + collate_off > 0 else 0
        share_batch_counters(rows, runq=runq - collate_runq, rchar=rchar, read_bytes=read_bytes)
        return rows, collate_runq, c0

    @property
    def n_calls(self) -> int:
        c = self.calls
        return (len(c) // 8 if c.__class__ is bytes else len(c)) // (2 if self.compact else len(CALL_FIELDS))

    def _fill_calls(self, rows: np.ndarray) -> np.ndarray:
        """Start, end, index and items of each call into ``rows``, from either recorded form; returns the on-CPU
        clock read at each call's end (NO_CPU where not read)."""
        n = rows.shape[0]
        packed = self.calls.__class__ is bytes  # every value an int64 (pack_calls)
        calls = call_values(self.calls)
        if self.compact:
            rows[:, 1] = calls[:n]
            rows[0, 0] = self.cpu_start[0]
            rows[1:, 0] = rows[:-1, 1]
            rows[:, 6] = calls[n:2 * n] if packed else \
                [k if k.__class__ is int and -_I64 < k < _I64 else _index_of(k) for k in calls[n:2 * n]]
            rows[:, 7] = 1
            clock = np.full(n, NO_CPU, dtype=np.int64)
            for r, c in zip(self.long_clocks[0::2], self.long_clocks[1::2]):
                if 0 <= r < n:
                    clock[r] = c
            return clock
        w = len(CALL_FIELDS)
        flat = calls[:n * w]
        # Column by column: an index is any int the dataset was called with (a hash id beyond int64 is -1).
        rows[:, 6] = flat[3::w] if packed else [k if -_I64 < k < _I64 else -1 for k in flat[3::w]]
        for col, j in ((0, 0), (1, 1), (7, 4)):
            rows[:, col] = flat[j::w]
        return np.array(flat[2::w], dtype=np.int64)

    @property
    def rows(self) -> np.ndarray:
        """int64 (n, len(ROW_COLUMNS)), one row per dataset call."""
        return self._derived[0]

    @property
    def collate(self) -> tuple[int, int, int, int]:
        """start (joined to the last call's end), end, on-CPU ns, run-queue ns of the collate."""
        _, c1, ccpu = self.collate_span
        _, crunq, c0 = self._derived
        return c0, c1, ccpu, crunq

    @property
    def stages(self) -> dict[str, np.ndarray]:
        """stage -> int64 self ns per row (rows where it occurred; zero elsewhere)."""
        if self._stage_views is None:
            self._stage_views = self._stages()
        return self._stage_views

    def _stages(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        n = self.n_calls
        for r, name, ns in self.stage_events:
            if not 0 <= r < n:  # outside a call, or in an iterator's end (no row)
                continue
            if name not in out:
                out[name] = np.zeros(n, dtype=np.int64)
            out[name][r] += ns
        return out

    def __getstate__(self) -> tuple[Any, ...]:
        # The derived views are rebuilt where they are read: never pickled along.
        return tuple(getattr(self, name) for name in _PICKLED)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(_PICKLED, state):
            setattr(self, name, value)
        self._derived_views = self._stage_views = None


_PICKLED = tuple(f for f in BatchMeta.__dataclass_fields__ if f not in ("_derived_views", "_stage_views"))


class Instrumented:
    """The user's batch plus its BatchMeta, from ``fetch`` to the main process's ``__next__`` (which unwraps it)."""

    __slots__ = ("batch", "meta")

    def __init__(self, batch: Any, meta: BatchMeta):
        self.batch, self.meta = batch, meta

    def pin_memory(self, device: Any = None) -> "Instrumented":
        from .torch_hooks import pin_batch  # torch's private pinning function lives behind torch_hooks

        return Instrumented(pin_batch(self.batch, device), self.meta)

    def __reduce__(self) -> tuple:
        # Pickling happens in the worker's queue-feeder thread: this instant is when the batch started on its way.
        self.meta.sent_ns = time.perf_counter_ns()
        return (Instrumented, (self.batch, self.meta))


class _Recorder:
    """Raw rows of the batch being fetched, in this thread: CALL_FIELDS ints per dataset call, appended by the
    proxies, and how many of those calls read the on-CPU clock (its cost is counted in the fetch's own time)."""

    __slots__ = ("calls", "skipped", "opened", "cpu_reads", "long_clocks")

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.long_clocks: list[int] = []  # the written-out fetch's (row, clock) pairs (BatchMeta.long_clocks)
        self.skipped: list[tuple[int, str, str]] = []
        self.opened: dict[str, int] = {}
        self.cpu_reads = 0


_current: _Recorder | None = None
# (pid, wall, on-CPU clock, run-queue ns) at this worker's last fetch's end: the start of the time between fetches
# (torch's worker loop waiting for the next index, or waiting for a core to run it). The pid tells a forked worker
# from the parent whose value it inherited.
_previous_end: tuple[int, int, int, int] = (0, 0, 0, 0)
# A batch that opened no file shares this one (never written to): one dict less for the garbage collector per batch.
_NO_FOLDERS: dict[str, int] = {}
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


_I64 = 1 << 63  # dataset keys outside int64 (hash ids) are recorded as index -1


def _index_of(key: Any) -> int:
    try:
        k = int(key)
    except (TypeError, ValueError):
        return -1
    return k if -_I64 < k < _I64 else -1


_perf = time.perf_counter_ns
_cpu = time.thread_time_ns
_PACKERS: dict[int, struct.Struct] = {}
_PACK_LEAN = struct.Struct("<5q")  # a lean fetch's one row (inline_map_fetch)
_PACKERS_MAX = 64  # batch lengths kept (a short last batch, a variable batch sampler); others are built per use


def pack_calls(values: list[Any]) -> bytes | tuple[Any, ...]:
    """A batch's flat call ints as little-endian int64 bytes; a tuple where one is no int64 (a dataset key that is a
    string or beyond int64). Why bytes: the garbage collector never looks into them. A tuple of the batch's ints is
    untracked only once a young collection has looked at each of its items, and each is an int object of its own
    somewhere in memory: on a light ``num_workers=0`` loop that first look was two thirds of the young collections'
    time (~2 µs per kept batch of 32, with the items out of cache), where packing costs ~0.8 µs. And 8 bytes an int
    instead of a 32-byte object and an 8-byte slot."""
    n = len(values)
    packer = _PACKERS.get(n)
    if packer is None:
        packer = struct.Struct(f"<{n}q")
        if len(_PACKERS) < _PACKERS_MAX:
            _PACKERS[n] = packer
    try:
        return packer.pack(*values)
    except struct.error:
        return tuple(values)


def call_values(calls: bytes | Sequence[Any]) -> Sequence[Any]:
    """BatchMeta.calls as a sequence: an int64 view of packed bytes (pack_calls), else the sequence itself."""
    if isinstance(calls, bytes):
        return np.frombuffer(calls, dtype="<i8")  # type: ignore[return-value]  # an ndarray reads as a Sequence
    return calls


class _MapProxy:
    """Stands in for the dataset inside the fetcher only; times each ``__getitem__``.

    The hot path, written out in each proxy rather than shared through a helper (one Python frame is ~0.1 µs of a
    ~0.3 µs budget): the wall clock at both ends, and the thread's on-CPU clock at the end only of a call that took
    CALL_CPU_FROM_NS or longer (see there; call_cpu turns the readings into each call's on-CPU time).
    """

    # torch's fetcher asks ``hasattr(dataset, "__getitems__") and dataset.__getitems__``: None answers both without
    # the AttributeError that __getattr__ would raise from the user's dataset on every batch (~1 µs). _MapProxyItems
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
                rec.calls += (t0, t1, NO_CPU, key if key.__class__ is int else _index_of(key), 1)
            else:
                rec.calls += (t0, t1, _cpu(), key if key.__class__ is int else _index_of(key), 1)
                rec.cpu_reads += 1

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
        t0 = _perf()
        try:
            return self._dataset.__getitems__(keys)
        finally:
            t1 = _perf()  # a call for a whole batch: always long enough to read the on-CPU clock
            rec.calls += (t0, t1, _cpu(), -1, len(keys))
            rec.cpu_reads += 1


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


class _TimedCollate:
    """The fetcher's collate_fn, timed: ``last`` = (wall start, wall end, on-CPU ns, on-CPU clock at its start)."""

    def __init__(self, fn: Any):
        self.fn = fn
        self.last: tuple[int, int, int, int] = NO_COLLATE

    def __call__(self, data: Any) -> Any:
        t0 = _perf()
        c0 = _cpu()
        try:
            return self.fn(data)
        finally:
            c1 = _cpu()
            self.last = (t0, _perf(), c1 - c0, c0)


NO_COLLATE = (0, 0, 0, 0)
# BatchMeta.io of a batch fetched in the main process (num_workers=0): /proc/self/io is not read there. Why: that
# process also reads libraries, checkpoints and /proc (the sampler), so its counters are not the dataset's and
# analysis never uses them (analysis/io.py leaves worker -1 out), while the read cost a loaded machine several µs
# per batch; the fetch's own bytes come from its thread's counters (rchar, read_bytes of its calls) as before.
NOT_READ_IO = (-1, -1)


def join_calls(rows: np.ndarray, fetch_start: int, collate_start: int) -> int:
    """Start each dataset call where the fetcher's previous step ended (the fetch's start, the previous call's end),
    in place, and return the collate's start moved back to the last call's end the same way (0 stays 0: no collate).

    Why: the fetcher's own steps between calls (torch's loop, the list append, the profiler's clock reads) are
    microseconds, but that is where a worker that used up its time slice is preempted: reading the thread's on-CPU
    clock updates the scheduler's accounting, and the return from that system call is where a thread with no slice
    left gives up its core. On a loaded machine those waits for a core (ms each) fell between the timed calls, so no
    span covered them and the batch's run-queue time had nowhere to go: "other" instead of "cpu". Joined end to end,
    the calls and the collate cover the whole fetch, and the step's wait for a core lands in the call it delayed.
    Only where the order is the expected one (a start at or after the previous end)."""
    n = rows.shape[0]
    if n > 1:
        prev_end = rows[:-1, 1]
        rows[1:, 0] = np.where((prev_end <= rows[1:, 0]) & (prev_end > 0), prev_end, rows[1:, 0])
    if n and 0 < fetch_start <= rows[0, 0]:
        rows[0, 0] = fetch_start
    last_end = int(rows[-1, 1]) if n else 0
    return last_end if collate_start and 0 < last_end <= collate_start else collate_start


def call_cpu(start: np.ndarray, end: np.ndarray, clock: np.ndarray, first: tuple[int, int],
             last: tuple[int, int]) -> np.ndarray:
    """Each call's on-CPU ns from the thread's on-CPU clock, read at the fetch's ends and at the end of the calls
    that took CALL_CPU_FROM_NS or longer (``clock``; NO_CPU elsewhere).

    The readings cut the fetch into segments, each ending at a reading: its off-CPU time is its wall time less the
    clock's advance. A short call runs on a core (CALL_CPU_FROM_NS says why), so a segment's off-CPU time belongs to
    its long call, the one whose end closed it, up to that call's wall time; what is left (or all of it, in the
    segment after the last long call) is shared over the segment's short calls by their wall time. The sum over a
    batch's calls is therefore what its clock says, up to the fetcher's own steps between calls (taken as on a core).
    ``first`` and ``last`` are (wall, clock) at the fetch's start and after its last call."""
    wall = np.maximum(end - start, 0)
    cpu = wall.copy()
    n = len(wall)
    cuts = [int(k) for k in np.flatnonzero(clock >= 0)] + [n]  # n: the segment after the last long call
    prev_w, prev_c, lo = first[0], first[1], 0
    for k in cuts:
        if k < n:
            w, c = int(end[k]), int(clock[k])
        else:
            w, c = last
        off = (w - prev_w) - (c - prev_c)
        if k < n and off > 0:
            take = min(off, int(wall[k]))
            cpu[k] = wall[k] - take
            off -= take
        if off > 0 and k > lo:
            short = wall[lo:k]
            total = int(short.sum())
            if total > 0:
                cpu[lo:k] = short - np.minimum(short, np.round(short * (min(off, total) / total)).astype(np.int64))
        prev_w, prev_c, lo = w, c, k + 1
    return cpu


def _share(total: int, weights: np.ndarray) -> np.ndarray:
    s = weights.sum()
    w = weights / s if s > 0 else np.full(len(weights), 1.0 / len(weights))
    return np.round(total * w).astype(np.int64)


def share_batch_counters(rows: np.ndarray, runq: int, rchar: int, read_bytes: int) -> None:
    """Give each dataset call its share of the batch's run-queue wait (by its off-CPU time: a thread waiting for a
    core is off it), of the bytes it asked to read (by items) and of the bytes from the block device (by its blocked
    time, what is off-CPU and not waiting for a core: a thread blocked on a disk read is off it). Reading /proc's
    schedstat and io around every call would cost ~2.5 µs a call (two preads and their parsing, more than the rest of
    the per-call path); around the batch it costs that once."""
    if not rows.size:
        return
    off = np.maximum(rows[:, 1] - rows[:, 0] - rows[:, 2], 0).astype(np.float64)
    if runq > 0:
        rows[:, 3] = np.minimum(_share(runq, off), off)
    if rchar > 0:
        rows[:, 4] = _share(rchar, rows[:, 7].astype(np.float64))
    if read_bytes > 0:
        rows[:, 5] = _share(read_bytes, np.maximum(off - rows[:, 3], 0))


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
        proxy = _MapProxy(data)
        saved = _current
        proxied = direct = clocked = 1 << 62
        try:
            for _ in range(CALIBRATION_REPEATS):
                _current = _Recorder()
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


def _begin(width: int, counters: bool = True) -> tuple[_Recorder, Any, clocks.Counters | None, int]:
    """A fetch's start in this thread: the batch's counters (None: not read, a lean fetch), its recorder and sub-stage
    lists (the caller reads the fetch's first clocks right after)."""
    global _current
    if substages._waiting and len(sys.modules) != substages._modules_seen:
        substages.wrap_imported()  # a library the job imported since the last batch: named from this one
    b0 = clocks.fetch_start() if counters else None
    rec = _current = _Recorder()
    return rec, substages.begin_batch(rec.calls, width), b0, 0


def _abandon() -> None:
    """A fetch that raised: no recorder or sub-stage list is left open for the next one."""
    global _current
    _current = None
    substages.end_batch()


def _envelope(batch: Any, rec: _Recorder, smp: Any, b0: clocks.Counters | None, w_in: int, c_in: int,
              last: tuple[int, int, int, int], w_out: int, c_out: int, worker_id: int, pid: int,
              n_items: int | None, own_ns: int, compact: bool = False,
              entry: tuple[int, int] | None = None, probe: bool = False) -> Instrumented:
    """The fetch's end: the batch's counters, its BatchMeta and the envelope. ``(w_in, c_in)`` and ``(w_out, c_out)``
    are the wall and on-CPU clocks around the user's fetch, ``last`` the collate's (NO_COLLATE: none); ``own_ns`` is
    the fetch's own time so far, and this function's own is added (measured up to the envelope).

    ``entry``: the fetch read its on-CPU clock only at its entry, ``(wall, cpu)``, and its inner on-CPU clocks
    (``c_in``, ``c_out``, the collate's) are derived here from the wall clock and one on-CPU read now
    (:func:`_derive_cpu` says how and why).

    ``b0`` None: a lean fetch (LEAN_STRETCH), which read no counters at its start and reads none at its end either
    unless its on-CPU clock, read now, shows it left its core; ``probe``: the fetch ends a lean stretch, and reads
    rchar (clocks.fetch_end)."""
    global _current, _previous_end
    _current = None
    substages.end_batch()
    if b0 is None:
        assert entry is not None  # a lean fetch times its calls by their ends only
        w_f = _perf()
        c_f = _cpu()
        off = (w_f - entry[0]) - (c_f - entry[1])
        if off < CLOSE_TIMING_FROM_OFF_NS:  # on its core throughout: no wait for a core, no blocking read
            b0 = b1 = _NO_COUNTERS
        else:  # it left its core: its counters since the last fetch that read them, its run-queue wait at most that
            s0 = clocks.since_last_fetch_end()
            b1 = clocks.fetch_end(probe=True)
            b0 = (b1[0] - min(b1[0] - s0[0], off), s0[1], s0[2], s0[3], s0[4])
        c_in, c_out, last = _derive_cpu(entry, w_in, w_out, last, w_f, c_f)
    else:
        b1 = clocks.fetch_end(probe)
        if entry is not None:
            w_f = _perf()
            # No context switch since the fetch's start (getrusage counts them): it stayed on its core, so its on-CPU
            # clock moved as the wall clock did, and reading it would only cost a system call.
            c_f = entry[1] + (w_f - entry[0]) if b1[4] == b0[4] else _cpu()
            c_in, c_out, last = _derive_cpu(entry, w_in, w_out, last, w_f, c_f)
    calls = pack_calls(rec.calls)  # bytes: nothing for the garbage collector to walk (BatchMeta says why it matters)
    gap = NO_GAP
    if worker_id >= 0:  # a worker's time between fetches; the main process's is the user's loop (not ours to split)
        io = clocks.process_io()
        p = _previous_end
        if p[0] == pid and 0 < p[1] <= w_in:
            gap = (p[1], w_in, max(0, c_in - p[2]), max(0, b0[0] - p[3]))
        _previous_end = (pid, w_out, c_out, b1[0])
        rchar = clocks.parse_rchar(b1[2]) - clocks.parse_rchar(b0[2]) - (b1[3] - b0[3])
        io_start = io_end = b""
    else:  # the main thread: its rchar is parsed after the window (BatchMeta.counters), less its own reads (here)
        io = NOT_READ_IO
        rchar = b1[3] - b0[3]
        io_start, io_end = b0[2], b1[2]
    meta = BatchMeta(worker_id, pid, calls,
                     (w_in, c_in, last[0] or w_out, last[3] if last[0] else c_out,
                      b1[0] - b0[0], rchar, b1[1] - b0[1], last[0], last[1], last[2], io[0], io[1], *gap),
                     smp.events or (), smp.pixels or (), rec.skipped or (),
                     opened=rec.opened or _NO_FOLDERS,
                     n_items=len(rec.calls) // len(CALL_FIELDS) if n_items is None else n_items,
                     compact=compact, long_clocks=rec.long_clocks or (), thread_io_start=io_start,
                     thread_io_end=io_end)
    if entry is not None:  # no on-CPU clock was read inside the user's code; this tail by the wall clock (see above)
        meta.own_ns = own_ns + (_perf() - w_out)
        return Instrumented(batch, meta)
    clock_reads = rec.cpu_reads + len(rec.long_clocks) // 2 + 2  # the proxies' long calls, the written-out fetch's
    meta.own_ns = own_ns + clock_reads * clock_cost_ns() + (_cpu() - c_out)
    return Instrumented(batch, meta)


def _reuse_lean(rec: _Recorder, smp: substages.SampleStages, drop: bool = False) -> None:
    """A lean fetch's recorder and sub-stage lists, ready for the next one: emptied, and those a BatchMeta now holds
    replaced by new ones (``drop``: a fetch that raised, whose rows are dropped, as torch drops the batch)."""
    rec.calls.clear()
    smp.stack.clear()
    if drop:
        smp.events.clear()
        smp.pixels.clear()
        rec.skipped.clear()
        rec.opened.clear()
        return
    if smp.events:
        smp.events = []
    if smp.pixels:
        smp.pixels = []
    if rec.skipped:
        rec.skipped = []
    if rec.opened:
        rec.opened = {}


# The counters of a lean fetch that stayed on its core (see _envelope): no wait for a core, nothing read from the
# block device, and rchar unread (an empty /proc reading: BatchMeta.counters then takes the marks' zeros).
_NO_COUNTERS: clocks.Counters = (0, 0, b"", 0, 0)


# LEAN_OUT: a lean fetch that stayed on its core and recorded nothing but its clocks (no sub-stage, no skipped sample,
# no file opened) returns the user's batch itself, not an envelope, and leaves these ints in its fetch's ``lean_out``
# holder, a one-item list (the session finds it through torch_hooks.lean_out_of and takes it when the batch arrives):
# (fetch entry wall, its on-CPU clock, the calls' start, their end (the collate's start), the collate's end, samples the
# calls returned, the on-CPU clock at the collate's end, the fetch's own ns). lean_meta makes them the BatchMeta the
# envelope would have carried, when the record is built. The entry's wall clock tells a holder's value from a stale one
# (a lean fetch of an earlier step starts before this step's wait).
LeanOut = tuple[int, int, int, int, int, int, int, int]


def lean_meta(out: LeanOut, pid: int) -> BatchMeta:
    """The BatchMeta of a LEAN_OUT fetch: what the envelope of a lean fetch on its core holds (one row of all its
    calls, index -1; the collate's on-CPU time its wall time; no counters)."""
    w_entry, c_entry, w_in, t0, t1, n, c_out, own_ns = out
    span = t1 - t0
    meta = BatchMeta(-1, pid, _PACK_LEAN.pack(w_in, t0, NO_CPU, -1, n),
                     (w_in, c_entry + (w_in - w_entry), t0, c_out - span, 0, 0, 0, t0, t1, span, -1, -1, 0, 0, 0, 0),
                     opened=_NO_FOLDERS, n_items=n)
    meta.own_ns = own_ns
    return meta


def _derive_cpu(entry: tuple[int, int], w_in: int, w_out: int, last: tuple[int, int, int, int], w_f: int,
                c_f: int) -> tuple[int, int, tuple[int, int, int, int]]:
    """``(c_in, c_out, last)`` of a fetch whose on-CPU clock was read only at its entry and now (``c_f`` at wall
    ``w_f``, after its counters; where getrusage counted no context switch since the fetch's start, ``c_f`` is the
    entry's plus the wall time since, unread): each read is a system call (~0.5 µs on a VM; the wall clock's is
    ~0.05 µs), and four more per batch were a tenth of the profiler's cost on a light ``num_workers=0`` loop. (Time
    the hypervisor took the virtual CPU away is then on-CPU time, as it is to the guest's scheduler.)

    Why that is exact where it is used: between two reads of the on-CPU clock, the time off the core is the wall
    time less the on-CPU time. A fetch whose off-core time in all is under CLOSE_TIMING_FROM_OFF_NS ran on its core
    throughout, so every inner on-CPU interval is its wall interval (to within that). Where it was off its core for
    longer (a disk read, a preemption), that time is given to the dataset's calls, the only part that can block or
    wait: the profiler's own stretches and the collate are taken as on-core. The fetch after such a one reads every
    clock (``closely``), so a job whose calls block keeps its exact split."""
    w_entry, c_entry = entry
    c_in = c_entry + (w_in - w_entry)
    c_out = c_f - (w_f - w_out)
    if last[0]:  # the collate, on its core: its on-CPU ns are its wall ns, and it ends at c_out
        span = last[1] - last[0]
        last = (last[0], last[1], span, c_out - span)
    return c_in, c_out, last


def instrumented_parts(source: Any, iterable: bool, collate_fn: Any, inner_fetch: Callable[[Any], Any],
                       worker_id: int) -> tuple[Any, Any, Callable[[Any], Any]]:
    """The timed stand-ins for a torch fetcher's dataset (or its iterator), ``collate_fn`` and ``fetch``, whose
    ``fetch`` returns Instrumented batches. torch_hooks.py puts them on the fetcher (its attributes are torch's)."""
    timed: Any
    has_items = False
    if iterable:
        timed = _TimedIterator(source)
    else:
        has_items = bool(getattr(source, "__getitems__", None))
        timed = (_MapProxyItems if has_items else _MapProxy)(source)
    collate = _TimedCollate(collate_fn)
    pid = os.getpid()
    per_call = call_cost_ns()
    width = len(CALL_FIELDS)

    def fetch(possibly_batched_index: Any) -> Any:
        c_entry = _cpu()
        rec, smp, b0, _ = _begin(width)
        collate.last = NO_COLLATE
        w_in = _perf()
        c_in = _cpu()
        try:
            batch = inner_fetch(possibly_batched_index)
        except BaseException:
            _abandon()
            raise
        c_out = _cpu()
        w_out = _perf()
        calls = rec.calls
        n = len(calls) // width
        # Its own time, as on-CPU time (a preemption in the middle is the machine's, not ours): what it did before
        # and after the user's fetch (measured) plus each call's and the collate's wrapper (calibrated: the path,
        # and the on-CPU clock where it was read); only the final assignment and return are left out.
        return _envelope(batch, rec, smp, b0, w_in, c_in, collate.last, w_out, c_out, worker_id, pid,
                         sum(calls[4::width]) if has_items else None, (c_in - c_entry) + (n + 1) * per_call)

    return timed, collate, fetch


# A written-out fetch whose calls were off their core for this long or longer in all (a disk read, a wait for a core)
# makes the next fetch time each call closely: the on-CPU clock at the end of each call of CALL_CPU_FROM_NS or more,
# as the proxies do. A fetch that stayed on its core makes the next one record only each call's end. Why: on an
# in-memory dataset with num_workers=0 (calls of ~2 µs, always on a core) the per-call test was a third of the
# profiler's whole per-batch cost there, and told nothing, since the batch's own clock readings show that no call
# was off its core; a job whose calls block or wait keeps showing it, so its batches are timed closely but for the
# first one after a quiet one, whose off-CPU time is shared over its calls by their wall time (call_cpu).
CLOSE_TIMING_FROM_OFF_NS = CALL_CPU_FROM_NS
# On the main thread (``num_workers=0``), while the thread's fetches read nothing (clocks.quiet) and stay on their core,
# all but one of every LEAN_STRETCH fetches are *lean*: they read no counters (getrusage twice and the /proc logic
# around it, ~10 µs of the job's time per light batch with its cold caches, a fifth of the profiler's cost there),
# and no on-CPU clock either while their stretch is checked as a whole (lean_check.py; else only that clock at their
# two ends). A lean fetch that stayed on its core waited for no core and blocked on no read,
# so its counters are zeros, exactly; one that left its core for CLOSE_TIMING_FROM_OFF_NS or more reads them then, from
# the last fetch that read them (its run-queue wait no more than its time off the core; blocks read by the loop
# between fetches since then would be counted as its own, once), and ends the stretch. The stretch's last fetch reads
# every counter and rchar (the quiet probe: bytes the stretch asked for land on it, as in clocks.QUIET_AFTER's
# stretches). Why PROBE_EVERY: one rchar read per stretch keeps that probe's cadence. A lean fetch of a batch also
# makes its calls as torch's list comprehension does, no clock between two calls, and records them as one row of all
# its samples (index -1): a clock read between two calls of an in-memory dataset cost more in the instruction-cache
# misses it caused in torch's indexing code than in itself (docs/attribution.md §4 has the counts); per-call detail
# comes from the stretch's last fetch and from every fetch after one that left its core.
LEAN_STRETCH = clocks.PROBE_EVERY
#: The main thread's check that its lean fetches stayed on their core, once per stretch (lean_check.py says why).
LEAN_CHECK = StretchCheck(CLOSE_TIMING_FROM_OFF_NS, LEAN_STRETCH - 1)
_inline_costs: tuple[int, int] | None = None


def inline_call_costs() -> tuple[int, int]:
    """:func:`call_cost_ns` for the written-out map fetch (:func:`inline_map_fetch`): (ns per call recording only its
    end, ns per call timed closely), calibrated once per process on that very fetch over a list: the slope between a
    batch of 256 indices and an empty one (the per-batch work cancels) less the same indexing as torch's list
    comprehension does it; each loop's minimum of CALIBRATION_REPEATS runs."""
    global _inline_costs, _current, _previous_end
    if _inline_costs is None:
        _inline_costs = (0, 0)  # the fetches built below read it

        class _ListFetcher:
            dataset = list(range(256))
            auto_collation = True

            @staticmethod
            def collate_fn(items: list[Any]) -> list[Any]:
                return items

        data, keys = _ListFetcher.dataset, list(range(256))
        saved = _current, _previous_end
        costs = []
        try:
            for close in (False, True):
                fetch = inline_map_fetch(_ListFetcher, -1, close=close)  # -1: no worker counters touched
                full = empty = plain = 1 << 62
                for _ in range(CALIBRATION_REPEATS):
                    t = _perf()
                    fetch(keys)
                    t1 = _perf()
                    fetch([])
                    t2 = _perf()
                    [data[i] for i in keys]
                    t3 = _perf()
                    full, empty, plain = min(full, t1 - t), min(empty, t2 - t1), min(plain, t3 - t2)
                costs.append(max(0, (full - empty - plain) // len(keys)))
        finally:
            _current, _previous_end = saved
        _inline_costs = (costs[0], costs[1])
    return _inline_costs


def inline_map_fetch(fetcher: Any, worker_id: int, close: bool | None = None) -> Callable[[Any], Any]:
    """torch's ``_MapDatasetFetcher.fetch`` for a dataset without ``__getitems__``, written out with its timing
    inline, returning Instrumented batches (torch_hooks.py uses it only where torch's fetch is the one it copies).

    Why written out: the general path puts a proxy between torch's list comprehension and the dataset, one more
    Python frame entered through a type slot per sample, and a timed collate_fn, one more per batch; on an in-memory
    dataset with ``num_workers=0`` those frames cost more than the timing itself. Here the user's ``__getitem__`` is
    called straight from the loop, with the same indices in the same order, the collate_fn with the same list, and
    the fetcher's ``dataset`` and ``collate_fn`` stay the user's own (read per fetch, as torch reads them).

    Each fetch times its calls closely or records only their ends (CLOSE_TIMING_FROM_OFF_NS says when); ``close``
    fixes one of the two (the calibration's)."""
    pid = os.getpid()
    costs = inline_call_costs()
    timing = [True if close is None else close]  # the next fetch times its calls closely (the first one does)
    # The main thread's lean stretch (LEAN_STRETCH): [lean fetches left in it, 1 while one is under way]
    lean = [0, 0] if worker_id < 0 and close is None else None
    if lean is not None:
        LEAN_CHECK.restart()
    # A lean fetch's recorder and sub-stage lists, made once and reused (_reuse_lean): a fresh pair per batch was nine
    # containers the garbage collector tracks and ~85 bytecodes, for lists a light batch leaves empty.
    lean_rec = _Recorder()
    lean_smp = substages.SampleStages(lean_rec.calls, len(CALL_FIELDS))
    out: list[LeanOut | None] = [None]  # the last lean fetch's LEAN_OUT (fetch.lean_out)

    def lean_batch(possibly_batched_index: Any, w_entry: int, c_entry: int) -> Any:
        """A lean fetch of a batch (LEAN_STRETCH): its calls made as torch makes them, with no clock between them,
        and timed together as one row of all its samples (index -1, as a ``__getitems__`` call's). ``c_entry``
        NO_CPU: its stretch is checked as a whole (lean_check.py), and it reads no on-CPU clock."""
        global _current
        if substages._waiting and len(sys.modules) != substages._modules_seen:
            substages.wrap_imported()  # _begin's, which this fetch does not call
        rec = _current = lean_rec  # no row is recorded before the calls end: stages are row 0
        smp = substages._local.sample = lean_smp
        dataset, collate_fn = fetcher.dataset, fetcher.collate_fn
        w_in = _perf()
        try:
            data = [dataset[idx] for idx in possibly_batched_index]
            t0 = _perf()
            n = len(data)
            rec.calls += (w_in, t0, NO_CPU, -1, n)
            try:
                batch = collate_fn(data)
            finally:
                t1 = _perf()
        except BaseException:
            _abandon()
            _reuse_lean(rec, smp, True)
            raise
        if c_entry == NO_CPU:  # on its core, as its stretch's check will show (or count as unchecked)
            check = LEAN_CHECK
            c_entry = check.c0 + (w_entry - check.w0)  # LEAN_CHECK.cpu_at, written out
            c_out = c_entry + (t1 - w_entry)
        else:
            c_f = _cpu()
            w_f = _perf()
            if (w_f - w_entry) - (c_f - c_entry) >= CLOSE_TIMING_FROM_OFF_NS:
                # It left its core: _envelope reads its counters; the stretch ends, the next fetch times closely.
                timing[0] = True
                lean[0] = lean[1] = 0  # type: ignore[index]
                env = _envelope(batch, rec, smp, None, w_in, NO_CPU, (t0, t1, 0, NO_CPU), t1, NO_CPU, worker_id,
                                pid, n, w_in - w_entry, False, (w_entry, c_entry))
                _reuse_lean(rec, smp)
                return env
            c_out = c_f - (w_f - t1)
        # On its core throughout: no counters, its on-CPU clocks by _derive_cpu's rule, the main thread's marks.
        _current = None
        substages.end_batch()
        rec.calls.clear()
        events, pixels, skipped, opened = smp.events, smp.pixels, rec.skipped, rec.opened
        if not (events or pixels or skipped or opened):
            # Nothing but its clocks: handed over as LEAN_OUT (lean_meta makes its BatchMeta when the record is
            # built), the batch itself returned as torch's fetch returns it. Why: the BatchMeta and envelope built
            # here, and the session's step row built for it, were a third of the profiler's per-batch cost on a
            # light loop, for figures that are the same arithmetic done later (LEAN_OUT says more).
            out[0] = (w_entry, c_entry, w_in, t0, t1, n, c_out, (w_in - w_entry) + (_perf() - t1))
            return batch
        meta = lean_meta((w_entry, c_entry, w_in, t0, t1, n, c_out, 0), pid)
        meta.stage_events, meta.pixel_events, meta.skipped = events or (), pixels or (), skipped or ()
        meta.opened = opened or _NO_FOLDERS
        _reuse_lean(rec, smp)  # handed to the record: the next batch gets its own
        meta.own_ns = (w_in - w_entry) + (_perf() - t1)
        return Instrumented(batch, meta)

    def fetch(possibly_batched_index: Any) -> Any:
        w_entry = _perf()
        if lean is not None and lean[0] > 0:  # a lean fetch: no counters (LEAN_STRETCH says why)
            lean[0] -= 1
            if fetcher.auto_collation:  # and its calls timed together, as one row
                check = LEAN_CHECK
                if check.by_stretch:  # and no clock of its own: its stretch is checked at its end
                    check.lean += 1
                    return lean_batch(possibly_batched_index, w_entry, NO_CPU)
                check.checked += 1
                return lean_batch(possibly_batched_index, w_entry, _cpu())
            c_entry = _cpu()
            rec, smp, b0, _ = _begin(1, False)
        else:
            c_entry = _cpu()
            if lean is not None and LEAN_CHECK.open:  # the lean stretch before this fetch ends here
                LEAN_CHECK.settle(w_entry, c_entry)
            rec, smp, b0, _ = _begin(1)  # compact form (BatchMeta.compact): each call's end, then the keys
        dataset, collate_fn = fetcher.dataset, fetcher.collate_fn
        ends = rec.calls
        last = NO_COLLATE
        keys: Sequence[Any]
        # Closely: every on-CPU clock read, and each long call's; else only the calls' ends and the on-CPU clock at
        # the fetch's two ends (_derive_cpu).
        closely = timing[0]
        w_in = _perf()
        c_in = _cpu() if closely else NO_CPU
        try:
            if fetcher.auto_collation:
                # The indices are copied into the record after the calls (one C call): a batch sampler that refills
                # one list per batch would rewrite a kept reference. Any other iterable (a range, an array, a
                # generator) is made a tuple first, so it is iterated once, as torch iterates it.
                keys = possibly_batched_index if possibly_batched_index.__class__ is list \
                    else tuple(possibly_batched_index)
                data: list[Any] = []
                append_item, append_end = data.append, ends.append
                # One clock read per call: a call starts where the previous one ended (join_calls' rule); one that
                # raises records nothing (the fetch is abandoned, as torch abandons the batch).
                if closely:
                    t0 = w_in
                    for idx in keys:
                        item = dataset[idx]
                        t1 = _perf()
                        if t1 - t0 >= CALL_CPU_FROM_NS:
                            rec.long_clocks += (len(ends), _cpu())
                        append_end(t1)
                        t0 = t1
                        append_item(item)
                else:
                    for idx in keys:
                        append_item(dataset[idx])
                        append_end(_perf())
            else:
                keys = (possibly_batched_index,)
                data = dataset[possibly_batched_index]
                ends.append(_perf())
                if closely:
                    rec.long_clocks += (0, _cpu())
            n = len(ends)
            ends.extend(keys)
            t0 = _perf()
            k0 = _cpu() if closely else NO_CPU
            try:
                batch = collate_fn(data)
            finally:
                k1 = _cpu() if closely else NO_CPU
                last = (t0, _perf(), k1 - k0, k0)
        except BaseException:
            _abandon()  # the user's error, as torch's fetch would raise it; this batch records nothing
            raise
        # The fetch ends with its collate: the collate's end clocks are the fetch's (one on-CPU clock read less).
        if closely:
            env = _envelope(batch, rec, smp, b0, w_in, c_in, last, last[1], k1, worker_id, pid, n,
                            (c_in - c_entry) + (n + 1) * costs[1], True)
        else:
            env = _envelope(batch, rec, smp, b0, w_in, c_in, last, last[1], k1, worker_id, pid, n,
                            (w_in - w_entry) + (n + 1) * costs[0], True, (w_entry, c_entry),
                            lean is not None and b0 is not None and lean[1] == 1)
        if close is None:  # the calls' time off their core decides how the next fetch is timed
            m = env.meta.marks
            timing[0] = (m[2] - m[0]) - (m[3] - m[1]) >= CLOSE_TIMING_FROM_OFF_NS
            if lean is not None and (b0 is not None or timing[0]):  # a stretch ends; may the next one start?
                lean[1] = 1 if not timing[0] and clocks.quiet() else 0
                lean[0] = LEAN_STRETCH - 1 if lean[1] else 0
                if lean[1]:
                    LEAN_CHECK.start(w_entry, c_entry)
        return env

    fetch.lean_out = out  # type: ignore[attr-defined]
    return fetch
