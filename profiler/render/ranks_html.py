"""A torchrun job's merged report page (report.html in the run folder: the per-rank table, the straggler sentence,
ranks.png inlined, links to each rank's own report) and ranks.json (the merged view, for scripts).

Reads the merged ``ranks`` view only (profiler/distributed/merge.py); the table rows come from ranks_rows.py, shared
with the terminal view.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from ..record import json_safe
from .jinja import environment
from .output import write_atomic
from .ranks_rows import HEADERS, figure, table_rows


def render_html(view: dict[str, Any], png: bytes | None) -> str:
    """The whole page as one string: inline CSS, the PNG as a data: URI, nothing fetched."""
    return environment().get_template("ranks.html.j2").render(
        v=view, headers=HEADERS, rows=table_rows(view), skew_mean=figure(view["skew_ms"]["mean"]),
        skew_max=figure(view["skew_ms"]["max"]), png_b64=base64.b64encode(png).decode("ascii") if png else None)


def render(view: dict[str, Any], out_dir: Path, ctx: dict[str, Any]) -> Path:
    """The registry's entry point: report.html, inlining ranks.png when it was drawn before (``ctx["results"]``)."""
    png_path = (ctx.get("results") or {}).get("ranks_png")
    png = Path(png_path).read_bytes() if isinstance(png_path, Path) else None
    return write_atomic(Path(out_dir) / "report.html", render_html(view, png))


def render_json(view: dict[str, Any], out_dir: Path, ctx: dict[str, Any]) -> Path:
    """ranks.json: the merged view, for scripts (and for ``report RUN_FOLDER`` to be redone from the records)."""
    return write_atomic(Path(out_dir) / "ranks.json", json.dumps(json_safe(view), indent=1).encode())
