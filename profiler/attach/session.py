"""One attach, start to end: find the job's parts, sample them from outside for the window, stop, collect.

NOTE — what runs where, and which clock:

    attach (this process)                       the job (untouched)
    ├─ py-spy record --nonblocking ─ reads ──>  main process + every child: Python stacks, rate R, counts per stack
    ├─ StateSampler thread ─ reads /proc ───>   every thread: schedstat (on-CPU ns, run-queue ns), state R/S/D;
    │                                           every process: io (rchar, read_bytes)
    └─ psutil ─ system CPU share over the window

The window is CLOCK_MONOTONIC (time.monotonic) of this process from the first /proc reading to the last; py-spy's
window starts a fraction of a second later (its own start-up) and ends when we stop it. Nothing is injected into the
job, no signal is sent to it, and py-spy is never left running: every way out of ``sample`` stops it.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import psutil

from .. import signals
from . import classify, discover, fold, procfs, pyspy
from .gpu import GpuSampler


@dataclass
class Sampled:
    """What one attach collected (raw; profiler/attach/build.py turns it into the record)."""
    target: discover.Target
    binary: str
    sampler_version: str | None
    rate_hz: int
    requested_s: float
    seconds: float
    stacks: pyspy.RecordingResult
    kernel: procfs.StateSampler
    threads: dict[tuple[int, int], str] = field(default_factory=dict)  # (pid, tid) -> thread name
    cpu_util: float | None = None
    started_unix: float = 0.0
    stopped_by: str = "duration"
    target_exited: bool = False
    interrupted: BaseException | None = None
    command: list[str] = field(default_factory=list)
    # exited workers (and main-process threads) folded into totals during the window (profiler/attach/fold.py)
    folded: fold.Folded = field(default_factory=fold.Folded)


#: How long to wait for a target whose py-spy ended by itself to disappear. Why 3 s: at exit the DataLoader joins
#: its workers (up to torch's 5 s worker-status check, usually well under a second) after Python stopped running.
EXIT_GRACE_S = 3.0


#: How often the window's loop checks whether a target exited or py-spy ended. Why 0.2 s: it bounds how late an exit
#: is noticed (the partial record's window is that much longer at most), and each check is a few /proc reads of
#: attach's own CPU, which counts in what attach costs the machine (scripts/bench_attach.py).
POLL_S = 0.2
#: The /proc reader's rate is the stack rate up to this. Why 20 Hz: the kernel's clocks (on-core, run-queue) are exact
#: and cumulative whatever the rate; the state samples only split blocked time into device / other, for which 20 a
#: second over a 30 s window (600 samples per thread, ±4 points at worst) is plenty, and each tick costs attach ~0.3 ms
#: of CPU per few threads.
PROC_RATE_MAX_HZ = 20
#: A py-spy that failed before its first sample is restarted only while this much of the window is left. Why 0.5 s:
#: py-spy needs ~0.1-0.5 s to parse the target's symbols before it samples; a shorter rest would sample nothing.
MIN_RESTART_WINDOW_S = 0.5


def _gone(t: discover.Target) -> bool:
    return not procfs.exists(t.pid) or procfs.start_ticks(t.pid) != t.start_ticks


def _gone_within(t: discover.Target, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if _gone(t):
            return True
        time.sleep(0.05)
    return _gone(t)


def _threads(target: discover.Target) -> dict[tuple[int, int], str]:
    out: dict[tuple[int, int], str] = {}
    for p in target.processes:
        if p.role not in ("main", "worker"):
            continue
        names = dict(p.threads)
        for tid in procfs.threads(p.pid):
            out[(p.pid, tid)] = names.get(tid, procfs.read_text(f"/proc/{p.pid}/task/{tid}/comm") or "")
    return out


def _known(t: discover.Target, k: procfs.StateSampler, th: dict[tuple[int, int], str]) -> pyspy.Known:
    """What attach read itself (command lines, thread names), for parsing py-spy's lines by it. Also called from the
    window's loop while the /proc reader's thread adds to ``k``: copies made by C calls, not Python loops over it."""
    cmdlines = {**{p.pid: " ".join(p.cmdline) for p in list(t.processes) if p.cmdline}, **k.cmdlines}
    return cmdlines, {**dict.fromkeys(k.windows, ""), **th}


def adopt_workers(target: discover.Target, stacks: Iterable[pyspy.Stack]) -> list[discover.Proc]:
    """Workers the stacks show that discovery did not list as workers: forked after it (a new epoch's workers when
    they are not persistent) or missed by its one look (a child caught mid-fork, a read that failed under load).
    py-spy samples every child of the main process, and a child whose main thread runs ``_worker_loop`` is a
    DataLoader worker whatever discovery saw; it joins ``target.processes`` marked ``found="sampling"``."""
    known = {p.pid: p for p in target.processes}
    servers = {p.pid for p in target.processes if p.role == "forkserver"}
    added: list[discover.Proc] = []
    for st in stacks:
        if st.pids[0] != target.pid or st.pid == target.pid:
            continue
        if not all(q in servers for q in st.pids[1:-1]):  # a grandchild (a worker's own child): not the loader's
            continue
        p = known.get(st.pid)
        if p is not None and (p.role != "child" or p.what not in ("not Python", "could not be read")):
            continue
        if classify.role(st.frames, st.thread_name, True) != classify.WORKER:
            continue
        via_server = len(st.pids) > 2
        if p is None:
            argv = procfs.cmdline(st.pid)
            p = discover.Proc(st.pid, "worker", argv, "forkserver" if via_server else
                              discover.start_method(argv, "main") if argv else None, found="sampling")
            target.processes.append(p)
            known[p.pid] = p
        else:  # listed as a child discovery could not tell: the stacks say it is a worker
            p.role, p.what, p.found = "worker", None, "sampling"
            p.start_method = "forkserver" if via_server else discover.start_method(p.cmdline, "main")
        added.append(p)
    return added


def _window(targets: list[discover.Target], recs: list[pyspy.Recording], t0: float, duration_s: float,
            exited: list[bool], ended: list[float], kernels: list[procfs.StateSampler], rate_hz: int,
            folded: list[fold.Folded]) -> None:
    """Wait out the window: until ``duration_s`` or every target exited (or its py-spy ended by itself). After each
    py-spy rotation, the workers that exited are folded into totals and forgotten (profiler/attach/fold.py)."""
    merged = [0] * len(recs)
    while time.monotonic() - t0 < duration_s:
        for i, (t, r) in enumerate(zip(targets, recs)):
            if exited[i]:
                continue
            gone = _gone(t)
            left = duration_s - (time.monotonic() - t0)
            if not gone and r.failed_before_first_sample() and left >= MIN_RESTART_WINDOW_S and r.restart(left + 5):
                continue  # py-spy's first read of a busy target failed: sample the rest of the window
            if not gone:
                r.poll()  # a fresh py-spy every pyspy.ROTATE_S: its memory and CPU grow with what it has seen
                if r.merged > merged[i]:  # a rotated-out piece was merged: fold what exited before the running one
                    merged[i] = r.merged
                    with signals.deferred():  # a Ctrl-C half-way would count a worker both folded and not
                        adopt_workers(t, r.stacks())  # the workers the stacks show, as the end adopts them
                        fold.fold_early(t, r, kernels[i], rate_hz, folded[i], r.piece_started_ns)
            if gone or not r.running():  # the target exited, or py-spy ended by itself
                ended[i] = time.monotonic() - t0
                # py-spy stops when the interpreter starts finalising: the process may take a moment to go
                exited[i] = gone or _gone_within(t, EXIT_GRACE_S)
                r.stop()
        if all(e or not r.running() for e, r in zip(exited, recs)):
            break
        time.sleep(POLL_S)


def sample(targets: list[discover.Target], binary: str, duration_s: float, rate_hz: int) -> list[Sampled]:
    """Sample every target (one job, or each rank of a torchrun job) for ``duration_s`` at once: less when a
    target exits (its py-spy ends; the others go on) or we are interrupted (Ctrl-C / SIGTERM arrive here as
    KeyboardInterrupt, kept in ``interrupted`` for the caller to report and exit 128+N)."""
    psutil.cpu_percent(interval=None)
    started = time.time()
    t0 = time.monotonic()
    kernels, recs, threads, gpus = [], [], [], []
    folded = [fold.Folded() for _ in targets]
    try:
        for t in targets:
            th = _threads(t)
            g = GpuSampler([int(d["index"]) for d in t.gpus])
            gpus.append(g)
            k = procfs.StateSampler(list(th), [p.pid for p in t.processes if p.role in ("main", "worker")],
                                    min(rate_hz, PROC_RATE_MAX_HZ),
                                    also=g.read, watch=functools.partial(discover.watch, t))
            k.start()
            kernels.append(k)
            threads.append(th)
            # we stop py-spy ourselves; its own duration is only a backstop
            recs.append(pyspy.Recording(binary, t.pid, rate_hz, duration_s + 5,
                                        known=functools.partial(_known, t, k, th)))
    except BaseException:
        for r in recs:
            r.kill()
        for k in kernels:
            k.stop()
        for g in gpus:
            g.close()
        raise
    interrupted: BaseException | None = None
    exited = [False] * len(targets)
    ended = [0.0] * len(targets)
    try:
        _window(targets, recs, t0, duration_s, exited, ended, kernels, rate_hz, folded)
        signals.job_ended()  # from here on a signal is held, not raised: what was sampled is collected and written
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP through profiler.signals
        signals.job_ended()  # a second signal now (in hand already) and later ones are held too
        interrupted = e
    for i, t in enumerate(targets):  # py-spy may have noticed the exit before /proc showed it
        if not exited[i] and _gone(t):
            exited[i] = True
            ended[i] = ended[i] or time.monotonic() - t0
    out = []
    try:
        for r in recs:
            r.stop()
        seconds = time.monotonic() - t0
        for k in kernels:
            k.stop()
        for t, g in zip(targets, gpus):
            for d in t.gpus:
                d.update(g.summary(int(d["index"])))
            g.close()
        util = psutil.cpu_percent(interval=None) / 100.0
        for i, (t, r, k, th) in enumerate(zip(targets, recs, kernels, threads)):
            # what attach read itself (command lines, threads): py-spy's lines are split by it, not by text the job
            # controls (profiler/attach/pyspy.py parse_raw)
            cmdlines, known_threads = _known(t, k, th)
            result = r.result(target_alive=not exited[i], cmdlines=cmdlines, threads=known_threads)
            adopt_workers(t, result.stacks)
            th.update({key: procfs.read_text(f"/proc/{key[0]}/task/{key[1]}/comm") or "" for key in k.windows
                       if key not in th})
            stopped = "interrupted" if interrupted is not None else ("target exited" if exited[i] else "duration")
            out.append(Sampled(t, binary, pyspy.version(binary), rate_hz, duration_s, ended[i] or seconds, result, k,
                               th, util, started, stopped, exited[i], interrupted, r.command, folded[i]))
    finally:
        for r in recs:
            r.kill()  # a no-op when it already ended; never leave py-spy behind
    return out
