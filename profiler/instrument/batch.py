"""The batch record: what one fetch of one batch leaves behind (:class:`BatchMeta`), the envelope that carries it to
the main process (:class:`Instrumented`), and the lean hand-off that replaces both on the steady-state path
(:class:`LeanOut`).

NOTE [ The batch record is the contract ]
    Everything the hot path measures about a batch reaches the session in one of three forms, and only through the
    names defined here:

    - a :class:`BatchMeta` (in an :class:`Instrumented` envelope), whose per-batch ints sit in one tuple ``marks``
      in the order of MARKS (read them with the ``M_*`` indices or the named properties, never by a bare number),
      and whose per-call ints sit in ``calls``, CALL_FIELDS per call (or the compact form: each call's end, then
      each call's key);
    - a LeanOut (a tuple of ints, read with the ``LO_*`` indices) beside the user's own batch, for a lean fetch on its
      core that recorded nothing but its clocks; :func:`lean_meta` makes it the BatchMeta its envelope would have
      carried;
    - a WorkerLean (a LeanOut and the ``WL_*`` ints) in the envelope, for a worker's lean fetch on its core: read any
      envelope's record with :func:`meta_of`, which makes its BatchMeta.

    Why tuples of ints and bytes rather than a field per figure: every object a kept batch leaves that the garbage
    collector tracks costs each young collection a visit (BatchMeta says how much). The derived views (``rows``,
    ``stages``, ``collate``) are computed from these raw figures after the window, in the main process
    (derived.py has the rules), never on the way.
"""
from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from . import clocks
from .derived import NO_CPU, call_cpu, join_calls, share_batch_counters

# Columns of BatchMeta.rows (int64), one row per dataset call.
ROW_COLUMNS = ("start", "end", "cpu", "runq", "rchar", "read_bytes", "index", "items", "pixels")
# BatchMeta.calls is flat: these ints per dataset call (one flat sequence, where a tuple per call was one more
# tracked object until the next collection: 32 a batch made the profiled loop collect ten times as often as the plain
# one), packed as int64 bytes (pack_calls says why). ``cpu`` is the thread's on-CPU clock at the call's end, or NO_CPU.
CALL_FIELDS = ("start", "end", "cpu", "index", "items")
CALL_START, CALL_END, CALL_CPU, CALL_INDEX, CALL_ITEMS = range(len(CALL_FIELDS))  # their offsets in a call

# BatchMeta.marks: every per-batch int but the calls', in one tuple (see BatchMeta for why), in this order; M_* are
# the indices (one per name of MARKS: read a mark by its name, never by a bare number).
MARKS = ("start_wall", "start_cpu",  # when the fetch began: wall, the thread's on-CPU clock (the first calls count
         # from it)
         "end_wall", "end_cpu",  # after the last call (the collate's start, else the fetch's end): wall, on-CPU clock
         "runq", "rchar", "read_bytes",  # the fetch thread's run-queue ns, rchar, read_bytes over the whole fetch
         "collate_start", "collate_end", "collate_cpu",  # the collate's wall start, end and on-CPU ns (0s: none)
         "io_rchar", "io_read_bytes",  # /proc/self/io of the worker after the batch, cumulative (-1: unknown or not
         # read: the main process, NOT_READ_IO)
         "gap_start", "gap_end", "gap_cpu", "gap_runq")  # the worker between its previous fetch and this one: wall
# start, wall end, on-CPU ns, run-queue ns (zeros: not known: its first fetch, or a batch made in the main process)
(M_START_WALL, M_START_CPU, M_END_WALL, M_END_CPU, M_RUNQ, M_RCHAR, M_READ_BYTES, M_COLLATE_START, M_COLLATE_END,
 M_COLLATE_CPU, M_IO_RCHAR, M_IO_READ_BYTES, M_GAP_START, M_GAP_END, M_GAP_CPU, M_GAP_RUNQ) = range(len(MARKS))
NO_GAP = (0, 0, 0, 0)
# A fetch with no timed collate: its (wall start, wall end, on-CPU ns, on-CPU clock at its start).
NO_COLLATE = (0, 0, 0, 0)
# BatchMeta.io of a batch fetched in the main process (num_workers=0): /proc/self/io is not read there. Why: that
# process also reads libraries, checkpoints and /proc (the sampler), so its counters are not the dataset's and
# analysis never uses them (analysis/io.py leaves worker -1 out), while the read cost a loaded machine several µs
# per batch; the fetch's own bytes come from its thread's counters (rchar, read_bytes of its calls) as before.
NOT_READ_IO = (-1, -1)
# A batch that opened no file shares this one (never written to): one dict less for the garbage collector per batch.
NO_FOLDERS: dict[str, int] = {}


@dataclass(slots=True)
class BatchMeta:
    """What one worker did for one batch, as recorded (flat lists and tuples: cheap to build and to pickle;
    NOTE [ The batch record is the contract ] above).

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
    own_ns: int = 0  # the instrumentation's own time in this fetch (NOTE [ The profiler's own time ], proxies.py)
    # The written-out map fetch's compact form (inline_fetch.inline_map_fetch): ``calls`` holds each call's end (a
    # call starts where the previous one ended, the first at the fetch's start) and then each call's key (its index),
    # and ``long_clocks`` (row, on-CPU clock) the calls that read the clock. False: ``calls`` is CALL_FIELDS-wide.
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
        return self.marks[M_START_WALL], self.marks[M_START_CPU]

    @property
    def cpu_end(self) -> tuple[int, int]:
        """(wall, thread CPU clock) after the last call: the collate's start, else the fetch's end."""
        return self.marks[M_END_WALL], self.marks[M_END_CPU]

    @property
    def counters(self) -> tuple[int, int, int]:
        """The fetch thread's run-queue ns, rchar and read_bytes over the whole fetch."""
        m = self.marks
        if self.thread_io_end:  # marks' rchar holds the profiler's own reads in between, to take out
            return (m[M_RUNQ], clocks.parse_rchar(self.thread_io_end) - clocks.parse_rchar(self.thread_io_start)
                    - m[M_RCHAR], m[M_READ_BYTES])
        return m[M_RUNQ], m[M_RCHAR], m[M_READ_BYTES]

    @property
    def collate_span(self) -> tuple[int, int, int]:
        """Start, end and on-CPU ns of the collate (0s: none)."""
        return self.marks[M_COLLATE_START], self.marks[M_COLLATE_END], self.marks[M_COLLATE_CPU]

    @property
    def io(self) -> tuple[int, int]:
        """/proc/self/io of the worker after the batch: (rchar, read_bytes), cumulative; -1: unknown or not read."""
        return self.marks[M_IO_RCHAR], self.marks[M_IO_READ_BYTES]

    @property
    def gap(self) -> tuple[int, int, int, int]:
        """The worker between its previous fetch and this one: wall start, wall end, on-CPU ns, run-queue ns."""
        m = self.marks
        return m[M_GAP_START], m[M_GAP_END], m[M_GAP_CPU], m[M_GAP_RUNQ]

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
                [k if k.__class__ is int and -_I64 < k < _I64 else index_of(k) for k in calls[n:2 * n]]
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
        # The derived views are rebuilt where they are read: never pickled along. The fields written out, in
        # _PICKLED's order (tests/test_worker_reads.py round-trips every field): a worker pickles one BatchMeta per
        # batch in its queue thread and the main process unpickles it, and a loop of getattr / setattr by name was
        # ~1 µs of the two (of ~6 µs in all).
        return (self.worker_id, self.pid, self.calls, self.marks, self.stage_events, self.pixel_events, self.skipped,
                self.sent_ns, self.opened, self.n_items, self.own_ns, self.compact, self.long_clocks,
                self.thread_io_start, self.thread_io_end)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        (self.worker_id, self.pid, self.calls, self.marks, self.stage_events, self.pixel_events, self.skipped,
         self.sent_ns, self.opened, self.n_items, self.own_ns, self.compact, self.long_clocks, self.thread_io_start,
         self.thread_io_end) = state
        self._derived_views = self._stage_views = None


_PICKLED = tuple(f for f in BatchMeta.__dataclass_fields__ if f not in ("_derived_views", "_stage_views"))


class Instrumented:
    """The user's batch plus its BatchMeta, from ``fetch`` to the main process's ``__next__`` (which unwraps it)."""

    __slots__ = ("batch", "meta")

    def __init__(self, batch: Any, meta: BatchMeta | WorkerLean):
        self.batch, self.meta = batch, meta  # read the meta with meta_of (a worker's lean fetch sends WorkerLean)

    def pin_memory(self, device: Any = None) -> "Instrumented":
        from .torch_private import pin_batch  # torch's private pinning function (a leaf module: no cycle)

        return Instrumented(pin_batch(self.batch, device), self.meta)

    def __reduce__(self) -> tuple:
        # Pickling happens in the worker's queue-feeder thread: this instant is when the batch started on its way.
        m = self.meta
        if m.__class__ is tuple:
            return (Instrumented, (self.batch, m[:WL_SENT_NS] + (time.perf_counter_ns(),)))
        m.sent_ns = time.perf_counter_ns()  # type: ignore[union-attr]
        return (Instrumented, (self.batch, m))


_I64 = 1 << 63  # dataset keys outside int64 (hash ids) are recorded as index -1


def index_of(key: Any) -> int:
    try:
        k = int(key)
    except (TypeError, ValueError):
        return -1
    return k if -_I64 < k < _I64 else -1

_PACKERS: dict[int, struct.Struct] = {}
_PACK_LEAN = struct.Struct("<5q")  # a lean fetch's one row (lean_meta)
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


# LEAN_OUT: a lean fetch that stayed on its core and recorded nothing but its clocks (no sub-stage, no skipped sample,
# no file opened) returns the user's batch itself, not an envelope, and leaves these ints in its fetch's ``lean_out``
# holder, a one-item list (the session finds it through torch_hooks.lean_out_of and takes it when the batch arrives):
# (fetch entry wall, its on-CPU clock, the calls' start, their end (the collate's start), the collate's end, samples the
# calls returned, the on-CPU clock at the collate's end, the fetch's own ns). lean_meta makes them the BatchMeta the
# envelope would have carried, when the record is built. The entry's wall clock tells a holder's value from a stale one
# (a lean fetch of an earlier step starts before this step's wait).
# Its fields by name: read a LeanOut with these indices, never a bare number. Why a plain tuple and not a NamedTuple:
# a flat step keeps its LeanOut until the window closes, and the garbage collector untracks only exact tuples of
# atoms; a NamedTuple stays tracked, one more object every young collection walks per kept step (measured: +10 to
# +25 µs per batch on the light benchmark, paired).
LEAN_OUT_FIELDS = ("w_entry", "c_entry", "w_in", "t0", "t1", "n", "c_out", "own_ns")
LO_W_ENTRY, LO_C_ENTRY, LO_W_IN, LO_T0, LO_T1, LO_N, LO_C_OUT, LO_OWN_NS = range(len(LEAN_OUT_FIELDS))
LeanOut = tuple[int, int, int, int, int, int, int, int]


def lean_meta(out: LeanOut, pid: int, worker_id: int = -1, gap_start: int = 0, gap_cpu: int = 0,
              gap_runq: int = 0) -> BatchMeta:
    """The BatchMeta of a LEAN_OUT fetch: what the envelope of a lean fetch on its core holds (one row of all its
    calls, index -1; the collate's on-CPU time its wall time; no counters). A worker's (WorkerLean) has its worker id
    and its time since its previous fetch (``gap_start`` 0: none known)."""
    w_entry, c_entry, w_in, t0, t1, n, c_out, own_ns = out
    span = t1 - t0
    meta = BatchMeta(worker_id, pid, _PACK_LEAN.pack(w_in, t0, NO_CPU, -1, n),
                     (w_in, c_entry + (w_in - w_entry), t0, c_out - span, 0, 0, 0, t0, t1, span, -1, -1,
                      gap_start, w_in if gap_start else 0, gap_cpu, gap_runq),
                     opened=NO_FOLDERS, n_items=n)
    meta.own_ns = own_ns
    return meta


# A worker's lean fetch on its core (NOTE [ Lean fetches in workers ], inline_fetch.py) sends these ints in its
# envelope instead of a BatchMeta: a LeanOut, then the worker's id and pid, its time since its previous fetch (wall
# start, 0: none known; on-CPU ns; run-queue ns) and when the queue's feeder thread began pickling it
# (Instrumented.__reduce__).
# Why a tuple: ~0.5 µs to pickle and unpickle where a BatchMeta was ~5 µs, and the BatchMeta is made in the main
# process only for a batch the record keeps (meta_of).
WORKER_LEAN_FIELDS = LEAN_OUT_FIELDS + ("worker_id", "pid", "gap_start", "gap_cpu", "gap_runq", "sent_ns")
WL_WORKER_ID, WL_PID, WL_GAP_START, WL_GAP_CPU, WL_GAP_RUNQ, WL_SENT_NS = range(len(LEAN_OUT_FIELDS),
                                                                              len(WORKER_LEAN_FIELDS))
WorkerLean = tuple[int, ...]


def meta_of(env: "Instrumented") -> BatchMeta:
    """An envelope's BatchMeta: the one it carries, or the one a worker's lean fetch's ints stand for."""
    m = env.meta
    if m.__class__ is not tuple:
        return m  # type: ignore[return-value]
    w = m  # WorkerLean
    meta = lean_meta(w[:len(LEAN_OUT_FIELDS)], w[WL_PID], w[WL_WORKER_ID], w[WL_GAP_START],  # type: ignore[arg-type]
                     w[WL_GAP_CPU], w[WL_GAP_RUNQ])
    meta.sent_ns = w[WL_SENT_NS]
    return meta


def fetch_off_core_ns(m: tuple[int, ...]) -> int:
    """A main-thread fetch's time off its core, from its BatchMeta.marks: its calls' and its collate's
    (derived.derive_cpu); the wait's on-CPU time, where not read, is its wall time less this."""
    return (m[M_END_WALL] - m[M_START_WALL]) - (m[M_END_CPU] - m[M_START_CPU]) \
        + (m[M_COLLATE_END] - m[M_COLLATE_START]) - m[M_COLLATE_CPU]


# NOTE [ Monitor sampling ]
#     Under ``profiler monitor`` (and only there: ``run`` leaves SAMPLING off and records every batch), the fetchers
#     make a *detail* batch, instrumented as ``run`` instruments it (its envelope or LeanOut), only when its index in
#     the epoch lies in the detail range [lo, hi) the monitor has set, and every other batch with the user's own
#     dataset and collate_fn, with no clock read and no envelope: the main side then takes a step for a counter and
#     two clock reads (session.py). Why in the fetcher: the per-call timing and the envelope were most of the
#     monitor's cost on a light loop (~+20 % CPU per batch with num_workers=0), and a batch whose figures the window
#     does not keep need not be timed at all.
#     Why a range the monitor sets (set_detail_range), not a fixed ``detail`` of every ``every`` batches: a window
#     needs about ``--detail`` detail steps whatever its length, and a window's length in steps is known only as the
#     job runs (a default window lasts 100 steps *and* 10 s: ~30,000 steps of a light loop, 6 % of them detail
#     under a fixed plan, and detail batches cost most). The monitor (runner.Monitor) places each chunk by steps and
#     time (a window's k-th of C chunks once k/C of its steps and of its seconds have passed), so a window of 20 steps
#     and one of 30,000 both get ``--detail``.
#     How the fetchers know it: torch hands a map-style epoch's batches to its W workers in turn, so worker w's c-th
#     batch is the epoch's c·W+w-th; the range lives in an anonymous shared mapping made before the workers fork
#     (one 8-byte word, lo << 32 | hi, written and read whole), and the monitor places a chunk at least
#     ``prefetch_factor·W + 1`` batches ahead of the batch the main side waits for (detail_margin), beyond every index
#     torch has handed out, so the main side and the workers agree on every batch without a message. The main side
#     reads the same range (DETAIL_RANGE, its own copy) to know which steps to time closely (the wait's on-CPU clock
#     and run-queue wait: session.py); the Session empties it at each epoch (tracking.py). Where the guess is wrong
#     (an iterable dataset whose workers end unevenly, a worker started by spawn, which does not inherit SAMPLING and
#     details every batch, a range left over from an epoch that ended early), the main side still details exactly
#     the batches that arrive with an envelope, with the wait's main-thread clocks unknown (0) on those it did not
#     expect: the window's cause split rests on fewer or more batches (it says how many, detail_steps), never on a
#     batch without its figures.
SAMPLING: list[int] = [0]  # [1]: the fetchers made from now on are sampled (monitor); [0]: every batch (``run``)
NO_RANGE = (1 << 32) - 1  # lo == hi == NO_RANGE: no batch is detail
DETAIL_RANGE: list[int] = [NO_RANGE, NO_RANGE]  # the main process's [lo, hi) (its thread's fetcher reads it too)
_WORD = struct.Struct("=Q")
_shared: Any = None  # the mmap the forked workers read the range from (made once, before any worker forks)


def _make_shared() -> None:
    global _shared
    if _shared is None:
        import mmap

        _shared = mmap.mmap(-1, _WORD.size)  # MAP_SHARED: a forked worker sees the main process's writes
        _WORD.pack_into(_shared, 0, NO_RANGE)  # (0, NO_RANGE): every batch (a worker's fetchers under ``run``)


def set_sampling(on: bool) -> None:
    """Sample the fetchers made from now on (this process and the workers it forks): detail only the batches of the
    detail range (empty until set_detail_range); off: every batch (``run``'s way)."""
    if on:
        _make_shared()
    SAMPLING[0] = 1 if on else 0
    set_detail_range(NO_RANGE, NO_RANGE)
    if not on:
        set_worker_detail(True)


# NOTE [ Worker detail under run ]
#     ``run`` keeps its first DETAIL_STEPS measured steps in detail and folds every later one into the tail's totals
#     (steps.Tail), which hold only what the main side measures: a worker's record of a tail step's batch was made,
#     sent and dropped. So once the detail is over, a worker's fetches go untimed (the user's dataset and collate_fn,
#     as a monitor's fetcher makes a batch outside its detail range: NOTE [ Monitor sampling ]), but for each worker's
#     first batch of an epoch, which still tells the main side the worker's pid (the sampler labels it). How the
#     workers know: the shared word of the monitor's detail range, which a forked worker's fetcher reads per batch
#     while SAMPLING is off too: (0, NO_RANGE), every batch, from the session's start; (0, W) from its first tail
#     step (Session._enter_tail), each worker's c = 0 batch; every batch again when the session stops. Why: the
#     workers' instrumentation was ~1.5-3.5 % of the light loop's CPU per step with workers=2 (workers uninstrumented:
#     -3.51 %, docs/performance.md), all of it spent on records the tail drops. A worker made by spawn (no shared
#     word) and the main thread's fetcher (``num_workers=0``, whose tail steps are kept flat) detail every batch.
def set_worker_detail(every: bool, workers: int = 0) -> None:
    """Under ``run`` (SAMPLING off): the forked workers' fetchers detail every batch (``every``) or each worker's
    first batch of an epoch only (``workers``: the loader's num_workers). NOTE [ Worker detail under run ]."""
    if SAMPLING[0]:
        return  # the monitor's range
    if every:
        _make_shared()
    if _shared is not None:
        _WORD.pack_into(_shared, 0, NO_RANGE if every else min(max(workers, 1), NO_RANGE))  # lo 0


def set_detail_range(lo: int, hi: int) -> None:
    """The epoch's batches [lo, hi) are detail batches (main process only; NOTE [ Monitor sampling ])."""
    lo, hi = min(max(lo, 0), NO_RANGE), min(max(hi, 0), NO_RANGE)
    DETAIL_RANGE[0], DETAIL_RANGE[1] = lo, hi
    if _shared is not None:
        _WORD.pack_into(_shared, 0, lo << 32 | hi)  # one aligned 8-byte store: a worker never reads half of it


def _shared_range() -> tuple[int, int]:
    v: int = _WORD.unpack_from(_shared)[0]
    return v >> 32, v & NO_RANGE


def _main_range() -> tuple[int, int]:
    return DETAIL_RANGE[0], DETAIL_RANGE[1]


def detail_margin(workers: int, prefetch_factor: int | None) -> int:
    """How many batches ahead of the one the main side waits for a detail range may start: torch has handed out at
    most ``prefetch_factor·W`` indices beyond it (0 with num_workers=0: the batch is made inside next())."""
    return (workers * (prefetch_factor or 2) + 1) if workers > 0 else 0


def sample_plan(worker_id: int, workers: int) -> tuple[int, int, Any] | None:
    """A fetcher's (W, w, range reader) when the loader has ``workers`` workers (0: the main thread's fetcher,
    ``worker_id`` -1), or None: not sampled. Its c-th batch is the epoch's c·W+w-th; the reader returns the detail
    range (lo, hi). NOTE [ Monitor sampling ]."""
    if not SAMPLING[0]:  # ``run``: a forked worker's fetcher follows set_worker_detail (NOTE [ Worker detail under
        # run ]); the main thread's fetcher details every batch
        return (workers, worker_id, _shared_range) if worker_id >= 0 and workers >= 1 and _shared is not None else None
    if worker_id < 0 or workers < 1:
        return 1, 0, _main_range
    if _shared is None:  # sampling on without its mapping: cannot happen (set_sampling makes it); detail all
        return None
    return workers, worker_id, _shared_range
