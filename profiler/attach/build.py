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
from . import fold

if TYPE_CHECKING:
    from ..record.schema import Attach, Environment, Timeline
    from .session import Sampled

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


def thread_roles(s: Sampled) -> dict[tuple[int, int], str]:
    """Each sampled thread's role, from all of its stacks (profiler/attach/fold.py ``thread_roles``)."""
    return fold.thread_roles(s.stacks.stacks, s.target)


def thread_rows(s: Sampled) -> list[dict[str, Any]]:
    """One row per sampled thread of the main process and the workers: role, stage counts, kernel figures."""
    return fold.thread_rows(s.stacks.stacks, s.target, s.kernel, s.rate_hz, s.folded)


def _folded_pids(s: Sampled) -> set[int]:
    """The exited workers folded at the end: beyond ``fold.MAX_WORKER_PROCESS_ROWS`` workers seen (those folded
    during the window counted), the exited ones with the lowest PIDs, the live ones always kept."""
    workers = sorted(s.target.workers, key=lambda p: p.pid)
    if len(workers) + s.folded.workers <= fold.MAX_WORKER_PROCESS_ROWS:
        return set()
    alive = {p.pid for p in workers if s.kernel.alive(p.pid)}
    exited = [p.pid for p in workers if p.pid not in alive]
    keep = max(0, fold.MAX_WORKER_PROCESS_ROWS - len(alive))
    return set(exited[:max(0, len(exited) - keep)])


def fold_exited(s: Sampled, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], set[int]]:
    """Rows of threads that exited during the window, beyond ``MAX_WORKER_PROCESS_ROWS`` worker processes (whole
    processes) and ``MAX_MAIN_THREAD_ROWS`` threads of the main process, summed into one row per role (``pid`` -1),
    with what was folded during the window (``s.folded``, the same sums: profiler/attach/fold.py); returns (rows, the
    worker pids folded here). Sums keep every figure analysis derives (samples and stage counts add; wall, on-core
    and run-queue seconds add; a share of a sum is the samples-weighted share)."""
    folded = _folded_pids(s)
    main_rows = [r for r in rows if r["pid"] == s.target.pid]
    fold_main: set[tuple[int, int]] = set()
    if len(main_rows) + s.folded.main_threads > fold.MAX_MAIN_THREAD_ROWS:
        gone = [(r["pid"], r["tid"]) for r in main_rows if r["tid"] != r["pid"]
                and not s.kernel.thread_alive((r["pid"], r["tid"]))]
        keep = max(0, fold.MAX_MAIN_THREAD_ROWS - (len(main_rows) - len(gone)))
        fold_main = set(gone[:max(0, len(gone) - keep)])
    if not folded and not fold_main and not s.folded.rows:
        return rows, set()
    out: list[dict[str, Any]] = []
    sums = {k: {**f, "stages": Counter(f["stages"]), "wait_stages": Counter(f["wait_stages"]),
                "states": Counter(f["states"])} for k, f in s.folded.rows.items()}
    for r in rows:
        in_main = (r["pid"], r["tid"]) in fold_main
        if r["pid"] not in folded and not in_main:
            out.append(r)
            continue
        fold.add_row(sums, r, in_main, s.target.pid)
    return out + fold.finish_rows(sums), folded


def workers_at_once(s: Sampled) -> int:
    """The most DataLoader workers alive at the same time in the window (the loader's num_workers, as far as the
    window shows it): workers that end and are forked again between epochs are counted once per slot, not once per
    process. From each worker's main-thread kernel window (first and last reading); a worker too short-lived to have
    one (forked and gone between two looks at the job's children) is not counted; the workers
    discovery found alive together are a floor."""
    spans = list(s.folded.spans.kept)  # the workers folded during the window that may overlap those kept
    at_discovery = len([p for p in s.target.workers if p.found == "discovery"]) + s.folded.at_discovery
    for p in s.target.workers:
        w = s.kernel.windows.get((p.pid, p.pid))
        if w is not None and w.first is not None and w.last is not None:
            spans.append((w.first.t_ns, w.last.t_ns))
    most = s.folded.spans.most_before
    alive = 0
    for _, d in fold.events(spans):
        alive += d
        most = max(most, alive)
    return max(most, at_discovery, 1 if s.target.workers or s.folded.workers else 0)


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
    folded_io = dict(s.folded.io)
    for p in t.processes:
        d = s.kernel.io_delta(p.pid) if p.role in ("main", "worker") else None
        if d is None:
            continue
        if p.pid in folded:
            for k in folded_io:
                folded_io[k] += d[k]
        else:
            io.append({"pid": p.pid, "rchar": d["rchar"], "read_bytes": d["read_bytes"]})
    if folded or s.folded.workers:
        io.append({"pid": fold.FOLDED_PID, **folded_io})
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
        "workers_seen": len(t.workers) + s.folded.workers,
        "workers_folded": len(folded) + s.folded.workers,
        "io": io,
        "cpu_util": round(s.cpu_util, 4) if s.cpu_util is not None else None,
        "absent": absent,
    }
    workers = int(attach["workers_at_once"])
    methods = sorted({p.start_method for p in t.workers if p.start_method} | s.folded.methods)
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
