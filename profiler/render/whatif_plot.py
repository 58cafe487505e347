"""what_would_help.png (the section's rows, shared with the terminal and HTML, are in whatif_rows.py). Reads
``rec.ceilings`` and ``rec.whatif`` only.

Left: each stage's ceiling (samples/s it could sustain alone; hatched = derived, solid = measured), the lowest in
red, this run's samples/s as a line. Right: predicted samples/s per worker count, with the measured point marked.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .output import write_png

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord


def render(rec: RunRecord, out_dir: Path, ctx: dict) -> Path:
    """Renderer entry (profiler/render/__init__.py): what_would_help.png."""
    return plot_whatif(rec, Path(out_dir) / "what_would_help.png")


def plot_whatif(rec: RunRecord, path: str | Path) -> Path:
    c, w = rec.ceilings or {}, rec.whatif or {}
    fig = Figure(figsize=(11, 4), dpi=110)
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    rows = c.get("rows") or []
    y = np.arange(len(rows))
    vals = [r["samples_per_s"] for r in rows]
    colors = ["#d62728" if r["stage"] == c.get("lowest") else "#1f77b4" for r in rows]
    bars = ax1.barh(y, vals, color=colors)
    for b, r in zip(bars, rows):
        if r["basis"] == "derived":
            b.set_hatch("//")
            b.set_alpha(0.7)
    ax1.set_yticks(y, [r["stage"] for r in rows], fontsize=8)
    if vals:
        ax1.set_xscale("log")
        ax1.axvline(c.get("samples_per_s") or 0, color="black", linestyle="--", linewidth=1, label="this run")
        ax1.legend(fontsize=8, loc="lower right")
    ax1.set_xlabel("samples/s (log)")
    ax1.set_title("Ceilings: each stage alone (hatched = derived)", fontsize=10)
    preds = [p for p in w.get("predictions") or [] if p["kind"] == "workers" and p.get("samples_per_s") is not None]
    if preds:
        n = [p["workers"] for p in preds]
        x = [p["samples_per_s"] for p in preds]
        ax2.plot(n, x, marker="o", color="#ff7f0e", label="predicted")
        ivs = [p.get("interval") or [v, v] for p, v in zip(preds, x)]
        ax2.fill_between(n, [i[0] for i in ivs], [i[1] for i in ivs], color="#ff7f0e", alpha=0.2,
                         label="95 % interval")
        meas = w.get("measured") or {}
        if meas.get("workers") is not None and meas.get("samples_per_s") is not None:
            ax2.scatter([meas["workers"]], [meas["samples_per_s"]], color="black", zorder=3, s=50,
                        label="measured (this run)")
        for p in preds:
            ax2.annotate(p["binds"], (p["workers"], p["samples_per_s"]), fontsize=7, xytext=(0, 6),
                         textcoords="offset points", ha="center")
        ax2.set_xticks(n)
        ax2.legend(fontsize=8, loc="lower right")
    ax2.set_xlabel("DataLoader workers")
    ax2.set_ylabel("samples/s")
    ax2.set_ylim(bottom=0)
    ax2.margins(y=0.2)
    ax2.set_title("What-if: workers (label: the stage that would bind)", fontsize=10)
    fig.tight_layout()
    return write_png(fig, path)  # a full disk leaves no truncated PNG
