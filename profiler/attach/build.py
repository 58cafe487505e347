"""Sampled stacks and kernel counters → one RunRecord of kind ``attach`` (raw sections only; analysis derives the
rest, profiler/analysis/attach.py).

The record keeps counts, not conclusions: per thread, how many stack samples fell in each stage, its kernel clocks
over the window and its state samples; per process, its read counters. What cannot be had from outside is listed in
``attach.absent`` with the reason, so no reader takes a missing figure for a zero.
"""
from __future__ import annotations

import datetime as _dt
from collections import Counter
from typing import TYPE_CHECKING, Any, cast

from .. import __version__
from ..redact import redact_argv
from ..samplers.environment import probe_environment
from . import classify
from .session import Sampled

if TYPE_CHECKING:
    from ..record.schema import Attach, Environment, Timeline

#: Figures ``run`` measures that sampling from outside cannot give, and why.
ABSENT: dict[str, str] = {
    "throughput": "samples per second need the batch sizes the loader returned; stacks do not show them "
                  "(run under `python -m profiler run` for them)",
    "step_latency_percentiles": "stack samples have no step boundaries: p50/p95/p99 of wait and compute per step "
                                "cannot be had, only their shares of time",
    "per_sample_times": "exact per-sample read/decode/augment times need timers inside the worker; attach gives each "
                        "stage's share of the worker's sampled time instead",
    "h2d": "host-to-device copies run in C++ (no Python frame of their own); they are counted in compute",
    "timeline": "no per-step rows: the record has empty timeline tables",
    "worker_ids": "DataLoader worker ids live inside the worker; workers are numbered by process start order",
}


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="seconds")


#: Roles a thread's frames name, most telling first: a thread whose stacks name two (none should) takes the first.
_ROLE_RANK = (classify.WORKER, classify.PIN_MEMORY, classify.WORKER_FEEDER, classify.MAIN, classify.OTHER)


def thread_roles(s: Sampled) -> dict[tuple[int, int], str]:
    """Each sampled thread's role, from all of its stacks. Not from its first: py-spy's folded output lists a thread's
    distinct stacks in no set order, and a non-blocking sample can be torn (a stack without its outer frames), so a
    worker's main thread whose first listed stack lacked ``_worker_loop`` was once taken for an unnamed thread, all of
    its samples with it, and a cpu-bound job got the verdict "other". A worker process's main thread is its worker
    loop whatever its stacks show; a main process's unnamed main thread is the main thread."""
    procs = {p.pid: p.role for p in s.target.processes}
    out: dict[tuple[int, int], str] = {}
    for st in s.stacks.stacks:
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


def thread_rows(s: Sampled) -> list[dict[str, Any]]:
    """One row per sampled thread of the main process and the workers: role, stage counts, kernel figures."""
    roles = thread_roles(s)
    worker_index = {p.pid: i for i, p in enumerate(sorted(s.target.workers, key=lambda p: p.pid))}
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    for st in s.stacks.stacks:
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
    for p in s.target.workers:
        if (p.pid, p.pid) not in rows and (p.pid, p.pid) in s.kernel.windows:
            rows[(p.pid, p.pid)] = {"pid": p.pid, "tid": p.pid, "name": "MainThread", "role": classify.WORKER,
                                    "worker": worker_index.get(p.pid, -1), "samples": 0, "stages": Counter(),
                                    "wait_stages": Counter(), "where": Counter()}
    out = []
    for (pid, tid), r in sorted(rows.items()):
        w = s.kernel.windows.get((pid, tid))
        top = r.pop("where").most_common(3)
        out.append({**r, "stages": dict(r["stages"]), "wait_stages": dict(r["wait_stages"]),
                    "top_frames": [{"where": k, "samples": v} for k, v in top],
                    # a thread that lived between two looks at the job's children has no kernel window: its sampled
                    # lifetime (py-spy samples every thread at the rate) stands in for its wall time
                    "wall_s": round(w.wall_s, 6) if w and w.wall_s > 0 else round(r["samples"] / s.rate_hz, 6),
                    "on_cpu_s": round(w.on_cpu_s, 6) if w else 0.0,
                    "runq_s": round(w.runq_s, 6) if w else 0.0, "states": dict(w.states) if w else {}})
    return out


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


def _folded_pids(s: Sampled) -> set[int]:
    workers = sorted(s.target.workers, key=lambda p: p.pid)
    if len(workers) <= MAX_WORKER_PROCESS_ROWS:
        return set()
    alive = {p.pid for p in workers if s.kernel.alive(p.pid)}
    exited = [p.pid for p in workers if p.pid not in alive]
    keep = max(0, MAX_WORKER_PROCESS_ROWS - len(alive))
    return set(exited[:max(0, len(exited) - keep)])


def fold_exited(s: Sampled, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], set[int]]:
    """Rows of threads that exited during the window, beyond ``MAX_WORKER_PROCESS_ROWS`` worker processes (whole
    processes) and ``MAX_MAIN_THREAD_ROWS`` threads of the main process, summed into one row per role (``pid`` -1);
    returns (rows, the folded worker pids). Sums keep every figure analysis derives (samples and stage counts add;
    wall, on-core and run-queue seconds add; a share of a sum is the samples-weighted share)."""
    folded = _folded_pids(s)
    main_rows = [r for r in rows if r["pid"] == s.target.pid]
    fold_main: set[tuple[int, int]] = set()
    if len(main_rows) > MAX_MAIN_THREAD_ROWS:
        gone = [(r["pid"], r["tid"]) for r in main_rows if r["tid"] != r["pid"]
                and not s.kernel.thread_alive((r["pid"], r["tid"]))]
        keep = max(0, MAX_MAIN_THREAD_ROWS - (len(main_rows) - len(gone)))
        fold_main = set(gone[:max(0, len(gone) - keep)])
    if not folded and not fold_main:
        return rows, set()
    out: list[dict[str, Any]] = []
    sums: dict[tuple[str, bool], dict[str, Any]] = {}
    for r in rows:
        in_main = (r["pid"], r["tid"]) in fold_main
        if r["pid"] not in folded and not in_main:
            out.append(r)
            continue
        f = sums.get((r["role"], in_main))
        if f is None:
            where = "the main process" if in_main else "exited workers"
            f = sums[(r["role"], in_main)] = {
                "pid": FOLDED_PID, "tid": FOLDED_PID, "name": f"{r['role']} threads of {where} that exited (folded)",
                "role": r["role"], "worker": FOLDED_PID, "samples": 0, "stages": Counter(), "wait_stages": Counter(),
                "top_frames": [], "wall_s": 0.0, "on_cpu_s": 0.0, "runq_s": 0.0, "states": Counter(), "folded": 0}
            if in_main:
                f["folded_from_pid"] = s.target.pid
        f["folded"] += 1
        f["samples"] += r["samples"]
        for k in ("stages", "wait_stages", "states"):
            f[k].update(r.get(k) or {})
        for k in ("wall_s", "on_cpu_s", "runq_s"):
            f[k] += float(r.get(k) or 0.0)
    for f in sums.values():
        out.append({**f, "stages": dict(f["stages"]), "wait_stages": dict(f["wait_stages"]),
                    "states": dict(f["states"]), "wall_s": round(f["wall_s"], 6),
                    "on_cpu_s": round(f["on_cpu_s"], 6), "runq_s": round(f["runq_s"], 6)})
    return out, folded


def workers_at_once(s: Sampled) -> int:
    """The most DataLoader workers alive at the same time in the window (the loader's num_workers, as far as the
    window shows it): workers that end and are forked again between epochs are counted once per slot, not once per
    process. From each worker's main-thread kernel window (first and last reading); a worker too short-lived to have
    one (forked and gone between two looks at the job's children) is not counted; the workers
    discovery found alive together are a floor."""
    spans: list[tuple[int, int]] = []
    at_discovery = len([p for p in s.target.workers if p.found == "discovery"])
    for p in s.target.workers:
        w = s.kernel.windows.get((p.pid, p.pid))
        if w is not None and w.first is not None and w.last is not None:
            spans.append((w.first.t_ns, 1))
            spans.append((w.last.t_ns + 1, -1))  # an end after a start at the same instant: they overlapped
    most = alive = 0
    for _, d in sorted(spans):
        alive += d
        most = max(most, alive)
    return max(most, at_discovery, 1 if s.target.workers else 0)


def _empty_timeline() -> Timeline:
    """Every table with its columns and no rows: attach times no spans, but a record always has a timeline."""
    return {"steps": {"step": [], "epoch": [], "batch": [], "worker": [], "samples": [], "wait_start": [],
                      "wait_end": [], "h2d_start": [], "h2d_end": [], "compute_end": [], "idle": [], "measured": [],
                      "main_cpu": [], "main_runq": []},
            "batches": {"batch": [], "worker": [], "pid": [], "collate_start": [], "collate_end": [], "sent": [],
                        "received": [], "samples": [], "rchar": [], "read_bytes": [], "collate_cpu": [],
                        "collate_runq": []},
            "sample_spans": {"batch": [], "worker": [], "index": [], "items": [], "start": [], "end": [], "cpu": [],
                             "runq": [], "rchar": [], "read_bytes": [], "stages": {}},
            "epochs": {"epoch": [], "iter_start": [], "iter_end": [], "first_batch": []},
            "accounting": {"absent": {"spans": "attach samples stacks from outside; no spans are timed"}},
            "time_unit": "s"}


def build(s: Sampled) -> Any:
    from ..record import RunRecord

    t = s.target
    threads, folded = fold_exited(s, thread_rows(s))
    procs = [{"pid": p.pid, "role": p.role, "start_method": p.start_method, "what": p.what, "found": p.found,
              "cmdline": redact_argv(p.cmdline)} for p in t.processes if p.pid not in folded]
    io = []
    folded_io = {"rchar": 0, "read_bytes": 0}
    for p in t.processes:
        d = s.kernel.io_delta(p.pid) if p.role in ("main", "worker") else None
        if d is None:
            continue
        if p.pid in folded:
            for k in folded_io:
                folded_io[k] += d[k]
        else:
            io.append({"pid": p.pid, "rchar": d["rchar"], "read_bytes": d["read_bytes"]})
    if folded:
        io.append({"pid": FOLDED_PID, **folded_io})
    absent = dict(ABSENT)
    if t.gpu_absent:
        absent["gpu"] = t.gpu_absent
    if not io:
        absent["io"] = "/proc/<pid>/io could not be read (needs the same permission as ptrace)"
    ranks = {k.lower(): int(v) for k, v in t.ranks.items() if v.lstrip("-").isdigit()} or None
    attach: dict[str, Any] = {
        "sampler": {"name": "py-spy", "version": s.sampler_version, "mode": "nonblocking", "rate_hz": s.rate_hz,
                    "samples": s.stacks.samples, "errors": s.stacks.errors},
        "proc_rate_hz": round(s.kernel.rate_hz), "proc_ticks": s.kernel.ticks,
        "requested_s": round(s.requested_s, 3), "seconds": round(s.seconds, 6), "started_utc": _iso(s.started_unix),
        "stopped_by": s.stopped_by,
        "target": {"pid": t.pid, "given_pid": t.given_pid, "cmdline": redact_argv(t.cmdline),
                   "start_time_utc": _iso(t.start_time_unix), "start_ticks": t.start_ticks,
                   "torch_loaded": t.torch_loaded, "main_in_dataloader_at_start": t.main_in_dataloader},
        "processes": procs,
        "pin_memory_tid": t.pin_memory_tid,
        "ranks": ranks, "siblings": t.siblings,
        "gpus": t.gpus,
        "threads": threads,
        "workers_at_once": workers_at_once(s),
        "workers_seen": len(t.workers),
        "workers_folded": len(folded),
        "io": io,
        "cpu_util": round(s.cpu_util, 4) if s.cpu_util is not None else None,
        "absent": absent,
    }
    workers = int(attach["workers_at_once"])
    methods = sorted({p.start_method for p in t.workers if p.start_method})
    partial_reason = None
    if s.interrupted is not None:
        from ..signals import describe, signal_number

        num = signal_number(s.interrupted)
        partial_reason = f"attach interrupted by {describe(num) if num is not None else 'an interrupt'}"
    elif s.target_exited:
        partial_reason = "the target exited during the attach"
    env = cast("Environment", probe_environment())  # the host's: the job runs on this machine too
    gpu0 = t.gpus[0] if t.gpus else None
    rec = RunRecord(
        config={"workers": workers, "batch_size": None, "model": None, "mode": "train", "device":
                "cuda" if gpu0 else "cpu", "steps": 0, "warmup": 0, "sample_interval_s": round(1 / s.rate_hz, 6),
                "extra": {"attach_rate_hz": s.rate_hz, "attach_duration_s": s.requested_s}},
        environment=env,
        compute_device={"type": "cuda" if gpu0 else "cpu", "index": gpu0["index"] if gpu0 else None,
                        "name": gpu0["name"] if gpu0 else None, "timing": "sampled stacks"},
        window={"start_s": 0.0, "end_s": round(s.seconds, 6), "seconds": round(s.seconds, 6), "steps": 0,
                "samples": 0, "warmup_steps": 0},
        timeline=_empty_timeline(),
        samples={"interval_s": round(1 / s.rate_hz, 6), "t_s": [], "processes": [],
                 "absent": {"series": "attach keeps totals over the window, not time series"}},
        job={"kind": "attach", "target": f"pid {t.pid}", "argv": redact_argv(t.cmdline), "ended": s.stopped_by,
             "loader": {"num_workers": workers, "batch_size": None, "pin_memory": t.pin_memory_tid is not None,
                        "multiprocessing_context": methods[0] if len(methods) == 1 else None}},
        partial=partial_reason is not None, partial_reason=partial_reason,
        tool={"name": "profiler", "version": __version__},
    )
    rec.attach = cast("Attach", attach)
    return rec
