"""Pure analysis: RunRecord -> derived sections (throughput, stages, stall, verdict, findings). No I/O, no drawing.

This module is the facade: :func:`analyze` runs the analyses in order, each in its own module — storage byte counts
(io.py), out-of-memory advice (memory.py), stage statistics (stats.py), stall attribution (attribution.py), the
verdict (verdict.py), stage ceilings and what-if (rates.py, whatif.py), recommendations (recommend.py), host RAM
(ram.py) and findings (findings.py, patterns.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..record.read import read
from .attribution import attribute, extend_to_tail, has_kernel_accounting
from .context import build_context
from .findings import findings
from .io import derive_storage, served_from_ram_note, summarize_storage
from .memory import derive_memory
from .patterns import pattern_findings
from .ram import ram_section
from .recommend import recommend
from .stats import stage_stats, tables
from .verdict import decide

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord
    from ..record.schema import Ceilings, WhatIf

__all__ = ["analyze"]


def analyze(rec: RunRecord) -> RunRecord:
    """Fill ``rec``'s derived sections from its raw ones (idempotent) and return it.

    Storage byte counts (``storage.bytes_requested`` / ``bytes_from_device`` / ``page_cache_hit_fraction`` and
    ``storage.window``) and the out-of-memory advice (``memory.oom_recommendations``) are recomputed here from the raw
    timeline, samples and ``memory.breakdown``, so ``report`` gives the same answers as the run did.
    """
    from .attach import analyze_attach, is_attach

    if is_attach(rec):  # sampled from outside: counts, not spans (analysis/attach.py)
        return analyze_attach(rec)
    derive_storage(rec)
    derive_memory(rec)
    t = tables(rec.timeline)
    window_s = float(rec.window["seconds"])
    stages = stage_stats(t)
    timing = rec.timing
    stall = attribute(t, window_s, timing, kernel=has_kernel_accounting(rec.timeline, t))
    stall = extend_to_tail(stall, t.tail, window_s)
    stall["method"] = ("device-timeline gaps (CUDA events), split by what the producing worker was doing"
                       if timing == "cuda events"
                       else "main-thread wait for the next batch, split by what the producing worker was doing")
    ctx = build_context(rec, t, stages)
    summarize_storage(rec, ctx.calls_items, ctx.calls_device_bytes, ctx.calls_rchar)
    verdict = decide(stall, ctx, read(rec).memory.oom)
    ram_note = served_from_ram_note(rec)
    if ram_note:  # said once, in the summary (not again as a finding): it changes how to read the verdict
        verdict["summary"] += " " + ram_note
    # What would help: stage ceilings and what-if predictions from this run alone. Advice on top of the verdict: a
    # record the model cannot read (too few steps, nothing measured per sample) gets none, and says why.
    from .rates import measure
    from .whatif import analyze as whatif_analyze

    whatif: WhatIf
    ceilings: Ceilings
    try:
        whatif, ceilings = whatif_analyze(measure(rec, t, stages, ctx))
    except (ValueError, ZeroDivisionError, KeyError, IndexError) as e:
        whatif, ceilings = {"error": f"{type(e).__name__}: {e}"}, {}
    rec.whatif, rec.ceilings = whatif, ceilings
    from .verdict import agree_on_shared_cores

    agree_on_shared_cores(verdict, rec.whatif, rec.ceilings)
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
