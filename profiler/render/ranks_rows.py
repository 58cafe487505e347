"""The per-rank table of a torchrun job's merged view, shared by ranks_html (every column) and ranks_terminal (the
80-column subset): one row per rank, then one per missing rank. Reads the merged ``ranks`` view only
(profiler/distributed/merge.py).
"""
from __future__ import annotations

from typing import Any

from ..thresholds import RANKS_TABLE_MAX

HEADERS = ["rank", "host", "samples/s", "steps", "step ms", "input wait ms", "compute ms", "collective ms",
           "collective share", "stall", "bottleneck"]

# The terminal's narrower table (80 columns): the HTML has every column.
TERMINAL_HEADERS = ["rank", "samples/s", "step ms", "input wait ms", "compute ms", "collective ms", "collective share",
                    "bottleneck"]
SHORT = {"samples/s": "smp/s", "step ms": "step", "input wait ms": "input", "compute ms": "compute",
         "collective ms": "collect.", "collective share": "coll %"}

# This table's own "no figure" mark (an en dash, as the ranks views have always shown it; units.ms uses an em dash).
MISSING = "–"


def figure(v: Any, fmt: str = "{:.1f}", scale: float = 1.0) -> str:
    """One cell: ``fmt`` of ``v * scale``, or :data:`MISSING` for no figure."""
    return MISSING if v is None else fmt.format(v * scale)


def shown_ranks(view: dict[str, Any], limit: int = RANKS_TABLE_MAX) -> tuple[list[dict[str, Any]], int]:
    """The rows a table shows: every rank up to ``limit``; beyond it the stragglers, then the ranks that waited least
    and most in collectives (the extremes), in rank order; and how many were left out (ranks.json has them all)."""
    rows = view["ranks"]
    if len(rows) <= limit:
        return rows, 0
    flagged = {s["rank"] for s in view.get("stragglers") or []}
    by_share = sorted(rows, key=lambda r: r.get("collective_share") or 0.0)
    keep = {r["rank"] for r in rows if r["rank"] in flagged}
    room = max(0, limit - len(keep))
    keep |= {r["rank"] for r in by_share[:room // 2]} | {r["rank"] for r in by_share[len(by_share) - room // 2:]}
    return [r for r in rows if r["rank"] in keep], len(rows) - len(keep)


def table_rows(view: dict[str, Any], limit: int = RANKS_TABLE_MAX) -> list[list[str]]:
    """The per-rank table (shared by HTML and terminal), in :data:`HEADERS` order; beyond ``limit`` ranks, the
    stragglers and the extremes, a row saying how many are left out, and the missing ranks in one row."""
    f = figure
    rows = []
    flagged = {s["rank"] for s in view.get("stragglers") or []}
    shown, left = shown_ranks(view, limit)
    for r in shown:
        rows.append([f"{r['rank']}" + ("*" if r["rank"] in flagged else ""),
                     str(r.get("hostname") or "–"), f(r.get("samples_per_s")), str(r.get("steps")),
                     f(r.get("step_ms")), f(r.get("wait_ms")), f(r.get("compute_ms")),
                     f(r.get("collective_ms")), f(r.get("collective_share"), "{:.0f} %", 100),
                     f(r.get("stall_fraction"), "{:.0f} %", 100), str(r.get("bottleneck") or "–")
                     + (" [partial]" if r.get("partial") else "")])
    if left:
        rows.append([f"({left} more)", "–", "–", "–", "–", "–", "–", "–", "–", "–", "between those shown; ranks.json"])
    if len(view["missing"]) > limit:
        ms = view["missing"]
        rows.append([f"{len(ms)} missing", "–", "–", "–", "–", "–", "–", "–", "–", "–",
                     f"ranks {ms[0]}..{ms[-1]}: see ranks.json states"])
        return rows
    for m in view["missing"]:
        rows.append([f"{m} (missing)", "–", "–", "–", "–", "–", "–", "–", "–", "–",
                     str(view["states"].get(m, view["states"].get(str(m), "no record")))])
    return rows
