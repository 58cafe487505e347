"""monitor.png: the whole job at a glance — wait share split by cause over the job's steps, throughput under it,
change points as vertical lines (matplotlib, Agg: no display needed)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .. import vocab
from . import output

if TYPE_CHECKING:
    from ..monitor.record import MonitorRecord


def write_png(rec: MonitorRecord, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ws = rec.windows
    edges = [w.step_first for w in ws] + [ws[-1].step_last + 1] if ws else [0]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(11, 5.5), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    bottom = [0.0] * len(ws)
    for cause in ("io", "cpu", "transfer", "other"):
        ys = [w.idle_share(cause) * 100 for w in ws]
        top = [b + y for b, y in zip(bottom, ys)]
        a1.stairs(top, edges, baseline=bottom, fill=True, color=vocab.CAUSE[cause].color,
                  label=vocab.CAUSE[cause].label)
        bottom = top
    a1.set_ylabel("waiting for input (% of time)")
    a1.set_ylim(0, max(5.0, max(bottom, default=0.0) * 1.15))
    a1.legend(loc="upper left", fontsize=8, ncol=2)
    a2.stairs([w.samples_per_s for w in ws], edges, color="#333333")
    a2.set_ylabel("samples/s")
    a2.set_xlabel("job step")
    for c in rec.changes:
        for ax in (a1, a2):
            ax.axvline(c.step, color="#c03030", linestyle="--", linewidth=1)
        a1.annotate(f"{c.kind}: {c.before} → {c.after}", (c.step, a1.get_ylim()[1] * 0.6), fontsize=7,
                    color="#c03030", rotation=90, va="top", ha="right")
    a1.set_title("Input wait over the whole job, by cause (change points dashed)", fontsize=10)
    fig.tight_layout()
    try:
        return output.write_png(fig, path, dpi=100)
    finally:
        plt.close(fig)
