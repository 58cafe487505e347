"""The job's process tree at a window's cut: memory (RSS, USS) and the kernel's byte counters, read from /proc.

Read once per window on the main thread (a few /proc files per process: well under a millisecond for a handful of
workers), never per step. Bytes: ``read_bytes`` is what the kernel fetched from the storage device (page faults
through mmap included), ``rchar`` what read() calls asked for, cache hits included; the window's "device vs cached"
figures use the two and say which. A process that exited between cuts takes its counts with it: the delta is taken
per pid (a new pid counts from zero), so an exited worker never makes a window's bytes negative.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: USS (smaps_rollup walks every mapping: 20-200 ms for a torch process on a loaded 2-core VM, measured) is read at
#: most this often; RSS (statm: microseconds) at every cut. USS only says how much of RSS is the process's own.
USS_EVERY_S = 60.0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    out.extend(int(x) for x in f.read().split())
            except OSError:
                continue
    except OSError:
        pass
    return out


def tree(root: int) -> list[int]:
    """``root`` and every descendant (workers, their children), breadth first."""
    seen, todo = [root], [root]
    while todo:
        kids = [c for c in _children(todo.pop()) if c not in seen]
        seen.extend(kids)
        todo.extend(kids)
    return seen


def _io(pid: int) -> tuple[int, int] | None:
    try:
        with open(f"/proc/{pid}/io", "rb") as f:
            vals = dict(line.split(b": ") for line in f.read().split(b"\n") if b": " in line)
        return int(vals.get(b"rchar", 0)), int(vals.get(b"read_bytes", 0))
    except (OSError, ValueError):
        return None


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def _memory(pid: int) -> tuple[int, int]:
    """(RSS, USS) bytes; USS from smaps_rollup (Private_Clean + Private_Dirty), 0 where it cannot be read."""
    rss = uss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith((b"Rss:", b"Private_Clean:", b"Private_Dirty:")):
                    kb = int(line.split()[1]) * 1024
                    if line.startswith(b"Rss:"):
                        rss = kb
                    else:
                        uss += kb
        return rss, uss
    except (OSError, ValueError, IndexError):
        pass
    return _rss(pid), 0


@dataclass
class TreeSnapshot:
    """One cut's figures for the whole tree, and the byte deltas since the previous cut."""
    processes: int = 0
    rss_bytes: int = 0
    uss_bytes: int = 0
    rchar: int = 0  # since the previous cut
    read_bytes: int = 0  # since the previous cut


@dataclass
class TreeCounters:
    """Per-pid last counters, so a window's byte delta survives workers that come and go."""
    root: int = field(default_factory=os.getpid)
    last: dict[int, tuple[int, int]] = field(default_factory=dict)
    uss_at: float = -1e18  # monotonic time of the last USS reading
    uss: int = 0  # the last USS reading (whole tree)

    def snapshot(self) -> TreeSnapshot:
        snap = TreeSnapshot()
        now: dict[int, tuple[int, int]] = {}
        full = time.monotonic() - self.uss_at >= USS_EVERY_S
        for pid in tree(self.root):
            io = _io(pid)
            rss, uss = _memory(pid) if full else (_rss(pid), 0)
            if rss == 0 and io is None:
                continue  # gone between the listing and the read
            snap.processes += 1
            snap.rss_bytes += rss
            snap.uss_bytes += uss
            if io is not None:
                now[pid] = io
                before = self.last.get(pid, (0, 0))
                snap.rchar += max(0, io[0] - before[0])
                snap.read_bytes += max(0, io[1] - before[1])
        self.last = now
        if full:
            self.uss, self.uss_at = snap.uss_bytes, time.monotonic()
        snap.uss_bytes = self.uss
        return snap
