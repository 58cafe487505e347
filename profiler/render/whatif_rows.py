"""The display rows of the "What would help" section: the terminal and the HTML share them, so they can never
disagree on a number, and neither needs matplotlib for them (what_would_help.png is whatif_plot.py). Reads
``rec.ceilings`` and ``rec.whatif`` only.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord


def _sps(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def ceiling_rows(rec: RunRecord) -> list[tuple[str, str, str, str]]:
    """(stage, samples/s, measured|derived, how) per ceiling, the lowest marked."""
    c = rec.ceilings or {}
    return [(r["stage"] + (" ← sets the pace" if r["stage"] == c.get("lowest") else ""), _sps(r["samples_per_s"]),
             r["basis"], r["how"]) for r in c.get("rows") or []]


def prediction_rows(rec: RunRecord) -> list[tuple[str, str, str, str, str]]:
    """(setting, samples/s, change, would bind, assumption) per prediction."""
    rows = []
    for p in (rec.whatif or {}).get("predictions") or []:
        ch = p.get("change")
        rows.append((p["setting"] + (" (this run)" if p.get("measured") else ""), _sps(p["samples_per_s"]),
                     _change(ch, p), p["binds"], p["assumption"]))
    return rows


def headline(rec: RunRecord) -> str:
    c = rec.ceilings or {}
    rows = c.get("rows") or []
    if not rows:
        return "No ceilings: this run measured no steps."
    parts = ", ".join(f"{r['stage']} {_sps(r['samples_per_s'])} ({r['basis']})" for r in rows)
    return (f"This run: {_sps(c.get('samples_per_s'))} samples/s; alone, {parts} — the lowest ({c.get('lowest')}) "
            "sets the pace.")


def _change(ch: float | None, p: dict[str, Any]) -> str:
    if ch is None or p.get("measured"):
        return "—"
    return "±0 %" if abs(ch) < 0.005 else f"{ch * 100:+.0f} %"
