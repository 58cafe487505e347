"""report.html and shares.png of an attach record: the verdict, the stage shares with their 95 % intervals, what
was found, and what could not be measured from outside (and which report files are therefore not drawn, and why).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import vocab
from ..analysis.headline import attach_figures, attach_headline
from ..record.read import read
from ..redact import redact_value
from .attach_terminal import NOT_DRAWN
from .jinja import environment
from .output import write_png
from .units import mpl, printable, safe, stage_label


def _side_label(stage: str, side: str) -> str:
    """"collate (worker)"; a label that already names its side ("wait for batch (main)") is not told it twice."""
    label = stage_label(stage)
    return label if f"({side}" in label else f"{label} ({side})"


def render_shares(rec: Any, out: Path, ctx: dict[str, Any]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(read(rec).stages.items(), key=lambda kv: (kv[1].per != "main", kv[1].share or 0))
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(rows) + 1.5))
    names = [mpl(_side_label(k, str(s.per))) for k, s in rows]
    share = [100 * float(s.share or 0) for _, s in rows]
    err = [[100 * (float(s.share or 0) - float(s.share_low or 0)) for _, s in rows],
           [100 * (float(s.share_high or 0) - float(s.share or 0)) for _, s in rows]]
    colors = [vocab.color(k) if k in vocab.STAGE or k in vocab.CAUSE else "#b0b0b0" for k, _ in rows]
    ax.barh(names, share, xerr=err, color=colors, capsize=3)
    ax.set_xlabel("% of the side's sampled time (bars: 95 % interval)")
    ax.set_xlim(0, 100)
    b = read(rec).verdict.bottleneck
    ax.set_title(mpl(f"attach: {'?' if b is None else b}"), loc="left")
    fig.tight_layout()
    try:
        return write_png(fig, out / "shares.png", dpi=100)  # a full disk leaves no truncated PNG
    finally:
        plt.close(fig)


def render(rec: Any, out: Path, ctx: dict[str, Any]) -> Path:
    import base64

    shares = (ctx.get("results") or {}).get("attach_shares")
    img = base64.b64encode(Path(shares).read_bytes()).decode() if isinstance(shares, Path) else None
    a = safe(redact_value(dict(rec.attach or {})))
    html = environment().get_template("attach.html.j2").render(
        headline=printable(attach_headline(rec)),
        cards=[{"value": printable(f.value), "label": printable(f.label)} for f in attach_figures(rec)],
        verdict=safe(redact_value(rec.verdict or {})),
        stages=safe(rec.stages or {}), attach=a,
        stall=rec.stall or {}, partial=rec.partial_reason if rec.partial else None, img=img,
        shares_error=None if img else shares, not_drawn=NOT_DRAWN, findings=safe(rec.findings or []))
    path = out / "report.html"
    path.write_text(html, encoding="utf-8")
    return path
