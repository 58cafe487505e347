"""Renderers: terminal, PNG plots, self-contained HTML, Chrome/Perfetto trace. They read a RunRecord (or the dict a
command made from records: a comparison, a sweep, the merged ranks view, fit's result) and measure nothing.

The seam: a :class:`Renderer` is a name, the file it writes and ``render(obj, out_dir, ctx) -> Path``; the registries
below list, in the order they run, what each command writes: a run / ``report`` (:data:`REPORT`), ``compare``
(:data:`COMPARE`), ``fit`` (:data:`FIT`), ``sweep`` (:data:`SWEEP`) and a torchrun job's merged report (:data:`RANKS`).
Every list of output files (the HTML's file list, the tests, the CLI's "Wrote: ...") is derived from them, so adding
an output is one entry here plus its module. ``ctx`` is one dict shared by the renderers of one write: what an earlier
renderer produced (``ctx["results"][name]``: its path, or the error that stopped it) is there for a later one (the
HTML inlines the PNGs), and a command puts there what a renderer needs beyond ``obj`` (the ranks' records).

The terminal views are functions next to them, one module per command: terminal.py (run, report), compare_terminal,
fit_terminal, sweep_terminal, ranks_terminal.

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
    """One output file. ``target`` is ``"module:function"`` under profiler.render, resolved on first use.

    ``required``: its failure propagates even where the others' would not (the file the rest is for). ``action``: what
    the stderr line says could not be done when it fails (default ``write <file>``).
    """
    name: str
    file: str
    target: str
    required: bool = False
    action: str = ""

    def render(self, obj: Any, out_dir: Path, ctx: dict[str, Any]) -> Path:
        module, func = self.target.split(":")
        fn: RenderFn = getattr(importlib.import_module(f".{module}", __name__), func)
        return fn(obj, Path(out_dir), ctx)


# A run and `report run.json`: the six plots first (the HTML inlines them; step_time.png is the page's lead picture),
# the trace, then the page.
REPORT: tuple[Renderer, ...] = (
    Renderer("step_time", "step_time.png", "step_plot:render"),
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

# `fit` (without --json): the stacked bar, named after the model and settings (render/fit_plot.py plot_name).
FIT: tuple[Renderer, ...] = (
    Renderer("fit_png", "fit_<model>_<mode>_b<batch>_<precision>.png", "fit_plot:render"),
)
# `sweep`: the points as JSON first (kept even when no point finished), then the figure and the page that inlines it.
SWEEP: tuple[Renderer, ...] = (
    Renderer("sweep_json", "sweep.json", "sweep_html:render_json"),
    Renderer("sweep_png", "sweep.png", "sweep_plot:render"),
    Renderer("sweep_html", "sweep.html", "sweep_html:render"),
)
# A torchrun job's run folder (rank 0 at the end, and `report RUN_FOLDER`): the merged view first (the numbers; its
# failure stops the rest), the lanes figure, the merged trace (each may fail alone), the page that inlines the figure.
RANKS: tuple[Renderer, ...] = (
    Renderer("ranks_json", "ranks.json", "ranks_html:render_json", required=True),
    Renderer("ranks_png", "ranks.png", "ranks_plot:render", action="draw ranks.png"),
    Renderer("ranks_trace", "trace.json", "ranks_trace:render", action="write the merged trace.json"),
    Renderer("ranks_html", "report.html", "ranks_html:render", required=True),
)
# An attach record (`attach PID`, and `report` of its run.json): sampled shares only, so the figure of the shares and
# the page; the files it cannot have are named with the reason (render/attach_terminal.py NOT_DRAWN).
ATTACH: tuple[Renderer, ...] = (
    Renderer("attach_shares", "shares.png", "attach_html:render_shares"),
    Renderer("attach_html", "report.html", "attach_html:render"),
)
REGISTRIES: tuple[tuple[Renderer, ...], ...] = (REPORT, COMPARE, FIT, SWEEP, RANKS, ATTACH)
# A run whose job exported torch.profiler traces (or run --torch-profiler), and `report RUN --torch-trace T.json`: the
# merged kineto trace (render/kineto_merge.py); also writes <name>.profiler_merged.json beside each job's trace. Not
# in REGISTRIES: it renders a record together with a trace file, not from the record alone.
TORCH_TRACE: tuple[Renderer, ...] = (
    Renderer("torch_trace", "torch_trace.json", "kineto_merge:render", action="merge the torch.profiler trace"),
)

REPORT_FILES = tuple(r.file for r in REPORT)
PLOT_FILES = tuple(r.file for r in REPORT if r.file.endswith(".png"))
COMPARE_FILES = tuple(r.file for r in COMPARE)
SWEEP_FILES = tuple(r.file for r in SWEEP)
RANKS_FILES = tuple(r.file for r in RANKS)


def renderer(name: str) -> Renderer:
    return next(r for reg in REGISTRIES for r in reg if r.name == name)


def render_all(renderers: tuple[Renderer, ...], obj: Any, out_dir: str | Path, ctx: dict[str, Any] | None = None,
               strict: bool = False) -> list[Path]:
    """Run ``renderers`` in order into ``out_dir``; returns the paths written.

    Not strict (a run's reports): one renderer failing must not cost the others, since the measurements are already
    in run.json; the failure is printed to stderr and kept in ``ctx["results"]`` (the HTML says which plot is missing
    and why), unless that renderer is ``required``. Strict (compare, fit, sweep, whose outputs are the whole point):
    the first failure propagates.
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
            if strict or r.required:
                raise
            from .units import printable

            results[r.name] = f"{type(e).__name__}: {printable(e)}"
            print(f"profiler: could not {r.action or 'write ' + r.file} ({results[r.name]})", file=sys.stderr)
    return written


def write_reports(rec: RunRecord, out_dir: str | Path) -> list[Path]:
    """Write every report file for ``rec`` (analyzed) into ``out_dir``; returns the paths written."""
    return render_all(REPORT, rec, out_dir)


def write_attach(rec: RunRecord, out_dir: str | Path) -> list[Path]:
    """Write an attach record's files (shares.png, report.html); one failing costs only itself."""
    return render_all(ATTACH, rec, out_dir)


def write_compare(comparison: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """Write compare.png, compare.html and compare.json; the first failure propagates (the compare command reports
    it)."""
    return render_all(COMPARE, comparison, out_dir, strict=True)


def write_fit(result: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """Write fit's plot (``result``: what ``fit --json`` prints); a failure propagates (the fit command reports it)."""
    return render_all(FIT, result, out_dir, strict=True)


def write_sweep(doc: dict[str, Any], out_dir: str | Path, plots: bool = True) -> list[Path]:
    """Write sweep.json, and sweep.png and sweep.html when ``plots`` and a point was measured; a failure propagates."""
    draw = plots and any(p.get("measured_samples_per_s") for p in doc["points"])
    return render_all(SWEEP if draw else SWEEP[:1], doc, out_dir, strict=True)


def write_ranks(view: dict[str, Any], recs: dict[int, Any], folder: str | Path, plots: bool = True) -> list[Path]:
    """Write a torchrun job's merged report into its run folder: ranks.json, then (``plots``) ranks.png, trace.json and
    report.html. ``recs``: rank -> its analyzed RunRecord (None where missing), for the trace. ranks.png or the trace
    failing costs only itself (said on stderr); ranks.json or the page failing propagates."""
    return render_all(RANKS if plots else RANKS[:1], view, folder, {"recs": recs})


def write_torch_trace(rec: RunRecord, out_dir: str | Path, traces: list[str] | None = None) -> list[Path]:
    """Merge the torch.profiler traces ``rec`` lists (or ``traces``) with it: torch_trace.json in the run's folder and
    ``<name>.profiler_merged.json`` beside each of the job's own; returns the paths written. A failure is one line on
    stderr (the record and reports are written already)."""
    ctx: dict[str, Any] = {"torch_traces": traces} if traces else {}
    render_all(TORCH_TRACE, rec, out_dir, ctx)
    return list(ctx.get("torch_trace_files", []))
