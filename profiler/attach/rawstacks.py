"""py-spy's folded (``record --format raw``) output, parsed: the stacks, their frames, and the job-controlled text
(command lines, thread names) skipped by structure. Apart from profiler/attach/pyspy.py (which runs py-spy) so that
the short-lived child that parses a rotated-out piece (profiler/attach/pieces.py) imports only this and the standard
library: no torch, nothing of attach's own state.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Frame:
    name: str  # "Class.method" or "function"
    file: str  # full path
    line: int


@dataclass
class Stack:
    """One folded stack of the raw output: which process chain and thread, the frames (outermost first), count."""
    pids: tuple[int, ...]  # the process chain py-spy printed: the attached root first, the sampled process last
    tid: int
    thread_name: str
    frames: tuple[Frame, ...]
    count: int

    @property
    def pid(self) -> int:
        return self.pids[-1]


_PROCESS_HEAD = re.compile(r'process (\d+):"')
_PROCESS_END = re.compile(r'";(?=process \d+:"|thread \((?:0x[0-9a-fA-F]+|\d+)\))')
_THREAD = re.compile(r"thread \((0x[0-9a-fA-F]+|\d+)\)")
_FRAME = re.compile(r"^(?P<name>.*) \((?P<file>.*):(?P<line>\d+)\)$")


def _tid(text: str) -> int:
    return int(text, 16) if text.startswith("0x") else int(text)


def _process_end(body: str, pid: int, start: int, cmdlines: dict[int, str],
                 tids: dict[int, set[int]]) -> int | None:
    """Where process ``pid``'s quoted command line ends (the index after its ``";``), or None.

    The command line is text the job controls: an argv holding ``";thread (`` once split a line there, the main
    thread got no samples and a worker 40 s in a 5 s window. So by structure first: the command line as attach read
    it from /proc (py-spy prints argv joined by spaces, read from the same file); else the end after which the next
    process is one we know, or the thread is one we know of this process; else the first end a process follows, or
    the last end a thread follows (frame names and file names, after it, hold a ``"`` far more rarely than an argv).
    """
    known = cmdlines.get(pid)
    if known is not None and body.startswith(known + '";', start):
        return start + len(known) + 2
    ends = [m.end() for m in _PROCESS_END.finditer(body, start)]
    if not ends:
        return None
    mine = tids.get(pid, set())
    for e in ends:
        nxt = _PROCESS_HEAD.match(body, e)
        if nxt is not None and int(nxt.group(1)) in cmdlines:
            return e
        t = _THREAD.match(body, e)
        if t is not None and _tid(t.group(1)) in mine:
            return e
    # nothing known: a child process follows at the first end that names one, a thread at the last
    return next((e for e in ends if _PROCESS_HEAD.match(body, e)), ends[-1])


def _thread_name(parts: list[str], known: str | None) -> int:
    """How many ``;``-separated parts the thread's name takes (a Python thread name may hold ``;``): the name we know
    for the thread, else up to the first part that is a frame (``name (file:line)``)."""
    if known:
        n = known.count(";") + 1
        if ";".join(parts[:n]) == known:
            return n
    n = 1
    while n < len(parts) and not _FRAME.match(parts[n]):
        n += 1
    return n if n < len(parts) else 1


def parse_raw(text: str, cmdlines: dict[int, str] | None = None,
              threads: dict[tuple[int, int], str] | None = None) -> list[Stack]:
    """py-spy's raw (folded) output with ``--threads --subprocesses``: one stack per line, its count last.

    A line is ``process PID:"ARGV";`` for each process of the chain (the attached root first), ``thread (TID)``
    with ``: NAME`` when the thread has one, then the frames, ``;``-separated. ``cmdlines`` (pid → argv joined by
    spaces) and ``threads`` ((pid, tid) → name), what attach read itself, let the job-controlled parts be skipped by
    their known text rather than searched for a separator (see ``_process_end``)."""
    cmdlines = cmdlines or {}
    threads = threads or {}
    tids: dict[int, set[int]] = {}
    for pid, tid in threads:
        tids.setdefault(pid, set()).add(tid)
    out: list[Stack] = []
    for line in text.splitlines():
        body, _, count = line.rstrip().rpartition(" ")
        if not body or not count.isdigit():
            continue
        pids: list[int] = []
        pos = 0
        while True:
            m = _PROCESS_HEAD.match(body, pos)
            if not m:
                break
            end = _process_end(body, int(m.group(1)), m.end(), cmdlines, tids)
            if end is None:
                break
            pids.append(int(m.group(1)))
            pos = end
        t = _THREAD.match(body, pos)
        if not pids or not t:
            continue
        tid = _tid(t.group(1))
        rest = body[t.end():]
        name = ""
        parts: list[str] = []
        if rest.startswith(": "):
            parts = rest[2:].split(";")
            n = _thread_name(parts, threads.get((pids[-1], tid)))
            name, parts = ";".join(parts[:n]), parts[n:]
        elif rest.startswith(";"):
            parts = rest[1:].split(";")
        frames = []
        for part in parts:
            f = _FRAME.match(part)
            if f:
                frames.append(Frame(f.group("name"), f.group("file"), int(f.group("line"))))
            elif part:
                frames.append(Frame(part, "", 0))
        out.append(Stack(tuple(pids), tid, name.strip(), tuple(frames), int(count)))
    return out
