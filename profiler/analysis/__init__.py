"""Pure analysis: RunRecord -> derived sections (throughput, stages, stall, verdict, findings). No I/O, no drawing."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..thresholds import SERVED_FROM_RAM_FROM
from .attribution import attribute, extend_to_tail, has_kernel_accounting
from .context import Context, build_context
from .io import fits_in_page_cache, io_totals, memory_advice
from .patterns import pattern_findings
from .recommend import recommend
from .stats import stage_stats, tables
from .verdict import decide

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord


def analyze(rec: RunRecord) -> Any:
    """Fill ``rec``'s derived sections from its raw ones (idempotent) and return it.

    Storage byte counts (``storage.bytes_requested`` / ``bytes_from_device`` / ``page_cache_hit_fraction`` and
    ``storage.window``) and the out-of-memory advice (``memory.oom_recommendations``) are recomputed here from the raw
    timeline, samples and ``memory.breakdown``, so ``report`` gives the same answers as the run did.
    """
    derive_storage(rec)
    derive_memory(rec)
    t = tables(rec.timeline)
    win = rec.window
    window_s = float(win.get("seconds", 0.0))
    stages = stage_stats(t)
    stall = attribute(t, window_s, rec.compute_device.get("timing", "host clocks"),
                      kernel=has_kernel_accounting(rec.timeline, t))
    stall = extend_to_tail(stall, t.tail, window_s)
    stall["method"] = ("device-timeline gaps (CUDA events), split by what the producing worker was doing"
                       if rec.compute_device.get("timing") == "cuda events"
                       else "main-thread wait for the next batch, split by what the producing worker was doing")
    ctx = build_context(rec, t, stages)
    oom = (rec.memory or {}).get("oom")
    verdict = decide(stall, ctx, oom)
    ram_note = served_from_ram_note(rec)
    if ram_note:  # said once, in the summary (not again as a finding): it changes how to read the verdict
        verdict["summary"] += " " + ram_note
    # What would help: stage ceilings and what-if predictions from this run alone. Advice on top of the verdict: a
    # record the model cannot read (too few steps, nothing measured per sample) gets none, and says why.
    from .rates import measure
    from .whatif import analyse as whatif_analyse

    try:
        rec.whatif, rec.ceilings = whatif_analyse(measure(rec, t, stages, ctx))
    except (ValueError, ZeroDivisionError, KeyError, IndexError) as e:
        rec.whatif, rec.ceilings = {"error": f"{type(e).__name__}: {e}"}, {}
    verdict["recommendations"] = recommend(verdict, stall, ctx, rec.memory, rec.whatif)
    steps = ctx.steps
    rec.throughput = {
        "samples_per_s": round(ctx.samples_per_s, 4),
        "steps_per_s": round(steps / window_s, 4) if window_s > 0 else 0.0,
        "samples": ctx.samples, "steps": steps, "window_s": round(window_s, 6),
    }
    rec.stages = stages
    rec.stall = stall
    rec.verdict = verdict
    rec.ram = ram_section(rec, ctx)
    rec.findings = findings(rec, ctx) + pattern_findings(t, rec, stall, ctx)
    return rec


def derive_storage(rec: RunRecord) -> None:
    """Recompute the storage byte counts from the raw /proc io readings (kept as recorded when there are none)."""
    io = io_totals(rec)
    if io.get("io_source") is not None:
        rec.storage = {**(rec.storage or {}), **io}


def derive_memory(rec: RunRecord) -> None:
    """Recompute the out-of-memory advice from ``memory.breakdown``; a failure is noted, never raised (the advice is
    a bonus on a run that already failed), and a record's own list is then kept."""
    mem = rec.memory
    if not mem or not mem.get("oom"):
        return
    try:
        advice = memory_advice(rec)
    except Exception as e:
        mem["oom_recommendations_error"] = f"{type(e).__name__}: {e}"
        return
    if advice or mem.get("breakdown"):
        mem["oom_recommendations"] = advice


def served_from_ram_note(rec: RunRecord) -> str | None:
    """A run meant to measure storage (cold cache or a throttle) whose reads mostly hit the page cache measured RAM."""
    st = rec.storage or {}
    hit = st.get("page_cache_hit_fraction")
    if hit is None or hit < SERVED_FROM_RAM_FROM or not (st.get("throttle") or st.get("cache_mode") == "cold"):
        return None
    return (f"Caution: {hit * 100:.0f} % of the bytes read were served from the page cache, so this run measured "
            "RAM, not the storage device (use --cache cold).")


def dataset_vs_ram(rec: RunRecord, ctx: Context) -> dict[str, Any] | None:
    """Can the page cache hold the dataset? If not, every epoch reads it from the device: say what that costs."""
    size, avail = ctx.dataset_bytes, ctx.ram_available_bytes
    fits = fits_in_page_cache(size, avail)
    if fits is None:
        return None
    total = (rec.environment.get("ram") or {}).get("total_bytes")
    st = rec.storage or {}
    from_dev = int(st.get("bytes_from_device") or 0)
    rate = from_dev / ctx.window_s if from_dev > 0 and ctx.window_s > 0 else None
    gb = 1e9
    out = {"kind": "dataset_vs_ram", "dataset_bytes": size, "ram_available_bytes": avail, "ram_total_bytes": total,
           "fits_in_page_cache": fits, "device_read_bytes_per_s": rate}
    if fits:
        out["message"] = (f"Dataset {size / gb:.2f} GB fits in the page cache ({avail / gb:.1f} GB of RAM available): "
                          "after the first epoch, reads come from RAM unless memory pressure evicts them.")
    else:
        cost = f"; at this run's device rate ({rate / 1e6:.0f} MB/s) that is {size / rate:.0f} s of reading per epoch" \
            if rate else ""
        out["message"] = (f"Dataset {size / gb:.1f} GB cannot stay in the page cache ({avail / gb:.1f} GB of RAM "
                          f"available): every epoch reads it from the storage device{cost}.")
    return out


def ram_section(rec: RunRecord, ctx: Context) -> dict[str, Any]:
    """Host RAM: per-process peaks, /dev/shm, copy-on-read growth, and a projection for other worker counts."""
    from .ram import detect_copy_on_read, project_ram

    s = rec.samples or {}
    cor = detect_copy_on_read(s)  # once: the projection and the finding both use this result
    out: dict[str, Any] = {"copy_on_read": cor}
    shm = [v for v in (s.get("shm_used_bytes") or []) if v is not None]
    out["shm_peak_bytes"] = max(shm) if shm else None
    out["processes"] = [
        {"pid": p.get("pid"), "role": p.get("role"), "worker_id": p.get("worker_id"),
         **{f"peak_{k}": max((v for v in (p.get(k) or []) if v is not None), default=None)
            for k in ("rss_bytes", "pss_bytes", "uss_bytes")}}
        for p in s.get("processes", [])]
    w = ctx.workers
    targets = sorted({max(1, w), w * 2 or 2, w * 4 or 4, int(ctx.usable_cores) * 2})
    try:
        out["projection"] = project_ram(s, w, targets, copy_on_read=cor) if s.get("processes") else []
    except Exception as e:  # a projection is advice; a record without enough samples must still render
        out["projection"] = []
        out["projection_error"] = f"{type(e).__name__}: {e}"
    return out


def findings(rec: RunRecord, ctx: Context) -> list[dict[str, Any]]:
    """Facts worth a line in every report, beyond the verdict (skipped files, RAM, the dataset vs the page cache).

    The "measured RAM, not the storage device" caution is not repeated here: it is part of the verdict's summary."""
    out: list[dict[str, Any]] = []
    n_skip = int(rec.skipped.get("count", 0))
    if n_skip:
        out.append({"kind": "skipped_files", "message": f"{n_skip} file(s) could not be read or decoded and were "
                                                        "skipped; see the skipped-files list."})
    if rec.partial:
        out.append({"kind": "partial", "message": f"Partial run: {rec.partial_reason}. Figures cover what was "
                                                  "measured before it ended."})
    cor = (rec.ram or {}).get("copy_on_read")
    if cor:
        out.append({**cor, "kind": "copy_on_read", "message": f"{cor.get('message')} Fix: {cor.get('fix')}"})
    for row in (rec.ram or {}).get("projection", []):
        if row.get("warning") and row.get("workers") == ctx.workers:
            out.append({"kind": "ram", "message": f"RAM: {row['warning']}"})
    dr = dataset_vs_ram(rec, ctx)
    if dr:
        out.append(dr)
    return out
