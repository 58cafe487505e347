"""The kernel's view of another process's threads, from /proc: what ``attach`` can know without touching the target.

Per thread: time on a core and time waiting for a core (``/proc/<pid>/task/<tid>/schedstat``, nanoseconds, exact
and cumulative, so a window's figure is a difference of two readings) and its scheduler state (``stat`` field 3:
R running or runnable, S sleeping, D uninterruptible — usually a block-device read). Per process: bytes asked for and
bytes from the block device (``/proc/<pid>/io``: rchar, read_bytes; needs the same ptrace permission as py-spy).
The rest of a thread's wall time in a window is time blocked (off a core, not runnable).

``StateSampler`` reads every thread's state at a fixed rate on a thread of ours: the share of D among the samples is
how much of the blocked time was waiting on the device rather than sleeping (a queue, a pipe, a socket).
"""
from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


#: How often the sampler looks for new children of the job (a new epoch's workers). Why 0.1 s: a loader over a small
#: dataset re-forks its workers every few tenths of a second; a look is a few /proc reads (~0.1 ms).
WATCH_EVERY_S = 0.1


@dataclass
class ThreadClock:
    on_cpu_ns: int
    runq_ns: int
    t_ns: int  # CLOCK_MONOTONIC when read


def exists(pid: int) -> bool:
    """A live process: present in /proc and not a zombie (one that exited and waits for its parent to reap it)."""
    if not Path(f"/proc/{pid}").is_dir():
        return False
    f = _stat_fields(f"/proc/{pid}/stat")
    return f is not None and f[2] not in ("Z", "X")


def read_text(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return None


def cmdline(pid: int) -> list[str]:
    raw = None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def comm(pid: int) -> str:
    return (read_text(f"/proc/{pid}/comm") or "").strip()


def _stat_fields(path: str) -> list[str] | None:
    text = read_text(path)
    if not text:
        return None
    # the command name (field 2) is in parentheses and may hold spaces: split after its closing one
    i, j = text.find("("), text.rfind(")")
    return [text[:i].strip(), text[i + 1:j], *text[j + 2:].split()]


def parent(pid: int) -> int | None:
    f = _stat_fields(f"/proc/{pid}/stat")
    return int(f[3]) if f else None


def cpu_s(pid: int, reaped_children: bool = False) -> float | None:
    """CPU seconds (user + system, stat fields 14-15) of a process; with ``reaped_children`` also those of its
    children it has waited for (16-17)."""
    f = _stat_fields(f"/proc/{pid}/stat")
    if not f:
        return None
    ticks = int(f[13]) + int(f[14]) + (int(f[15]) + int(f[16]) if reaped_children else 0)
    return ticks / CLK_TCK


def start_ticks(pid: int) -> int | None:
    """Start time in clock ticks after boot (stat field 22): with the pid, the identity of a process."""
    f = _stat_fields(f"/proc/{pid}/stat")
    return int(f[21]) if f else None


def start_time_unix(pid: int) -> float | None:
    ticks = start_ticks(pid)
    btime = None
    for line in (read_text("/proc/stat") or "").splitlines():
        if line.startswith("btime "):
            btime = int(line.split()[1])
    if ticks is None or btime is None:
        return None
    return btime + ticks / CLK_TCK


def children(pid: int) -> list[int]:
    """Direct children (every thread's children file, so a child started from any thread is found)."""
    out: set[int] = set()
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tids:
        text = read_text(f"/proc/{pid}/task/{tid}/children") or ""
        out.update(int(c) for c in text.split())
    return sorted(out)


def threads(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return []


def thread_clock(pid: int, tid: int) -> ThreadClock | None:
    text = read_text(f"/proc/{pid}/task/{tid}/schedstat")
    if not text:
        return None
    parts = text.split()
    return ThreadClock(int(parts[0]), int(parts[1]), time.monotonic_ns())


def thread_state(pid: int, tid: int) -> str | None:
    f = _stat_fields(f"/proc/{pid}/task/{tid}/stat")
    return f[2] if f else None


def process_io(pid: int) -> dict[str, int] | None:
    """{rchar, read_bytes} of the process, or None when /proc/<pid>/io cannot be read (permission, exited)."""
    text = read_text(f"/proc/{pid}/io")
    if not text:
        return None
    vals = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    try:
        return {"rchar": int(vals["rchar"]), "read_bytes": int(vals["read_bytes"])}
    except (KeyError, ValueError):
        return None


def maps_mention(pid: int, needle: str) -> bool | None:
    """Whether a shared object whose path contains ``needle`` is mapped (``libtorch`` → torch was imported); None
    when the maps cannot be read."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            return needle.encode() in f.read()
    except OSError:
        return None


def environ_value(pid: int, names: tuple[str, ...]) -> dict[str, str]:
    """Only the named variables of a process's environment (torchrun's RANK and friends), nothing else kept."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, _, v = item.partition(b"=")
        name = k.decode(errors="replace")
        if name in names:
            out[name] = v.decode(errors="replace")
    return out


@dataclass
class ThreadWindow:
    """One thread over the window: kernel clocks at both ends and state samples in between."""
    pid: int
    tid: int
    first: ThreadClock | None = None
    last: ThreadClock | None = None
    states: Counter[str] = field(default_factory=Counter)

    @property
    def wall_s(self) -> float:
        return (self.last.t_ns - self.first.t_ns) / 1e9 if self.first and self.last else 0.0

    @property
    def on_cpu_s(self) -> float:
        return (self.last.on_cpu_ns - self.first.on_cpu_ns) / 1e9 if self.first and self.last else 0.0

    @property
    def runq_s(self) -> float:
        return (self.last.runq_ns - self.first.runq_ns) / 1e9 if self.first and self.last else 0.0


class StateSampler:
    """Reads the state and clocks of the threads it is given at ``rate_hz`` on a daemon thread of this process.

    Costs the target nothing (it reads /proc files the kernel fills on demand). A thread that exits keeps its last
    reading, so its window ends where it was last seen.
    """

    def __init__(self, threads: list[tuple[int, int]], pids: list[int], rate_hz: float,
                 also: Callable[[], None] | None = None,
                 watch: Callable[[], tuple[list[tuple[int, int]], list[int]]] | None = None,
                 watch_every_s: float = WATCH_EVERY_S) -> None:
        self.also = also  # another reading to take at each tick (NVML's, attach/gpu.py)
        # ``watch``: the threads and processes to read now (the job's children change: a new epoch forks new
        # workers, a worker missed at discovery is still there); new ones are added every ``watch_every_s``
        self.watch = watch
        self.watch_every_s = watch_every_s
        self.windows = {(p, t): ThreadWindow(p, t) for p, t in threads}
        self.pids = list(pids)
        # Read at each tick: only what is alive. A thread whose clock cannot be read any more has exited (a worker of
        # an earlier epoch): its window keeps its last reading and is never read again, so a job that re-forks its
        # workers every few seconds costs each tick what its live threads cost, not every thread it ever had.
        self._live: set[tuple[int, int]] = set(self.windows)
        self._live_pids: set[int] = set(self.pids)
        self._seen_pids: set[int] = set(self.pids)
        self.ended = 0  # threads seen to exit during the window
        # Each process's command line as py-spy prints it (argv joined by spaces), read once when it is first seen:
        # the raw stacks are split by these known strings, not by text the job controls (profiler/attach/pyspy.py).
        self.cmdlines: dict[int, str] = {}
        for pid in self.pids:
            self._note_cmdline(pid)
        self.io_first: dict[int, dict[str, int]] = {}
        self.io_last: dict[int, dict[str, int]] = {}
        self.rate_hz = max(1.0, rate_hz)
        self.period = 1.0 / self.rate_hz
        self.ticks = 0
        self._stop = threading.Event()
        # ``forget`` (the window's thread) and the reader's tick (this sampler's thread) change the same dicts
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="profiler-attach-proc", daemon=True)

    def start(self) -> None:
        self._read(first=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._read(first=False)

    def _note_cmdline(self, pid: int) -> None:
        if pid not in self.cmdlines:
            argv = cmdline(pid)
            if argv:
                self.cmdlines[pid] = " ".join(argv)

    def _read(self, first: bool) -> None:
        for key in list(self._live):
            w = self.windows[key]
            c = thread_clock(w.pid, w.tid)
            if c is None:  # it has exited (or never could be read): never read again
                self._live.discard(key)
                self.ended += 1
                continue
            if first or w.first is None:
                w.first = c
            w.last = c
            s = thread_state(w.pid, w.tid)
            if s and not first:
                w.states[s] += 1
        for pid in list(self._live_pids):
            io = process_io(pid)
            if io is not None:
                if first or pid not in self.io_first:
                    self.io_first[pid] = io
                self.io_last[pid] = io
            else:
                self._live_pids.discard(pid)

    def _add_watched(self) -> None:
        if self.watch is None:
            return
        threads, pids = self.watch()
        for key in threads:
            if key not in self.windows:
                self.windows[key] = ThreadWindow(*key)  # its first reading is taken at this tick
                self._live.add(key)
        for p in pids:
            if p not in self._seen_pids:
                self._seen_pids.add(p)
                self.pids.append(p)
                self._live_pids.add(p)
                self._note_cmdline(p)

    def forget(self, pids: set[int], threads: set[tuple[int, int]]) -> None:
        """Drop every record of processes ``pids`` and of threads ``threads`` that exited, once the caller folded
        their figures into totals (profiler/attach/fold.py): a job that re-forks its workers then costs attach the
        memory of its live threads, not of every thread it ever had. A live one is never dropped."""
        with self._lock:
            for key in [k for k in self.windows if (k[0] in pids or k in threads) and k not in self._live]:
                del self.windows[key]
            gone = {p for p in pids if p not in self._live_pids}
            for p in gone:
                self.io_first.pop(p, None)
                self.io_last.pop(p, None)
                self.cmdlines.pop(p, None)
            self._seen_pids -= gone
            self.pids = [p for p in self.pids if p not in gone]

    def alive(self, pid: int) -> bool:
        """Whether the main thread of ``pid`` could still be read at the last tick."""
        return (pid, pid) in self._live

    def thread_alive(self, key: tuple[int, int]) -> bool:
        return key in self._live

    @property
    def live(self) -> int:
        """Threads read at each tick now (the live ones)."""
        return len(self._live)

    def _loop(self) -> None:
        nxt = time.monotonic()
        watched = nxt
        while not self._stop.is_set():
            with self._lock:
                if self.watch is not None and time.monotonic() >= watched:
                    self._add_watched()
                    watched = time.monotonic() + self.watch_every_s
                self._read(first=False)
            if self.also is not None:
                self.also()
            self.ticks += 1
            nxt += self.period
            self._stop.wait(max(0.0, nxt - time.monotonic()))

    def io_delta(self, pid: int) -> dict[str, int] | None:
        a, b = self.io_first.get(pid), self.io_last.get(pid)
        if a is None or b is None:
            return None
        return {k: max(0, b[k] - a[k]) for k in a}
