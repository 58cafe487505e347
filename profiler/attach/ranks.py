"""``attach --rank-of PID``: the ranks' attach records → one merged ranks view, the straggler named. Pure, no I/O.

Why reuse the distributed merge (profiler/distributed/merge.py, straggler.py) and not a rule of its own: a straggler is
the same thing seen from outside — the rank the others wait for in the all-reduce, with a cause of its own — and the
thresholds (profiler/thresholds.py) and sentences should not differ between `run` and `attach`.

How an attach record becomes a rank summary: it has no steps, so its one "step" is the sampled window. Its input wait
is the main thread's sampled wait share of the window; its compute is the rest. A DDP step's all-reduce runs inside
the backward (C++ with no Python frame of its own), so from stacks a rank waiting for the others looks like compute;
the merge then derives each rank's collective wait exactly as it does for a `run` without recorded all-reduce spans:
its compute minus the least compute of any rank. The straggler rule is applied unchanged: the rank that waited least
in collectives, STRAGGLER_WAIT_SHARE below the others, with a cause of its own (its input stall's leading cause, or
longer compute). What one window cannot give: consistency over steps (1 of 1) and step-time skew (every rank's
window is the same few seconds); the view says so (``attach_note``).
"""
from __future__ import annotations

from typing import Any

from ..distributed.merge import merge_summaries
from ..distributed.straggler import pct, ranks_words
from ..distributed.summary import SUMMARY_VERSION, RankSummary
from ..vocab import CAUSE

NOTE = ("attach: each rank's sampled window is its one step (input wait = the main thread's sampled wait share; "
        "compute = the rest, the all-reduce inside the backward included); collective wait derived as a rank's "
        "compute minus the least of any rank's; no per-step consistency or skew from one window")


def summary_of(rec: dict[str, Any], rank: int, path: str | None = None) -> RankSummary:
    """One analysed attach record (a dict, as run.json holds it) as the merge's rank summary."""
    a = rec.get("attach") or {}
    stall, verdict = rec.get("stall") or {}, rec.get("verdict") or {}
    window = float(a.get("seconds") or 0.0)
    frac = float(stall.get("fraction") or 0.0)
    wait = frac * window
    ranks = a.get("ranks") or {}
    return {
        "summary_version": SUMMARY_VERSION, "rank": rank, "world_size": ranks.get("world_size"),
        "local_rank": ranks.get("local_rank"), "group_rank": ranks.get("group_rank"), "hostname": None,
        "boot_id": None, "backend": None, "t0_monotonic_ns": None, "record_path": path,
        "collective_method": None, "steps_total": 1, "stride": 1,
        "series": {"step": [0], "start": [0.0], "got": [round(wait, 6)], "end": [round(window, 6)],
                   "collective": None},
        "step_ms": round(window * 1e3, 3), "wait_ms": round(wait * 1e3, 3),
        "compute_ms": round((window - wait) * 1e3, 3), "input_wait_share": round(frac, 4),
        "samples_per_s": None, "stall_fraction": stall.get("fraction"), "stall_s": stall.get("seconds"),
        "stall_by_cause": dict(stall.get("by_cause") or {}),
        "stall_share_by_cause": dict(stall.get("share_by_cause") or {}),
        "bottleneck": verdict.get("bottleneck"), "verdict": verdict.get("summary"),
        "partial": bool(rec.get("partial")), "partial_reason": rec.get("partial_reason"),
    }


def sentence(st: dict[str, Any]) -> str:
    """The straggler in attach's words (shares of the sampled window, not of a measured step)."""
    waiting = ranks_words(st["waiting_ranks"])
    tail = (f"{waiting} spent {pct(st['waiting_share'])} of the window in the backward/all-reduce beyond the "
            "straggler's compute, waiting for it")
    if st["kind"] == "input":
        cause = st["cause"]
        words = CAUSE[cause].words if cause in CAUSE else cause
        return (f"rank {st['rank']} is {cause}-bound: its main thread waited for its next batch "
                f"{pct(st.get('input_wait_share') or 0.0)} of the sampled window, {pct(st['cause_share'])} of that "
                f"{words}; {tail}.")
    return (f"rank {st['rank']} is the slowest to compute: {st['compute_ms'] / 1e3:.1f} s of the window against "
            f"{st['others_compute_ms'] / 1e3:.1f} s on the others (waits for the others excluded); {tail}.")


def merged(recs: dict[int, dict[str, Any]], paths: dict[int, str] | None = None,
           world_size: int | None = None) -> dict[str, Any]:
    """rank → its analysed attach record (dict) → the merged ``ranks`` view, as profiler/distributed/merge.py makes
    it, with attach's sentences and ``attach_note``."""
    paths = paths or {}
    view = merge_summaries({r: summary_of(rec, r, paths.get(r)) for r, rec in recs.items()}, world_size)
    for st in view["stragglers"]:
        if "sentence" in st:
            st["sentence"] = sentence(st)
    if view["stragglers"]:
        named = [s["sentence"][0].upper() + s["sentence"][1:] for s in view["stragglers"][:8]]
        view["summary"] = " ".join(named)
    else:
        rows = view["ranks"]
        waits = ", ".join(f"rank {r['rank']} {pct(r['input_wait_share'] or 0.0)} ({r['bottleneck']})" for r in rows)
        view["summary"] = ("No straggler: no rank waited for its input, or computed, enough beyond the others to "
                           f"hold them up (input wait share of the window: {waits}).")
    view["collective_method"] = NOTE
    view["attach_note"] = NOTE
    view["kind"] = "attach"
    return view
