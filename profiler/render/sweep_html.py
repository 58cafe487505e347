"""sweep.html: one self-contained page (table + the sweep plot inlined) from the sweep dict; and sweep.json, the dict
itself (for scripts)."""
from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

from ..analysis.headline import sweep_figures, sweep_headline
from ..record import json_safe
from ..record.read_docs import SweepBest, SweepPoint, sweep_view
from .output import write_atomic
from .units import printable


def _f(v: Any, fmt: str = "{:.1f}") -> str:
    return "—" if v is None else fmt.format(v)


def _predicted(p: SweepPoint) -> str:
    """"29.5 (3.5–56.0)": the prediction with its interval; "not predicted" where the what-if could not say."""
    x, iv = p.predicted_samples_per_s, p.predicted_interval
    if x is None:
        return "not predicted" if p.predicted_binds == "unknown" else "—"
    return _f(x) + (f" ({iv[0]:.1f}–{iv[1]:.1f})" if iv else "")


def write_sweep_html(doc: dict[str, Any], path: str | Path, png: str | Path | None = None) -> Path:
    rows = []
    sw = sweep_view(doc)
    for p in sw.points:
        iv = p.interval
        err = "baseline" if p.index == sw.baseline else _f(None if p.error is None else p.error * 100, "{:+.0f} %")
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (
            p.label, _f(p.measured_samples_per_s) if p.measured_samples_per_s else p.failed,
            f"{iv[0]:.1f}–{iv[1]:.1f}" if iv else "—",
            _predicted(p), err,
            "—" if p.predicted_binds is None else p.predicted_binds, "—" if p.bottleneck is None else p.bottleneck,
            f'<a href="point{p.index}/report.html">report</a>')) + "</tr>")
    rows_html = "\n".join(rows).replace("&lt;a href=", "<a href=").replace("&quot;", '"').replace(
        "&gt;report&lt;/a&gt;", ">report</a>")
    img = ""
    if png and Path(png).is_file():
        img = ('<img alt="measured vs predicted" src="data:image/png;base64,'
               + base64.b64encode(Path(png).read_bytes()).decode() + '">')
    best = sw.best or SweepBest(label="—")
    median_err = sw.median_abs_error
    cards = "".join(f'<li class="card"><b>{html.escape(printable(f.value))}</b><span>{html.escape(printable(f.label))}'
                    "</span></li>" for f in sweep_figures(doc))
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>profiler sweep</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:70em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:first-child{{text-align:left}}
h1{{font-size:1.5em}}img{{max-width:100%;height:auto;max-height:min(470px,60vh);width:auto}}
ul.cards{{display:flex;flex-wrap:wrap;gap:10px;margin:8px 0;padding:0;list-style:none}}
ul.cards li{{border:1px solid #ccc;border-radius:6px;padding:4px 12px;min-width:150px;flex:1 1 150px}}
ul.cards b{{display:block;font-size:1.3em}}ul.cards span{{color:#555;font-size:.85em}}</style></head><body>
<h1 id="headline">{html.escape(printable(sweep_headline(doc)))}</h1>
<ul class="cards" id="cards">{cards}</ul>
{img}
<p>Best setting: <b>{html.escape(str(best.label))}</b> ({_f(best.samples_per_s)} samples/s).
Every other point was predicted from the first one
{'(median absolute error ' + f'{median_err * 100:.0f} %)' if median_err is not None else ''}.
{f"{sw.coverage * 100:.0f} % of the predicted points were measured inside their predicted interval."
 if sw.coverage is not None else ''}
{'<b>Interrupted</b>: only the finished points are shown.' if sw.interrupted else ''}</p>
<div style="overflow-x:auto;max-width:100%">
<table><tr><th>point</th><th>measured samples/s</th><th>95 % interval</th><th>predicted (interval)</th><th>error</th>
<th>would bind (predicted)</th><th>verdict (measured)</th><th></th></tr>
{rows_html}</table></div>
<p>Each point is a full profiled run in its own folder (pointN/run.json, report.html). Predictions assume what the
first point's report states per prediction (run.json <code>whatif</code>).</p></body></html>"""
    out = Path(path)
    out.write_text(page, encoding="utf-8")
    return out


def render(doc: dict[str, Any], out_dir: Path, ctx: dict[str, Any]) -> Path:
    """The registry's entry point: sweep.html, inlining sweep.png when it was drawn before (``ctx["results"]``)."""
    png = (ctx.get("results") or {}).get("sweep_png")
    return write_sweep_html(doc, Path(out_dir) / "sweep.html", png if isinstance(png, Path) else None)


def render_json(doc: dict[str, Any], out_dir: Path, ctx: dict[str, Any]) -> Path:
    """sweep.json: every point (setting, measured, predicted, error) and the summary, for scripts."""
    return write_atomic(Path(out_dir) / "sweep.json", json.dumps(json_safe(doc), indent=1).encode())
