"""Pure analysis: RunRecord -> derived sections (throughput, stages, stall, verdict, findings). No I/O, no drawing."""
from __future__ import annotations

from typing import Any

from .attribution import attribute
from .context import Context, build_context
from .recommend import recommend
from .stats import stage_stats, tables
from .verdict import decide


def analyze(rec: Any) -> Any:
    """Fill ``rec``'s derived sections from its raw ones (idempotent) and return it."""
    t = tables(rec.timeline)
    win = rec.window
    window_s = float(win.get("seconds", 0.0))
    stages = stage_stats(t)
    stall = attribute(t, window_s)
    stall["method"] = ("device-timeline gaps (CUDA events), split by what the producing worker was doing"
                       if rec.compute_device.get("timing") == "cuda events"
                       else "main-thread wait for the next batch, split by what the producing worker was doing")
    ctx = build_context(rec, t, stages)
    oom = (rec.memory or {}).get("oom")
    verdict = decide(stall, ctx, oom)
    verdict["recommendations"] = recommend(verdict, stall, ctx, rec.memory)
    steps = ctx.steps
    rec.throughput = {
        "samples_per_s": round(ctx.samples_per_s, 4),
        "steps_per_s": round(steps / window_s, 4) if window_s > 0 else 0.0,
        "samples": ctx.samples, "steps": steps, "window_s": round(window_s, 6),
    }
    rec.stages = stages
    rec.stall = stall
    rec.verdict = verdict
    rec.findings = findings(rec, ctx)
    return rec


def findings(rec: Any, ctx: Context) -> list[dict[str, Any]]:
    """Facts worth a line in every report, beyond the verdict (skipped files, RAM, storage caveats)."""
    out: list[dict[str, Any]] = []
    n_skip = int(rec.skipped.get("count", 0))
    if n_skip:
        out.append({"kind": "skipped_files", "message": f"{n_skip} file(s) could not be read or decoded and were "
                                                        "skipped; see the skipped-files list."})
    if rec.partial:
        out.append({"kind": "partial", "message": f"Partial run: {rec.partial_reason}. Figures cover what was "
                                                  "measured before it ended."})
    try:
        from .ram import detect_copy_on_read
        cor = detect_copy_on_read(rec.samples)
        if cor:
            out.append({"kind": "copy_on_read", **cor})
    except ImportError:
        pass
    return out
