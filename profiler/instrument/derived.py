"""Derived clocks: how a batch's few clock readings become each dataset call's wall, on-CPU and off-CPU time.

The hot path reads as few clocks as it can (NOTE [ Clock reads on the hot path ] in proxies.py); what it does not read
is derived here, from rules that hold by construction. These run after the window (BatchMeta's derived views) or once
per batch at the fetch's end (:func:`derive_cpu`), never per call.

NOTE [ Wall clock outside, on-CPU clock inside ]
    Wherever a span is timed by both clocks, the wall clock is read first at its start and last at its end, so the
    wall interval contains the on-CPU interval and "wall less on-CPU" (time off the core) is never negative by the
    order of the reads: ``t0 = perf(); c0 = cpu(); ...; c1 = cpu(); t1 = perf()``. clocks.WaitClocks and the
    session's wait keep this order; a fetch that reads the on-CPU clock only at its entry derives the others
    (:func:`derive_cpu`).
"""
from __future__ import annotations

import numpy as np

NO_CPU = -1
# A dataset call this long or longer reads the thread's on-CPU clock at its end; a shorter one does not. Why 10 µs:
# time off a core comes in pieces far longer than that (a preemption is a time slice, ~ms; a disk read, a page fault
# from storage or a wait for the GIL held by another thread is tens of µs or more), so a shorter call ran on a core,
# and the clock would cost 3-5 % of a 10 µs call but a quarter of the profiler's whole per-call path for the ~2 µs
# call of an in-memory dataset. The batch's clock is read at its ends all the same, so whatever off-core time hid in
# short calls is still counted (call_cpu shares it out over them), never lost.
CALL_CPU_FROM_NS = 10_000
# A written-out fetch whose calls were off their core for this long or longer in all (a disk read, a wait for a core)
# makes the next fetch time each call closely: the on-CPU clock at the end of each call of CALL_CPU_FROM_NS or more,
# as the proxies do. A fetch that stayed on its core makes the next one record only each call's end. Why: on an
# in-memory dataset with num_workers=0 (calls of ~2 µs, always on a core) the per-call test was a third of the
# profiler's whole per-batch cost there, and told nothing, since the batch's own clock readings show that no call
# was off its core; a job whose calls block or wait keeps showing it, so its batches are timed closely but for the
# first one after a quiet one, whose off-CPU time is shared over its calls by their wall time (call_cpu).
CLOSE_TIMING_FROM_OFF_NS = CALL_CPU_FROM_NS


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


def derive_cpu(entry: tuple[int, int], w_in: int, w_out: int, last: tuple[int, int, int, int], w_f: int,
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

