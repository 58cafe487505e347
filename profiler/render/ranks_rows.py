"""The per-rank table of a torchrun job's merged view, shared by ranks_html (every column) and ranks_terminal (the
80-column subset): one row per rank, then one per missing rank. Reads the merged ``ranks`` view only
(profiler/distributed/merge.py).
"""
from __future__ import annotations

from typing import Any

from ..record.read import view as typed
from ..record.read_docs import RankRow, RanksView, RecordPlace, ranks_view
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


def record_places(v: dict[str, Any]) -> dict[Any, RecordPlace]:
    """``records`` (rank -> where its record is), each place typed; ranks as the view keys them (int, or str once
    read back from ranks.json)."""
    recs = v.get("records")
    return {r: typed(RecordPlace, loc) for r, loc in recs.items()} if isinstance(recs, dict) else {}


def figure(v: Any, fmt: str = "{:.1f}", scale: float = 1.0) -> str:
    """One cell: ``fmt`` of ``v * scale``, or :data:`MISSING` for no figure."""
    return MISSING if v is None else fmt.format(v * scale)


def shown_ranks(v: RanksView, limit: int = RANKS_TABLE_MAX) -> tuple[list[RankRow], int]:
    """The rows a table shows: every rank up to ``limit``; beyond it the stragglers, then the ranks that waited least
    and most in collectives (the extremes), in rank order; and how many were left out (ranks.json has them all)."""
    rows = v.ranks
    if len(rows) <= limit:
        return rows, 0
    flagged = {s.rank for s in v.stragglers}
    by_share = sorted(rows, key=lambda r: r.collective_share or 0.0)
    keep = {r.rank for r in rows if r.rank in flagged}
    room = max(0, limit - len(keep))
    keep |= {r.rank for r in by_share[:room // 2]} | {r.rank for r in by_share[len(by_share) - room // 2:]}
    return [r for r in rows if r.rank in keep], len(rows) - len(keep)


def table_rows(view: dict[str, Any], limit: int = RANKS_TABLE_MAX) -> list[list[str]]:
    """The per-rank table (shared by HTML and terminal), in :data:`HEADERS` order; beyond ``limit`` ranks, the
    stragglers and the extremes, a row saying how many are left out, and the missing ranks in one row."""
    f = figure
    rows = []
    v = ranks_view(view)
    flagged = {s.rank for s in v.stragglers}
    shown, left = shown_ranks(v, limit)
    for r in shown:
        rows.append([f"{r.rank}" + ("*" if r.rank in flagged else ""),
                     str(r.hostname or "–"), f(r.samples_per_s), str(r.steps),
                     f(r.step_ms), f(r.wait_ms), f(r.compute_ms),
                     f(r.collective_ms), f(r.collective_share, "{:.0f} %", 100),
                     f(r.stall_fraction, "{:.0f} %", 100), str(r.bottleneck or "–")
                     + (" [partial]" if r.partial else "")])
    if left:
        rows.append([f"({left} more)", "–", "–", "–", "–", "–", "–", "–", "–", "–", "between those shown; ranks.json"])
    if len(v.missing) > limit:
        ms = v.missing
        rows.append([f"{len(ms)} missing", "–", "–", "–", "–", "–", "–", "–", "–", "–",
                     f"ranks {ms[0]}..{ms[-1]}: see ranks.json states"])
        return rows
    for m in v.missing:
        rows.append([f"{m} (missing)", "–", "–", "–", "–", "–", "–", "–", "–", "–",
                     str(view["states"].get(m, view["states"].get(str(m), "no record")))])
    return rows
