"""ranks.png: the ranks of a torchrun job side by side (from the merged ``ranks`` view, profiler/distributed/merge).

Top: one lane per rank on the shared time axis (or each rank's own, aligned at its first measured step, when the
ranks ran on different machines): per step, the wait for input, then compute, with the collective wait drawn at the
end of the compute where it happens (DDP's all-reduce closes the backward). Bottom: per step index, each rank's
collective wait, so the rank the others wait for stands out as the one that waits least.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import vocab


def plot_ranks(view: dict[str, Any], path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    ps = view["per_step"]
    ranks = [r["rank"] for r in view["ranks"]]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(11, 2.2 + 0.6 * len(ranks) + 2.4),
                                  gridspec_kw={"height_ratios": [max(1, len(ranks)), 2]})
    cw, cc, ck = vocab.colour("wait"), vocab.colour("compute"), vocab.colour("collective")
    for lane, r in enumerate(ranks):
        key = str(r) if str(r) in ps["step_s"] else r
        t = ps["start_s"][key]
        waits, comps, cols = ps["wait_s"][key], ps["compute_s"][key], ps["collective_s"][key]
        for t0, w, c, k in zip(t, waits, comps, cols):
            ax.broken_barh([(t0, w)], (lane - 0.35, 0.7), color=cw)
            ax.broken_barh([(t0 + w, max(0.0, c - k))], (lane - 0.35, 0.7), color=cc)
            if k > 0:
                ax.broken_barh([(t0 + w + max(0.0, c - k), k)], (lane - 0.35, 0.7), color=ck)
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    shared = view["clocks"]["shared"]
    ax.set_xlabel("s (one clock: CLOCK_MONOTONIC)" if shared else "s from each rank's first measured step "
                  "(no shared clock: aligned by step index)")
    st = view.get("straggler")
    ax.set_title(f"Ranks side by side — straggler: rank {st['rank']} ({st['cause']})" if st
                 else "Ranks side by side — no straggler")
    ax.legend(handles=[Patch(color=cw, label=vocab.label("wait")), Patch(color=cc, label=vocab.label("compute")),
                       Patch(color=ck, label=vocab.label("collective"))], loc="upper right", fontsize=8)
    steps = ps["step"]
    width = 0.8 / max(1, len(ranks))
    for i, r in enumerate(ranks):
        key = str(r) if str(r) in ps["collective_s"] else r
        ax2.bar([s + (i - (len(ranks) - 1) / 2) * width for s in steps], [v * 1e3 for v in ps["collective_s"][key]],
                width=width, label=f"rank {r}")
    ax2.set_xlabel("step")
    ax2.set_ylabel("collective wait, ms")
    ax2.set_title(f"Collective wait per step ({'measured' if view.get('collective_measured') else 'derived'})",
                  fontsize=9)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def render(view: dict[str, Any], out_dir: Path, ctx: dict[str, Any]) -> Path:
    """The registry's entry point: ranks.png in ``out_dir``."""
    return plot_ranks(view, Path(out_dir) / "ranks.png")
