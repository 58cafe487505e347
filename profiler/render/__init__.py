"""Renderers: terminal, PNG plots, self-contained HTML, Chrome/Perfetto trace. They read a RunRecord only.

The seam: a :class:`Renderer` is a name, the file it writes and ``render(obj, out_dir, ctx) -> Path``; the registries
below list, in the order they run, what a run / ``report`` writes (:data:`REPORT`) and what ``compare`` writes
(:data:`COMPARE`). Every list of output files (the HTML's file list, the tests, the CLI's "Wrote: ...") is derived
from them, so adding an output is one entry here plus its module. ``ctx`` is one dict shared by the renderers of one
write: what an earlier renderer produced (``ctx["results"][name]``: its path, or the error that stopped it) is there
for a later one (the HTML inlines the PNGs).

Renderer modules are imported when they first render, so listing the files costs no matplotlib import.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord

RenderFn = Callable[[Any, Path, dict], Path]


@dataclass(frozen=True)
class Renderer:
    """One output file. ``target`` is ``"module:function"`` under profiler.render, resolved on first use."""
    name: str
    file: str
    target: str

    def render(self, obj: Any, out_dir: Path, ctx: dict[str, Any]) -> Path:
        module, func = self.target.split(":")
        fn: RenderFn = getattr(importlib.import_module(f".{module}", __name__), func)
        return fn(obj, Path(out_dir), ctx)


# A run and `report run.json`: the four plots first (the HTML inlines them), the trace, then the page.
REPORT: tuple[Renderer, ...] = (
    Renderer("where_time_went", "where_time_went.png", "plots:render_where_time_went"),
    Renderer("timeline", "timeline.png", "plots:render_timeline"),
    Renderer("utilisation", "utilisation.png", "plots:render_utilisation"),
    Renderer("latency", "latency.png", "plots:render_latency"),
    Renderer("what_would_help", "what_would_help.png", "whatif_plot:render"),
    Renderer("trace", "trace.json", "trace:render"),
    Renderer("html", "report.html", "html:render"),
)
# `compare`: the figure first (the page inlines it), the page, the comparison as JSON for scripts.
COMPARE: tuple[Renderer, ...] = (
    Renderer("compare_png", "compare.png", "compare_plots:render"),
    Renderer("compare_html", "compare.html", "compare_html:render"),
    Renderer("compare_json", "compare.json", "compare_html:render_json"),
)

REPORT_FILES = tuple(r.file for r in REPORT)
PLOT_FILES = tuple(r.file for r in REPORT if r.file.endswith(".png"))
COMPARE_FILES = tuple(r.file for r in COMPARE)


def renderer(name: str) -> Renderer:
    return next(r for r in REPORT + COMPARE if r.name == name)


def render_all(renderers: tuple[Renderer, ...], obj: Any, out_dir: str | Path, ctx: dict[str, Any] | None = None,
               strict: bool = False) -> list[Path]:
    """Run ``renderers`` in order into ``out_dir``; returns the paths written.

    Not strict (a run's reports): one renderer failing must not cost the others, since the measurements are already
    in run.json; the failure is printed to stderr and kept in ``ctx["results"]`` (the HTML says which plot is missing
    and why). Strict (compare, whose outputs are the whole point): the first failure propagates.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ctx = {} if ctx is None else ctx
    results: dict[str, Any] = ctx.setdefault("results", {})
    written: list[Path] = []
    for r in renderers:
        try:
            results[r.name] = r.render(obj, out, ctx)
            written.append(results[r.name])
        except Exception as e:  # noqa: BLE001 - reported, and the other files still get written
            if strict:
                raise
            from .units import printable

            results[r.name] = f"{type(e).__name__}: {printable(e)}"
            print(f"profiler: could not write {r.file} ({results[r.name]})", file=sys.stderr)
    return written


def write_reports(rec: RunRecord, out_dir: str | Path) -> list[Path]:
    """Write every report file for ``rec`` (analysed) into ``out_dir``; returns the paths written."""
    return render_all(REPORT, rec, out_dir)


def write_compare(comparison: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """Write compare.png, compare.html and compare.json; the first failure propagates (compare_cli reports it)."""
    return render_all(COMPARE, comparison, out_dir, strict=True)
