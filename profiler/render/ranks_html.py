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
from ..thresholds import RANKS_TABLE_MAX
from .jinja import environment
from .output import write_atomic
from .ranks_rows import HEADERS, figure, table_rows


def render_html(view: dict[str, Any], png: bytes | None, folder: Path | None = None) -> str:
    """The whole page as one string: inline CSS, the PNG as a data: URI, nothing fetched. A rank's record links to
    its own report where that is in ``folder`` (a shared --out, or rank 0's node)."""
    local = {r: _local_report(folder, r) for r in view["present"]}
    from ..analysis.headline import ranks_figures, ranks_headline
    from .units import printable

    cards = [{"value": printable(f.value), "label": printable(f.label)} for f in ranks_figures(view)]
    return environment().get_template("ranks.html.j2").render(
        headline=printable(ranks_headline(view)), cards=cards, v=view, local=local, headers=HEADERS,
        rows=table_rows(view),
        skew_mean=figure(view["skew_ms"]["mean"]),
        skew_max=figure(view["skew_ms"]["max"]), png_b64=base64.b64encode(png).decode("ascii") if png else None)


def _local_report(folder: Path | None, rank: int) -> str | None:
    """The relative link to a rank's own report in ``folder``: ``rank<N>/`` (a run's), ``attach-rank<N>/`` (attach
    --rank-of's), or None where neither is there."""
    for sub in (f"rank{rank}", f"attach-rank{rank}"):
        if folder is not None and (Path(folder) / sub / "report.html").exists():
            return f"{sub}/report.html"
    return None


def render(view: dict[str, Any], out_dir: Path, ctx: dict[str, Any]) -> Path:
    """The registry's entry point: report.html, inlining ranks.png when it was drawn before (``ctx["results"]``)."""
    png_path = (ctx.get("results") or {}).get("ranks_png")
    png = Path(png_path).read_bytes() if isinstance(png_path, Path) else None
    return write_atomic(Path(out_dir) / "report.html", render_html(view, png, Path(out_dir)))


def render_json(view: dict[str, Any], out_dir: Path, ctx: dict[str, Any]) -> Path:
    """ranks.json: the merged view, for scripts (and for ``report RUN_FOLDER`` to be redone from the records)."""
    ps = view.get("per_step") or {}
    doc = json_safe({**view, "per_step": {}})
    # The per-step series are most of the bytes at scale (ranks x steps numbers, finite: rounded from the merge's
    # arrays); walking them through json_safe costs seconds at 1,024 ranks, so they are dumped as they are.
    doc["per_step"] = {k: ({str(r): x for r, x in v.items()} if isinstance(v, dict) else v) for k, v in ps.items()}
    indent = 1 if len(view.get("ranks") or []) <= RANKS_TABLE_MAX else None
    try:
        text = json.dumps(doc, indent=indent, allow_nan=False)
    except ValueError:  # a non-finite number after all: the careful route
        text = json.dumps(json_safe(view), indent=indent)
    return write_atomic(Path(out_dir) / "ranks.json", text.encode())
