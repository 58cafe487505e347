"""step_time.png: the report's main picture — where each measured step's time went, compute vs the wait by what the
awaited batch was doing, step by step over the window.

Why this one first: it is the TensorFlow input-pipeline analyzer's lead (its step-time graph) and answers the
report's question in one look — how much of every step the model worked, how much it waited and for what, and
whether that was steady or came in bursts. The numbers are the analysis's (``stall.per_step``, per measured step,
split by stage) and the step rows' own bounds; nothing is measured here.

A step's time is its row's span (wait start to the end of its compute, the next ``next()``); its busy part is that
minus its idle seconds. Beyond STEP_BARS_MAX steps, consecutive steps are averaged into that many bars (the title
says so), so a 40,000-step run draws as fast and as legibly as a 30-step one.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from .. import vocab
from ..record.read import read
from .output import write_png
from .units import mpl, stage_color, stage_order
from .units import stage_label as _stage_label

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord

# Bars drawn at most: ~2 px each on the page's ~1,150 px plot; more steps are averaged in groups.
STEP_BARS_MAX = 300
# Share of the idle time under which a stage is not drawn on its own (see step_parts).
STAGE_SHOWN_FROM = 0.005
# Figure size (inches at DPI): wide and short, so headline, cards, this and the top recommendation fit the first
# screen of a 1366x768 laptop (docs/reports.md).
FIGSIZE = (12.0, 3.0)
DPI = 100


def step_parts(rec: RunRecord) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(step numbers, busy seconds, idle seconds by stage) per measured step of the detail."""
    st = rec.timeline["steps"]  # every column is required (schema StepsTable; checked on load)
    measured = np.asarray(st["measured"], dtype=bool)
    rows = np.flatnonzero(measured)
    per = rec.idle_per_step
    if not rows.size or (per and len(next(iter(per.values()))) != rows.size):
        return np.zeros(0), np.zeros(0), {}
    span = (np.asarray(st["compute_end"], dtype=float) - np.asarray(st["wait_start"], dtype=float))[rows]
    idle = {k: np.asarray(v, dtype=float) for k, v in per.items() if any(float(x) > 0 for x in v)}
    idle_sum = sum(idle.values(), np.zeros(rows.size))
    # A stage with under STAGE_SHOWN_FROM of the idle time is drawn as part of "other" (a legend entry for 5 us of
    # 0.1 s says nothing); the bars' heights are unchanged.
    total = float(idle_sum.sum())
    small = [k for k, v in idle.items() if k != "other" and float(v.sum()) < STAGE_SHOWN_FROM * total]
    for k in small:
        idle["other"] = idle.get("other", np.zeros(rows.size)) + idle.pop(k)
    if "other" in idle and float(idle["other"].sum()) < STAGE_SHOWN_FROM * total:
        busy_extra = idle.pop("other")
        idle_sum = idle_sum - busy_extra  # too small to draw: shown as part of the step, said in no legend
    busy = np.maximum(span - idle_sum, 0.0)
    return np.asarray(st["step"], dtype=float)[rows], busy, idle


def _groups(x: np.ndarray, size: int) -> np.ndarray:
    """Means of consecutive groups of ``size`` (the last may be shorter)."""
    if size <= 1:
        return x
    n = int(np.ceil(x.size / size))
    pad = np.full(n * size, np.nan)
    pad[: x.size] = x
    return np.nanmean(pad.reshape(n, size), axis=1)


def plot_step_time(rec: RunRecord, path: str | Path) -> Path:
    steps, busy, idle = step_parts(rec)
    # No measured step: a one-line picture, not a screen-high blank one pushing the answer's box down.
    fig = Figure(figsize=FIGSIZE if steps.size else (FIGSIZE[0], 0.5), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    if not steps.size:
        ax.text(0.5, 0.5, "Where each step's time went: no measured step (the run ended before its window)",
                ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return write_png(fig, path)
    group = int(np.ceil(steps.size / STEP_BARS_MAX))
    x = _groups(steps, group)
    scale = 1e3  # ms
    bottom = np.zeros(x.size)
    r = read(rec)
    dev = "GPU" if r.device.type == "cuda" else "model (CPU)"
    if r.config.model == "none" and r.job.builtin:
        dev = "loop (no model)"
    handles = []
    b = _groups(busy, group) * scale
    width = (float(np.median(np.diff(x))) if x.size > 1 else 1.0) * 0.85
    ax.bar(x, b, width=width, bottom=bottom, color=vocab.BUSY.color, linewidth=0)
    handles.append(Patch(color=vocab.BUSY.color, label=f"{dev} working"))
    bottom += b
    for k in stage_order(idle):
        v = _groups(idle[k], group) * scale
        color = stage_color(k)
        ax.bar(x, v, width=width, bottom=bottom, color=color, linewidth=0)
        # The stage only, not its default cause: the kernel's view may put part of it elsewhere (a transfer that
        # waited for a core is cpu), and the page's idle-by-cause table says that.
        handles.append(Patch(color=color, label=f"waiting: {mpl(_stage_label(k))}"))
        bottom += v
    ax.set_xlim(float(x[0]) - width, float(x[-1]) + width)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("ms per step")
    ax.set_xlabel("measured step" + (f" (bars: means of {group} steps)" if group > 1 else ""))
    ax.grid(axis="y", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    total = float(busy.sum() + sum(float(v.sum()) for v in idle.values()))
    waited = total - float(busy.sum())
    share = waited / total if total > 0 else 0.0
    ax.set_title(f"Where each step's time went: {dev} working vs waiting for input ({share * 100:.1f} % waiting "
                 f"over {steps.size:,} steps)", loc="left", fontsize=11)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return write_png(fig, path)


def render(rec: RunRecord, out_dir: Path, ctx: dict) -> Path:
    """Renderer entry (profiler/render/__init__.py): step_time.png."""
    return plot_step_time(rec, Path(out_dir) / "step_time.png")
