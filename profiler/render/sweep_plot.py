"""sweep.png: each point's measured samples/s next to what the first point predicted for it (matplotlib, Agg).

Reads the sweep dict only. Measured bars carry their 95 % bootstrap interval over steps; predicted markers carry the
first point's own interval scaled to the prediction (the prediction cannot be surer than the run it came from).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..record.read_docs import sweep_view
from .output import write_png


def _err(values: list[float], intervals: list[Any]) -> np.ndarray:
    err = np.zeros((2, len(values)))
    for i, (v, iv) in enumerate(zip(values, intervals)):
        if iv and v:
            err[:, i] = [max(0.0, v - iv[0]), max(0.0, iv[1] - v)]
    return err


def plot_sweep(doc: dict[str, Any], path: str | Path) -> Path:
    sw = sweep_view(doc)
    pts = [p for p in sw.points if p.measured_samples_per_s]
    labels = [p.label.replace(" ", "\n") for p in pts]
    meas = [p.measured_samples_per_s or 0.0 for p in pts]  # not 0: filtered above
    pred = [p.predicted_samples_per_s or 0.0 for p in pts]
    x = np.arange(len(pts))
    fig = Figure(figsize=(max(6.0, 1.3 * len(pts) + 2), 4.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.bar(x - 0.2, meas, width=0.4, color="#1f77b4", label="measured (95 % interval)",
           yerr=_err(meas, [p.interval for p in pts]), capsize=4)
    ax.errorbar(x + 0.2, pred, yerr=_err(pred, [p.predicted_interval for p in pts]), fmt="D",
                color="#ff7f0e", capsize=4, label="predicted from the first point")
    for i, p in enumerate(pts):
        tag = "baseline" if p.index == sw.baseline else (f"{p.error * 100:+.0f} %" if p.error is not None else "")
        ax.annotate(tag, (i, max(meas[i], pred[i])), ha="center", va="bottom", fontsize=8, xytext=(0, 8),
                    textcoords="offset points")
    title = "Sweep: measured vs predicted"
    if sw.median_abs_error is not None:
        title += f" (median error {sw.median_abs_error * 100:.0f} %)"
    if sw.best:
        title += f"; best: {sw.best.label}"
    ax.set_title(title, fontsize=10)
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("samples/s")
    ax.legend(fontsize=8, loc="upper left")
    ax.margins(y=0.2)
    fig.tight_layout()
    return write_png(fig, path)  # a full disk leaves no truncated PNG


def render(doc: dict[str, Any], out_dir: Path, ctx: dict[str, Any]) -> Path:
    """The registry's entry point: sweep.png in ``out_dir``."""
    return plot_sweep(doc, Path(out_dir) / "sweep.png")
