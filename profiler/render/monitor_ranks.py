"""A monitored torchrun job's ranks side by side: the terminal lines, monitor_ranks.png and monitor_ranks.html, drawn
from a RanksView (monitor/ranks.py says what is compared and why; monitor/side_by_side.py reads the ranks' saved
records and writes these files into the job's folder, beside its rank<k> folders)."""
from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import TYPE_CHECKING

from .. import vocab
from . import output

if TYPE_CHECKING:
    from ..monitor.ranks import RanksView

_TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
PLOT_RANKS_MAX = 16  # more lines than this are unreadable: the plot then draws the median, the range and the laggers


def ranks_lines(view: RanksView) -> list[str]:
    """The ranks in brief for the terminal: the answer, one line per rank, one per episode of a lagging rank."""
    lines = [f"Across the {len(view.rows)} ranks: {view.headline}"]
    for r in view.rows:
        cause = f", mostly {r.cause}" if r.cause else ""
        lines.append(f"  rank {r.rank}: {r.steps:,} steps, waited for input {r.wait_share * 100:.0f} %{cause}, "
                     f"{r.samples_per_s:,.1f} samples/s, {r.read_mb_s:,.1f} MB/s from the device [{r.status}]")
    if len(view.lags) > 1:
        lines += [f"  - {g.summary}" for g in view.lags]
    return lines


def write_png(view: RanksView, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4))
    ranks = [r.rank for r in view.rows]
    laggers = {g.rank for g in view.lags}
    edges = [b.step_first for b in view.bins] + ([view.bins[-1].step_last + 1] if view.bins else [])
    drawn = ranks if len(ranks) <= PLOT_RANKS_MAX else sorted(laggers)
    if len(ranks) > PLOT_RANKS_MAX and view.bins:
        from statistics import median

        shares = [list(b.share.values()) for b in view.bins]
        ax.stairs([max(s) * 100 for s in shares], edges, baseline=[min(s) * 100 for s in shares], fill=True,
                  color="#dddddd", label="every rank's range")
        ax.stairs([median(s) * 100 for s in shares], edges, color="#555555", label="median rank")
    for i, r in enumerate(drawn):
        ys = [b.share.get(r, float("nan")) * 100 for b in view.bins]
        ax.stairs(ys, edges, color=_TAB10[i % len(_TAB10)], linewidth=2.2 if r in laggers else 1.2,
                  label=f"rank {r}" + (" (lagged)" if r in laggers else ""))
    for g in view.lags:
        color = _TAB10[drawn.index(g.rank) % len(_TAB10)] if g.rank in drawn else "#c03030"
        ax.axvspan(g.step_first, g.step_last + 1, color=color, alpha=0.12)
        ax.annotate(f"rank {g.rank}: {g.cause or 'input'}", (g.step_first, 0.97), xycoords=("data", "axes fraction"),
                    fontsize=8, va="top", color=color)
    top = max((s for b in view.bins for s in b.share.values()), default=0.0) * 100
    ax.set_ylim(0, max(5.0, top * 1.15))
    ax.set_ylabel("waiting for input (% of time)")
    ax.set_xlabel("job step")
    ax.legend(loc="upper right", fontsize=8, ncol=2)
    ax.set_title("Each rank's input wait over the job (a rank's lagging steps shaded)", fontsize=10)
    fig.tight_layout()
    try:
        return output.write_png(fig, path, dpi=100)
    finally:
        plt.close(fig)


def write_html(view: RanksView, folders: dict[int, Path], out: Path, png: Path | None) -> Path:
    e = html.escape
    img = (f'<img src="data:image/png;base64,{base64.b64encode(png.read_bytes()).decode("ascii")}" '
           'alt="each rank\'s input wait over the job" style="max-width:100%">') if png is not None else ""
    rows = "".join(
        f"<tr><td><a href=\"{e(folders[r.rank].name)}/monitor.html\">rank {r.rank}</a></td><td>{r.steps:,}</td>"
        f"<td>{r.windows:,}</td><td>{r.wait_share * 100:.1f}</td><td>{e(r.cause or '-')}</td>"
        f"<td>{r.samples_per_s:,.1f}</td><td>{r.read_mb_s:,.1f}</td><td>{r.rss_peak_bytes / 1e6:,.0f}</td>"
        f"<td>{e(r.status)}</td></tr>" for r in view.rows)
    lags = "".join(f"<li>{e(g.summary)}</li>" for g in view.lags) or "<li>none</li>"
    shares = [r.wait_share for r in view.rows]
    laggers = sorted({g.rank for g in view.lags})
    card_items = [(str(len(view.rows)), "ranks side by side"),
                  (", ".join(map(str, laggers)) or "none", "rank(s) whose input lagged"),
                  (str(len(view.lags)), "lagging episodes"),
                  (f"{min(shares) * 100:.0f}-{max(shares) * 100:.0f} %", "waiting for input, whole job, by rank")]
    cards = "".join(f"<li class='card'><b>{e(v)}</b><span>{e(k)}</span></li>" for v, k in card_items)
    causes = ", ".join(f"{c.name}: {c.words}" for c in vocab.CAUSES)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>profiler monitor: ranks</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:1em auto}}td,th{{padding:2px 8px;text-align:right}}
table{{border-collapse:collapse;font-size:13px}}tr:nth-child(even){{background:#f4f4f4}}
img{{max-height:min(420px,55vh);width:auto}}
ul.cards{{display:flex;flex-wrap:wrap;gap:10px;margin:8px 0;padding:0;list-style:none}}
ul.cards li{{border:1px solid #ccc;border-radius:6px;padding:4px 12px;min-width:150px;flex:1 1 150px}}
ul.cards b{{display:block;font-size:1.3em}}ul.cards span{{color:#555;font-size:.85em}}</style></head><body>
<h1 id="headline">{e(view.title)}</h1>
<ul class="cards" id="cards">{cards}</ul>
{img}
{'' if view.lags else f"<p>{e(view.headline)}</p>"}
<h2>Lagging ranks</h2><ul id="lags">{lags}</ul>
<h2>Each rank over the job</h2><table><tr><th>rank</th><th>steps</th><th>windows</th><th>wait %</th><th>cause</th>
<th>samples/s</th><th>device MB/s</th><th>peak RSS MB</th><th>status</th></tr>{rows}</table>
<p><small>A rank lags where its input wait is at least 10 points above the other ranks' median at the same job
steps (beyond their spread with four or more ranks) over two of its windows or more. Causes: {e(causes)}.</small></p>
</body></html>"""
    return output.write_atomic(out / "monitor_ranks.html", page)
