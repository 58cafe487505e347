"""Measured rates of one run, per sample and per step: the inputs of the what-if model (analysis/whatif.py).

Why a separate module: the what-if model must reason only with figures a run measured, each with a name and a unit,
so that a prediction can say which measurement it rests on. Everything here is read from the v2 timeline (the
in-worker per-call accounting) and the process samples; nothing is assumed except where a field says so.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import thresholds as th
from ..record.read import MainProcessSamplesView, ModelAloneView, StageView, samples, view
from ..record.read import read as read_views
from .stats import Tables

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord
    from .context import Context

# Below this share of a core a thread was *waiting* for one, the run is treated as uncontended: the run-queue clock
# has ~1 ms resolution per call, so a few per cent of runq is measurement noise, not other load.
UNCONTENDED_SHARE_FROM = 0.95


@dataclass
class Rates:
    """What one sample, one batch and one step cost in this run. Seconds unless the name says otherwise."""

    samples_per_s: float  # measured throughput of the window
    workers: int
    batch: float  # samples per step (mean)
    device_type: str  # "cpu" | "cuda"
    cores: float  # usable cores
    model_threads: int  # torch intra-op threads of the main process (environment.torch.num_threads)
    # --- per sample, in the process that ran the dataset (workers, or the main process with 0 workers) -------------
    cpu_s: float  # on a core (dataset call + collate share)
    runq_s: float  # runnable, waiting for a core
    blocked_s: float  # neither: blocked on IO, a lock, a sleep (wall - cpu - runq)
    read_blocked_s: float  # the part of blocked_s inside the read stage (what a warm page cache removes)
    rchar: float  # bytes the dataset asked to read per sample
    read_bytes: float  # bytes that came from the block device per sample
    cold_reads: float  # dataset calls per sample that read from the device (0..1 for one file per sample)
    # --- per step / batch ---------------------------------------------------------------------------------------
    collate_s: float  # wall per batch
    transfer_s: float  # worker -> main per batch (0 with 0 workers: not measured)
    compute_s: float  # model step per step, as measured in the window (with whatever contention there was)
    h2d_s: float
    loop_s: float  # the main loop's own time per step outside wait, H2D and compute
    main_wait_cpu_s: float  # main thread on a core while waiting for a batch, per step (receive, unpickle)
    # --- whole job ---------------------------------------------------------------------------------------------
    job_cores: float  # cores the job's processes used on average in the window (process samples; spans if absent)
    worker_cores: float  # of which the worker processes (0 with 0 workers)
    share: float  # share of a core a runnable dataset thread got: cpu / (cpu + runq), 1.0 if uncontended
    system_busy_cores: float | None  # all processes on the machine, from the per-core samples
    pin_memory: bool
    throttle: dict[str, Any] | None  # the run's storage throttle (spec + mechanism), if any
    cache_mode: str
    model_alone_s: float | None  # model step on a batch already on the device (harness/ceiling.py), if measured
    main_sample_cpu_s: float | None = None  # a sample's CPU in the main thread (harness/ceiling.py), if measured
    main_sample_process_cpu_s: float | None = None  # ... and in all the main process's threads (intra-op pool)
    # --- how steady the window was: the spread a prediction inherits (None: not measured; an old record) ---------
    rate_rel_low: float | None = None  # 95 % interval of the window's samples/s over its steps, relative to it
    rate_rel_high: float | None = None
    cpu_rel_half: float | None = None  # 95 % half-width of the mean CPU per sample, relative (spread over calls)
    drift: float | None = None  # second half's samples/s over the first half's, minus 1
    warmup_gap: float | None = None  # first quarter's samples/s over the rest's, minus 1
    other_load_spread: float | None = None  # cores other processes used: 90th minus 10th percentile of the samples
    steps_measured: int = 0
    target: str | None = None  # the user's script (None: the built-in pipeline), for the re-measure command
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def _mean_in_window(t: list, v: list, start: float, end: float) -> float | None:
    ta = np.asarray(t, dtype=float)
    va = np.asarray([np.nan if x is None else x for x in v], dtype=float)
    if ta.size == 0 or ta.size != va.size:
        return None
    m = (ta >= start) & (ta <= end) & np.isfinite(va)
    return float(va[m].mean()) if m.any() else None


def _process_cores(rec: RunRecord, start: float, end: float) -> tuple[float | None, float | None]:
    """Mean cores used by the job's processes (all, workers) in the window, from the sampled cpu_percent."""
    total = workers = 0.0
    seen = False
    for p in samples(rec).processes:
        m = _mean_in_window(p.t_s, p.cpu_percent, start, end)
        if m is None:
            continue
        seen = True
        total += m / 100.0
        if p.role == "worker":
            workers += m / 100.0
    return (total, workers) if seen else (None, None)


def _system_busy(rec: RunRecord, start: float, end: float, cores: float) -> float | None:
    s = samples(rec)
    t = np.asarray(s.t_s, dtype=float)
    rows = s.cpu_percent_per_core
    if t.size == 0 or len(rows) != t.size:
        return None
    vals = [float(np.mean(r)) for r, ti in zip(rows, t) if r and start <= ti <= end]
    return float(np.mean(vals)) / 100.0 * cores if vals else None


def _other_load_spread(rec: RunRecord, start: float, end: float, cores: float) -> float | None:
    """10th-90th percentile range of the cores other processes used in the window: all busy cores (per-core samples)
    less the job's processes (their sampled cpu_percent, interpolated to the same instants)."""
    s = samples(rec)
    t = np.asarray(s.t_s, dtype=float)
    rows = s.cpu_percent_per_core
    if t.size == 0 or len(rows) != t.size:
        return None
    keep = (t >= start) & (t <= end)
    if keep.sum() < 4:
        return None
    busy = np.asarray([float(np.mean(r)) / 100.0 * cores if r else np.nan for r in rows])[keep]
    job = np.zeros(int(keep.sum()))
    for p in s.processes:
        pt = np.asarray(p.t_s, dtype=float)
        pv = np.asarray([np.nan if v is None else v for v in p.cpu_percent], dtype=float)
        ok = np.isfinite(pv)
        if pt.size != pv.size or ok.sum() < 2:
            continue
        job += np.interp(t[keep], pt[ok], pv[ok] / 100.0, left=0.0, right=0.0)
    others = np.clip(busy - job, 0.0, None)
    others = others[np.isfinite(others)]
    if others.size < 4:
        return None
    p10, p90 = np.percentile(others, [10, 90])
    return float(p90 - p10)


def _steadiness(rec: RunRecord) -> dict[str, Any]:
    """The window's own spread: the block-bootstrap interval of its samples/s, its drift (second half vs first),
    and how far its first quarter ran from the rest (a warm-up that had not settled)."""
    from ..thresholds import CONFIDENCE
    from .stats import block_bootstrap_rate, step_periods

    n, period = step_periods(rec.timeline["steps"])
    out: dict[str, Any] = {"steps_measured": int(n.size)}
    rel = block_bootstrap_rate(n, period)
    if rel is not None:
        lo, hi = np.percentile(rel, [(1 - CONFIDENCE) / 2 * 100, (1 + CONFIDENCE) / 2 * 100])
        out.update(rate_rel_low=float(lo), rate_rel_high=float(hi))

    def rate(a: slice) -> float:
        secs = float(period[a].sum())
        return float(n[a].sum()) / secs if secs > 0 else 0.0

    if n.size >= 8:
        h, q = n.size // 2, n.size // 4
        first, second, head, rest = rate(slice(0, h)), rate(slice(h, None)), rate(slice(0, q)), rate(slice(q, None))
        if first > 0:
            out["drift"] = second / first - 1.0
        if rest > 0:
            out["warmup_gap"] = head / rest - 1.0
    return out


def _per_sample(n: int | None, v: float | None) -> float | None:
    """``v / n`` of a raw ceiling measurement (seconds over its samples), None unless both are sane."""
    if type(n) is not int or n <= 0:
        return None
    return float(v) / n if isinstance(v, (int, float)) and v > 0 else None


def _mean_ms(stages: dict[str, Any], name: str) -> float:
    """A stage's mean in ms (the stage statistics analysis just built); 0 where the window had no such stage."""
    ms = view(StageView, stages[name]).mean_ms if name in stages else None
    return ms if ms is not None else 0.0


def measure(rec: RunRecord, t: Tables, stages: dict[str, Any], ctx: Context) -> Rates:
    """The rates of ``rec`` (its measured window), from the tables and the context analysis already built."""
    notes: list[str] = []
    sp, bt, st = t.spans, t.batches, t.steps
    r = read_views(rec)
    start, end = float(r.window.start_s), float(r.window.end_s)
    samples = max(ctx.samples, 1)
    steps = max(ctx.steps, 1)
    sel = np.isin(sp["batch"], t.measured_batches) if sp["batch"].size else None
    if sel is not None and sel.any():
        items = float(np.maximum(sp["items"][sel], 1).sum())
        wall = float((sp["end"][sel].astype(float) - sp["start"][sel].astype(float)).sum())
        cpu = float(sp["cpu"][sel].sum()) if "cpu" in sp else 0.0
        runq = float(sp["runq"][sel].sum()) if "runq" in sp else 0.0
        read = float(t.span_stages["read"][sel].sum()) if "read" in t.span_stages else 0.0
        rchar = float(sp["rchar"][sel].sum()) if "rchar" in sp else 0.0
        rbytes = float(sp["read_bytes"][sel].sum()) if "read_bytes" in sp else 0.0
        cold = float((sp["read_bytes"][sel] > 0).sum()) if "read_bytes" in sp else 0.0
    else:
        items, wall, cpu, runq, read, rchar, rbytes, cold = float(samples), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
        notes.append("no dataset calls in the window: per-sample costs unknown")
    clock = r.accounting.cpu_clock
    if cpu <= 0 and wall > 0:  # no per-thread clock (v1 record, or a kernel without schedstat): wall minus reads
        cpu, runq = max(wall - read, 0.0), 0.0
        notes.append(f"no per-thread CPU clock ({'absent' if clock is None else clock}): CPU per sample = wall "
                     "minus read")
    blocked = max(wall - cpu - runq, 0.0)
    read_blocked = min(blocked, read)
    if read <= 0 and sel is not None and sel.any() and "read_bytes" in sp and "cpu" in sp:
        # No timed read stage (a user's script): the reads are the calls the kernel fetched device bytes for, and
        # their blocked time is what a warm page cache would remove.
        dev = sp["read_bytes"][sel] > 0
        if dev.any():
            w = sp["end"][sel][dev].astype(float) - sp["start"][sel][dev].astype(float)
            q = np.clip(sp["runq"][sel][dev].astype(float), 0, None) if "runq" in sp else np.zeros_like(w)
            read_blocked = min(blocked, float(np.clip(w - sp["cpu"][sel][dev].astype(float) - q, 0, None).sum()))
    if rbytes > th.DEVICE_BEYOND_RCHAR_FACTOR * max(rchar, 0.0):
        # Reads around read(): page faults on memory-mapped files (np.memmap token files) fetch bytes rchar never
        # counts. The bytes a sample needs from storage are then the device's count.
        notes.append(f"reads through memory maps: {rbytes / items / 1e3:.0f} kB per sample from the device (the "
                     f"kernel's read_bytes) for {rchar / items / 1e3:.0f} kB asked of read(); bytes per sample taken "
                     "from the device's count")
        rchar = rbytes
    bsel = np.isin(bt["batch"], t.measured_batches) if bt["batch"].size else None
    collate_cpu = float(bt["collate_cpu"][bsel].sum()) if bsel is not None and "collate_cpu" in bt else 0.0
    collate_runq = float(bt["collate_runq"][bsel].sum()) if bsel is not None and "collate_runq" in bt else 0.0
    nb = max(int(bsel.sum()) if bsel is not None else 0, 1)
    collate_wall = _mean_ms(stages, "collate") / 1e3
    if collate_cpu <= 0:
        collate_cpu = collate_wall * nb
    per = 1.0 / items
    cpu_s = (cpu + collate_cpu) * per
    runq_s = (runq + collate_runq) * per
    share = cpu_s / (cpu_s + runq_s) if cpu_s + runq_s > 0 else 1.0
    if share >= UNCONTENDED_SHARE_FROM:
        share = 1.0
    job, workers_c = _process_cores(rec, start, end)
    if job is None:
        workers_c = cpu_s * ctx.samples_per_s if ctx.workers > 0 else 0.0
        job = workers_c + float(np.sum(st["main_cpu"])) / max(ctx.window_s, 1e-9)
        notes.append("no process CPU samples: job CPU from the in-worker accounting only")
    loop = 0.0
    if st["wait_start"].size > 1:
        gaps = st["wait_start"][1:].astype(float) - st["compute_end"][:-1].astype(float)
        loop = float(np.clip(gaps, 0, None).mean())
    torch_env = r.environment.torch  # free-form in the schema (torch's own facts): read by key
    ma_s = view(ModelAloneView, rec.model_alone).seconds_per_step
    mp = view(MainProcessSamplesView, rec.main_process_samples)
    main_cpu, main_proc = _per_sample(mp.samples, mp.cpu_s), _per_sample(mp.samples, mp.process_cpu_s)
    steady = _steadiness(rec)
    cpu_half = None
    if sel is not None and sel.any() and "cpu" in sp and int(sel.sum()) >= 3 and cpu > 0:
        c = sp["cpu"][sel].astype(float) / np.maximum(sp["items"][sel], 1)
        cpu_half = float(1.96 * c.std(ddof=1) / np.sqrt(c.size) / max(c.mean(), 1e-12))
    target = r.job.target if rec.job and rec.job_kind != "builtin" else None
    return Rates(
        samples_per_s=ctx.samples_per_s, workers=ctx.workers, batch=samples / steps,
        device_type=ctx.device_type, cores=max(ctx.usable_cores, 1.0),
        model_threads=int(torch_env.get("num_threads") or ctx.usable_cores or 1),
        cpu_s=cpu_s, runq_s=runq_s, blocked_s=blocked * per, read_blocked_s=read_blocked * per,
        rchar=rchar * per, read_bytes=rbytes * per, cold_reads=cold * per,
        collate_s=collate_wall, transfer_s=_mean_ms(stages, "transfer") / 1e3 if ctx.workers else 0.0,
        compute_s=ctx.compute_ms / 1e3, h2d_s=ctx.h2d_ms / 1e3, loop_s=loop,
        main_wait_cpu_s=float(np.mean(st["main_cpu"])) if st["main_cpu"].size
        else 0.0,
        job_cores=job, worker_cores=workers_c or 0.0, share=share,
        system_busy_cores=_system_busy(rec, start, end, max(ctx.usable_cores, 1.0)),
        pin_memory=ctx.pin_memory, throttle=r.storage.throttle,
        cache_mode=str(r.storage.cache_mode if r.storage.cache_mode is not None else "as-is"),
        model_alone_s=float(ma_s) if isinstance(ma_s, (int, float)) and ma_s > 0 else None,
        main_sample_cpu_s=main_cpu, main_sample_process_cpu_s=main_proc,
        cpu_rel_half=cpu_half, other_load_spread=_other_load_spread(rec, start, end, max(ctx.usable_cores, 1.0)),
        target=str(target) if target else None, notes=notes, **steady,
    )
