"""Per-thread kernel accounting: wall clock, on-CPU time, run-queue wait, bytes read — cheap enough per sample.

Why per thread: a DataLoader worker runs the dataset in its main thread while its queue-feeder thread pickles the
previous batch, and the main process has a pin-memory thread; process-wide counters would mix them. Linux keeps
per-thread figures. Two tiers, by cost:

- per dataset call and per collate, wall clock and on-CPU time only (``perf_counter_ns`` and ``thread_time_ns``
  read inline by proxies.py's proxies, ~0.3 µs together); the rest of the call is off-CPU;
- per batch, :func:`fetch_start` and :func:`fetch_end` add the run-queue wait and bytes read (asked for, and from
  the block device), which the batch then shares out over its calls and its collate; per step (main side, with
  workers) :class:`WaitClocks` reads the run-queue wait without the byte counts. Both read /proc as seldom as
  exactness allows (see PROBE_EVERY, WaitClocks): on a light loop, one read per batch at most.

- on-CPU time: ``time.thread_time_ns()`` (CLOCK_THREAD_CPUTIME_ID), exact to the nanosecond at the moment of the
  call. (schedstat's on-CPU field is only brought up to date at ticks and context switches, so for a call of a few
  ms it can be off by a whole tick.)
- ``/proc/thread-self/schedstat`` field 2: run-queue wait ns (sched_info; on with CONFIG_SCHED_INFO, which every
  distribution kernel has) — time the thread was ready to run but had no core: the signature of oversubscribed
  workers. It grows when the thread is switched back in, so between two reads made while the thread runs it counts
  exactly the waits in between.
- ``/proc/thread-self/io``: ``rchar`` (bytes the thread asked ``read()`` for, page cache or not: the profiler's own
  /proc reads included, which are therefore counted and taken out) and ``read_bytes`` (bytes it caused to be
  fetched from the block device; also ``getrusage(RUSAGE_THREAD).ru_inblock`` x 512, which is what is read).

A file descriptor of ``/proc/thread-self/...`` is bound to the thread that opened it, so each thread opens its own
(kept in a ``threading.local``) and re-reads it with one ``pread`` (~1-2 µs each). Every timestamp is
``time.perf_counter_ns()`` — CLOCK_MONOTONIC on Linux — comparable across the processes of one machine.
"""
from __future__ import annotations

import os
import resource
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
    global _generation, _proc_io, _proc_io_left
    _generation += 1
    _proc_io = None
    _proc_io_left = 0  # a forked worker's first fetch reads /proc/self/io (process_io_if)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


# The run-queue wait and the byte counts, at the fewest reads of /proc (each ~1-2 µs, and ~4 µs of the job's own
# time on a busy loop: they evict what the job had in cache):
# - read_bytes comes from getrusage(RUSAGE_THREAD) (ru_inblock is the same counter in 512-byte units), which is
#   cheaper than any /proc read and leaves the job's caches alone;
# - the run-queue wait grows only when the thread is switched back in after waiting, which follows a context switch
#   away from it, and getrusage counts those (ru_nvcsw + ru_nivcsw): while the count has not moved since schedstat
#   was last read, the wait is the value read then, exactly;
# - rchar needs /proc/thread-self/io. A fetch's start takes the value read at its thread's previous fetch's end, as
#   long as nothing is read between fetches; every PROBE_EVERY-th fetch reads it at its start as well, and once one
#   finds bytes read in between (the job's own loop reads files, or a worker's index queue is a pipe), the thread
#   reads it at both ends of every fetch. Why 16: a job that reads between its fetches does so at every step (a file
#   per step) or seldom (a checkpoint): the first is found within 16 batches, and the second costs at most the bytes
#   of that one read, counted as its next fetch's.
PROBE_EVERY = 16
# - and while a thread's fetches read nothing (QUIET_AFTER in a row whose rchar did not move, none read between
#   them), its fetches' ends stop reading rchar too: every PROBE_EVERY-th reads it. rchar only ever grows, so a read
#   that finds it where it was shows that every fetch since read nothing: exact, at 1/16 of the reads (an in-memory
#   dataset on num_workers=0 reads nothing, and this read was ~1.5 µs of each batch's profiler cost). A probe that
#   finds bytes ends the quiet stretch, and those bytes are that fetch's: the totals stay exact, and only a job that
#   starts reading files after 16 fetches that read none places up to 16 fetches' bytes on one (or, where its loop
#   starts reading between fetches, that loop's bytes once: the stretch ends, and the start probes find the loop).
QUIET_AFTER = PROBE_EVERY
# - a thread found reading between fetches reads rchar at both ends of every fetch, and goes back to probing once
#   QUIET_AFTER fetches in a row found nothing read between them: a one-off read (torch's first backward reads the
#   4-byte /sys/devices/system/cpu/online through glibc's sysconf) must not cost every later batch two /proc reads
#   and keep a light loop's fetches from ever being lean; a loop that reads at every step stays exact.


class _Thread:
    """One thread's kept-open /proc descriptors and what it last read from them (see above)."""

    __slots__ = ("sched", "io", "generation", "csw", "runq", "io_raw", "own_at_raw", "own", "probe", "exact",
                 "calm", "zero_run", "quiet_left", "inblock", "gaps", "gap_max", "carried", "end_gaps")

    def __init__(self) -> None:
        self.sched = _open("/proc/thread-self/schedstat")
        self.io = _open("/proc/thread-self/io")
        self.generation = _generation
        self.csw = -1  # context switches counted when ``runq`` was read (-1: never read)
        self.runq = 0
        self.io_raw = b""  # /proc/thread-self/io at the end of this thread's last fetch (b"": none yet)
        self.own_at_raw = 0  # ``own`` when io_raw was read
        # Bytes this thread has read from /proc for the profiler: rchar counts every read, these too, so a fetch's
        # rchar is its delta less the delta of this (exact: what was read is known).
        self.own = 0
        self.probe = 0  # fetch starts until the next probe
        self.exact = False  # bytes were read between two fetches: read rchar at both ends of every fetch
        self.calm = 0  # exact: fetches in a row with nothing read between them (QUIET_AFTER: not exact any more)
        self.zero_run = 0  # fetches in a row whose rchar did not move (QUIET_AFTER or more: quiet; < 0: read lately)
        self.quiet_left = 0  # quiet fetch ends until the next one that reads rchar
        self.inblock = 0  # getrusage's ru_inblock at this thread's last fetch_end (512-byte units)
        # A worker's lean stretches (NOTE [ Lean fetches in workers ], inline_fetch.py; set by lean_gaps): the times
        # between fetches since its last fetch_end (1: the usual one; > 1: lean fetches in between; 0: unknown,
        # fetches skipped under the monitor), the most bytes one of those times was seen to read (the index queue's
        # message), and the bytes a lean stretch asked for beyond them, carried to the fetch that found them.
        self.gaps = 1
        self.gap_max = 0
        self.carried = 0
        self.end_gaps = 0  # (end_gaps)


def _state() -> _Thread:
    st: _Thread | None = getattr(_local, "state", None)
    if st is None or st.generation != _generation:
        st = _local.state = _Thread()
    return st


def _fds() -> tuple[int | None, int | None]:
    st = _state()
    return st.sched, st.io


_getrusage = resource.getrusage
_RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)


def _runq(st: _Thread, csw: int) -> int:
    if csw != st.csw and st.sched is not None:
        buf = os.pread(st.sched, 128, 0)
        st.own += len(buf)
        st.runq = int(buf.split()[1])
        st.csw = csw
    return st.runq


def _read_io(st: _Thread, fd: int) -> tuple[bytes, int]:
    """/proc/thread-self/io now, and ``own`` as it stands in that reading (this read's bytes come after it)."""
    own = st.own
    buf = os.pread(fd, 512, 0)
    st.own = own + len(buf)
    return buf, own


# A fetch's counters, in this order (fetch_start says what each is); read them by unpacking
# (``runq, read_bytes, io, own, switches = c``), never by a bare index.
Counters = tuple[int, int, bytes, int, int]


def fetch_start() -> Counters:
    """``(runq_ns, read_bytes, io, own, switches)`` of the calling thread at a fetch's start, cumulative: ``io`` is
    /proc/thread-self/io as read (unparsed; ``b""``: not readable), maybe at the end of its previous fetch (above),
    ``own`` the bytes of the profiler's own reads that its rchar counts, and ``switches`` its context switches
    (getrusage: voluntary and not; none between two readings: the thread stayed on its core in between)."""
    st = _state()
    ru = _getrusage(_RUSAGE_THREAD)
    csw = ru.ru_nvcsw + ru.ru_nivcsw
    runq = _runq(st, csw)
    raw, own = st.io_raw, st.own_at_raw
    inblock = ru.ru_inblock
    gaps = st.gaps
    if gaps != 1:
        st.gaps = 1
        if gaps > 1:  # a worker's lean stretch since its last fetch_end: blocks read since then are its fetches'
            inblock = st.inblock
    if st.io is not None and st.zero_run < QUIET_AFTER:  # quiet: the end's probe finds any read (see above)
        if st.exact and raw:
            prev, prev_own = raw, own
            raw, own = _read_io(st, st.io)
            between = parse_rchar(raw) - parse_rchar(prev) - (own - prev_own)
            if gaps == 1:  # the most one time between fetches read (since forget_last_fetch: a new fetcher)
                if between > st.gap_max:
                    st.gap_max = between
            elif gaps > 1 and between > gaps * st.gap_max:  # the stretch's fetches read: carried to this one
                st.carried = between - gaps * st.gap_max
            if between > 0:
                st.calm = 0
            else:  # nothing read since the last fetch ended: after QUIET_AFTER such in a row, probe again (above)
                st.calm += 1
                if st.calm >= QUIET_AFTER:
                    st.exact, st.calm, st.probe = False, 0, PROBE_EVERY
        elif not raw:
            raw, own = _read_io(st, st.io)
        else:
            st.probe -= 1
            if st.probe <= 0:
                st.probe = PROBE_EVERY
                now, own_now = _read_io(st, st.io)
                if parse_rchar(now) - parse_rchar(raw) > own_now - own:
                    st.exact = True  # read between fetches: not a fetch's, so both ends of every fetch from now on
                raw, own = now, own_now
    return runq, inblock * 512, raw, own, csw


def fetch_end(probe: bool = False) -> Counters:
    """The same at a fetch's end (io read now, and kept as the next fetch's start). ``probe``: read rchar even in a
    quiet stretch (the written-out fetch's lean stretches call this once per stretch: :func:`quiet` says why)."""
    st = _state()
    ru = _getrusage(_RUSAGE_THREAD)
    csw = ru.ru_nvcsw + ru.ru_nivcsw
    runq = _runq(st, csw)
    st.inblock = ru.ru_inblock
    if st.io is None:
        return runq, ru.ru_inblock * 512, b"", st.own, csw
    prev, prev_own = st.io_raw, st.own_at_raw
    if st.zero_run >= QUIET_AFTER:
        st.quiet_left -= 1
        if st.quiet_left > 0 and not probe:  # as at its start: nothing read (the next probe shows it)
            return runq, ru.ru_inblock * 512, prev, prev_own, csw
        st.quiet_left = PROBE_EVERY
    raw, own = _read_io(st, st.io)
    st.io_raw, st.own_at_raw = raw, own
    if not st.exact and prev:  # its start was ``prev`` (nothing read between fetches): did it read anything?
        if st.zero_run < 0:  # it read lately: not asked again for PROBE_EVERY fetches (a reading job keeps reading)
            st.zero_run += 1
        elif parse_rchar(raw) - parse_rchar(prev) > own - prev_own:
            st.zero_run = -PROBE_EVERY
        elif st.zero_run < QUIET_AFTER:
            st.zero_run += 1
            st.quiet_left = PROBE_EVERY
    return runq, ru.ru_inblock * 512, raw, own, csw


def runq_read() -> int:
    """The calling thread's run-queue wait (ns, cumulative), read from schedstat now (a worker's lean fetch reads it
    at its start: its time since the previous fetch then has its own run-queue figure); 0 where unreadable."""
    st = _state()
    if st.sched is None:
        return 0
    buf = os.pread(st.sched, 128, 0)
    st.own += len(buf)  # this thread's rchar counts it: the profiler's own read
    st.runq = runq = int(buf.split()[1])
    st.csw = -1  # (_runq's cache: its next reading reads again)
    return runq


def lean_gaps(n: int) -> None:
    """The calling thread's next fetch_start follows ``n`` times between fetches since its last fetch_end: ``n - 1``
    lean fetches in between (a worker's lean stretch), or 0: fetches skipped (the monitor's), an unknown number."""
    _state().gaps = n


def end_gaps(n: int) -> None:
    """The calling thread's next since_last_fetch_end is for a worker's lean fetch that left its core, the ``n``-th
    lean fetch since its last fetch_end: its counters span ``n`` times between fetches."""
    _state().end_gaps = n


def take_carried() -> int:
    """Bytes a worker's lean stretch asked for, found at this fetch's start (fetch_start): counted as this fetch's
    (as the main thread's stretch's bytes land on its probe); 0 once taken."""
    st = _state()
    n, st.carried = st.carried, 0
    return n


def quiet() -> bool:
    """Have the calling thread's fetches, and what ran between them, read nothing lately (QUIET_AFTER fetches in a row
    whose rchar did not move)? Then a fetch that stays on its core needs no counters at all: on its core it waited for
    no core and blocked on no read, and rchar's probe at the next stretch's end finds any bytes it asked for. The
    written-out fetch on the main thread (``num_workers=0``) uses this to skip both getrusage calls of a batch in all
    but one of every LEAN_STRETCH batches (inline_fetch.inline_map_fetch, LEAN_STRETCH)."""
    st: _Thread | None = getattr(_local, "state", None)
    return st is not None and st.generation == _generation and st.io is not None and not st.exact \
        and st.zero_run >= QUIET_AFTER


def since_last_fetch_end() -> Counters:
    """The counters as the calling thread's last :func:`fetch_end` left them, as a start for a fetch that read none of
    its own at its start (a lean one that turned out to leave its core: inline_fetch.inline_map_fetch)."""
    st = _state()
    own, gaps = st.own_at_raw, st.end_gaps
    if gaps:  # a worker's lean fetches (end_gaps): the index queue's bytes in their gaps are not the fetch's
        st.end_gaps = 0
        own -= gaps * st.gap_max  # (at most: envelope counts no fewer than 0 bytes)
    return st.runq, st.inblock * 512, st.io_raw, own, st.csw


def forget_last_fetch() -> None:
    """The calling thread's next fetch reads rchar at its start: what ran since its last fetch (a new iterator being
    made, the profiler's own set-up) is not the job's loop between two fetches of one loader."""
    st: _Thread | None = getattr(_local, "state", None)
    if st is not None:
        st.io_raw = b""
        st.probe = 0  # and its second fetch probes: reads between fetches are found from the first gap on
        st.exact = False
        st.calm = 0
        st.zero_run = 0
        st.gaps, st.gap_max, st.carried, st.end_gaps = 1, 0, 0, 0  # a new fetcher's times between fetches: afresh


def runq_now() -> int:
    """The calling thread's run-queue wait (ns, cumulative), read from schedstat only if it may have moved."""
    st = _state()
    ru = _getrusage(_RUSAGE_THREAD)
    return _runq(st, ru.ru_nvcsw + ru.ru_nivcsw)


def process_io() -> tuple[int, int]:
    """``(rchar, read_bytes)`` of this whole process, cumulative; ``(-1, -1)`` where /proc/self/io cannot be read.

    Read at most once per batch (process_io_if says when); the descriptor is opened once per process (a forked
    worker opens its own: /proc/self resolves at open time, so an inherited descriptor would read the parent)."""
    global _proc_io
    if _proc_io is None:
        st = _state()
        before = parse_rchar(os.pread(st.io, 512, 0)) if st.io is not None else 0
        _proc_io = (os.getpid(), _open("/proc/self/io"))
        if st.io is not None:  # the opening's own test read and these two reads: counted as ours
            after = os.pread(st.io, 512, 0)
            st.own += parse_rchar(after) - before + len(after)
    fd = _proc_io[1]
    if fd is None:
        return -1, -1
    try:
        buf = os.pread(fd, 512, 0)
        _state().own += len(buf)  # this thread's rchar counts it too: the profiler's own read
        lines = buf.split(b"\n")
        return int(lines[0][7:]), int(lines[4][12:])
    except (OSError, ValueError, IndexError):
        return -1, -1


# /proc/self/io in a worker (process_io_if): read at the end of every fetch whose own thread read bytes (rchar or
# read_bytes moved), of the worker's first fetch, and of every PROCESS_IO_EVERY-th fetch otherwise; the others record
# -1 (not read), which io.py's totals skip. Why: it was one of a light worker batch's four /proc reads (~3 µs each in a
# worker, by perf's syscall timestamps), and a worker whose fetches read nothing moves it only by what its other
# threads read (the index queue's pipe, a dataset's own threads): the readings stay exact where they are taken, and a
# window's totals (io.py: the last reading in the window less the last before it) miss at most PROCESS_IO_EVERY - 1
# batches' worth of such reads at each end, never a byte the fetches read.
PROCESS_IO_EVERY = PROBE_EVERY
_proc_io_left = 0  # fetches of this process until the next unconditional reading


def process_io_if(moved: bool) -> tuple[int, int]:
    """:func:`process_io` where the fetch's own thread read bytes (``moved``) or the cadence is due (above); else
    ``(-1, -1)``, not read."""
    global _proc_io_left
    if moved or _proc_io_left <= 0:
        _proc_io_left = PROCESS_IO_EVERY - 1
        return process_io()
    _proc_io_left -= 1
    return -1, -1


def accounting() -> dict:
    """What this process can measure: recorded once per run as ``timeline.accounting``."""
    sched, tio = _fds()
    return {"cpu_clock": "thread_time", "runqueue": sched is not None,
            "thread_io": tio is not None, "absent": dict(ABSENT)}


class WaitClocks:
    """The main thread's clocks around a step's wait for a batch made by workers: ``(wall, on-CPU, run-queue)`` ns at
    its start (:meth:`start`) and its end (:meth:`end`, read in the opposite order: NOTE [ Wall clock outside, on-CPU
    clock inside ], derived.py).

    The run-queue wait grows only when the thread waited for a core, which it can only have done while off its core.
    So schedstat is read only where the wall and on-CPU clocks show time off the core since the last reading (in all,
    OFF_LIMIT_NS or more): at the wait's end after the thread blocked for the batch, at its start after a step whose
    compute left its core (a preemption, a CUDA synchronisation). Otherwise the last reading stands, off by less than
    OFF_LIMIT_NS in all. Why: getrusage at both ends (to see a context switch) and schedstat at the end were ~3 % of a
    light loop's CPU per batch with workers (scripts/bench_overhead_light.py, concurrent pairs, 2026-12-06: +7.7 %
    with them, +4.5 % with none of the three)."""

    __slots__ = ("wall", "cpu", "runq", "off")
    OFF_LIMIT_NS = 10_000  # derived.CLOSE_TIMING_FROM_OFF_NS: the same bound a lean fetch's counters rest on

    def __init__(self) -> None:
        self.wall = self.cpu = self.runq = 0
        self.off = self.OFF_LIMIT_NS  # time off the core not yet read into ``runq`` (the limit: read first)

    def start(self) -> tuple[int, int, int]:
        wall = time.perf_counter_ns()
        return self._reading(wall, time.thread_time_ns())

    def end(self) -> tuple[int, int, int]:
        cpu = time.thread_time_ns()
        return self._reading(time.perf_counter_ns(), cpu)

    def _reading(self, wall: int, cpu: int) -> tuple[int, int, int]:
        """The clocks read now; schedstat too if the time off the core since its last reading reached the limit."""
        off = self.off + (wall - self.wall) - (cpu - self.cpu)
        if off >= self.OFF_LIMIT_NS:
            self.runq, off = runq_read(), 0
        self.wall, self.cpu, self.off = wall, cpu, off
        return wall, cpu, self.runq


def parse_rchar(raw: bytes) -> int:
    """``rchar`` from a /proc/*/io read (0 for ``b""``: not readable). "rchar: N" is its first line (Linux 2.6.20+)."""
    return int(raw[7:raw.index(b"\n")]) if raw else 0
