"""compare.png: the runs side by side (matplotlib, Agg; reads the comparison dict only).

Four panels, because they answer the questions in the order people ask them: did it get faster or slower
(throughput, with each run's own 95 % bootstrap interval as error bars)? Was the device waiting more, and on what
(stall seconds stacked by cause, in the same colors as the single-run plots)? Which stage moved (per-stage mean and
p95, log scale because read on a throttled disk and collate differ by orders of magnitude)?
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .. import vocab
from ..record.read_docs import Comparison, Metric, comparison_view
from .output import write_atomic
from .units import printable, stage_order

# Run colors: baseline grey, then matplotlib's tab10 (distinct, color-blind tolerable for the first few runs).
RUN_COLORS = ("#7f7f7f", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


def _required(c: Comparison, key: str) -> Metric:
    """A metric every comparison has (analysis.compare writes throughput and each stage it lists)."""
    m = c.metric(key)
    if m is None:
        raise KeyError(f"the comparison has no metric {key!r}")
    return m


def _color(i: int) -> str:
    return RUN_COLORS[i % len(RUN_COLORS)]


def _throughput(ax: Axes, c: dict[str, Any]) -> None:
    m = _required(comparison_view(c), "throughput")
    labels = c["labels"]
    vals = np.array([v or 0.0 for v in m.values], dtype=float)
    err = np.zeros((2, len(vals)))
    for i, ci in enumerate(m.ci_self):
        if ci:
            err[:, i] = [max(0.0, vals[i] - ci[0]), max(0.0, ci[1] - vals[i])]
    x = np.arange(len(vals))
    ax.bar(x, vals, color=[_color(i) for i in range(len(vals))], yerr=err, capsize=4)
    for i, v in enumerate(vals):
        vs = m.versus(i)
        tag = "" if not vs or vs.ratio is None else f"\n{vs.ratio:.2f}x" + (" *" if vs.significant else "")
        top = v + err[1, i]  # above the error bar, so the label never sits on it
        ax.annotate(f"{v:.0f}{tag}" if v >= 100 else f"{v:.1f}{tag}", (i, top), ha="center", va="bottom",
                    fontsize=8, xytext=(0, 3), textcoords="offset points")
    ax.set_xticks(x, [printable(lab) for lab in labels])
    ax.set_ylabel("samples/s")
    ax.set_title("Throughput (error bar: 95 % bootstrap interval)")
    ax.margins(y=0.25)


def _stall(ax: Axes, c: dict[str, Any]) -> None:
    labels = c["labels"]
    x = np.arange(len(labels))
    bottom = np.zeros(len(labels))
    cv = comparison_view(c)
    for cause in vocab.CAUSES:
        m = cv.metric(f"stall_{cause.name}")
        if m is None:
            continue
        v = np.array([x or 0.0 for x in m.values], dtype=float)
        ax.bar(x, v, bottom=bottom, color=cause.color, label=cause.name)
        bottom += v
    for i, total in enumerate(bottom):
        ax.annotate(f"{total:.2f} s", (i, total), ha="center", va="bottom", fontsize=8, xytext=(0, 3),
                    textcoords="offset points")
    ax.set_xticks(x, labels)
    ax.set_ylabel("seconds idle")
    ax.set_title("Stall by cause (measured window)")
    # Room above the tallest bar for its label and the legend: margins() cannot add it, a stacked bar's top segment
    # (even an empty one) is a sticky edge at the total.
    top = float(bottom.max()) if len(bottom) else 0.0
    ax.set_ylim(0, top * 1.45 if top > 0 else 1.0)
    ax.legend(fontsize=8, loc="upper left", ncols=4)


def _stages(ax: Axes, c: dict[str, Any], stat: str) -> None:
    labels = c["labels"]
    n = len(labels)
    cv = comparison_view(c)
    stages = stage_order(m.key[: -len(f"_{stat}")] for m in cv.metrics
                         if m.group == "stages" and m.key.endswith(f"_{stat}"))
    shown = [s for s in stages if any((v or 0) > 0 for v in _required(cv, f"{s}_{stat}").values)]
    x = np.arange(len(shown))
    w = 0.8 / max(1, n)
    for i, lab in enumerate(labels):
        vals = [_required(cv, f"{s}_{stat}").values[i] or np.nan for s in shown]
        vals = [v if v and v > 0 else np.nan for v in vals]  # log scale: a zero has no bar
        ax.bar(x + (i - (n - 1) / 2) * w, vals, width=w, color=_color(i), label=lab)
    ax.set_yscale("log")
    ax.set_xticks(x, shown)
    ax.set_ylabel("ms (log)")
    ax.set_title(f"Per-stage {stat}")
    ax.legend(fontsize=8)


def render_png(comparison: dict[str, Any], dpi: int = 110, part: str = "all") -> bytes:
    """The figure as PNG bytes (no file I/O here; the caller writes or inlines it). ``part``: "all" (compare.png's
    four panels), "lead" (throughput and stall by cause: the page's first picture, short enough to sit on the first
    screen under the answer) or "stages" (per-stage mean and p95, shown beside the metrics table)."""
    rows = {"all": 2, "lead": 1, "stages": 1}[part]
    fig = Figure(figsize=(13, 8.5 if rows == 2 else 4.1), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 2, squeeze=False)
    if part in ("all", "lead"):
        _throughput(axes[0, 0], comparison)
        _stall(axes[0, 1], comparison)
    if part in ("all", "stages"):
        _stages(axes[rows - 1, 0], comparison, "mean")
        _stages(axes[rows - 1, 1], comparison, "p95")
    if part != "stages":
        fig.suptitle("Runs side by side (baseline " + printable(comparison["baseline"])
                     + "); * = beyond run-to-run noise", fontsize=11)
    if part != "lead":
        fig.supxlabel("read, decode, augment: per sample; collate, transfer: per batch; wait, h2d, compute: per step",
                      fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def render(comparison: dict[str, Any], out_dir: Path, ctx: dict[str, Any]) -> Path:
    """The registry's entry point: compare.png."""
    return write_atomic(Path(out_dir) / "compare.png", render_png(comparison))
