"""ranks.png: the ranks of a torchrun job side by side (from the merged ``ranks`` view, profiler/distributed/merge).

Top: one lane per rank on the shared time axis (or each rank's own, aligned at its first measured step, when the
ranks ran on different machines): per step, the wait for input, then compute, with the collective wait drawn at the
end of the compute where it happens (DDP's all-reduce closes the backward). Bottom: per step index, each rank's
collective wait, so the rank the others wait for stands out as the one that waits least.

Beyond RANKS_LANES_MAX ranks (1,024 lanes are unreadable): a heatmap of the collective-wait share, rank x step (the
stragglers are the dark rows: the ones that did not wait), the distribution of the ranks' shares with the
stragglers marked and named, and step time per step (median and the slowest and fastest rank).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import vocab
from ..record.read_docs import ranks_view
from ..thresholds import RANKS_LANES_MAX
from .output import write_png

STEP_BARS_MAX = 64  # per-step bars per rank up to this many steps; lines beyond


def plot_ranks(view: dict[str, Any], path: str | Path) -> Path:
    if len(view["ranks"]) > RANKS_LANES_MAX:
        return plot_many(view, path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    v = ranks_view(view)
    ps = view["per_step"]
    ranks = [r.rank for r in v.ranks]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(11, 2.2 + 0.6 * len(ranks) + 2.4),
                                  gridspec_kw={"height_ratios": [max(1, len(ranks)), 2]})
    cw, cc, ck = vocab.color("wait"), vocab.color("compute"), vocab.color("collective")
    for lane, r in enumerate(ranks):
        key = str(r) if str(r) in ps["step_s"] else r
        t = ps["start_s"][key]
        waits, comps, cols = ps["wait_s"][key], ps["compute_s"][key], ps["collective_s"][key]
        bars: tuple[list, list, list] = ([], [], [])  # one call per lane and kind: thousands of steps stay fast
        for t0, w, c, k in zip(t, waits, comps, cols):
            bars[0].append((t0, w))
            bars[1].append((t0 + w, max(0.0, c - k)))
            if k > 0:
                bars[2].append((t0 + w + max(0.0, c - k), k))
        for b, color in zip(bars, (cw, cc, ck)):
            if b:
                ax.broken_barh(b, (lane - 0.35, 0.7), color=color)
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    clocks = v.clocks
    if clocks.shared:
        ax.set_xlabel("s (one clock: CLOCK_MONOTONIC)")
    elif clocks.comparable:
        ax.set_xlabel(f"s on rank 0's clock (other hosts' offsets from store round trips, "
                      f"± {clocks.uncertainty_ms or 0:.2f} ms)")
    else:
        ax.set_xlabel("s from each rank's first measured step (no shared clock: aligned by step index)")
    st = v.straggler
    ax.set_title(f"Ranks side by side — straggler: rank {st.rank} ({st.cause})" if st
                 else "Ranks side by side — no straggler")
    ax.legend(handles=[Patch(color=cw, label=vocab.label("wait")), Patch(color=cc, label=vocab.label("compute")),
                       Patch(color=ck, label=vocab.label("collective"))], loc="upper right", fontsize=8)
    steps = ps["step"]
    width = 0.8 / max(1, len(ranks))
    for i, r in enumerate(ranks):
        key = str(r) if str(r) in ps["collective_s"] else r
        if len(steps) > STEP_BARS_MAX:  # thousands of bars draw for seconds and read as a blur: lines
            ax2.plot(steps, [v * 1e3 for v in ps["collective_s"][key]], lw=0.8, label=f"rank {r}")
            continue
        ax2.bar([s + (i - (len(ranks) - 1) / 2) * width for s in steps], [v * 1e3 for v in ps["collective_s"][key]],
                width=width, label=f"rank {r}")
    ax2.set_xlabel("step")
    ax2.set_ylabel("collective wait, ms")
    ax2.set_title(f"Collective wait per step ({'measured' if v.collective_measured else 'derived'})",
                  fontsize=9)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    try:
        return write_png(fig, path, dpi=100)  # a full disk leaves no truncated PNG
    finally:
        plt.close(fig)


def render(view: dict[str, Any], out_dir: Path, ctx: dict[str, Any]) -> Path:
    """The registry's entry point: ranks.png in ``out_dir``."""
    return plot_ranks(view, Path(out_dir) / "ranks.png")


def plot_many(view: dict[str, Any], path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    v = ranks_view(view)
    ps = view["per_step"]
    ranks = [r.rank for r in v.ranks]

    def col(name: str, r: int) -> list[float]:
        d = ps[name]
        return d[str(r)] if str(r) in d else d[r]

    steps = ps["step"]
    step = np.array([col("step_s", r) for r in ranks]) if steps else np.zeros((len(ranks), 0))
    coll = np.array([col("collective_s", r) for r in ranks]) if steps else np.zeros((len(ranks), 0))
    share = np.divide(coll, step, out=np.zeros_like(coll), where=step > 0)
    fig, (ax, ax2, ax3) = plt.subplots(3, 1, figsize=(11, 10), gridspec_kw={"height_ratios": [3, 1.4, 1.2]})
    im = ax.imshow(share, aspect="auto", interpolation="nearest", cmap="magma", vmin=0, vmax=1,
                   extent=(steps[0] - 0.5 if steps else 0, steps[-1] + 0.5 if steps else 1, len(ranks) - 0.5, -0.5))
    fig.colorbar(im, ax=ax, label="collective wait, share of step")
    ax.set_ylabel(f"rank (0..{ranks[-1] if ranks else 0})")
    ax.set_xlabel("step")
    sts = v.stragglers
    named = ", ".join(str(s.rank) for s in sts[:8]) + (" …" if len(sts) > 8 else "")
    ax.set_title(f"{len(ranks)} ranks: collective wait per step — stragglers (dark rows): {named}" if sts
                 else f"{len(ranks)} ranks: collective wait per step — no straggler")
    per_rank = np.array([r.collective_share or 0.0 for r in v.ranks])
    ax2.hist(per_rank * 100, bins=50, color=vocab.color("collective"))
    for s in sts[:8]:
        ax2.axvline((s.collective_share or 0.0) * 100, color="red", lw=1)
        ax2.annotate(f"rank {s.rank}", ((s.collective_share or 0.0) * 100, 0), rotation=90, fontsize=7,
                     xytext=(2, 4), textcoords="offset points", color="red")
    ax2.set_xlabel("collective wait, % of a rank's step (stragglers in red: the others wait for them)")
    ax2.set_ylabel("ranks")
    if steps:
        ax3.plot(steps, np.median(step, axis=0) * 1e3, label="median rank")
        ax3.plot(steps, step.max(axis=0) * 1e3, label="slowest rank", lw=0.8)
        ax3.plot(steps, step.min(axis=0) * 1e3, label="fastest rank", lw=0.8)
        ax3.legend(fontsize=8)
    ax3.set_xlabel("step")
    ax3.set_ylabel("step time, ms")
    fig.tight_layout()
    try:
        return write_png(fig, path, dpi=90)
    finally:
        plt.close(fig)
