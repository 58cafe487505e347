"""The per-rank table of a torchrun job's merged view, shared by ranks_html (every column) and ranks_terminal (the
80-column subset): one row per rank, then one per missing rank. Reads the merged ``ranks`` view only
(profiler/distributed/merge.py).
"""
from __future__ import annotations

from typing import Any

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


def table_rows(view: dict[str, Any]) -> list[list[str]]:
    """The per-rank table (shared by HTML and terminal), in :data:`HEADERS` order."""
    f = figure
    rows = []
    st = view.get("straggler") or {}
    for r in view["ranks"]:
        rows.append([f"{r['rank']}" + ("*" if st.get("rank") == r["rank"] else ""),
                     str(r.get("hostname") or "–"), f(r.get("samples_per_s")), str(r.get("steps")),
                     f(r.get("step_ms")), f(r.get("wait_ms")), f(r.get("compute_ms")),
                     f(r.get("collective_ms")), f(r.get("collective_share"), "{:.0f} %", 100),
                     f(r.get("stall_fraction"), "{:.0f} %", 100), str(r.get("bottleneck") or "–")
                     + (" [partial]" if r.get("partial") else "")])
    for m in view["missing"]:
        rows.append([f"{m} (missing)", "–", "–", "–", "–", "–", "–", "–", "–", "–",
                     str(view["states"].get(m, view["states"].get(str(m), "no record")))])
    return rows
