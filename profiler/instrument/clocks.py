"""Per-thread kernel accounting: wall clock, on-CPU time, run-queue wait, bytes read — cheap enough per sample.

Why per thread: a DataLoader worker runs the dataset in its main thread while its queue-feeder thread pickles the
previous batch, and the main process has a pin-memory thread; process-wide counters would mix them. Linux keeps
per-thread figures. Two tiers, by cost:

- per dataset call, :func:`call_snapshot` (~2 µs): wall clock and on-CPU time; the rest of the call is off-CPU;
- per batch, per collate and per main-loop wait, :func:`snapshot` (~8 µs) adds the run-queue wait and bytes read
  (asked for, and from the block device), which the batch then shares out over its calls:

- on-CPU time: ``time.thread_time_ns()`` (CLOCK_THREAD_CPUTIME_ID), exact to the nanosecond at the moment of the
  call. (schedstat's on-CPU field is only brought up to date at ticks and context switches, so for a call of a few
  ms it can be off by a whole tick.)
- ``/proc/thread-self/schedstat`` field 2: run-queue wait ns (sched_info; on with CONFIG_SCHED_INFO, which every
  distribution kernel has) — time the thread was ready to run but had no core: the signature of oversubscribed
  workers. It grows when the thread is switched back in, so between two reads made while the thread runs it counts
  exactly the waits in between.
- ``/proc/thread-self/io``: ``rchar`` (bytes the thread asked ``read()`` for, page cache or not) and ``read_bytes``
  (bytes it caused to be fetched from the block device).

A file descriptor of ``/proc/thread-self/...`` is bound to the thread that opened it, so each thread opens its own
(kept in a ``threading.local``) and re-reads it with one ``pread`` (~1-2 µs each). Every timestamp is
``time.perf_counter_ns()`` — CLOCK_MONOTONIC on Linux — comparable across the processes of one machine.
"""
from __future__ import annotations

import os
import threading
import time

_local = threading.local()
# What is missing on this machine (facility -> why), filled on first use in each process.
ABSENT: dict[str, str] = {}


def _open(path: str) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY)
        os.pread(fd, 256, 0)
        return fd
    except OSError as e:
        ABSENT.setdefault(path, e.strerror or str(e))
        return None


def _fds() -> tuple[int | None, int | None]:
    fds = getattr(_local, "fds", None)
    if fds is None or getattr(_local, "pid", None) != os.getpid():  # a forked child inherits the parent's fds
        fds = (_open("/proc/thread-self/schedstat"), _open("/proc/thread-self/io"))
        _local.fds, _local.pid = fds, os.getpid()
    return fds


def accounting() -> dict:
    """What this process can measure: recorded once per run as ``timeline.accounting``."""
    sched, tio = _fds()
    return {"cpu_clock": "thread_time", "runqueue": sched is not None,
            "thread_io": tio is not None, "absent": dict(ABSENT)}


def call_snapshot(end: bool = False) -> tuple[int, int]:
    """``(wall_ns, cpu_ns)`` of the calling thread, ~2 µs: cheap enough for every dataset call. (getrusage's thread
    times would be one syscall too, but like schedstat they are only brought up to date at ticks: a 1 ms call could
    show 4 ms on a core.) Run-queue wait and bytes read come per batch from :func:`snapshot`."""
    if end:
        cpu = time.thread_time_ns()
        return time.perf_counter_ns(), cpu
    wall = time.perf_counter_ns()
    return wall, time.thread_time_ns()


def snapshot(end: bool = False) -> tuple[int, int, int, int, int]:
    """``(wall_ns, cpu_ns, runq_ns, rchar, read_bytes)`` of the calling thread; counters are cumulative.

    The wall clock is read first at the start of an interval and last at its end (``end=True``), so a preemption
    while the counters are read falls outside the interval's counters but inside its wall time: on-CPU + run-queue
    never exceed the wall time of the interval.
    """
    sched, tio = _fds()
    wall = 0 if end else time.perf_counter_ns()
    cpu = time.thread_time_ns()
    runq = int(os.pread(sched, 128, 0).split()[1]) if sched is not None else 0
    rchar = rbytes = 0
    if tio is not None:
        # "rchar: N\nwchar: N\nsyscr: N\nsyscw: N\nread_bytes: N\n..." — fixed order since Linux 2.6.20.
        lines = os.pread(tio, 512, 0).split(b"\n")
        rchar, rbytes = int(lines[0][7:]), int(lines[4][12:])
    if end:
        wall = time.perf_counter_ns()
    return wall, cpu, runq, rchar, rbytes
