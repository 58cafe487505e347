"""PNG plots of a run (matplotlib, Agg): where the time went, a timeline, utilisation, latency distributions.

Why these four: the first answers "how much of the run was the device idle, and why" at a glance; the timeline shows
*which* worker made the device wait and what it was doing; utilisation shows whether the machine (cores, disk, RAM,
GPU) was saturated; latency distributions show tails that a mean hides (one slow file read per batch is enough to
stall a step).

Renderers read the record and its analysis only; they measure nothing. Aggregates shown (percentiles, totals) come
from the analysis; only the per-span drawing is windowed or downsampled, so long runs still draw quickly and the
files stay small.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from .. import vocab  # noqa: E402
from ..record.read import GpuSeriesView, HistogramView, ProcessSeriesView, SamplesView, read, samples  # noqa: E402
from . import spans as spans_mod  # noqa: E402
from .spans import TIMELINE_MEASURED_STEPS, timeline_steps  # noqa: E402,F401 - timeline_steps: drawn here
from .units import mpl, stage_color, stage_order  # noqa: E402
from .units import ms as _ms  # noqa: E402
from .units import pct as _pct  # noqa: E402
from .units import stage_label as _stage_label  # noqa: E402

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord
    from ..record.schema import EpochsTable


def stage_label(name: str) -> str:
    return mpl(_stage_label(name))


# Stages with per-observation durations that latency.png draws, when the analysis has them: every stage of a sample,
# batch or step except ready_ahead (queue slack, not a latency of any code).
LATENCY_PER = ("sample", "batch", "step")
LATENCY_SKIP = ("ready_ahead",)
# The kernel's view of the idle time (stall.by_kind): kinds of one cause share its color, the second one hatched.
KIND_HATCH = {"runqueue": "//", "blocked_other": "//"}

# 100 dpi with ~13-14 in wide figures: ~1300-1400 px, readable at 100 % zoom on a laptop and in the HTML column.
DPI = 100
# When warm-up (worker start-up) is longer than this share of the plotted span, the plot starts later so the
# measured steps are not squeezed into a corner; the warm-up shading still shows its tail.
TIMELINE_WARMUP_MAX_SHARE = 0.5
# Sampled series are drawn with at most this many points (bucket means): more cannot show on a ~1,300 px axis.
MAX_SERIES_POINTS = 1500
# Above this many cores, per-core lines become a min-max band with the mean: 64 lines are unreadable.
MAX_CORE_LINES = 16
_LABEL_FONT = 10


def _savefig(fig: Figure, path: Path) -> Path:
    """Draw into memory, then write atomically (render/output.py): a full disk leaves no truncated PNG behind."""
    from .output import write_png

    try:
        return write_png(fig, path, dpi=DPI)
    finally:
        plt.close(fig)


def latency_stages(rec: RunRecord) -> list[str]:
    """Stages latency.png draws: those the analysis reports (rec.stages), registry order, then user-named ones."""
    names = [k for k, v in read(rec).stages.items()
             if (vocab.stage(k).per if v.per is None else v.per) in LATENCY_PER and k not in LATENCY_SKIP]
    return stage_order(names)


def _bucket(t: np.ndarray, *ys: np.ndarray, n: int = MAX_SERIES_POINTS) -> tuple[np.ndarray, ...]:
    """Downsample a series to at most ``n`` points by bucket means (keeps level; spikes narrower than a bucket
    flatten, which the HTML states for long runs)."""
    t = np.asarray(t, dtype=float)
    if t.size <= n:
        return (t, *[np.asarray(y, dtype=float) for y in ys])
    edges = np.linspace(0, t.size, n + 1).astype(int)[:-1]
    counts = np.diff(np.append(edges, t.size))

    def red(a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, dtype=float)
        if a.ndim == 1:
            return np.add.reduceat(a, edges) / counts
        return np.add.reduceat(a, edges, axis=0) / counts[:, None]

    return (red(t), *[red(y) for y in ys])


# --------------------------------------------------------------------------------------------------------------------
# a. where the time went
# --------------------------------------------------------------------------------------------------------------------
def _stacked(ax: Axes, parts: list[tuple[str, float, str, str, str | None]], total: float, inside: str) -> None:
    """One horizontal stacked bar of (key, seconds, color, legend label, hatch); big parts labelled inside."""
    left = 0.0
    handles = []
    for key, sec, color, label, hatch in parts:
        share = sec / total if total > 0 else 0.0
        ax.barh([0], [sec], left=left, color=color, edgecolor="white", height=0.6, hatch=hatch)
        handles.append(Patch(facecolor=color, edgecolor="white", hatch=hatch, label=label))
        if total > 0 and share >= 0.08:
            text = f"{sec:.2f} s\n{_pct(share)}" if inside == "seconds" else f"{mpl(key)}\n{_pct(share)}"
            ax.text(left + sec / 2, 0, text, ha="center", va="center", fontsize=9, color="white", fontweight="bold")
        left += sec
    ax.set_xlim(0, total if total > 0 else 1.0)
    ax.set_yticks([])
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0, -0.5), ncol=3, fontsize=9, frameon=False)


def plot_where_time_went(rec: RunRecord, path: Path) -> Path:
    """Stacked bars: the measured window split into busy + idle by cause; the idle part split by stage (what the
    producing worker was doing); and, when the record has the kernel's view (stall.by_kind), the idle part by kind."""
    window = float(rec.window["seconds"])
    r = read(rec)
    idle = float(r.stall.seconds)
    by_cause, by_stage, by_kind = r.stall.by_cause, r.stall.by_stage, r.stall.by_kind
    n = 3 if by_kind else 2
    fig, axes = plt.subplots(n, 1, figsize=(13, 3.0 * n), gridspec_kw={"hspace": 1.5})
    ax1, ax2 = axes[0], axes[1]
    busy = max(0.0, window - idle)
    busy_label = f"{vocab.BUSY.label}: {busy:.2f} s ({_pct(busy / window if window else 0)})"
    parts: list[tuple[str, float, str, str, str | None]] = [("busy", busy, vocab.BUSY.color, busy_label, None)]
    for c in vocab.CAUSES:
        sec = float(by_cause.get(c.name, 0.0))
        parts.append((c.name, sec, c.color, f"{c.label}: {sec:.2f} s ({_pct(sec / window if window else 0)})", None))
    _stacked(ax1, parts, max(window, 1e-9), "seconds")
    ax1.set_xlabel("seconds of the measured window (warm-up excluded)")
    dev = "the CPU (no GPU)" if rec.compute_device["type"] == "cpu" else mpl(r.device.name)
    ax1.set_title(f"Where the measured window went: {window:.2f} s, {rec.window_steps} steps, "
                  f"compute device {dev}; idle {_pct(idle / window if window else 0)}", loc="left", fontsize=11)

    parts = []
    for k in stage_order(by_stage):
        sec = float(by_stage.get(k, 0.0))
        parts.append((k, sec, stage_color(k), f"{stage_label(k)}: {sec:.3f} s ({_pct(sec / idle if idle else 0)})",
                      None))
    _stacked(ax2, parts, idle, "name")
    ax2.set_xlabel("seconds of idle time")
    ax2.set_title("Idle time by what the producing worker was doing (zoom on the idle part)" if idle > 0
                  else "Idle time by stage: the compute device was never idle", loc="left", fontsize=11)
    if by_kind:
        parts = []
        for k, (cause, _words) in vocab.KINDS.items():
            sec = float(by_kind.get(k, 0.0))
            parts.append((k.replace("_", " "), sec, vocab.color(cause),
                          f"{k.replace('_', ' ')} ({cause}): {sec:.3f} s ({_pct(sec / idle if idle else 0)})",
                          KIND_HATCH.get(k)))
        _stacked(axes[2], parts, idle, "name")
        axes[2].set_xlabel("seconds of idle time")
        axes[2].set_title("Idle time by what the kernel saw the producing thread do (on a core, waiting for one, "
                          "blocked)", loc="left", fontsize=11)
    fig.subplots_adjust(left=0.03, right=0.98, top=0.93, bottom=0.24 if n == 2 else 0.16)
    return _savefig(fig, path)


# --------------------------------------------------------------------------------------------------------------------
# b. timeline (Gantt)
# --------------------------------------------------------------------------------------------------------------------
def _lane_name(w: int) -> str:
    return "main process\n(workers=0)" if w < 0 else f"worker {w}"


def timeline_lanes(rec: RunRecord) -> list[str]:
    """Lane labels of the Gantt, top to bottom: main loop, idle strip, then one per worker (worker -1 = loading in
    the main process, workers=0)."""
    ws = sorted({int(w) for w in rec.timeline["batches"]["worker"]})
    return ["main loop", "idle by cause"] + [_lane_name(w) for w in ws]



@dataclass
class _Gantt:
    """The timeline's axes and the time range it shows; each lane is drawn by its own function below."""
    ax: Axes
    t_begin: float
    t_end: float
    h: float = 0.7  # bar height of a lane

    @property
    def span(self) -> float:
        return self.t_end - self.t_begin

    def bars(self, y: float, starts: np.ndarray, ends: np.ndarray, color: str, height: float | None = None) -> None:
        height = self.h if height is None else height
        m = (ends >= self.t_begin) & (starts <= self.t_end)
        if m.any():
            self.ax.broken_barh(list(zip(starts[m].tolist(), np.maximum(ends[m] - starts[m], 0).tolist())),
                                (y - height / 2, height), facecolors=color)


def _main_lane(g: _Gantt, y: float, st: dict[str, np.ndarray], lo: int, hi: int) -> None:
    """Wait / H2D / compute of each shown step, step boundaries, and the worker each long wait was for."""
    shown = slice(lo, hi)
    ws, we = st["wait_start"][shown], st["wait_end"][shown]
    g.bars(y, ws, we, stage_color("wait"))
    g.bars(y, st["h2d_start"][shown], st["h2d_end"][shown], stage_color("h2d"))
    g.bars(y, st["h2d_end"][shown], st["compute_end"][shown], stage_color("compute"))
    g.ax.vlines(ws[ws >= g.t_begin], y - g.h / 2, y + g.h / 2, colors="white", lw=0.6)  # step boundaries
    for i in range(lo, hi):  # which worker produced the batch this step waited for
        if float(st["wait_end"][i] - st["wait_start"][i]) > 0.015 * g.span and st["wait_end"][i] >= g.t_begin:
            w = int(st["worker"][i])
            g.ax.text(float(st["wait_start"][i] + st["wait_end"][i]) / 2, y + g.h / 2 + 0.05,
                      "main" if w < 0 else f"w{w}", ha="center", va="bottom", fontsize=8, color=stage_color("wait"))


def _idle_lane(g: _Gantt, y: float, per_step: dict[str, list[float]], st: dict[str, np.ndarray],
               measured: np.ndarray, lo: int, hi: int) -> set[str]:
    """Each measured step's idle seconds laid out from its wait start, split by detail stage; the stages drawn."""
    drawn: set[str] = set()
    m_rows = np.flatnonzero(measured)
    if not per_step or m_rows.size != len(next(iter(per_step.values()), [])):
        return drawn
    detail = stage_order(per_step)
    cols = np.array([per_step.get(k, [0.0] * m_rows.size) for k in detail], dtype=float)  # (stages, n_measured)
    sel = (m_rows >= lo) & (m_rows < hi)
    starts = st["wait_start"][m_rows[sel]].astype(float)
    off = np.zeros(starts.size)
    for j, k in enumerate(detail):
        d = cols[j, sel]
        g.bars(y, starts + off, starts + off + d, stage_color(k), height=0.5)
        off += d
        drawn.add(k)
    return drawn


def _worker_lane(g: _Gantt, y: float, w: int, sp: spans_mod.Spans, bt: dict[str, np.ndarray]) -> set[str]:
    """One worker: each sample span split into its sub-stages, per-batch collate, and an outline per batch (bN)."""
    drawn: set[str] = set()
    if sp.n:
        for k, s0, s1 in sp.select(sp.cols["worker"] == w).layout():
            if (s1 > s0).any():
                g.bars(y, s0, s1, stage_color(k))
                drawn.add(k)
    mb = bt["worker"] == w
    g.bars(y, bt["collate_start"][mb], bt["collate_end"][mb], stage_color("collate"))
    near = mb & (bt["collate_end"] >= g.t_begin) & (bt["collate_start"] <= g.t_end + g.span)
    for j in np.flatnonzero(near):
        b = int(bt["batch"][j])
        first = float(bt["collate_start"][j])
        if sp.n:
            in_batch = sp.cols["batch"] == b
            if in_batch.any():
                first = min(first, float(sp.cols["start"][in_batch].min()))
        last = float(bt["collate_end"][j])
        if last < g.t_begin or first > g.t_end:
            continue
        g.ax.add_patch(Rectangle((first, y - g.h / 2 - 0.06), last - first, g.h + 0.12, fill=False, lw=0.8,
                                 edgecolor="#333333"))
        if last - first > 0.02 * g.span:
            g.ax.text(max(first, g.t_begin) + 0.003 * g.span, y + g.h / 2 + 0.07, f"b{b}", fontsize=7,
                      va="bottom", color="#333333")
    return drawn


def _epoch_marks(g: _Gantt, ep: EpochsTable, n_lanes: int) -> None:
    """A dashed line where each epoch began (iter(loader))."""
    for e, t0 in zip(ep["epoch"], ep["iter_start"]):
        if g.t_begin <= float(t0) <= g.t_end:
            g.ax.axvline(float(t0), color=stage_color("epoch_start"), ls="--", lw=0.9)
            g.ax.text(float(t0), n_lanes - 0.45, f" epoch {e}", fontsize=8, va="bottom",
                      color=stage_color("epoch_start"))


def plot_timeline(rec: RunRecord, path: Path) -> Path:
    """Gantt: main loop (wait / H2D / compute), idle-by-cause strip, and one lane per worker (each sample span split
    into its sub-stages: read / decode / augment / user stages, the rest as getitem; collate per batch; batch
    outlines). Shows which worker the device waited for."""
    tl = rec.timeline
    st = {k: np.asarray(v) for k, v in tl["steps"].items()}
    bt = {k: np.asarray(v) for k, v in tl["batches"].items()}
    sp = spans_mod.sample_spans(tl)
    lo, hi = timeline_steps(rec)
    n_total = int(st["wait_start"].size)
    if hi <= lo:
        fig, ax = plt.subplots(figsize=(13, 4))
        ax.text(0.5, 0.5, "no steps recorded", ha="center", va="center", transform=ax.transAxes)
        ax.set_title("Timeline", loc="left")
        ax.set_xlabel("seconds since run start")
        return _savefig(fig, path)
    t_end = float(st["compute_end"][hi - 1])
    t_first = float(st["wait_start"][lo])
    if sp.n:
        t_first = min(t_first, float(sp.cols["start"].min()))
    win_start = float(rec.window["start_s"])
    measured_span = max(t_end - win_start, 1e-6)
    t_begin = t_first
    truncated = False
    if win_start - t_first > TIMELINE_WARMUP_MAX_SHARE * (t_end - t_first) and win_start < t_end:
        t_begin = win_start - 0.2 * measured_span
        truncated = True

    workers = sorted({int(w) for w in bt["worker"].tolist()})  # required columns (schema BatchesTable, StepsTable)
    lanes = timeline_lanes(rec)
    lane_y = {name: len(lanes) - 1 - i for i, name in enumerate(lanes)}
    fig, ax = plt.subplots(figsize=(14, 1.9 + 0.75 * len(lanes)))
    g = _Gantt(ax, t_begin, t_end)
    span = g.span
    _main_lane(g, lane_y["main loop"], st, lo, hi)
    measured = np.asarray(st["measured"], dtype=bool)
    drawn = _idle_lane(g, lane_y["idle by cause"], rec.idle_per_step, st, measured, lo, hi)
    if sp.n:  # only spans near the plotted window
        sp = sp.select((sp.cols["end"] >= t_begin) & (sp.cols["start"] <= t_end))
    for w in workers:
        drawn |= _worker_lane(g, lane_y[_lane_name(w)], w, sp, bt)
    _epoch_marks(g, tl["epochs"], len(lanes))

    # Warm-up region and window start.
    if win_start > t_begin:
        ax.axvspan(t_begin, min(win_start, t_end), color="#999999", alpha=0.15, hatch="//", lw=0)
        ax.text(t_begin + 0.005 * span, len(lanes) - 0.45, "warm-up (not measured)", fontsize=9, va="bottom",
                color="#555555")
    ax.set_yticks([lane_y[n] for n in lanes])
    ax.set_yticklabels(lanes, fontsize=_LABEL_FONT)
    ax.set_ylim(-0.7, len(lanes) - 0.1)
    ax.set_xlim(t_begin, t_end + 0.01 * span)
    ax.set_xlabel("seconds since run start")
    ax.grid(axis="x", alpha=0.3)
    n_meas = int(measured[lo:hi].sum())
    title = (f"Timeline: steps {lo}–{hi - 1} of {n_total} ({hi - lo - n_meas} warm-up + {n_meas} measured); "
             "labels on waits name the worker that made the batch")
    if truncated:
        title += "; warm-up start cut"
    ax.set_title(title, loc="left", fontsize=11)
    main = [Patch(color=stage_color(k), label=f"main: {stage_label(k)}") for k in vocab.MAIN_STAGES]
    drawn |= {"collate"} if bt["batch"].size else set()
    legend = main + [Patch(color=stage_color(k), label=stage_label(k)) for k in stage_order(drawn)]
    legend.append(Patch(facecolor="none", edgecolor="#333333", label="one batch (bN)"))
    fig_h = fig.get_size_inches()[1]
    fig.legend(handles=legend, loc="lower left", bbox_to_anchor=(0.01, 0.0), ncol=6, fontsize=8, frameon=False)
    rows = math.ceil(len(legend) / 6)
    fig.tight_layout(rect=(0, (0.2 + 0.2 * rows) / fig_h, 1, 1))
    return _savefig(fig, path)


# --------------------------------------------------------------------------------------------------------------------
# c. utilisation
# --------------------------------------------------------------------------------------------------------------------
def _panel_cpu(ax: Axes, s: SamplesView, t: np.ndarray, procs: list[ProcessSeriesView],
               gpu: GpuSeriesView | None) -> None:
    per_core = np.asarray(s.cpu_percent_per_core, dtype=float)
    if t.size and per_core.ndim == 2 and per_core.shape[0] == t.size:
        tt, pc = _bucket(t, per_core)
        if pc.shape[1] <= MAX_CORE_LINES:
            for c in range(pc.shape[1]):
                ax.plot(tt, pc[:, c], lw=0.7, alpha=0.6, label=f"core {c}" if pc.shape[1] <= 8 else None)
        else:
            ax.fill_between(tt, pc.min(axis=1), pc.max(axis=1), alpha=0.25, color="#4c72b0",
                            label=f"min–max of {pc.shape[1]} cores")
        ax.plot(tt, pc.mean(axis=1), lw=2, color="black", label="mean of all cores")
    ax.set_ylim(0, 105)
    ax.set_ylabel("CPU %")
    ax.set_title("CPU use per logical core", loc="left", fontsize=10)


def _panel_processes(ax: Axes, s: SamplesView, t: np.ndarray, procs: list[ProcessSeriesView],
                     gpu: GpuSeriesView | None) -> None:
    for p in procs:
        tt, cpu = _bucket(np.asarray(p.t_s, dtype=float),
                          np.asarray([np.nan if v is None else v for v in p.cpu_percent], dtype=float))
        label = "main process" if p.role == "main" else (
            f"worker {p.worker_id}" if p.worker_id is not None else f"pid {p.pid}")
        ax.plot(tt, cpu, lw=1.2, label=label)
    ax.set_ylabel("CPU % (100 = 1 core)")
    ax.set_title("CPU use per process", loc="left", fontsize=10)


def _panel_disk(ax: Axes, s: SamplesView, t: np.ndarray, procs: list[ProcessSeriesView],
                gpu: GpuSeriesView | None) -> None:
    d = np.asarray(s.disk_read_bytes_per_s, dtype=float)
    if d.size == t.size and t.size:
        tt, dd = _bucket(t, d / 1e6)
        ax.plot(tt, dd, color=stage_color("read"), lw=1.2)
        ax.fill_between(tt, 0, dd, color=stage_color("read"), alpha=0.2)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("MB/s")
    ax.set_title(f"Disk reads ({mpl(s.disk or 'all disks')})", loc="left", fontsize=10)


def _panel_ram(ax: Axes, s: SamplesView, t: np.ndarray, procs: list[ProcessSeriesView],
               gpu: GpuSeriesView | None) -> None:
    for series, label, color in ((s.ram_used_bytes, "used", "#c44e52"), (s.page_cache_bytes, "page cache", "#4c72b0"),
                                 (s.shm_used_bytes, "/dev/shm", "#8172b2")):
        v = np.asarray(series, dtype=float)
        if v.size == t.size and t.size:
            tt, vv = _bucket(t, v / 1e9)
            ax.plot(tt, vv, lw=1.4, label=label, color=color)
    total = s.ram_total_bytes
    ax.set_ylim(bottom=0)
    ax.set_ylabel("GB")
    ax.set_title("Memory" + (f" (total {total / 1e9:.1f} GB)" if total else ""), loc="left", fontsize=10)


def _panel_gpu(ax: Axes, s: SamplesView, t: np.ndarray, procs: list[ProcessSeriesView],
               gpu: GpuSeriesView | None) -> None:
    gpu = gpu or GpuSeriesView()
    gt = np.asarray(gpu.t_s, dtype=float)
    u = np.asarray([np.nan if v is None else v for v in gpu.util_percent], dtype=float)
    if gt.size and u.size == gt.size:
        tt, uu = _bucket(gt, u)
        ax.plot(tt, uu, color=stage_color("compute"), lw=1.4, label="GPU util %")
    ax.set_ylim(0, 105)
    ax.set_ylabel("GPU util %")
    mem = np.asarray([np.nan if v is None else v for v in gpu.mem_used_bytes], dtype=float)
    if gt.size and mem.size == gt.size:
        ax2 = ax.twinx()
        tt, mm = _bucket(gt, mem / 1e9)
        ax2.plot(tt, mm, color="#8172b2", lw=1.2, label="GPU memory used (GB)")
        ax2.set_ylabel("GPU memory GB")
        mem_total = gpu.mem_total_bytes
        if mem_total:
            ax2.set_ylim(0, mem_total / 1e9 * 1.05)
        ax2.legend(loc="lower left", bbox_to_anchor=(1.06, 0.0), fontsize=8, frameon=False)
    ax.set_title(f"GPU {'' if gpu.index is None else gpu.index}: {mpl(gpu.name or '')}", loc="left", fontsize=10)


def _panel_pcie(ax: Axes, s: SamplesView, t: np.ndarray, procs: list[ProcessSeriesView],
                gpu: GpuSeriesView | None) -> None:
    gpu = gpu or GpuSeriesView()
    gt = np.asarray(gpu.t_s, dtype=float)
    for series, label in ((gpu.pcie_rx_bytes_per_s, "PCIe rx (host → GPU)"),
                          (gpu.pcie_tx_bytes_per_s, "PCIe tx (GPU → host)")):
        v = np.asarray([np.nan if x is None else x for x in series or []], dtype=float)
        if gt.size and v.size == gt.size:
            tt, vv = _bucket(gt, v / 1e6)
            ax.plot(tt, vv, lw=1.2, label=label)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("MB/s")
    ax.set_title("PCIe throughput", loc="left", fontsize=10)


#: The utilisation plot's panels, top to bottom: one helper each (which are drawn is decided in plot_utilisation).
_PANELS = {"cpu": _panel_cpu, "proc": _panel_processes, "disk": _panel_disk, "ram": _panel_ram, "gpu": _panel_gpu,
           "pcie": _panel_pcie}


def plot_utilisation(rec: RunRecord, path: Path) -> Path:
    """CPU per core and mean, CPU per process, disk read MB/s, RAM GB, and GPU panels when sampled."""
    s = samples(rec)
    t = np.asarray(s.t_s, dtype=float)
    gpu = s.gpu if s.gpu != GpuSeriesView() else None  # an empty object: no GPU sampled, as an absent one
    procs = [p for p in s.processes if p.t_s]
    panels = ["cpu"] + (["proc"] if procs else []) + ["disk", "ram"]
    if gpu is not None:
        panels += ["gpu"] + (["pcie"] if gpu.pcie_rx_bytes_per_s is not None else [])
    fig, axes = plt.subplots(len(panels), 1, figsize=(13, 1.0 + 2.0 * len(panels)), sharex=True, squeeze=False)
    axes = axes[:, 0]
    w0, w1 = float(rec.window["start_s"]), float(rec.window["end_s"])
    for ax, name in zip(axes, panels):
        ax.axvspan(w0, w1, color=stage_color("compute"), alpha=0.08, lw=0,
                   label="measured window" if name == "cpu" else None)
        ax.grid(alpha=0.3)
        _PANELS[name](ax, s, t, procs, gpu)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    axes[-1].set_xlabel("seconds since run start")
    note = "" if t.size <= MAX_SERIES_POINTS else f" (drawn as {MAX_SERIES_POINTS} bucket means of {t.size} samples)"
    every = "?" if s.interval_s is None else s.interval_s
    fig.suptitle(f"Utilisation, sampled every {every} s; shaded: measured window{note}", x=0.01, ha="left", fontsize=11)
    fig.tight_layout()
    return _savefig(fig, path)


# --------------------------------------------------------------------------------------------------------------------
# d. latency distributions
# --------------------------------------------------------------------------------------------------------------------
def plot_latency(rec: RunRecord, path: Path) -> Path:
    """Histogram per stage on log-spaced bins (ms), with p50/p95/p99 marked: all from the analysis (rec.stages)."""
    names = latency_stages(rec)
    cols = 4
    rows = max(1, math.ceil(len(names) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(14, 0.6 + 3.0 * rows), squeeze=False)
    marks: tuple[tuple[Literal["p50_ms", "p95_ms", "p99_ms"], str, str], ...] = (
        ("p50_ms", "p50", "-"), ("p95_ms", "p95", "--"), ("p99_ms", "p99", ":"))
    for ax in axes.ravel()[len(names):]:
        ax.set_axis_off()
    if not names:
        axes[0, 0].text(0.5, 0.5, "no stage statistics in this record", ha="center", va="center",
                        transform=axes[0, 0].transAxes, color="#555555")
    stages = read(rec).stages
    for ax, name in zip(axes.ravel(), names):
        stats = stages[name]
        hist = stats.histogram or HistogramView()
        edges, counts, zeros = np.asarray(hist.edges_ms, dtype=float), hist.counts, int(hist.zeros)
        n = int(sum(counts)) + zeros
        per = stats.per or vocab.stage(name).per
        ax.set_title(f"{mpl(name)} (per {mpl(per)}, n={n})", fontsize=10, loc="left")
        ax.set_xlabel("ms (log scale)")
        ax.set_ylabel("count")
        if not counts:
            msg = "no observations" if n == 0 else f"all {n} are 0 ms"
            if name == "h2d" and rec.compute_device["type"] == "cpu":
                msg += "\n(no host-to-device copy on the CPU)"
            ax.text(0.5, 0.5, msg,
                    ha="center", va="center", transform=ax.transAxes, color="#555555")
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        lo_, hi_ = float(edges[0]), float(edges[-1])
        ax.hist(edges[:-1], bins=edges, weights=counts, color=stage_color(name), alpha=0.85)
        ax.set_xscale("log")
        if hi_ / lo_ < 1e3:  # up to 3 decades: label 1-2-5 steps, else a narrow range shows a single label
            ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        for key, label, ls in marks:
            x = getattr(stats, key)
            if x and x > 0:
                ax.axvline(x, color="black", ls=ls, lw=1.1, label=f"{label} {_ms(x)} ms")
        if zeros:
            ax.text(0.98, 0.97, f"{zeros} at 0 ms not shown", ha="right", va="top", fontsize=8,
                    transform=ax.transAxes, color="#555555")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="best", framealpha=0.85)
    fig.suptitle("Latency per stage in the measured window (worker stages per sample or batch, main loop per step); "
                 "percentiles from the analysis", x=0.01, ha="left", fontsize=11)
    fig.tight_layout()
    return _savefig(fig, path)


# --------------------------------------------------------------------------------------------------------------------
# The registry's entry points (profiler.render.REPORT): render(rec, out_dir, ctx) -> path.
# --------------------------------------------------------------------------------------------------------------------
def render_where_time_went(rec: RunRecord, out_dir: Path, ctx: dict) -> Path:
    return plot_where_time_went(rec, Path(out_dir) / "where_time_went.png")


def render_timeline(rec: RunRecord, out_dir: Path, ctx: dict) -> Path:
    return plot_timeline(rec, Path(out_dir) / "timeline.png")


def render_utilisation(rec: RunRecord, out_dir: Path, ctx: dict) -> Path:
    return plot_utilisation(rec, Path(out_dir) / "utilisation.png")


def render_latency(rec: RunRecord, out_dir: Path, ctx: dict) -> Path:
    return plot_latency(rec, Path(out_dir) / "latency.png")
