"""Per-thread rows of the record, and the folding of exited workers into per-role totals — at the end
(profiler/attach/build.py) and, during a long window, at each py-spy rotation (issue 36 item 9).

Why fold during the window: a loader without ``persistent_workers`` forks new workers every epoch, and attach kept,
until ``build``, every exited worker's folded stacks (py-spy's pieces merged, profiler/attach/pyspy.py), its /proc
windows and read counters (profiler/attach/procfs.py) and its process entry: ~6 KB per worker, ~1.1 MB a minute of
attach's memory on a job forking ~3 workers a second. The record folds most of those workers into one row per role
anyway (``MAX_WORKER_PROCESS_ROWS``); ``fold_early`` does that fold as soon as it is certain — the worker exited
before the running py-spy piece began (so no stack of it is still to come) and at least ``MAX_WORKER_PROCESS_ROWS``
exited workers have a higher PID (so ``build`` would fold it whatever happens next) — and then forgets the worker's
stacks, windows, counters and entry. The sums are the ones ``build`` makes, so the record is the same (rows per role,
workers seen, folded and at once, read bytes, start methods); ``Folded`` keeps only totals, whose size does not grow
with the workers seen.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from . import classify, discover, procfs, pyspy

#: Worker processes kept one row each in the record; beyond it, the workers that exited during the window are folded
#: into one row per thread role (``pid`` -1, ``folded``: how many threads). Why 16: a loader that re-forks its workers
#: every epoch leaves a new process every few seconds (and the main process a new queue-feeder thread per worker), and
#: one row per thread made run.json grow ~5 KB/s (over the 32 MiB ``report`` accepts after ~1.5 h); 16 is more than
#: any job's num_workers at once that a person reads row by row, and the workers alive at the end are always kept.
MAX_WORKER_PROCESS_ROWS = 16
#: The same for the main process's threads that exited during the window (one index-queue feeder per worker per
#: epoch): beyond this many rows, the exited ones are folded by role.
MAX_MAIN_THREAD_ROWS = 32
FOLDED_PID = -1
#: A thread is folded during the window only when its last /proc reading is this long before the running py-spy
#: piece started. Why 1 s: the reader looks every 1/20 s at most rarely, so a thread last seen 1 s before the piece
#: began had exited before it (py-spy only samples after it started): none of its stacks is still to come.
EXITED_BEFORE_PIECE_S = 1.0
#: Threads (workers' processes, or main-process threads) whose rows ``fold_early`` makes and sums at once. Why 64:
#: a worker's rows and stacks are ~2-4 KB while being summed, so a batch stays ~0.2 MB however many workers a piece
#: saw (~1,000 in 5 minutes on a job re-forking 2 workers a second), and each batch costs one pass over the keys of
#: the merged stacks (~5,000), not one per thread.
FOLD_BATCH = 64

#: Roles a thread's frames name, most telling first: a thread whose stacks name two (none should) takes the first.
_ROLE_RANK = (classify.WORKER, classify.PIN_MEMORY, classify.WORKER_FEEDER, classify.MAIN, classify.OTHER)


class Spans:
    """The most workers alive at once, without keeping every exited worker's span: spans that end before every span
    still to come begins are reduced to the most they overlapped (``most_before``) and dropped."""

    def __init__(self) -> None:
        self.most_before = 0
        self.kept: list[tuple[int, int]] = []  # (first, last) reading in ns, of folded workers

    def add(self, first_ns: int, last_ns: int) -> None:
        self.kept.append((first_ns, last_ns))

    def prune(self, before_ns: int) -> None:
        """Every span still to come starts at or after ``before_ns``: count what the kept ones overlapped before it,
        keep those that reach it."""
        alive = 0
        for t, d in events(self.kept):
            if t >= before_ns:
                break
            alive += d
            self.most_before = max(self.most_before, alive)
        self.kept = [(a, b) for a, b in self.kept if b + 1 > before_ns]


def events(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """+1 at a span's first reading, -1 just after its last (an end after a start at the same instant: they
    overlapped), sorted."""
    out = []
    for a, b in spans:
        out.append((a, 1))
        out.append((b + 1, -1))
    return sorted(out)


@dataclass
class Folded:
    """What was folded during the window (``fold_early``): totals only, whatever the number of workers."""
    rows: dict[tuple[str, bool], dict[str, Any]] = field(default_factory=dict)  # (role, of the main process) -> sums
    workers: int = 0  # worker processes folded
    main_threads: int = 0  # main-process thread rows folded
    at_discovery: int = 0  # of the folded workers, those discovery found
    methods: set[str] = field(default_factory=set)
    io: dict[str, int] = field(default_factory=lambda: {"rchar": 0, "read_bytes": 0})
    spans: Spans = field(default_factory=Spans)
    max_pid: int = 0  # the highest worker PID folded
    below: dict[int, int] = field(default_factory=dict)  # a worker kept -> folded workers with a lower PID


def add_row(sums: dict[tuple[str, bool], dict[str, Any]], r: dict[str, Any], in_main: bool, main_pid: int) -> None:
    """Add one thread's row to its role's folded row (samples and stage counts add; wall, on-core and run-queue
    seconds add; a share of a sum is the samples-weighted share)."""
    f = sums.get((r["role"], in_main))
    if f is None:
        where = "the main process" if in_main else "exited workers"
        f = sums[(r["role"], in_main)] = {
            "pid": FOLDED_PID, "tid": FOLDED_PID, "name": f"{r['role']} threads of {where} that exited (folded)",
            "role": r["role"], "worker": FOLDED_PID, "samples": 0, "stages": Counter(), "wait_stages": Counter(),
            "top_frames": [], "wall_s": 0.0, "on_cpu_s": 0.0, "runq_s": 0.0, "states": Counter(), "folded": 0}
        if in_main:
            f["folded_from_pid"] = main_pid
    f["folded"] += 1
    f["samples"] += r["samples"]
    for k in ("stages", "wait_stages", "states"):
        f[k].update(r.get(k) or {})
    for k in ("wall_s", "on_cpu_s", "runq_s"):
        f[k] += float(r.get(k) or 0.0)


def finish_rows(sums: dict[tuple[str, bool], dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**f, "stages": dict(f["stages"]), "wait_stages": dict(f["wait_stages"]), "states": dict(f["states"]),
             "wall_s": round(f["wall_s"], 6), "on_cpu_s": round(f["on_cpu_s"], 6), "runq_s": round(f["runq_s"], 6)}
            for f in sums.values()]


def thread_roles(stacks: list[pyspy.Stack], target: discover.Target) -> dict[tuple[int, int], str]:
    """Each sampled thread's role, from all of its stacks. Not from its first: py-spy's folded output lists a thread's
    distinct stacks in no set order, and a non-blocking sample can be torn (a stack without its outer frames), so a
    worker's main thread whose first listed stack lacked ``_worker_loop`` was once taken for an unnamed thread, all of
    its samples with it, and a cpu-bound job got the verdict "other". A worker process's main thread is its worker
    loop whatever its stacks show; a main process's unnamed main thread is the main thread."""
    procs = {p.pid: p.role for p in target.processes}
    out: dict[tuple[int, int], str] = {}
    for st in stacks:
        if procs.get(st.pid) not in ("main", "worker"):
            continue
        key = (st.pid, st.tid)
        in_worker = procs.get(st.pid) == "worker"
        role = classify.role(st.frames, st.thread_name, in_worker)
        if role == classify.OTHER and st.tid == st.pid:
            role = classify.WORKER if in_worker else classify.MAIN
        seen = out.get(key)
        if seen is None or _ROLE_RANK.index(role) < _ROLE_RANK.index(seen):
            out[key] = role
    return out


def thread_rows(stacks: list[pyspy.Stack], target: discover.Target, kernel: procfs.StateSampler, rate_hz: int,
                folded: Folded | None = None, pids: set[int] | None = None) -> list[dict[str, Any]]:
    """One row per sampled thread of the main process and the workers (of ``pids`` only, when given): role, stage
    counts, kernel figures. Workers are numbered by PID among all seen, the ones ``folded`` already counted."""
    roles = thread_roles(stacks, target)
    workers = sorted(target.workers, key=lambda p: p.pid)
    worker_index = {p.pid: i + _folded_below(folded, p.pid) for i, p in enumerate(workers)}
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    for st in stacks:
        key = (st.pid, st.tid)
        role = roles.get(key)
        if role is None:
            continue
        r = rows.get(key)
        if r is None:
            r = rows[key] = {"pid": st.pid, "tid": st.tid, "name": st.thread_name, "role": role,
                             "worker": worker_index.get(st.pid, -1), "samples": 0, "stages": Counter(),
                             "wait_stages": Counter(), "where": Counter()}
        r["samples"] += st.count
        if role == classify.MAIN:
            stage, inner = classify.main_stage(st.frames)
            r["stages"][stage] += st.count
            if inner:
                r["wait_stages"][inner] += st.count
        elif role == classify.WORKER:
            stage = classify.worker_stage(st.frames)
            r["stages"][stage] += st.count
        elif role == classify.WORKER_FEEDER:
            r["stages"][classify.feeder_stage(st.frames)] += st.count
        elif role == classify.PIN_MEMORY:
            r["stages"][classify.pin_stage(st.frames)] += st.count
        else:
            r["stages"]["other"] += st.count
        if role in (classify.MAIN, classify.WORKER):
            where = classify.user_frame(st.frames)
            if where:
                r["where"][where] += st.count
    # A worker py-spy could not read (it sometimes gives up on a child it first meets mid-read): its kernel clocks
    # still say how it spent the window, so it keeps a row, without stack samples, and analysis says so.
    for p in workers:
        if (p.pid, p.pid) not in rows and (p.pid, p.pid) in kernel.windows and (pids is None or p.pid in pids):
            rows[(p.pid, p.pid)] = {"pid": p.pid, "tid": p.pid, "name": "MainThread", "role": classify.WORKER,
                                    "worker": worker_index.get(p.pid, -1), "samples": 0, "stages": Counter(),
                                    "wait_stages": Counter(), "where": Counter()}
    out = []
    for (pid, tid), r in sorted(rows.items()):
        w = kernel.windows.get((pid, tid))
        top = r.pop("where").most_common(3)
        out.append({**r, "stages": dict(r["stages"]), "wait_stages": dict(r["wait_stages"]),
                    "top_frames": [{"where": k, "samples": v} for k, v in top],
                    # a thread that lived between two looks at the job's children has no kernel window: its sampled
                    # lifetime (py-spy samples every thread at the rate) stands in for its wall time
                    "wall_s": round(w.wall_s, 6) if w and w.wall_s > 0 else round(r["samples"] / rate_hz, 6),
                    "on_cpu_s": round(w.on_cpu_s, 6) if w else 0.0,
                    "runq_s": round(w.runq_s, 6) if w else 0.0, "states": dict(w.states) if w else {}})
    return out


def _folded_below(folded: Folded | None, pid: int) -> int:
    """Folded workers with a PID below ``pid`` (a worker's number counts them): known for the workers kept when
    a fold happened; a worker first seen after it has a higher PID than every folded one, unless PIDs wrapped."""
    if folded is None or not folded.workers:
        return 0
    return folded.below.get(pid, folded.workers if pid > folded.max_pid else 0)


def fold_early(target: discover.Target, rec: pyspy.Recording, kernel: procfs.StateSampler, rate_hz: int,
               folded: Folded, piece_started_ns: int) -> None:
    """Fold the workers (and main-process threads) that ``build`` will fold whatever the rest of the window brings,
    and forget their per-process state; called after a rotated-out py-spy piece was merged (see the module's
    docstring). ``piece_started_ns``: CLOCK_MONOTONIC when the running piece was started. The caller has adopted
    the workers the stacks show, as the end does (a worker forked during the window is known only so:
    ``session.adopt_workers``)."""
    cutoff = piece_started_ns - int(EXITED_BEFORE_PIECE_S * 1e9)

    def exited_before(key: tuple[int, int]) -> bool:
        w = kernel.windows.get(key)
        return (not kernel.thread_alive(key) and w is not None and w.last is not None and w.first is not None
                and w.last.t_ns < cutoff)

    exited = sorted(p.pid for p in target.workers if not kernel.alive(p.pid))
    fold_pids = {pid for i, pid in enumerate(exited) if len(exited) - 1 - i >= MAX_WORKER_PROCESS_ROWS
                 and exited_before((pid, pid))}
    main_tids = sorted({st.tid for st in rec.stacks() if st.pid == target.pid and st.tid != target.pid
                        and not kernel.thread_alive((target.pid, st.tid))})
    fold_main = {(target.pid, tid) for i, tid in enumerate(main_tids)
                 if len(main_tids) - 1 - i >= MAX_MAIN_THREAD_ROWS and exited_before((target.pid, tid))}
    if not fold_pids and not fold_main:
        return
    # a batch of threads at a time: the rows of every worker of a 5-minute piece at once (and their stacks in a list)
    # were ~1-4 MB of attach's memory at each rotation, for sums that are a few numbers per role
    mains, pids = sorted(fold_main), sorted(fold_pids)
    batches = [(set[int](), set(mains[i:i + FOLD_BATCH])) for i in range(0, len(mains), FOLD_BATCH)]
    batches += [(set(pids[i:i + FOLD_BATCH]), set[tuple[int, int]]()) for i in range(0, len(pids), FOLD_BATCH)]
    for batch_pids, batch_main in batches:
        for r in thread_rows(list(rec.stacks_of(batch_pids, batch_main)), target, kernel, rate_hz, pids=batch_pids):
            add_row(folded.rows, r, (r["pid"], r["tid"]) in fold_main, target.pid)
            folded.main_threads += (r["pid"], r["tid"]) in fold_main
    gone = [p for p in target.workers if p.pid in fold_pids]
    for p in gone:
        d = kernel.io_delta(p.pid)
        if d is not None:
            for k in folded.io:
                folded.io[k] += d[k]
        w = kernel.windows[(p.pid, p.pid)]
        assert w.first is not None and w.last is not None  # exited_before
        folded.spans.add(w.first.t_ns, w.last.t_ns)
        folded.at_discovery += p.found == "discovery"
        if p.start_method:
            folded.methods.add(p.start_method)
    new_workers, new_max = folded.workers + len(fold_pids), max([folded.max_pid, *fold_pids])
    below: dict[int, int] = {}
    for p in target.workers:
        if p.pid in fold_pids:
            continue
        n = _folded_below(folded, p.pid) + sum(1 for q in fold_pids if q < p.pid)
        if n != (new_workers if p.pid > new_max else 0):  # only what the default would get wrong is kept
            below[p.pid] = n
    folded.below, folded.workers, folded.max_pid = below, new_workers, new_max
    target.processes[:] = [p for p in target.processes if p.pid not in fold_pids]
    rec.forget(fold_pids, fold_main)
    kernel.forget(fold_pids, fold_main)
    # every worker span still to come starts at the first reading of a worker kept, or of a child not yet known as
    # anything that lived into the running piece (its stacks, still to be merged, may make it a worker), or later
    known = {p.pid for p in target.processes}
    workers = {p.pid for p in target.workers}
    firsts = [w.first.t_ns for (pid, tid), w in list(kernel.windows.items())
              if w.first is not None and w.last is not None and pid == tid and pid != target.pid
              and (pid in workers or pid not in known and (kernel.thread_alive((pid, tid)) or w.last.t_ns >= cutoff))]
    folded.spans.prune(min(firsts, default=cutoff))
