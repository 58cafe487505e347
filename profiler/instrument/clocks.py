"""Per-thread kernel accounting: wall clock, on-CPU time, run-queue wait, bytes read — cheap enough per sample.

Why per thread: a DataLoader worker runs the dataset in its main thread while its queue-feeder thread pickles the
previous batch, and the main process has a pin-memory thread; process-wide counters would mix them. Linux keeps
per-thread figures. Two tiers, by cost:

- per dataset call and per collate, wall clock and on-CPU time only (``perf_counter_ns`` and ``thread_time_ns``
  read inline by worker.py's proxies, ~0.3 µs together); the rest of the call is off-CPU;
- per batch (worker side) :func:`snapshot` (~2.5 µs) adds the run-queue wait and bytes read (asked for, and from the
  block device), which the batch then shares out over its calls and its collate; per step (main side)
  :func:`sched_snapshot` reads the run-queue wait without the byte counts:

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


# Bumped in a forked child: a thread's descriptors opened before the fork read the *parent's* thread, so the child's
# threads open their own. (Checked per read instead of os.getpid(), which is a system call.)
_generation = 0
_proc_io: tuple[int, int | None] | None = None  # (pid, fd of /proc/self/io) in this process


def _after_fork() -> None:
    global _generation, _proc_io
    _generation += 1
    _proc_io = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _fds() -> tuple[int | None, int | None]:
    fds = getattr(_local, "fds", None)
    if fds is None or _local.generation != _generation:
        fds = (_open("/proc/thread-self/schedstat"), _open("/proc/thread-self/io"))
        _local.fds, _local.generation = fds, _generation
    return fds


def process_io() -> tuple[int, int]:
    """``(rchar, read_bytes)`` of this whole process, cumulative; ``(-1, -1)`` where /proc/self/io cannot be read.

    Read once per batch; the descriptor is opened once per process (a forked worker opens its own: /proc/self resolves
    at open time, so an inherited descriptor would read the parent)."""
    global _proc_io
    if _proc_io is None:
        _proc_io = (os.getpid(), _open("/proc/self/io"))
    fd = _proc_io[1]
    if fd is None:
        return -1, -1
    try:
        lines = os.pread(fd, 512, 0).split(b"\n")
        return int(lines[0][7:]), int(lines[4][12:])
    except (OSError, ValueError, IndexError):
        return -1, -1


def accounting() -> dict:
    """What this process can measure: recorded once per run as ``timeline.accounting``."""
    sched, tio = _fds()
    return {"cpu_clock": "thread_time", "runqueue": sched is not None,
            "thread_io": tio is not None, "absent": dict(ABSENT)}


def cpu_snapshot(end: bool = False) -> tuple[int, int, int]:
    """``(wall_ns, cpu_ns, 0)``: the same shape as :func:`sched_snapshot` without reading /proc, where the run-queue
    wait of the interval comes from elsewhere (a num_workers=0 step: its fetch reads it)."""
    if end:
        cpu = time.thread_time_ns()
        return time.perf_counter_ns(), cpu, 0
    wall = time.perf_counter_ns()
    return wall, time.thread_time_ns(), 0


def sched_snapshot(end: bool = False) -> tuple[int, int, int]:
    """``(wall_ns, cpu_ns, runq_ns)`` of the calling thread: :func:`snapshot` without the io counters, for the main
    thread's per-step reads (which use no byte counts)."""
    sched = _fds()[0]
    wall = 0 if end else time.perf_counter_ns()
    cpu = time.thread_time_ns()
    runq = int(os.pread(sched, 128, 0).split()[1]) if sched is not None else 0
    if end:
        wall = time.perf_counter_ns()
    return wall, cpu, runq


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


def counters() -> tuple[int, int, int]:
    """``(runq_ns, rchar, read_bytes)`` of the calling thread, cumulative: :func:`snapshot` without the clocks, for
    a fetch that reads its clocks itself (around its own work, not around these reads)."""
    sched, tio = _fds()
    runq = int(os.pread(sched, 128, 0).split()[1]) if sched is not None else 0
    if tio is None:
        return runq, 0, 0
    lines = os.pread(tio, 512, 0).split(b"\n")
    return runq, int(lines[0][7:]), int(lines[4][12:])
