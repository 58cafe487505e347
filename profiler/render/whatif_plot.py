"""what_would_help.png (the section's rows, shared with the terminal and HTML, are in whatif_rows.py). Reads
``rec.ceilings`` and ``rec.whatif`` only.

Left: each stage's ceiling (samples/s it could sustain alone; hatched = derived, solid = measured), the lowest in
red, this run's samples/s as a line. Right: every predicted setting (worker counts, page cache, storage presets, a
faster model) as a point with its 95 % interval, colored by the short label of the stage that would then bind.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..record.read import CeilingsView, WhatIfView, view
from .output import write_png
from .units import mpl

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord


def render(rec: RunRecord, out_dir: Path, ctx: dict) -> Path:
    """Renderer entry (profiler/render/__init__.py): what_would_help.png."""
    return plot_whatif(rec, Path(out_dir) / "what_would_help.png")


def plot_whatif(rec: RunRecord, path: str | Path) -> Path:
    c, w = view(CeilingsView, rec.ceilings), view(WhatIfView, rec.whatif)
    n_preds = len([p for p in w.prediction_rows if p.samples_per_s is not None])
    fig = Figure(figsize=(12, max(3.6, 1.3 + 0.3 * max(n_preds, len(c.rows)))), dpi=100)
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    rows = c.row_views
    y = np.arange(len(rows))
    vals = [x.samples_per_s or 0.0 for x in rows]  # analysis writes a row only with its rate
    colors = ["#d62728" if x.stage == c.lowest else "#1f77b4" for x in rows]
    bars = ax1.barh(y, vals, color=colors)
    for b, x in zip(bars, rows):
        if x.basis == "derived":
            b.set_hatch("//")
            b.set_alpha(0.7)
    ax1.set_yticks(y, [x.stage for x in rows], fontsize=8)
    if vals:
        ax1.set_xscale("log")
        ax1.axvline(c.samples_per_s or 0, color="black", linestyle="--", linewidth=1, label="this run")
        ax1.legend(fontsize=8, loc="lower right")
    ax1.set_xlabel("samples/s (log)")
    ax1.set_title("Ceilings: each stage alone (hatched = derived)", fontsize=10)
    _predictions(ax2, rec)
    fig.tight_layout()
    return write_png(fig, path)  # a full disk leaves no truncated PNG


# Colors of the binding labels in the what-if panel (the ceilings' red is "sets the pace" there, not a label).
_BINDS_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def _predictions(ax: Axes, rec: RunRecord) -> None:
    """Every predicted setting as a point with its 95 % interval, colored by the stage that would then bind (short
    labels: analysis/binds.py binds_label), the measured setting in black, this run's rate as a dashed line."""
    from ..analysis.binds import binds_label

    w = view(WhatIfView, rec.whatif)
    preds = [p for p in w.prediction_rows if p.samples_per_s is not None]
    if not preds:
        ax.text(0.5, 0.5, "no prediction", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    y = np.arange(len(preds))[::-1]
    labels = [binds_label(str(p.binds)) for p in preds]
    colors = {lab: _BINDS_COLORS[i % len(_BINDS_COLORS)] for i, lab in enumerate(dict.fromkeys(labels))}
    for yi, p, lab in zip(y, preds, labels):
        x = float(p.samples_per_s or 0.0)  # not None: filtered above
        iv = p.interval or [x, x]
        color = "black" if p.measured else colors[lab]
        ax.errorbar([x], [yi], xerr=[[max(x - iv[0], 0.0)], [max(iv[1] - x, 0.0)]], fmt="o", color=color,
                    ecolor=color, elinewidth=1.5, capsize=3, markersize=5)
    names = [mpl(p.setting) + (" (this run)" if p.measured else "") for p in preds]
    ax.set_yticks(y, names, fontsize=8)
    meas = w.measured.samples_per_s
    if meas:
        ax.axvline(float(meas), color="black", linestyle="--", linewidth=1)
    handles = [Line2D([], [], marker="o", linestyle="", color=col, label=f"then bound by {lab}")
               for lab, col in colors.items()]
    handles.append(Line2D([], [], color="black", linestyle="--", label="this run (measured)"))
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_xlim(left=0)
    ax.set_xlabel("predicted samples/s (95 % interval)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title("What-if: each setting, predicted from this run", fontsize=10)
