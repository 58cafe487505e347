"""compare.html (one self-contained page: inline CSS, the figure as a data: URI, nothing fetched) and compare.json.

Reads the dict of ``profiler.analysis.compare.compare`` only; the rows come from compare_rows.py, shared with the
terminal table.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from ..analysis.headline import compare_headline
from ..record import json_safe
from .compare_rows import GROUP_TITLES, groups, rows
from .jinja import environment
from .output import write_atomic
from .units import printable, safe


def render_html(comparison: dict[str, Any], png: bytes | None) -> str:
    """The whole page as one string: inline CSS, the PNG as a data: URI, no external resource of any kind."""
    shown, omitted = rows(comparison)
    return environment().get_template("compare.html.j2").render(
        headline=printable(compare_headline(comparison)), cards=_cards(comparison),
        c=safe(comparison), groups=groups(shown), titles=GROUP_TITLES, omitted=omitted,
        png_b64=base64.b64encode(png).decode("ascii") if png else None)


def _cards(c: dict[str, Any]) -> list[dict[str, str]]:
    """One card per run (up to five): its throughput and idle share, named by label and folder."""
    metric = {m.get("key"): m for m in c.get("metrics") or []}
    thr, idle = metric.get("throughput") or {}, metric.get("stall_fraction") or {}
    out = []
    for i, r in enumerate((c.get("runs") or [])[:5]):
        tp = (thr.get("values") or [None] * (i + 1))[i]
        fr = (idle.get("values") or [None] * (i + 1))[i]
        value = "—" if tp is None else f"{float(tp):,.1f} samples/s"
        label = f"{r.get('label')}: {r.get('name')}" + ("" if fr is None else f", waiting {float(fr) * 100:.1f} %")
        out.append({"value": value, "label": printable(label)})
    return out


def render(comparison: dict[str, Any], out_dir: Path, ctx: dict[str, Any]) -> Path:
    """The registry's entry point: compare.html, inlining compare.png when it was drawn before (``ctx["results"]``)."""
    png_path = (ctx.get("results") or {}).get("compare_png")
    png = Path(png_path).read_bytes() if isinstance(png_path, Path) and png_path.is_file() else None
    return write_atomic(Path(out_dir) / "compare.html", render_html(comparison, png))


def render_json(comparison: dict[str, Any], out_dir: Path, ctx: dict[str, Any]) -> Path:
    """compare.json: the whole comparison, for scripts."""
    return write_atomic(Path(out_dir) / "compare.json", json.dumps(json_safe(comparison), indent=1, allow_nan=False))
