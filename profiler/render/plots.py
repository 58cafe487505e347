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

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from ..analysis.stats import stage_durations as analysis_stage_durations  # noqa: E402
from ..analysis.stats import tables

# One colour per stage, used by every plot (and named the same in the HTML legend) so a stage looks the same
# everywhere. Seaborn's "deep" palette: distinguishable for the common colour-vision deficiencies and in greyscale
# by lightness.
STAGE_COLOURS = {
    "read": "#4c72b0", "decode": "#dd8452", "augment": "#8172b2", "collate": "#937860", "transfer": "#ccb974",
    "other": "#8c8c8c", "wait": "#c44e52", "h2d": "#da8bc3", "compute": "#55a868",
}
# Idle causes take the colour of their main stage: io = read, cpu = decode (+augment, collate), busy = compute.
CAUSE_COLOURS = {"busy": STAGE_COLOURS["compute"], "io": STAGE_COLOURS["read"], "cpu": STAGE_COLOURS["decode"],
                 "transfer": STAGE_COLOURS["transfer"], "other": STAGE_COLOURS["other"]}
CAUSE_LABELS = {"busy": "compute device busy", "io": "idle: io (storage read)",
                "cpu": "idle: cpu (decode, augment, collate)", "transfer": "idle: transfer (worker → main, H2D)",
                "other": "idle: other (unexplained)"}
LATENCY_STAGES = (("read", "sample"), ("decode", "sample"), ("augment", "sample"), ("collate", "batch"),
                  ("transfer", "batch"), ("wait", "step"), ("h2d", "step"), ("compute", "step"))
PLOT_FILES = ("where_time_went.png", "timeline.png", "utilisation.png", "latency.png")

# 100 dpi with ~13-14 in wide figures: ~1300-1400 px, readable at 100 % zoom on a laptop and in the HTML column.
DPI = 100
# Timeline: warm-up plus this many measured steps. 30 shows the steady-state pattern (which worker, how regular)
# while each batch stays wide enough to see its read/decode/augment spans.
TIMELINE_MEASURED_STEPS = 30
# When warm-up (worker start-up) is longer than this share of the plotted span, the plot starts later so the
# measured steps are not squeezed into a corner; the warm-up shading still shows its tail.
TIMELINE_WARMUP_MAX_SHARE = 0.5
# Sampled series are drawn with at most this many points (bucket means): more cannot show on a ~1,300 px axis.
MAX_SERIES_POINTS = 1500
# Above this many cores, per-core lines become a min-max band with the mean: 64 lines are unreadable.
MAX_CORE_LINES = 16
_LABEL_FONT = 10


def _savefig(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _ms(x: float) -> str:
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


# --------------------------------------------------------------------------------------------------------------------
# Per-observation durations (the analysis keeps aggregates only; histograms need the observations).
# --------------------------------------------------------------------------------------------------------------------
def stage_durations(rec: Any) -> dict[str, np.ndarray]:
    """Seconds per observation of each plotted stage in the measured window (analysis.stats' one definition)."""
    d = analysis_stage_durations(tables(rec.timeline))
    return {k: d.get(k, np.zeros(0)) for k, _ in LATENCY_STAGES}


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
def plot_where_time_went(rec: Any, path: Path) -> Path:
    """Two stacked bars: the measured window split into busy + idle by cause; the idle part split by stage."""
    window = float(rec.window.get("seconds", 0.0))
    stall = rec.stall or {}
    idle = float(stall.get("seconds", 0.0))
    by_cause = stall.get("by_cause", {})
    by_stage = stall.get("by_stage", {})
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(13, 6.0), gridspec_kw={"hspace": 1.5})
    parts = [("busy", max(0.0, window - idle))] + [(c, float(by_cause.get(c, 0.0)))
                                                    for c in ("io", "cpu", "transfer", "other")]
    left = 0.0
    handles = []
    for name, sec in parts:
        share = sec / window if window > 0 else 0.0
        label = f"{CAUSE_LABELS[name]}: {sec:.2f} s ({_pct(share)})"
        ax1.barh([0], [sec], left=left, color=CAUSE_COLOURS[name], edgecolor="white", height=0.6)
        handles.append(Patch(color=CAUSE_COLOURS[name], label=label))
        if window > 0 and share >= 0.08:
            ax1.text(left + sec / 2, 0, f"{sec:.2f} s\n{_pct(share)}", ha="center", va="center", fontsize=9,
                     color="white", fontweight="bold")
        left += sec
    ax1.set_xlim(0, max(window, 1e-9))
    ax1.set_yticks([])
    ax1.set_xlabel("seconds of the measured window (warm-up excluded)")
    dev = "the CPU (no GPU)" if rec.compute_device.get("type") == "cpu" else f"{rec.compute_device.get('name')}"
    ax1.set_title(f"Where the measured window went: {window:.2f} s, {rec.window.get('steps', 0)} steps, "
                  f"compute device {dev}; idle {_pct(idle / window if window else 0)}", loc="left", fontsize=11)
    ax1.legend(handles=handles, loc="upper left", bbox_to_anchor=(0, -0.5), ncol=3, fontsize=9, frameon=False)

    left = 0.0
    stage_parts = [(k, float(by_stage.get(k, 0.0))) for k in ("read", "decode", "augment", "collate", "transfer",
                                                             "other")]
    handles = []
    for name, sec in stage_parts:
        share = sec / idle if idle > 0 else 0.0
        ax2.barh([0], [sec], left=left, color=STAGE_COLOURS[name], edgecolor="white", height=0.6)
        handles.append(Patch(color=STAGE_COLOURS[name], label=f"{name}: {sec:.3f} s ({_pct(share)})"))
        if idle > 0 and share >= 0.08:
            ax2.text(left + sec / 2, 0, f"{name}\n{_pct(share)}", ha="center", va="center", fontsize=9,
                     color="white", fontweight="bold")
        left += sec
    ax2.set_xlim(0, idle if idle > 0 else 1.0)
    ax2.set_yticks([])
    ax2.set_xlabel("seconds of idle time")
    ax2.set_title("Idle time by what the producing worker was doing (zoom on the idle part)" if idle > 0
                  else "Idle time by stage: the compute device was never idle", loc="left", fontsize=11)
    ax2.legend(handles=handles, loc="upper left", bbox_to_anchor=(0, -0.5), ncol=3, fontsize=9, frameon=False)
    fig.subplots_adjust(left=0.03, right=0.98, top=0.93, bottom=0.24)
    return _savefig(fig, path)


# --------------------------------------------------------------------------------------------------------------------
# b. timeline (Gantt)
# --------------------------------------------------------------------------------------------------------------------
def timeline_steps(rec: Any) -> tuple[int, int]:
    """Rows [0, n) of timeline.steps the Gantt shows: warm-up plus the first TIMELINE_MEASURED_STEPS measured."""
    steps = rec.timeline["steps"]
    measured = np.asarray(steps.get("measured", [True] * len(steps["wait_start"])), dtype=bool)
    total = measured.size
    idx = np.flatnonzero(measured)
    if idx.size > TIMELINE_MEASURED_STEPS:
        return 0, int(idx[TIMELINE_MEASURED_STEPS - 1]) + 1
    return 0, total


def _lane_name(w: int) -> str:
    return "main process\n(workers=0)" if w < 0 else f"worker {w}"


def timeline_lanes(rec: Any) -> list[str]:
    """Lane labels of the Gantt, top to bottom: main loop, idle strip, then one per worker (worker -1 = loading in
    the main process, workers=0)."""
    ws = sorted({int(w) for w in rec.timeline.get("batches", {}).get("worker", [])})
    return ["main loop", "idle by cause"] + [_lane_name(w) for w in ws]


def plot_timeline(rec: Any, path: Path) -> Path:
    """Gantt: main loop (wait / H2D / compute), idle-by-cause strip, and one lane per worker (read / decode /
    augment per sample, collate per batch, batch outlines). Shows which worker the device waited for."""
    tl = rec.timeline
    st = {k: np.asarray(v) for k, v in tl["steps"].items()}
    bt = {k: np.asarray(v) for k, v in tl.get("batches", {}).items()}
    sp = {k: np.asarray(v) for k, v in tl.get("sample_spans", {}).items()}
    lo, hi = timeline_steps(rec)
    n_total = int(st["wait_start"].size)
    shown = slice(lo, hi)
    if hi <= lo:
        fig, ax = plt.subplots(figsize=(13, 4))
        ax.text(0.5, 0.5, "no steps recorded", ha="center", va="center", transform=ax.transAxes)
        ax.set_title("Timeline", loc="left")
        ax.set_xlabel("seconds since run start")
        return _savefig(fig, path)
    t_end = float(st["compute_end"][hi - 1])
    t_first = float(st["wait_start"][lo])
    if sp.get("read_start") is not None and sp["read_start"].size:
        t_first = min(t_first, float(sp["read_start"].min()))
    win_start = float(rec.window.get("start_s", t_first))
    measured_span = max(t_end - win_start, 1e-6)
    t_begin = t_first
    truncated = False
    if win_start - t_first > TIMELINE_WARMUP_MAX_SHARE * (t_end - t_first) and win_start < t_end:
        t_begin = win_start - 0.2 * measured_span
        truncated = True

    workers = sorted({int(w) for w in bt.get("worker", np.array([], dtype=int)).tolist()})
    lanes = timeline_lanes(rec)
    lane_y = {name: len(lanes) - 1 - i for i, name in enumerate(lanes)}
    fig, ax = plt.subplots(figsize=(14, 1.9 + 0.75 * len(lanes)))
    h = 0.7

    def bars(y: float, starts: np.ndarray, ends: np.ndarray, colour: str, height: float = h, **kw) -> None:
        m = (ends >= t_begin) & (starts <= t_end)
        if m.any():
            ax.broken_barh(list(zip(starts[m].tolist(), np.maximum(ends[m] - starts[m], 0).tolist())),
                           (y - height / 2, height), facecolors=colour, **kw)

    # Main loop lane.
    y = lane_y["main loop"]
    ws, we = st["wait_start"][shown], st["wait_end"][shown]
    bars(y, ws, we, STAGE_COLOURS["wait"])
    bars(y, st["h2d_start"][shown], st["h2d_end"][shown], STAGE_COLOURS["h2d"])
    bars(y, st["h2d_end"][shown], st["compute_end"][shown], STAGE_COLOURS["compute"])
    ax.vlines(ws[ws >= t_begin], y - h / 2, y + h / 2, colors="white", lw=0.6)  # step boundaries
    span = t_end - t_begin
    for i in range(lo, hi):  # which worker produced the batch this step waited for
        if float(st["wait_end"][i] - st["wait_start"][i]) > 0.015 * span and st["wait_end"][i] >= t_begin:
            w = int(st["worker"][i])
            ax.text(float(st["wait_start"][i] + st["wait_end"][i]) / 2, y + h / 2 + 0.05,
                    "main" if w < 0 else f"w{w}", ha="center", va="bottom", fontsize=8, color=STAGE_COLOURS["wait"])

    # Idle by cause: each measured step's idle seconds laid out from its wait start, split by detail stage.
    y = lane_y["idle by cause"]
    per_step = (rec.stall or {}).get("per_step") or {}
    measured = np.asarray(st.get("measured", np.ones(n_total, dtype=bool)), dtype=bool)
    m_rows = np.flatnonzero(measured)
    if per_step and m_rows.size == len(next(iter(per_step.values()), [])):
        detail = ("read", "decode", "augment", "collate", "transfer", "other")
        cols = np.array([per_step.get(k, [0.0] * m_rows.size) for k in detail], dtype=float)  # (6, n_measured)
        sel = (m_rows >= lo) & (m_rows < hi)
        starts = st["wait_start"][m_rows[sel]].astype(float)
        off = np.zeros(starts.size)
        for j, k in enumerate(detail):
            d = cols[j, sel]
            bars(y, starts + off, starts + off + d, STAGE_COLOURS[k], height=0.5)
            off += d

    # Worker lanes: per-sample spans and per-batch collate + outline (only spans near the plotted window).
    if sp.get("read_start") is not None and sp["read_start"].size:
        keep = (sp["augment_end"] >= t_begin) & (sp["read_start"] <= t_end)
        sp = {k: v[keep] for k, v in sp.items()}
    for w in workers:
        y = lane_y[_lane_name(w)]
        if sp.get("worker") is not None and sp["worker"].size:
            m = sp["worker"] == w
            bars(y, sp["read_start"][m], sp["read_end"][m], STAGE_COLOURS["read"])
            bars(y, sp["read_end"][m], sp["decode_end"][m], STAGE_COLOURS["decode"])
            bars(y, sp["decode_end"][m], sp["augment_end"][m], STAGE_COLOURS["augment"])
        mb = bt["worker"] == w
        bars(y, bt["collate_start"][mb], bt["collate_end"][mb], STAGE_COLOURS["collate"])
        near = mb & (bt["collate_end"] >= t_begin) & (bt["collate_start"] <= t_end + span)
        for j in np.flatnonzero(near):
            b = int(bt["batch"][j])
            first = float(bt["collate_start"][j])
            if sp.get("batch") is not None and sp["batch"].size:
                ms = sp["batch"] == b
                if ms.any():
                    first = float(sp["read_start"][ms].min())
            last = float(bt["collate_end"][j])
            if last < t_begin or first > t_end:
                continue
            ax.add_patch(Rectangle((first, y - h / 2 - 0.06), last - first, h + 0.12, fill=False, lw=0.8,
                                   edgecolor="#333333"))
            if last - first > 0.02 * span:
                ax.text(max(first, t_begin) + 0.003 * span, y + h / 2 + 0.07, f"b{b}", fontsize=7, va="bottom",
                        color="#333333")

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
    legend = [Patch(color=STAGE_COLOURS[k], label=lbl) for k, lbl in (
        ("wait", "main: wait for batch"), ("h2d", "main: H2D copy"), ("compute", "main: compute"),
        ("read", "read"), ("decode", "decode"), ("augment", "augment"), ("collate", "collate"),
        ("transfer", "transfer"), ("other", "other (unexplained idle)"))]
    legend.append(Patch(facecolor="none", edgecolor="#333333", label="one batch (bN)"))
    fig_h = fig.get_size_inches()[1]
    fig.legend(handles=legend, loc="lower left", bbox_to_anchor=(0.01, 0.0), ncol=10, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.45 / fig_h, 1, 1))
    return _savefig(fig, path)


# --------------------------------------------------------------------------------------------------------------------
# c. utilisation
# --------------------------------------------------------------------------------------------------------------------
def plot_utilisation(rec: Any, path: Path) -> Path:
    """CPU per core and mean, CPU per process, disk read MB/s, RAM GB, and GPU panels when sampled."""
    s = rec.samples or {}
    t = np.asarray(s.get("t_s", []), dtype=float)
    gpu = s.get("gpu")
    procs = [p for p in s.get("processes", []) or [] if p.get("t_s")]
    panels = ["cpu"] + (["proc"] if procs else []) + ["disk", "ram"]
    if gpu:
        panels += ["gpu"] + (["pcie"] if gpu.get("pcie_rx_bytes_per_s") is not None else [])
    fig, axes = plt.subplots(len(panels), 1, figsize=(13, 1.0 + 2.0 * len(panels)), sharex=True, squeeze=False)
    axes = axes[:, 0]
    w0, w1 = float(rec.window.get("start_s", 0.0)), float(rec.window.get("end_s", 0.0))
    for ax, name in zip(axes, panels):
        ax.axvspan(w0, w1, color=STAGE_COLOURS["compute"], alpha=0.08, lw=0,
                   label="measured window" if name == "cpu" else None)
        ax.grid(alpha=0.3)
        if name == "cpu":
            per_core = np.asarray(s.get("cpu_percent_per_core", []), dtype=float)
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
        elif name == "proc":
            for p in procs:
                tt, cpu = _bucket(np.asarray(p["t_s"], dtype=float),
                                  np.asarray([np.nan if v is None else v for v in p.get("cpu_percent", [])],
                                             dtype=float))
                label = "main process" if p.get("role") == "main" else (
                    f"worker {p.get('worker_id')}" if p.get("worker_id") is not None else f"pid {p.get('pid')}")
                ax.plot(tt, cpu, lw=1.2, label=label)
            ax.set_ylabel("CPU % (100 = 1 core)")
            ax.set_title("CPU use per process", loc="left", fontsize=10)
        elif name == "disk":
            d = np.asarray(s.get("disk_read_bytes_per_s", []), dtype=float)
            if d.size == t.size and t.size:
                tt, dd = _bucket(t, d / 1e6)
                ax.plot(tt, dd, color=STAGE_COLOURS["read"], lw=1.2)
                ax.fill_between(tt, 0, dd, color=STAGE_COLOURS["read"], alpha=0.2)
            ax.set_ylim(bottom=0)
            ax.set_ylabel("MB/s")
            ax.set_title(f"Disk reads ({s.get('disk') or 'all disks'})", loc="left", fontsize=10)
        elif name == "ram":
            for key, label, colour in (("ram_used_bytes", "used", "#c44e52"),
                                       ("page_cache_bytes", "page cache", "#4c72b0"),
                                       ("shm_used_bytes", "/dev/shm", "#8172b2")):
                v = np.asarray(s.get(key) or [], dtype=float)
                if v.size == t.size and t.size:
                    tt, vv = _bucket(t, v / 1e9)
                    ax.plot(tt, vv, lw=1.4, label=label, color=colour)
            total = s.get("ram_total_bytes")
            ax.set_ylim(bottom=0)
            ax.set_ylabel("GB")
            ax.set_title("Memory" + (f" (total {total / 1e9:.1f} GB)" if total else ""), loc="left", fontsize=10)
        elif name == "gpu":
            gt = np.asarray(gpu.get("t_s", []), dtype=float)
            u = np.asarray([np.nan if v is None else v for v in gpu.get("util_percent", [])], dtype=float)
            if gt.size and u.size == gt.size:
                tt, uu = _bucket(gt, u)
                ax.plot(tt, uu, color=STAGE_COLOURS["compute"], lw=1.4, label="GPU util %")
            ax.set_ylim(0, 105)
            ax.set_ylabel("GPU util %")
            mem = np.asarray([np.nan if v is None else v for v in gpu.get("mem_used_bytes", [])], dtype=float)
            if gt.size and mem.size == gt.size:
                ax2 = ax.twinx()
                tt, mm = _bucket(gt, mem / 1e9)
                ax2.plot(tt, mm, color="#8172b2", lw=1.2, label="GPU memory used (GB)")
                ax2.set_ylabel("GPU memory GB")
                if gpu.get("mem_total_bytes"):
                    ax2.set_ylim(0, gpu["mem_total_bytes"] / 1e9 * 1.05)
                ax2.legend(loc="lower left", bbox_to_anchor=(1.06, 0.0), fontsize=8, frameon=False)
            ax.set_title(f"GPU {gpu.get('index', '')}: {gpu.get('name', '')}", loc="left", fontsize=10)
        elif name == "pcie":
            gt = np.asarray(gpu.get("t_s", []), dtype=float)
            for key, label in (("pcie_rx_bytes_per_s", "PCIe rx (host → GPU)"),
                               ("pcie_tx_bytes_per_s", "PCIe tx (GPU → host)")):
                v = np.asarray([np.nan if x is None else x for x in gpu.get(key) or []], dtype=float)
                if gt.size and v.size == gt.size:
                    tt, vv = _bucket(gt, v / 1e6)
                    ax.plot(tt, vv, lw=1.2, label=label)
            ax.set_ylim(bottom=0)
            ax.set_ylabel("MB/s")
            ax.set_title("PCIe throughput", loc="left", fontsize=10)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    axes[-1].set_xlabel("seconds since run start")
    note = "" if t.size <= MAX_SERIES_POINTS else f" (drawn as {MAX_SERIES_POINTS} bucket means of {t.size} samples)"
    fig.suptitle(f"Utilisation, sampled every {s.get('interval_s', '?')} s; shaded: measured window{note}",
                 x=0.01, ha="left", fontsize=11)
    fig.tight_layout()
    return _savefig(fig, path)


# --------------------------------------------------------------------------------------------------------------------
# d. latency distributions
# --------------------------------------------------------------------------------------------------------------------
def plot_latency(rec: Any, path: Path) -> Path:
    """Histogram per stage on log-spaced bins (ms), with p50/p95/p99 from the analysis marked."""
    durs = stage_durations(rec)
    fig, axes = plt.subplots(2, 4, figsize=(14, 6.6))
    marks = (("p50_ms", "p50", "-"), ("p95_ms", "p95", "--"), ("p99_ms", "p99", ":"))
    for ax, (name, per) in zip(axes.ravel(), LATENCY_STAGES):
        v = durs.get(name, np.array([])) * 1e3
        stats = (rec.stages or {}).get(name, {})
        ax.set_title(f"{name} (per {per}, n={v.size})", fontsize=10, loc="left")
        ax.set_xlabel("ms (log scale)")
        ax.set_ylabel("count")
        pos = v[v > 0]
        if pos.size == 0:
            msg = "no observations" if v.size == 0 else f"all {v.size} are 0 ms"
            if name == "h2d" and rec.compute_device.get("type") == "cpu":
                msg += "\n(no host-to-device copy on the CPU)"
            ax.text(0.5, 0.5, msg,
                    ha="center", va="center", transform=ax.transAxes, color="#555555")
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        lo_, hi_ = max(pos.min(), 1e-3), max(pos.max(), 1e-3)
        if hi_ < lo_ * 10:  # at least one decade, so the log axis has labelled major ticks
            mid = np.sqrt(lo_ * hi_)
            lo_, hi_ = mid / np.sqrt(10), mid * np.sqrt(10)
        bins = np.geomspace(lo_, hi_, 40)
        ax.hist(np.clip(pos, lo_, hi_), bins=bins, color=STAGE_COLOURS.get(name, "#4c72b0"), alpha=0.85)
        ax.set_xscale("log")
        if hi_ / lo_ < 1e3:  # up to 3 decades: label 1-2-5 steps, else a narrow range shows a single label
            ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        for key, label, ls in marks:
            x = stats.get(key)
            if x and x > 0:
                ax.axvline(x, color="black", ls=ls, lw=1.1, label=f"{label} {_ms(x)} ms")
        zeros = v.size - pos.size
        if zeros:
            ax.text(0.98, 0.97, f"{zeros} at 0 ms not shown", ha="right", va="top", fontsize=8,
                    transform=ax.transAxes, color="#555555")
        ax.legend(fontsize=8, loc="best", framealpha=0.85)
    fig.suptitle("Latency per stage in the measured window (worker stages per sample or batch, main loop per step); "
                 "percentiles from the analysis", x=0.01, ha="left", fontsize=11)
    fig.tight_layout()
    return _savefig(fig, path)


def write_plots(rec: Any, out_dir: str | Path) -> list[Path]:
    """Write the four PNGs into ``out_dir``; returns their paths (PLOT_FILES order)."""
    out = Path(out_dir)
    fns = (plot_where_time_went, plot_timeline, plot_utilisation, plot_latency)
    return [fn(rec, out / name) for fn, name in zip(fns, PLOT_FILES)]
