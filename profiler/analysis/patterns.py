"""Patterns in a job's timeline worth a finding of their own: oversubscribed workers, costly epoch starts, the
lock-step sawtooth, and time off the core that lean batches could not place. Pure functions of the record's raw
timeline and the derived stall; each returns a finding dict (kind, message, the numbers behind it) or None.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import thresholds as th
from ..record.read import StallView, read, view
from .context import Context
from .findings import finding
from .stats import Tables

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord
    from ..record.schema import Finding, Stall


def oversubscription(stall: Stall, ctx: Context) -> dict[str, Any] | None:
    """Time the data pipeline spent waiting for a core: the workers (and the main process) outnumber the cores."""
    sv = view(StallView, stall)
    secs = float(sv.seconds)
    rq = float(sv.by_kind.get("runqueue", 0.0))
    if secs <= 0 or rq / secs < th.OVERSUBSCRIBED_FROM or float(sv.fraction) < th.NOT_INPUT_BOUND_BELOW:
        return None  # (a share of a wait that is itself within noise is not worth a finding)
    return {"kind": "oversubscribed", "runqueue_s": round(rq, 6), "share_of_stall": round(rq / secs, 4),
            "workers": ctx.workers, "usable_cores": ctx.usable_cores,
            "message": (f"Oversubscribed: {rq / secs * 100:.0f} % of the wait ({rq:.2f} s) was threads of the input "
                        f"pipeline waiting for a core — {ctx.workers} worker(s) and the main process on "
                        f"{ctx.usable_cores:g} usable core(s). More workers cannot help; fewer workers, fewer model "
                        "threads (torch.set_num_threads) or cheaper samples can.")}


def epoch_starts(t: Tables, rec: RunRecord, ctx: Context) -> dict[str, Any] | None:
    """Epochs after the first that paid worker start-up again: ``persistent_workers=True`` saves it."""
    ep = t.epochs
    if ep["iter_start"].size < 2:
        return None
    costs = (ep["first_batch"] - ep["iter_start"])[1:].astype(float)
    loader = read(rec).job.loader
    step_s = (ctx.window_s / ctx.steps) if ctx.steps else 0.0
    mean = float(costs.mean())
    if step_s <= 0 or mean < th.EPOCH_START_FLAG_STEPS * step_s or loader.persistent_workers:
        return None
    fix = ("persistent_workers=True keeps the workers (and their state) across epochs" if loader.num_workers
           else "a faster first batch (smaller prefetch, lighter dataset __init__)")
    return {"kind": "epoch_start", "epochs": int(costs.size), "mean_s": round(mean, 4),
            "steps_equivalent": round(mean / step_s, 1),
            "message": (f"Each new epoch started with {mean:.2f} s before its first batch (mean of {costs.size} epoch "
                        f"start(s), ≈ {mean / step_s:.0f} steps of this job): {fix}, saving about that per epoch.")}


def sawtooth(t: Tables, stall: Stall, ctx: Context) -> dict[str, Any] | None:
    """Workers in lock-step: one long wait every N batches (N = workers) while the steps between are served."""
    st = t.steps
    if ctx.workers < 2 or st["wait_start"].size < 3 * ctx.workers:
        return None
    wait = (st["wait_end"] - st["wait_start"]).astype(float)
    med = float(np.median(wait))
    long = np.flatnonzero(wait >= max(th.SAWTOOTH_LONG_FACTOR * med, th.SAWTOOTH_MIN_WAIT_S))
    if long.size < 3:
        return None
    gaps = np.diff(long)
    regular = float(np.mean(gaps == ctx.workers))
    long_s = float(wait[long].sum())
    secs = float(view(StallView, stall).seconds) or float(wait.sum())
    if regular < th.SAWTOOTH_REGULAR_SHARE or secs <= 0 or long_s / secs < th.SAWTOOTH_STALL_SHARE:
        return None
    return {"kind": "sawtooth", "period_steps": ctx.workers, "long_waits": int(long.size),
            "mean_long_wait_ms": round(float(wait[long].mean()) * 1e3, 3), "median_wait_ms": round(med * 1e3, 3),
            "share_of_stall": round(long_s / secs, 4),
            "message": (f"Workers in lock-step: one long wait ({wait[long].mean() * 1e3:.0f} ms, vs a median of "
                        f"{med * 1e3:.1f} ms) every {ctx.workers} batches holds {long_s / secs * 100:.0f} % of the "
                        "wait: the workers start and finish their batches together, so the loop drains the queue and "
                        "then waits for all of them. Per-worker throughput is the limit: more workers (if cores are "
                        "free) or cheaper samples; a larger prefetch_factor only delays the same wait.")}


def lean_unchecked(rec: RunRecord, stall: Stall) -> dict[str, Any] | None:
    """num_workers=0: time off the core in lean stretches that could not be checked (instrument/lean_check.py), when it
    is a share of the wait worth a caution: it was counted as on-core (cpu), and it may have been a wait for a core
    or a block in the job's fetches, or the job's own steps between them."""
    u = read(rec).accounting.lean_unchecked
    off, secs = float(u.off_core_s), float(view(StallView, stall).seconds)
    if secs <= 0 or off / secs < th.LEAN_UNCHECKED_NOTE_FROM:
        return None
    return {"kind": "lean_unchecked", "off_core_s": round(off, 6), "share_of_stall": round(off / secs, 4),
            "stretches": int(u.stretches), "batches": int(u.batches),
            "message": (f"Up to {off * 1e3:.1f} ms ({off / secs * 100:.0f} % of the wait) of the main thread's time "
                        f"off its core fell in {int(u.stretches)} stretch(es) of lean batches that could "
                        f"not be checked one by one; their {int(u.batches)} batches were counted as on "
                        "their core (cpu). It may have been the job's own steps between them; after each such "
                        "stretch every batch was checked (docs/attribution.md §4).")}


def pattern_findings(t: Tables, rec: RunRecord, stall: Stall, ctx: Context) -> list[Finding]:
    found = (oversubscription(stall, ctx), epoch_starts(t, rec, ctx), sawtooth(t, stall, ctx),
             lean_unchecked(rec, stall))
    return [finding(**f) for f in found if f]
