"""A fetch's two ends, shared by every instrumented fetch: its start (:func:`begin_fetch`), its end
(:func:`envelope`: the batch's counters, its BatchMeta and the envelope), and the general fetch that wraps torch's own
around the timed proxies (:func:`instrumented_parts`). The written-out ``num_workers=0`` fetch is inline_fetch.py.

NOTE [ A fetch's ends ]
    Every fetch runs, in this order: ``begin_fetch`` (the batch's counters, unless lean; a fresh recorder made
    proxies._current), the user's calls and collate, then ``envelope`` (``proxies._current`` back to None, the
    counters again, the BatchMeta). A fetch that raises calls ``abandon_fetch`` instead, so no recorder is left open
    for the next one, and records nothing (as torch drops the batch). The clocks around the user's fetch follow NOTE
    [ Wall clock outside, on-CPU clock inside ] (derived.py); the fetch's own time is NOTE [ The profiler's own time ]
    (proxies.py).
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable

from . import clocks, proxies, substages
from .batch import (
    CALL_FIELDS,
    CALL_ITEMS,
    NO_COLLATE,
    NO_FOLDERS,
    NO_GAP,
    NOT_READ_IO,
    BatchMeta,
    Instrumented,
    pack_calls,
    sample_plan,
)
from .derived import CLOSE_TIMING_FROM_OFF_NS, derive_cpu
from .proxies import Recorder, call_cost_ns, clock_cost_ns

_perf = time.perf_counter_ns
_cpu = time.thread_time_ns
# (pid, wall, on-CPU clock, run-queue ns) at this worker's last fetch's end: the start of the time between fetches
# (torch's worker loop waiting for the next index, or waiting for a core to run it). The pid tells a forked worker
# from the parent whose value it inherited.
_previous_end: tuple[int, int, int, int] = (0, 0, 0, 0)


def begin_fetch(width: int, counters: bool = True) -> tuple[Recorder, Any, clocks.Counters | None, int]:
    """A fetch's start in this thread: the batch's counters (None: not read, a lean fetch), its recorder and sub-stage
    lists (the caller reads the fetch's first clocks right after)."""
    if substages._waiting and len(sys.modules) != substages._modules_seen:
        substages.wrap_imported()  # a library the job imported since the last batch: named from this one
    if not proxies._audit_installed:
        proxies.install_audit()  # this process's first timed fetch (install_audit says why not before)
    b0 = clocks.fetch_start() if counters else None
    rec = proxies._current = Recorder()
    return rec, substages.begin_batch(rec.calls, width), b0, 0


def abandon_fetch() -> None:
    """A fetch that raised: no recorder or sub-stage list is left open for the next one."""
    proxies._current = None
    substages.end_batch()


def envelope(batch: Any, rec: Recorder, smp: Any, b0: clocks.Counters | None, w_in: int, c_in: int,
             last: tuple[int, int, int, int], w_out: int, c_out: int, worker_id: int, pid: int,
             n_items: int | None, own_ns: int, compact: bool = False,
             entry: tuple[int, int] | None = None, probe: bool = False) -> Instrumented:
    """The fetch's end: the batch's counters, its BatchMeta and the envelope. ``(w_in, c_in)`` and ``(w_out, c_out)``
    are the wall and on-CPU clocks around the user's fetch, ``last`` the collate's (NO_COLLATE: none); ``own_ns`` is
    the fetch's own time so far, and this function's own is added (measured up to the envelope).

    ``entry``: the fetch read its on-CPU clock only at its entry, ``(wall, cpu)``, and its inner on-CPU clocks
    (``c_in``, ``c_out``, the collate's) are derived here from the wall clock and one on-CPU read now
    (derived.derive_cpu says how and why).

    ``b0`` None: a lean fetch (inline_fetch.LEAN_STRETCH), which read no counters at its start and reads none at its
    end either unless its on-CPU clock, read now, shows it left its core; ``probe``: the fetch ends a lean stretch,
    and reads rchar (clocks.fetch_end)."""
    global _previous_end
    proxies._current = None
    substages.end_batch()
    # Counters by name (clocks.Counters' order): run-queue ns, read_bytes, /proc io (raw), own rchar, switches.
    if b0 is None:
        assert entry is not None  # a lean fetch times its calls by their ends only
        w_f = _perf()
        c_f = _cpu()
        off = (w_f - entry[0]) - (c_f - entry[1])
        if off < CLOSE_TIMING_FROM_OFF_NS:  # on its core throughout: no wait for a core, no blocking read
            b0 = b1 = _NO_COUNTERS
        else:  # it left its core: its counters since the last fetch that read them, its run-queue wait at most that
            s_runq, s_bytes, s_io, s_own, s_csw = clocks.since_last_fetch_end()
            b1 = clocks.fetch_end(probe=True)
            b0 = (b1[0] - min(b1[0] - s_runq, off), s_bytes, s_io, s_own, s_csw)
        c_in, c_out, last = derive_cpu(entry, w_in, w_out, last, w_f, c_f)
        runq0, bytes0, io0, own0, _ = b0
        runq1, bytes1, io1, own1, _ = b1
    else:
        b1 = clocks.fetch_end(probe)
        runq0, bytes0, io0, own0, csw0 = b0
        runq1, bytes1, io1, own1, csw1 = b1
        if entry is not None:
            w_f = _perf()
            # No context switch since the fetch's start (getrusage counts them): it stayed on its core, so its on-CPU
            # clock moved as the wall clock did, and reading it would only cost a system call.
            c_f = entry[1] + (w_f - entry[0]) if csw1 == csw0 else _cpu()
            c_in, c_out, last = derive_cpu(entry, w_in, w_out, last, w_f, c_f)
    calls = pack_calls(rec.calls)  # bytes: nothing for the garbage collector to walk (BatchMeta says why it matters)
    gap = NO_GAP
    if worker_id >= 0:  # a worker's time between fetches; the main process's is the user's loop (not ours to split)
        p_pid, p_wall, p_cpu, p_runq = _previous_end
        if p_pid == pid and 0 < p_wall <= w_in:
            gap = (p_wall, w_in, max(0, c_in - p_cpu), max(0, runq0 - p_runq))
        _previous_end = (pid, w_out, c_out, runq1)
        rchar = max(0, clocks.parse_rchar(io1) - clocks.parse_rchar(io0) - (own1 - own0) + clocks.take_carried())
        io = clocks.process_io_if(rchar > 0 or bytes1 > bytes0)  # /proc/self/io: not every batch (PROCESS_IO_EVERY)
        io_start = io_end = b""
    else:  # the main thread: its rchar is parsed after the window (BatchMeta.counters), less its own reads (here)
        io = NOT_READ_IO
        rchar = own1 - own0
        io_start, io_end = io0, io1
    k_start, k_end, k_cpu_ns, k_cpu0 = last  # the collate's (NO_COLLATE: none)
    meta = BatchMeta(worker_id, pid, calls,  # marks, in MARKS' order (batch.py)
                     (w_in, c_in, k_start or w_out, k_cpu0 if k_start else c_out,
                      runq1 - runq0, rchar, bytes1 - bytes0, k_start, k_end, k_cpu_ns, io[0], io[1], *gap),
                     smp.events or (), smp.pixels or (), rec.skipped or (),
                     opened=rec.opened or NO_FOLDERS,
                     n_items=len(rec.calls) // len(CALL_FIELDS) if n_items is None else n_items,
                     compact=compact, long_clocks=rec.long_clocks or (), thread_io_start=io_start,
                     thread_io_end=io_end)
    if entry is not None:  # no on-CPU clock was read inside the user's code; this tail by the wall clock (see above)
        meta.own_ns = own_ns + (_perf() - w_out)
        return Instrumented(batch, meta)
    clock_reads = rec.cpu_reads + len(rec.long_clocks) // 2 + 2  # the proxies' long calls, the written-out fetch's
    meta.own_ns = own_ns + clock_reads * clock_cost_ns() + (_cpu() - c_out)
    return Instrumented(batch, meta)


def worker_count(worker_id: int) -> int:
    """The loader's num_workers, seen from a fetcher made in worker ``worker_id`` (-1: the main thread, 0)."""
    if worker_id < 0:
        return 0
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    return int(info.num_workers) if info is not None else 1


_NO_END = (0, 0, 0, 0)


def skip_fetch() -> None:
    """A batch fetched without instrumentation (NOTE [ Monitor sampling ]): the next instrumented fetch of this worker
    measures no time between fetches from the last one's end (the batches between were the worker's own work)."""
    global _previous_end
    _previous_end = _NO_END


def reuse_lean(rec: Recorder, smp: substages.SampleStages, drop: bool = False) -> None:
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


# The counters of a lean fetch that stayed on its core (see envelope): no wait for a core, nothing read from the
# block device, and rchar unread (an empty /proc reading: BatchMeta.counters then takes the marks' zeros).
_NO_COUNTERS: clocks.Counters = (0, 0, b"", 0, 0)


def instrumented_parts(source: Any, iterable: bool, collate_fn: Any, inner_fetch: Callable[[Any], Any],
                       worker_id: int) -> tuple[Any, Any, Callable[[Any], Any]]:
    """The timed stand-ins for a torch fetcher's dataset (or its iterator), ``collate_fn`` and ``fetch``, whose
    ``fetch`` returns Instrumented batches. torch_hooks.py puts them on the fetcher (its attributes are torch's)."""
    timed: Any
    has_items = False
    if iterable:
        timed = proxies.TimedIterator(source)
    else:
        has_items = bool(getattr(source, "__getitems__", None))
        timed = (proxies.MapProxyItems if has_items else proxies.MapProxy)(source)
    collate = proxies.TimedCollate(collate_fn)
    pid = os.getpid()
    per_call = call_cost_ns()
    width = len(CALL_FIELDS)
    plan = sample_plan(worker_id, worker_count(worker_id))  # NOTE [ Monitor sampling ] (batch.py); None: ``run``
    made = [0]  # batches this fetcher made (its sampling count)

    def fetch(possibly_batched_index: Any) -> Any:
        if plan is not None:
            c = made[0]
            made[0] = c + 1
            i = c * plan[0] + plan[1]  # its index in the epoch
            lo, hi = plan[2]()
            if not lo <= i < hi:  # not a detail batch: torch's fetch, the proxies passing straight through
                skip_fetch()
                return inner_fetch(possibly_batched_index)
        c_entry = _cpu()
        rec, smp, b0, _ = begin_fetch(width)
        collate.last = NO_COLLATE
        w_in = _perf()
        c_in = _cpu()
        try:
            batch = inner_fetch(possibly_batched_index)
        except BaseException:
            abandon_fetch()
            raise
        c_out = _cpu()
        w_out = _perf()
        calls = rec.calls
        n = len(calls) // width
        # Its own time, as on-CPU time (a preemption in the middle is the machine's, not ours): what it did before
        # and after the user's fetch (measured) plus each call's and the collate's wrapper (calibrated: the path,
        # and the on-CPU clock where it was read); only the final assignment and return are left out.
        return envelope(batch, rec, smp, b0, w_in, c_in, collate.last, w_out, c_out, worker_id, pid,
                        sum(calls[CALL_ITEMS::width]) if has_items else None, (c_in - c_entry) + (n + 1) * per_call)

    return timed, collate, fetch

