"""monitor.html: the answer first (what changed, when, why), the picture (monitor.png), then the windows' table."""
from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..monitor.record import MonitorRecord


def _headline(rec: MonitorRecord) -> str:
    if rec.changes:
        c = rec.changes[-1]
        n = len(rec.changes)
        return f"{n} change point{'s' if n != 1 else ''}; the latest: {c.summary}"
    if rec.windows:
        return f"One regime throughout: {rec.windows[-1].summary}"
    return "No window yet"


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
    changes = "".join(f"<li><b>{e(c.kind)}</b> at step {c.step:,}: {e(c.summary)}<br><small>{e(c.statistic)}"
                      f"</small></li>" for c in rec.changes) or "<li>none</li>"
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>profiler monitor</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:1em auto}}td,th{{padding:2px 6px;text-align:right}}
table{{border-collapse:collapse;font-size:12px}}tr:nth-child(even){{background:#f4f4f4}}</style></head><body>
<h1>{e(_headline(rec))}</h1>
<p>{e(str(rec.job.get('target', '')))} — {rec.steps_total:,} steps, {rec.windows_total:,} windows ({len(rec.windows)}
kept), status: {e(rec.status)}</p>
<img src="monitor.png" alt="wait share by cause over the job" style="max-width:100%">
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
