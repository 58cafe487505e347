"""monitor.html: the answer first (what changed, when, why), the picture (monitor.png), then the windows' table."""
from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import TYPE_CHECKING

from .. import vocab
from ..analysis.headline import cause_words

if TYPE_CHECKING:
    from ..monitor.record import MonitorRecord


def _regime(x: str) -> str:
    """A regime label of a change point ("io", "cpu", "compute", ...) in words a headline can hold."""
    if x in vocab.CAUSE_NAMES:
        return f"input-bound on {cause_words(x)}"
    return {"compute": "compute-bound (the input keeps up)"}.get(x, x)


def headline(rec: MonitorRecord) -> str:
    """The page's h1 and the terminal's first line: what changed, when (the latest change point), or the one regime
    with its wait share and main cause — at most ~20 words; each window's full sentence is in the table and the
    change points' list."""
    if rec.changes:
        c = rec.changes[-1]
        n = len(rec.changes)
        head = f"{n} change point{'s' if n != 1 else ''}; the latest"
        if c.kind == "cause":
            return f"{head}: from step {c.step:,} {_regime(c.after)} (was {_regime(c.before)})."
        if c.kind == "throughput":
            return f"{head}: from step {c.step:,} throughput fell from {c.before} to {c.after}."
        if c.kind == "memory":
            return f"{head}: from step {c.step:,} memory grew from {c.before} to {c.after}."
        return f"{head}: {c.kind} from step {c.step:,}."
    if not rec.windows:
        return "No window yet: the job has not run a full window."
    secs = sum(w.seconds for w in rec.windows)
    idle: dict[str, float] = {}
    for w in rec.windows:
        for k, v in w.idle_by_cause_s.items():
            idle[k] = idle.get(k, 0.0) + float(v)
    share = sum(idle.values()) / secs if secs > 0 else 0.0
    top = max(idle, key=lambda k: idle[k]) if any(v > 0 for v in idle.values()) else None
    verdict = rec.windows[-1].bottleneck
    kind = "compute-bound" if verdict == "compute" else "input-bound" if verdict in vocab.CAUSE_NAMES else verdict
    return (f"One regime throughout: {kind}, waiting for input {share * 100:.0f} % of the time"
            + (f", mostly {cause_words(top)}." if top and share >= 0.005 else "."))


def cards(rec: MonitorRecord) -> list[tuple[str, str]]:
    """(value, label) of the page's cards: the job's steps, its wait share, the change points, the windows, and how
    the job stands (running, ended, ...)."""
    secs = sum(w.seconds for w in rec.windows)
    idle = sum(w.idle_s for w in rec.windows)
    rate = sum(w.samples for w in rec.windows) / secs if secs > 0 else 0.0
    return [(f"{rec.steps_total:,}", "steps watched"), (f"{idle / secs * 100 if secs else 0:.0f} %",
                                                        "waiting for input, whole job"),
            (f"{rate:,.1f} samples/s", "throughput, whole job"), (str(len(rec.changes)), "change points"),
            (f"{rec.windows_total:,}", f"windows ({len(rec.windows)} kept); job {rec.status}")]


def write_monitor(rec: MonitorRecord, out: Path) -> list[Path]:
    """monitor.png and monitor.html in ``out`` (each written whole, then renamed)."""
    from .monitor_plot import write_png

    files = []
    if rec.windows:
        files.append(write_png(rec, out / "monitor.png"))
    e = html.escape
    rows = []
    for w in rec.windows[-400:]:
        rows.append(f"<tr><td>{w.step_first:,}–{w.step_last:,}</td><td>{w.epoch}</td><td>{w.start_s:,.1f}</td>"
                    f"<td>{w.samples_per_s:,.1f}</td><td>{w.wait_share * 100:.1f}</td>"
                    + "".join(f"<td>{w.idle_share(c) * 100:.1f}</td>" for c in ("io", "cpu", "transfer", "other"))
                    + f"<td>{e(w.bottleneck)}</td><td>{w.rss_bytes / 1e6:,.0f}</td>"
                    f"<td>{w.read_bytes / 1e6:,.1f} / {w.rchar / 1e6:,.1f}</td><td>{w.outside_s:.2f}</td>"
                    f"<td>{w.detail_steps}/{w.steps}</td><td>{w.span}</td></tr>")
    card_items = "".join(f"<li class='card'><b>{e(v)}</b><span>{e(k)}</span></li>" for v, k in cards(rec))
    png = out / "monitor.png"
    img = (f'<img src="data:image/png;base64,{base64.b64encode(png.read_bytes()).decode("ascii")}" '
           'alt="wait share by cause over the job" style="max-width:100%">') if rec.windows and png.is_file() else ""
    last = f"<p><b>The last window:</b> {e(rec.windows[-1].summary)}</p>" if rec.windows else ""
    changes = "".join(f"<li><b>{e(c.kind)}</b> at step {c.step:,}: {e(c.summary)}<br><small>{e(c.statistic)}"
                      f"</small></li>" for c in rec.changes) or "<li>none</li>"
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>profiler monitor</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:1em auto}}td,th{{padding:2px 6px;text-align:right}}
table{{border-collapse:collapse;font-size:12px}}tr:nth-child(even){{background:#f4f4f4}}
ul.cards{{display:flex;flex-wrap:wrap;gap:10px;margin:8px 0;padding:0;list-style:none}}
ul.cards li{{border:1px solid #ccc;border-radius:6px;padding:4px 12px;min-width:150px;flex:1 1 150px}}
ul.cards b{{display:block;font-size:1.3em}}ul.cards span{{color:#555;font-size:.85em}}
img{{max-height:min(470px,60vh);width:auto}}</style></head><body>
<h1 id="headline">{e(headline(rec))}</h1>
<p>{e(str(rec.job.get('target', '')))} — {rec.steps_total:,} steps, {rec.windows_total:,} windows ({len(rec.windows)}
kept), status: {e(rec.status)}</p>
<ul class="cards" id="cards">{card_items}</ul>
{img}
{last}
<h2>Change points</h2><ul>{changes}</ul>
<details><summary>Windows (the last {len(rows)})</summary><table><tr><th>steps</th><th>epoch</th><th>start s</th>
<th>samples/s</th><th>wait %</th><th>io %</th><th>cpu %</th><th>transfer %</th><th>other %</th><th>verdict</th>
<th>RSS MB</th><th>device / read() MB</th><th>outside s</th><th>detail/steps</th><th>span</th></tr>
{''.join(rows)}</table></details></body></html>"""
    path = out / "monitor.html"
    tmp = out / ".monitor.html.tmp"
    tmp.write_text(page)
    tmp.replace(path)
    files.append(path)
    return files
