"""The written-out ``num_workers=0`` map fetch (:func:`inline_map_fetch`): torch's ``_MapDatasetFetcher.fetch`` with
its timing inline, its lean stretches, and the calibration of its per-call cost.

NOTE [ Lean fetches and the LEAN_OUT hand-off ]
    On the main thread, while its fetches read nothing and stay on their core, all but one of every LEAN_STRETCH
    fetches are *lean* (LEAN_STRETCH says what they skip and why). A lean fetch that stayed on its core and recorded
    nothing but its clocks returns the user's batch itself, not an envelope, and leaves a batch.LeanOut in its
    fetch's holder, a one-item list found through :func:`lean_out_holder` (torch_hooks.lean_out_of gives the
    session the holder of a ``num_workers=0`` iterator). The session takes it when the batch arrives and keeps the
    step flat (flat_steps.py); batch.lean_meta makes the BatchMeta when the record is built. A stale value (a lean
    fetch of an earlier step) is told apart by its entry's wall clock, which is before this step's wait.

NOTE [ Lean fetches in workers ]
    A worker's fetches are lean too (15 of every LEAN_STRETCH), once QUIET_AFTER of its full fetches in a row read
    nothing (rchar and read_bytes 0) and the last stayed on its core. Why: a full fetch's counters and BatchMeta were
    ~40 µs of a light batch's CPU in a real worker (its caches cold after the queue's work: fetch_start ~12 µs,
    envelope ~21 µs), ~3 % of the light loop's whole per-batch CPU. What differs from the main thread's:
    - each lean fetch checks itself (the on-CPU clock at its two ends): between fetches a worker waits off its core,
      so no stretch-wide check can hold;
    - one on its core sends a WorkerLean (batch.py: its ints, no BatchMeta; the main side makes the BatchMeta) in
      its envelope;
    - a lean fetch that left its core but read nothing (a preemption: workers share the cores with the job) does
      not end its stretch, as the main thread's does: its counters are read and its record is whole, and the per-call
      detail a closely timed fetch after it would give says nothing about a wait for a core (on the light benchmark
      with two jobs on two cores a third of the workers' fetches left their core so);
    - a worker reads its index queue (a pipe) between fetches, which rchar counts, so its thread reads rchar at both
      ends of every full fetch (clocks.fetch_start's exact mode). The bytes one time between fetches read (at most,
      as seen so far: the queue's message) are known (``gap_max``); at the stretch's next full fetch, bytes beyond
      that many per time between are the lean fetches' and are counted on it (clocks.take_carried), and blocks read
      from the device since the last full fetch land on it too: the totals stay exact but for the variation in the
      queue's message sizes (a few bytes per batch). A lean fetch that left its core reads its counters from the last
      full fetch's end, the queue's bytes of the stretch taken out the same way;
    - it reads its run-queue wait at its start (one schedstat read: clocks.runq_read), so its time since its previous
      fetch keeps its own run-queue figure, as a full fetch's does (a first version shared a stretch's wait over its
      gaps when the record was built; beside other load that moved a transfer-bound job's verdict to cpu).

NOTE [ A preempted lean fetch ends no stretch ]
    The main thread's lean fetch that left its core for CLOSE_TIMING_FROM_OFF_NS or more (it checks itself once a
    stretch check has failed: lean_check.py) reads its counters and is recorded whole, as a worker's. Until 2026-12-07
    it also ended its stretch, so the next fetch was a full one, timed closely (every call's clocks, every counter);
    now, when it read nothing (its rchar did not move, clocks.quiet, and no block came from the device), the stretch
    goes on, as a worker's does: a wait for a core is what its own counters say, and a closely timed fetch after it
    says nothing more about it. Why: a loop that shares its core (two jobs on one core, its own workers beside it, a
    neighbour) is preempted every few ms, every few light steps, and each preemption cost a chain of full fetches:
    the light loop's profiled steps cost +113 µs of CPU each (+20 %) beside a plain twin on one core, against +13-19
    µs alone (2026-12-07, scripts/bench_overhead_light.py --concurrent vs one process alternated). One that read
    bytes still ends its stretch: a blocking read is what the per-call detail is for.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Sequence

from . import clocks, proxies, substages
from . import fetch as _fetch
from .batch import (
    CALL_FIELDS,
    M_END_CPU,
    M_END_WALL,
    M_RCHAR,
    M_READ_BYTES,
    M_START_CPU,
    M_START_WALL,
    NO_COLLATE,
    NO_FOLDERS,
    Instrumented,
    LeanOut,
    lean_meta,
    sample_plan,
)
from .derived import CALL_CPU_FROM_NS, CLOSE_TIMING_FROM_OFF_NS, NO_CPU
from .fetch import abandon_fetch, begin_fetch, envelope, reuse_lean
from .lean_check import StretchCheck
from .proxies import CALIBRATION_REPEATS, Recorder

_perf = time.perf_counter_ns
_cpu = time.thread_time_ns
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
# A worker's fetch that asked for this many bytes or fewer, none from the device, counts as reading nothing for its
# lean stretches (NOTE [ Lean fetches in workers ]; its bytes are counted all the same). Why not 0: the index queue's
# messages vary in size (a pickled index takes 2, 3 or 5 bytes by its value), so a stretch's next full fetch finds a
# few to tens of bytes per time between fetches beyond the most seen before (on the light benchmark, 2-960 bytes over
# a 16-fetch stretch), and ending the stretch for them cost 16 full fetches each time.
WORKER_QUIET_RCHAR = 1024


def inline_call_costs() -> tuple[int, int]:
    """:func:`call_cost_ns` for the written-out map fetch (:func:`inline_map_fetch`): (ns per call recording only its
    end, ns per call timed closely), calibrated once per process on that very fetch over a list: the slope between a
    batch of 256 indices and an empty one (the per-batch work cancels) less the same indexing as torch's list
    comprehension does it; each loop's minimum of CALIBRATION_REPEATS runs."""
    global _inline_costs
    if _inline_costs is None:
        _inline_costs = (0, 0)  # the fetches built below read it

        class _ListFetcher:
            dataset = list(range(256))
            auto_collation = True

            @staticmethod
            def collate_fn(items: list[Any]) -> list[Any]:
                return items

        data, keys = _ListFetcher.dataset, list(range(256))
        saved = proxies._current, _fetch._previous_end
        audit = proxies._audit_installed
        proxies._audit_installed = True  # no audit hook for the calibration's fetches (install_audit says why)
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
            proxies._current, _fetch._previous_end = saved
            proxies._audit_installed = audit
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
    # The lean stretch (LEAN_STRETCH): [lean fetches left in it, 1 while one is under way, a worker's lean fetches
    # since its last fetch_end]
    lean = [0, 0, 0] if close is None else None
    worker = worker_id >= 0
    quiet_run = [0]  # a worker's full fetches in a row that read nothing (NOTE [ Lean fetches in workers ])
    if lean is not None and not worker:
        LEAN_CHECK.restart()
    # A lean fetch's recorder and sub-stage lists, made once and reused (reuse_lean): a fresh pair per batch was nine
    # containers the garbage collector tracks and ~85 bytecodes, for lists a light batch leaves empty.
    lean_rec = Recorder()
    lean_smp = substages.SampleStages(lean_rec.calls, len(CALL_FIELDS))
    out: list[LeanOut | None] = [None]  # the last lean fetch's LEAN_OUT (lean_out_holder)
    # NOTE [ Monitor sampling ] (batch.py): None under ``run`` and in the calibration (close given)
    plan = sample_plan(worker_id, _fetch.worker_count(worker_id)) if close is None else None
    made = [0]  # batches this fetcher made (its sampling count)
    skipped_some = [False]  # batches made untimed since this fetcher's last timed one (a worker's clocks.lean_gaps)

    def lean_batch(possibly_batched_index: Any, w_entry: int, c_entry: int) -> Any:
        """A lean fetch of a batch (LEAN_STRETCH): its calls made as torch makes them, with no clock between them,
        and timed together as one row of all its samples (index -1, as a ``__getitems__`` call's). ``c_entry``
        NO_CPU: its stretch is checked as a whole (lean_check.py), and it reads no on-CPU clock."""
        if substages._waiting and len(sys.modules) != substages._modules_seen:
            substages.wrap_imported()  # begin_fetch's, which this fetch does not call
        rec = proxies._current = lean_rec  # no row is recorded before the calls end: stages are row 0
        smp = substages._local.sample = lean_smp
        dataset, collate_fn = fetcher.dataset, fetcher.collate_fn
        q_entry = clocks.runq_read() if worker else 0  # NOTE [ Lean fetches in workers ]
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
            abandon_fetch()
            reuse_lean(rec, smp, True)
            raise
        if c_entry == NO_CPU:  # on its core, as its stretch's check will show (or count as unchecked)
            check = LEAN_CHECK
            c_entry = check.c0 + (w_entry - check.w0)  # LEAN_CHECK.cpu_at, written out
            c_out = c_entry + (t1 - w_entry)
        else:
            c_f = _cpu()
            w_f = _perf()
            if (w_f - w_entry) - (c_f - c_entry) >= CLOSE_TIMING_FROM_OFF_NS:
                # It left its core: envelope reads its counters; unless it read nothing (a wait for a core), the
                # stretch ends and the next fetch times closely.
                if worker:  # its counters run from its last full fetch's end, across lean[2] times between fetches
                    clocks.end_gaps(lean[2])  # type: ignore[index]
                    lean[2] = 0  # type: ignore[index]
                env = envelope(batch, rec, smp, None, w_in, NO_CPU, (t0, t1, 0, NO_CPU), t1, NO_CPU, worker_id,
                               pid, n, w_in - w_entry, False, (w_entry, c_entry))
                reuse_lean(rec, smp)
                m = env.meta.marks  # type: ignore[union-attr]  # envelope's: a BatchMeta
                if worker:
                    if m[M_RCHAR] <= WORKER_QUIET_RCHAR and m[M_READ_BYTES] <= 0:
                        return env  # a worker's that read nothing (it waited for a core): its stretch goes on
                    quiet_run[0] = 0
                elif m[M_READ_BYTES] <= 0 and clocks.quiet():
                    return env  # the main thread's, the same (NOTE [ A preempted lean fetch ends no stretch ])
                timing[0] = True
                lean[0] = lean[1] = lean[2] = 0  # type: ignore[index]
                return env
            c_out = c_f - (w_f - t1)
        # On its core throughout: no counters, its on-CPU clocks by derive_cpu's rule, the main thread's marks.
        proxies._current = None
        substages.end_batch()
        rec.calls.clear()
        events, pixels, skipped, opened = smp.events, smp.pixels, rec.skipped, rec.opened
        if worker:  # its time since its previous fetch (on its core to its end: its run-queue figure is its start's)
            p_pid, p_wall, p_cpu, p_runq = _fetch._previous_end
            gap_start = gap_cpu = gap_runq = 0
            if p_pid == pid and 0 < p_wall <= w_in:
                gap_start, gap_cpu = p_wall, max(0, c_entry + (w_in - w_entry) - p_cpu)
                gap_runq = max(0, q_entry - p_runq)
            _fetch._previous_end = (pid, t1, c_out, q_entry)
            if not (events or pixels or skipped or opened):  # WorkerLean: its ints, no BatchMeta (meta_of)
                return Instrumented(batch, (w_entry, c_entry, w_in, t0, t1, n, c_out, (w_in - w_entry) + (_perf() - t1),
                                            worker_id, pid, gap_start, gap_cpu, gap_runq, 0))
            meta = lean_meta((w_entry, c_entry, w_in, t0, t1, n, c_out, 0), pid, worker_id, gap_start, gap_cpu,
                             gap_runq)
            meta.stage_events, meta.pixel_events, meta.skipped = events or (), pixels or (), skipped or ()
            meta.opened = opened or NO_FOLDERS
            reuse_lean(rec, smp)
            meta.own_ns = (w_in - w_entry) + (_perf() - t1)
            return Instrumented(batch, meta)
        if not (events or pixels or skipped or opened):
            # Nothing but its clocks: handed over as LEAN_OUT (lean_meta makes its BatchMeta when the record is
            # built), the batch itself returned as torch's fetch returns it. Why: the BatchMeta and envelope built
            # here, and the session's step row built for it, were a third of the profiler's per-batch cost on a
            # light loop, for figures that are the same arithmetic done later (LEAN_OUT says more).
            out[0] = (w_entry, c_entry, w_in, t0, t1, n, c_out, (w_in - w_entry) + (_perf() - t1))  # LeanOut
            return batch
        meta = lean_meta((w_entry, c_entry, w_in, t0, t1, n, c_out, 0), pid)
        meta.stage_events, meta.pixel_events, meta.skipped = events or (), pixels or (), skipped or ()
        meta.opened = opened or NO_FOLDERS
        reuse_lean(rec, smp)  # handed to the record: the next batch gets its own
        meta.own_ns = (w_in - w_entry) + (_perf() - t1)
        return Instrumented(batch, meta)

    def fetch(possibly_batched_index: Any) -> Any:
        if plan is not None:
            c = made[0]
            made[0] = c + 1
            i = c * plan[0] + plan[1]  # its index in the epoch
            lo, hi = plan[2]()
            if not lo <= i < hi:  # not a detail batch: torch's fetch itself, no clock, no LeanOut
                _fetch.skip_fetch()
                skipped_some[0] = True
                if fetcher.auto_collation:
                    dataset = fetcher.dataset
                    return fetcher.collate_fn([dataset[idx] for idx in possibly_batched_index])
                return fetcher.collate_fn(fetcher.dataset[possibly_batched_index])
        w_entry = _perf()
        if lean is not None and lean[0] > 0:  # a lean fetch: no counters (LEAN_STRETCH says why)
            lean[0] -= 1
            if fetcher.auto_collation:  # and its calls timed together, as one row
                if worker:  # its own on-CPU check (between fetches a worker waits off its core: no stretch check)
                    lean[2] += 1
                    return lean_batch(possibly_batched_index, w_entry, _cpu())
                check = LEAN_CHECK
                if check.by_stretch:  # and no clock of its own: its stretch is checked at its end
                    check.lean += 1
                    return lean_batch(possibly_batched_index, w_entry, NO_CPU)
                check.checked += 1
                return lean_batch(possibly_batched_index, w_entry, _cpu())
            c_entry = _cpu()
            rec, smp, b0, _ = begin_fetch(1, False)
        else:
            c_entry = _cpu()
            if worker:  # the times between fetches since its last fetch_end (clocks.lean_gaps)
                if skipped_some[0]:
                    skipped_some[0] = False
                    lean[2] = 0  # type: ignore[index]
                    clocks.lean_gaps(0)
                elif lean is not None and lean[2]:
                    clocks.lean_gaps(lean[2] + 1)
                    lean[2] = 0
            elif lean is not None and LEAN_CHECK.open:  # the lean stretch before this fetch ends here
                LEAN_CHECK.settle(w_entry, c_entry)
            rec, smp, b0, _ = begin_fetch(1)  # compact form (BatchMeta.compact): each call's end, then the keys
        dataset, collate_fn = fetcher.dataset, fetcher.collate_fn
        ends = rec.calls
        last = NO_COLLATE
        keys: Sequence[Any]
        # Closely: every on-CPU clock read, and each long call's; else only the calls' ends and the on-CPU clock at
        # the fetch's two ends (derived.derive_cpu).
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
            abandon_fetch()  # the user's error, as torch's fetch would raise it; this batch records nothing
            raise
        # The fetch ends with its collate: the collate's end clocks are the fetch's (one on-CPU clock read less).
        if closely:
            env = envelope(batch, rec, smp, b0, w_in, c_in, last, last[1], k1, worker_id, pid, n,
                           (c_in - c_entry) + (n + 1) * costs[1], True)
        else:
            env = envelope(batch, rec, smp, b0, w_in, c_in, last, last[1], k1, worker_id, pid, n,
                           (w_in - w_entry) + (n + 1) * costs[0], True, (w_entry, c_entry),
                           lean is not None and b0 is not None and lean[1] == 1)
        if close is None:  # the calls' time off their core decides how the next fetch is timed
            m = env.meta.marks  # type: ignore[union-attr]  # envelope's: a BatchMeta
            timing[0] = (m[M_END_WALL] - m[M_START_WALL]) - (m[M_END_CPU] - m[M_START_CPU]) \
                >= CLOSE_TIMING_FROM_OFF_NS
            if lean is not None and (b0 is not None or timing[0]):  # a stretch ends; may the next one start?
                if worker:  # NOTE [ Lean fetches in workers ]: QUIET_AFTER full fetches in a row that read nothing
                    quiet_run[0] = quiet_run[0] + 1 if m[M_RCHAR] <= WORKER_QUIET_RCHAR and m[M_READ_BYTES] <= 0 \
                        else 0
                    lean[1] = 1 if not timing[0] and quiet_run[0] >= clocks.QUIET_AFTER else 0
                else:
                    lean[1] = 1 if not timing[0] and clocks.quiet() else 0
                lean[0] = LEAN_STRETCH - 1 if lean[1] else 0
                if lean[1] and not worker:
                    LEAN_CHECK.start(w_entry, c_entry)
        return env

    setattr(fetch, LEAN_OUT_ATTR, out)
    setattr(fetch, MADE_ATTR, made)
    return fetch


# The attribute of a written-out fetch that holds its LEAN_OUT holder (NOTE [ Lean fetches and the LEAN_OUT
# hand-off ]).
LEAN_OUT_ATTR = "lean_out"
# ... and its sampling count, a one-item list: the batches it made this epoch (NOTE [ Monitor sampling ]). A monitor
# gap takes the fetch off the fetcher (torch's own then runs, no frame of ours per batch) and sets the count to the
# iterator's at the gap's close (torch_hooks.fetch_untimed / fetch_timed_again; NOTE [ Monitor gaps ]).
MADE_ATTR = "made"


def lean_out_holder(fetch_fn: Any) -> list[LeanOut | None] | None:
    """The LEAN_OUT holder of a fetch made by :func:`inline_map_fetch` (None: another fetch)."""
    out = getattr(fetch_fn, LEAN_OUT_ATTR, None)
    return out if isinstance(out, list) else None
