"""The stack sampler behind ``attach``: py-spy, run as a separate process against the target. The one module that
knows py-spy; Austin could replace it by providing the same three things (``find_binary``, ``dump``, ``Recording``).

Why py-spy: a PyPI wheel with its own static binary (nothing to compile, already a dependency), it reads the target's
memory with ``process_vm_readv`` and, with ``--nonblocking``, never stops the target (Austin also reads without
stopping, but is a separate native install and its output names no thread roles). Why ``record --format raw`` for
the window and not one ``dump`` per tick: ``dump`` starts a process, re-reads the target's symbols and walks every
thread each time (tens of ms of CPU per tick), while one ``record`` process samples all of the job's processes
(``--subprocesses``) at a fixed rate for the whole window and writes the folded stacks with counts at the end, also
when stopped by SIGINT or when the target exits. ``--idle`` keeps the samples of threads that are waiting (the main
thread blocked in the DataLoader's queue is exactly the figure we want); ``--threads`` names each sample's thread
id, so the kernel's per-thread counters can be joined to it; ``--full-filenames`` tells user code from libraries.

One ``dump --json`` per process is used before sampling, to check that we may read the process, that it is Python,
and to tell DataLoader workers and the pin-memory thread apart by their frames.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import UserError
from . import pieces
from .rawstacks import Frame, Stack
from .rawstacks import parse_raw as parse_raw  # re-exported: callers and tests parse py-spy's text through here

#: How long ``dump`` may take before we give up on a process. Why 10 s: it parses the target's binary for symbols
#: (~0.1-0.5 s for CPython with torch loaded, more on a loaded machine); beyond that something is wrong.
DUMP_TIMEOUT_S = 10.0
#: How long py-spy may take to write its file after SIGINT or the end of its duration. It only serialises counts.
STOP_TIMEOUT_S = 15.0
#: Times a ``record`` that ended by itself with an error before its first sample is started again. Why: on a loaded
#: machine py-spy can fail its first read of a busy target and exit with an empty message; the next start a moment
#: later reads it (seen in CI beside other tests: --rank-of a worker failed one rank of two, exit 2). Two, because
#: a target py-spy really cannot read fails the same way each time and the window must not be spent on it.
RECORD_RESTARTS = 2
#: A ``record`` is ended (SIGINT: it writes its file) and a fresh one started every this many seconds of a long
#: window; the pieces' stacks are folded here. Why: py-spy keeps every stack and every process it has seen, dead ones
#: included, until it ends; on a job that re-forks its workers every second its memory grew 7.5 -> 70 MB and its CPU
#: 5.8 -> 7.3 % of a core over 30 min (scripts/bench_attach_long.py). Why 300 s: a 30 s default window never rotates
#: (no gap, no extra start-up), a piece's growth stays at ~10 MB, and the ~0.1-0.5 s gap that each rotation leaves
#: (the new py-spy parsing the target's symbols) is <= 0.2 % of the time sampled.
ROTATE_S = 300.0
#: The environment variable that sets ``ROTATE_S`` (seconds, >= 1) for a bench or a test that wants rotations within
#: minutes (scripts/bench_attach_long.py --rotate); anything else leaves 300 s.
ROTATE_ENV = "PROFILER_ATTACH_ROTATE_S"


def rotation_period() -> float:
    """The rotation period: ``ROTATE_S``, or the environment's ``ROTATE_ENV`` when it is a number >= 1."""
    try:
        v = float(os.environ.get(ROTATE_ENV, ""))
    except ValueError:
        return ROTATE_S
    return v if v >= 1 else ROTATE_S


#: A rotation is skipped when less than this (or less than the rotation period, when shorter) is left of the record's
#: duration: a piece that short would only add a gap and a start-up. Why 10 s: twice the 5 s backstop that attach
#: adds to its window (it stops py-spy itself), so the window's end is never preceded by a needless rotation.
MIN_PIECE_S = 10.0
#: Lines of py-spy's file parsed at once (profiler/attach/pieces.py, where the reason for 500 is).
FOLD_LINES = pieces.FOLD_LINES


class SamplerError(UserError):
    """py-spy could not read the target; the message says why in one line, and how to fix it where one can."""


@dataclass
class ThreadDump:
    pid: int
    tid: int
    name: str | None
    active: bool
    frames: tuple[Frame, ...]  # outermost first


@dataclass
class RecordingResult:
    stacks: list[Stack] = field(default_factory=list)
    samples: int = 0  # the total py-spy reported (per process sampled per tick)
    errors: int = 0  # samples py-spy could not read (a process exiting, a torn read in nonblocking mode)
    stopped_by: str = "duration"  # "duration" | "signal" | "target exited"
    log: str = ""


def find_binary() -> str:
    """py-spy next to this Python first (the wheel's own binary in this environment), then on PATH."""
    here = Path(sys.executable).parent / "py-spy"
    try:
        if here.is_file() and os.access(here, os.X_OK):
            return str(here)
    except OSError:  # a folder this user may not look into (another user's environment)
        pass
    found = shutil.which("py-spy")
    if found:
        return found
    raise SamplerError("py-spy is not installed: pip install py-spy (attach samples the job's stacks with it)")


def version(binary: str) -> str | None:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=DUMP_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().split()[-1] if out.stdout.strip() else None


def _env() -> dict[str, str]:
    return {**os.environ, "RUST_BACKTRACE": "0"}  # a one-line error, not a Rust backtrace


def explain(pid: int, stderr: str) -> str:
    """py-spy's error output as one line a user can act on."""
    text = stderr.lower()
    if "permission" in text or "operation not permitted" in text:
        return permission_hint(pid)
    if "failed to find python version" in text or "no python processes found" in text:
        return f"process {pid} is not a Python process py-spy can read (is it a launcher such as bash or torchrun's " \
               "agent? give the training process's PID)"
    if "no such process" in text or "check that the process is running" in text:
        return f"process {pid} exited"
    first = next((ln.strip() for ln in stderr.splitlines() if ln.strip() and not ln.startswith("py-spy>")), "")
    return f"py-spy could not sample process {pid}: {first[:200] or 'no reason given'}"


def permission_hint(pid: int) -> str:
    scope = None
    try:
        scope = Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip()
    except OSError:
        pass
    how = ("run attach as the job's user with ptrace allowed (sudo sysctl kernel.yama.ptrace_scope=0), as root, or "
           "with CAP_SYS_PTRACE (docker run --cap-add SYS_PTRACE; in Kubernetes securityContext.capabilities.add: "
           "[SYS_PTRACE])")
    yama = f" (kernel.yama.ptrace_scope is {scope})" if scope not in (None, "0") else ""
    return f"not allowed to read process {pid}'s memory{yama}: {how}"


def _frames(raw: list[dict[str, Any]]) -> tuple[Frame, ...]:  # py-spy's JSON frames
    out = [Frame(str(f.get("name") or "?"), str(f.get("filename") or ""), int(f.get("line") or 0)) for f in raw]
    return tuple(reversed(out))  # dump lists the innermost frame first


#: Attempts of one ``dump`` before giving up. Why: without stopping the target, a read can catch a stack being
#: changed ("Failed to get stack traces"); the next read a moment later is consistent.
DUMP_ATTEMPTS = 3
_FINAL = ("permission", "operation not permitted", "failed to find python version", "no python processes",
          "no such process", "check that the process is running")


def dump(binary: str, pid: int) -> list[ThreadDump]:
    """Every thread of ``pid`` once, without stopping it; SamplerError (one line) if it cannot be read."""
    for attempt in range(DUMP_ATTEMPTS):
        try:
            p = subprocess.run([binary, "dump", "--pid", str(pid), "--nonblocking", "--json"], capture_output=True,
                               text=True, timeout=DUMP_TIMEOUT_S, env=_env(), stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise SamplerError(f"py-spy took over {DUMP_TIMEOUT_S:.0f} s to read process {pid}") from None
        if p.returncode == 0:
            break
        text = (p.stderr + p.stdout).lower()
        if attempt == DUMP_ATTEMPTS - 1 or any(f in text for f in _FINAL):
            raise SamplerError(explain(pid, p.stderr + p.stdout))
        time.sleep(0.05)
    try:
        threads = json.loads(p.stdout)
    except json.JSONDecodeError:
        raise SamplerError(f"py-spy printed something other than JSON for process {pid}") from None
    return [ThreadDump(int(t.get("pid") or pid), int(t.get("os_thread_id") or 0), t.get("thread_name"),
                       bool(t.get("active")), _frames(t.get("frames") or [])) for t in threads]


_SUMMARY = re.compile(r"Samples: (\d+) Errors: (\d+)")


#: A folded stack's identity: process chain, thread id, thread name, frames (see ``Recording``).
_StackKey = tuple[tuple[int, ...], int, str, tuple[Frame, ...]]
#: What attach knows of the job's processes and threads, for ``parse_raw``: (cmdlines, threads).
Known = tuple[dict[int, str], dict[tuple[int, int], str]]


class Recording:
    """One ``py-spy record`` of the target and its child processes for up to ``duration_s``, never blocking it.

    Started in a session of its own, so a Ctrl-C meant for ``attach`` reaches py-spy only when we pass it on (and
    then it writes what it has). ``stop()`` asks it to finish early; ``result()`` waits for the file and parses it.

    Rotation: py-spy holds every stack and process it has seen until it ends, so over a long window (a job re-forking
    its workers) its memory and CPU grow. ``poll()`` (called by the window's loop) ends the current py-spy every
    ``rotate_s`` seconds by SIGINT, starts a fresh one for the rest of the duration at once, and folds the ended
    piece's stacks into ``_folded`` (counts of identical (pids, tid, thread name, frames) summed, frames shared), parsed
    with what ``known()`` returns then (attach's command lines and thread names, as ``result`` gets them). Between two
    pieces up to ~0.5 s goes unsampled (the new py-spy parsing the target's symbols): attach reports shares of the
    time sampled, which a gap that short does not move. A rotation is no failure: it does not count in ``restarts``.
    """

    def __init__(self, binary: str, pid: int, rate_hz: int, duration_s: float, rotate_s: float | None = None,
                 known: Callable[[], Known] | None = None) -> None:
        self.pid = pid
        self._dir = tempfile.mkdtemp(prefix="profiler-attach-")
        self._log = Path(self._dir) / "py-spy.log"
        self._stopped = False
        self._binary, self._rate_hz = binary, rate_hz
        self._rotate_s = rotation_period() if rotate_s is None else rotate_s
        self._known = known
        self._folded: dict[_StackKey, int] = {}
        # one object per distinct frame, frame tuple and process chain across pieces: the workers a loader re-forks
        # run the same code, so a dead worker's stacks cost their keys, not their frames again
        self._frames: dict[Frame, Frame] = {}
        self._stacks: dict[tuple[Frame, ...], tuple[Frame, ...]] = {}
        self._chains: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._ending: list[tuple[subprocess.Popen[bytes], Path]] = []  # rotated out, still writing their file
        self.pieces = 0
        self.merged = 0  # rotated-out pieces folded into ``_folded`` so far
        self.restarts = 0
        self._start(duration_s)

    def _start(self, duration_s: float) -> None:
        self.pieces += 1
        self.path = Path(self._dir) / f"stacks-{self.pieces}.txt"
        cmd = [self._binary, "record", "--pid", str(self.pid), "--nonblocking", "--format", "raw", "--rate",
               str(self._rate_hz), "--duration", str(max(1, round(duration_s))), "--threads", "--idle",
               "--subprocesses", "--full-filenames", "--output", str(self.path)]
        if self.pieces == 1:
            self.command = cmd  # what the record names: the first piece's command (later ones differ in --duration)
        with open(self._log, "ab") as log:  # a restart's log follows the failed start's: both explain a failure
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=_env(), start_new_session=True)
        self._piece_t0 = time.monotonic()
        self._deadline = self._piece_t0 + duration_s

    def failed_before_first_sample(self) -> bool:
        """py-spy ended by itself, with an error, before it wrote anything (not stopped by us, not a clean end)."""
        return (not self._stopped and self._proc.poll() not in (0, None)
                and not (self.path.exists() and self.path.stat().st_size))

    def restart(self, duration_s: float) -> bool:
        """Start py-spy again for ``duration_s`` after ``failed_before_first_sample`` (``RECORD_RESTARTS`` times at
        most); False when no restart is left, and the caller lets the failure stand."""
        if self.restarts >= RECORD_RESTARTS:
            return False
        self.restarts += 1
        self._start(duration_s)
        return True

    def poll(self) -> None:
        """Rotate when the current piece is ``rotate_s`` old, and fold the pieces that finished writing since."""
        now = time.monotonic()
        left = self._deadline - now
        if (not self._stopped and self.running() and now - self._piece_t0 >= self._rotate_s
                and left >= min(MIN_PIECE_S, self._rotate_s)):
            try:
                os.kill(self._proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            self._ending.append((self._proc, self.path))
            self._start(left)  # at once: the old one stops sampling on SIGINT, the new one is parsing symbols
        self._collect(wait=False)

    def _collect(self, wait: bool) -> None:
        """Fold the rotated-out pieces that have exited (all of them, waiting, when ``wait``)."""
        pending = []
        for proc, path in self._ending:
            if wait:
                try:
                    proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.poll() is None:
                pending.append((proc, path))
                continue
            self._fold_file(path, *(self._known() if self._known else ({}, {})))
            path.unlink(missing_ok=True)
            self.merged += 1
        self._ending = pending

    def _fold_file(self, path: Path, cmdlines: dict[int, str] | None,
                   threads: dict[tuple[int, int], str] | None) -> bool:
        """Parse one piece's file into ``_folded``; whether it held anything. In a short-lived child process, a
        chunk of ``FOLD_LINES`` lines at a time (profiler/attach/pieces.py): parsed here, a 5-minute piece of a
        re-forking job was ~4 MB of attach's memory at once per chunk (~30 MB parsed whole), of which the allocator
        kept 1-10 MB at each rotation (scripts/bench_attach_long.py); what comes back is the stacks, one line
        each, their frames numbered."""
        return pieces.read(path, cmdlines or {}, threads or {}, self._fold)

    def _fold(self, stacks: list[Stack]) -> None:
        for st in stacks:
            frames = tuple(self._frames.setdefault(f, f) for f in st.frames)
            frames = self._stacks.setdefault(frames, frames)
            key = (self._chains.setdefault(st.pids, st.pids), st.tid, sys.intern(st.thread_name), frames)
            self._folded[key] = self._folded.get(key, 0) + st.count

    @property
    def piece_started_ns(self) -> int:
        """CLOCK_MONOTONIC (ns) when the running piece was started: no stack of it is older."""
        return int(self._piece_t0 * 1e9)

    def stacks(self) -> Iterator[Stack]:
        """The stacks of the pieces merged so far (not the running piece's), one at a time: a 5-minute piece of a
        re-forking job is ~20,000 of them, and a list of them all was half of attach's peak at a rotation."""
        for (p, t, n, f), c in self._folded.items():  # not changed while iterated: forget() runs after
            yield Stack(p, t, n, f, c)

    def stacks_of(self, pids: set[int], threads: set[tuple[int, int]]) -> Iterator[Stack]:
        """The merged stacks of processes ``pids`` and threads ``threads`` ((pid, tid)) only, one at a time: the
        others are passed over by their key, without making a Stack of each."""
        for (p, t, n, f), c in self._folded.items():
            if p[-1] in pids or (p[-1], t) in threads:
                yield Stack(p, t, n, f, c)

    def forget(self, pids: set[int], threads: set[tuple[int, int]]) -> None:
        """Drop the merged stacks of processes ``pids`` and threads ``threads`` ((pid, tid)), folded into totals by
        the caller (profiler/attach/fold.py): a long window's memory then holds the processes that matter, not every
        worker a re-forking loader ever had. Their frames stay shared with the stacks of the workers that follow."""
        if not pids and not threads:
            return
        for key in [k for k in self._folded if k[0][-1] in pids or (k[0][-1], k[1]) in threads]:
            del self._folded[key]
        for chain in [c for c in self._chains if c[-1] in pids]:
            del self._chains[chain]
        # the shared frames and frame tuples, to those the stacks kept still use: torn non-blocking samples make new
        # distinct tuples all the time, and kept for ever they grew with every worker seen
        self._stacks = {k[3]: k[3] for k in self._folded}
        self._frames = {f: f for frames in self._stacks for f in frames}

    def running(self) -> bool:
        return self._proc.poll() is None

    def stop(self) -> None:
        """Ask py-spy to end now and write what it sampled (its own Ctrl-C handling)."""
        if self.running():
            self._stopped = True
            try:
                os.kill(self._proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    def result(self, target_alive: bool, cmdlines: dict[int, str] | None = None,
               threads: dict[tuple[int, int], str] | None = None) -> RecordingResult:
        """Wait for py-spy's file and parse it (``cmdlines``, ``threads``: what attach knows, see ``parse_raw``),
        merged with the pieces rotated out before: stacks folded, samples and errors summed, logs in order."""
        try:
            self._proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._collect(wait=True)
        log = self._log.read_text(errors="replace") if self._log.exists() else ""
        rotated = bool(self._folded)
        had = self._fold_file(self.path, cmdlines, threads)
        self.cleanup()
        res = RecordingResult(stacks=[Stack(p, t, n, f, c) for (p, t, n, f), c in self._folded.items()], log=log)
        for m in _SUMMARY.finditer(log):  # one summary per piece that ended cleanly
            res.samples += int(m.group(1))
            res.errors += int(m.group(2))
        res.stopped_by = "signal" if self._stopped else ("duration" if target_alive else "target exited")
        if not had and not rotated and self._proc.returncode not in (0, None) and not self._stopped:
            # py-spy's own failure; one we stopped before its first sample wrote nothing and is no error of its own:
            # the caller says the attach was interrupted before anything was measured (exit 130/143, not 2)
            raise SamplerError(explain(self.pid, log))
        return res

    def kill(self) -> None:
        """Last resort on our own way out: nothing of ours is left running."""
        for proc in [self._proc, *(p for p, _ in self._ending)]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self._ending = []
        self.cleanup()

    def cleanup(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)
