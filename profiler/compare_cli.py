"""``python -m profiler compare RUN_A RUN_B [RUN_C ...] [--out DIR] [--force]``.

Loads and re-analyses each run (so runs saved by an older analysis compare on today's definitions), compares them
(``profiler.analysis.compare``), prints the table and the story, and writes compare.html, compare.png and
compare.json (the whole comparison, for scripts) to --out.
"""
from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

from .errors import UserError

DEFAULT_OUT_ROOT = "reports"


def load_runs(paths: list[str]) -> tuple[list[Any], list[str]]:
    """Load and analyse every run; UserError (one line) for the first that cannot be read."""
    from . import record
    from .analysis import analyze

    if len(paths) < 2:
        raise UserError(f"compare needs at least two runs (got {len(paths)}): python -m profiler compare RUN_A RUN_B")
    recs, names = [], []
    for p in paths:
        path = Path(p)
        if path.is_dir() and not (path / "run.json").exists():
            raise UserError(f"{p}: no run.json in this folder")
        recs.append(analyze(record.load(path)))
        names.append(str(path if path.is_dir() or path.name != "run.json" else path.parent))
    return recs, names


def out_dir(arg: str | None) -> Path:
    path = Path(arg) if arg else Path(DEFAULT_OUT_ROOT) / f"compare-{_dt.datetime.now():%Y%m%d-%H%M%S}"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--out {path}: cannot create it ({e.strerror or e})") from None
    return path


# Columns a compared run needs (value, ratio, interval) and what the metric and baseline columns take: beyond what
# the terminal holds, one table per compared run is printed instead of one wide table that rich would squash.
PAIR_WIDTH = 38
FIXED_WIDTH = 36


def comparison_table(c: dict[str, Any], shown: list[Any], which: list[int]) -> Any:
    """A rich table of the baseline and the runs at positions ``which`` (1-based into c['labels'])."""
    from rich import box
    from rich.table import Table

    from .render.compare_html import SHORT_TITLES

    base = c["baseline"]
    t = Table(title=f"{' vs '.join([base] + [c['labels'][i] for i in which])} (baseline {base}; * = beyond "
                    "run-to-run noise, 95 % bootstrap interval)",
              title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    t.add_column("metric", no_wrap=True)
    t.add_column(base, justify="right", no_wrap=True)
    for i in which:
        lab = c["labels"][i]
        t.add_column(lab, justify="right", no_wrap=True)
        t.add_column(f"{lab}/{base}", justify="right", no_wrap=True)
        t.add_column("95 % CI", justify="right", no_wrap=True)
    group = None
    for r in shown:
        if r.group != group:
            group = r.group
            t.add_row(f"[bold]{SHORT_TITLES.get(group, group)}[/]")
        unit = " (samples/s)" if r.unit == "samples/s" else ""
        cells = [f" {r.label}{unit}", r.cells[0].value]
        for i in which:
            cell = r.cells[i]
            style = {"better": "bold green", "worse": "bold red"}.get(cell.direction, "bold" if cell.significant
                                                                        else "dim")
            mark = " *" if cell.significant else ""
            cells += [cell.value, f"[{style}]{cell.ratio}{mark}[/]" if cell.ratio else "",
                      f"[dim]{cell.interval}[/]" if not cell.significant else cell.interval]
        t.add_row(*cells)
    return t


def print_comparison(c: dict[str, Any], console: Any, files: list[str]) -> None:
    from rich.markup import escape

    from .render.compare_html import rows

    shown, omitted = rows(c)
    others = list(range(1, len(c["labels"])))
    if FIXED_WIDTH + PAIR_WIDTH * len(others) <= console.width:
        console.print(comparison_table(c, shown, others))
    else:
        for i in others:
            console.print(comparison_table(c, shown, [i]))
    if omitted:
        console.print(f"[dim]Left out (zero in every run): {', '.join(omitted)}.[/]")
    for r in c["runs"]:
        console.print(f"[bold]{r['label']}[/] = {escape(r['name'])}" + (" [yellow](partial)[/]" if r["partial"]
                                                                         else ""))
    if c["forced"]:
        console.print(f"[yellow]![/] compared with --force although the runs differ in "
                      f"{escape(' and '.join(c['forced']))}.")
    for s in c["sentences"].values():
        console.print(f"[bold]{escape(s)}[/]")
    if files:
        console.print("Wrote: " + ", ".join(escape(f) for f in files))


def run_compare(args: Any) -> int:
    from rich.console import Console

    from .analysis.compare import compare
    from .record import _clean
    from .render.compare_html import render_html
    from .render.compare_plots import render_png

    recs, names = load_runs(list(args.runs))
    c = compare(recs, names=names, force=bool(getattr(args, "force", False)))
    out = out_dir(getattr(args, "out", None))
    png = render_png(c)
    files = []
    for name, data in (("compare.png", png), ("compare.html", render_html(c, png).encode()),
                       ("compare.json", json.dumps(_clean(c), indent=1, allow_nan=False).encode())):
        try:
            (out / name).write_bytes(data)
        except OSError as e:
            raise UserError(f"--out {out}: cannot write {name} ({e.strerror or e})") from None
        files.append(str(out / name))
    print_comparison(c, Console(), files)
    return 0
