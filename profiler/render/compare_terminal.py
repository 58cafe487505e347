"""The terminal view of ``compare`` (rich): the metrics table (or one table per compared run when the terminal is
too narrow for all), the runs, and the story. Rows come from compare_rows.py, shared with compare.html.

Every user string (run folder names, the story, file paths) goes through :func:`units.markup`, so a ``[/]`` in a path
neither styles nor crashes, and escape sequences in a name are shown, not obeyed.
"""
from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..analysis.headline import compare_headline
from .compare_rows import SHORT_TITLES, Row, rows
from .units import markup, printable

# Columns a compared run needs (value, ratio, interval) and what the metric and baseline columns take: beyond what
# the terminal holds, one table per compared run is printed instead of one wide table that rich would squash.
PAIR_WIDTH = 38
FIXED_WIDTH = 36


def comparison_table(c: dict[str, Any], shown: list[Row], which: list[int]) -> Table:
    """A rich table of the baseline and the runs at positions ``which`` (1-based into c['labels'])."""
    base = c["baseline"]
    title = (f"{' vs '.join([base] + [c['labels'][i] for i in which])} (baseline {base}; * = beyond "
             "run-to-run noise, 95 % bootstrap interval)")
    t = Table(title=markup(title), title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    t.add_column("metric", no_wrap=True)
    t.add_column(markup(base), justify="right", no_wrap=True)
    for i in which:
        lab = c["labels"][i]
        t.add_column(markup(lab), justify="right", no_wrap=True)
        t.add_column(markup(f"{lab}/{base}"), justify="right", no_wrap=True)
        t.add_column("95 % CI", justify="right", no_wrap=True)
    group = None
    for r in shown:
        if r.group != group:
            group = r.group
            t.add_row(f"[bold]{markup(SHORT_TITLES.get(group, group))}[/]")
        unit = " (samples/s)" if r.unit == "samples/s" else ""
        cells = [f" {markup(r.label)}{unit}", markup(r.cells[0].value)]
        for i in which:
            cell = r.cells[i]
            style = {"better": "bold green", "worse": "bold red"}.get(cell.direction, "bold" if cell.significant
                                                                        else "dim")
            mark = " *" if cell.significant else ""
            cells += [markup(cell.value), f"[{style}]{markup(cell.ratio)}{mark}[/]" if cell.ratio else "",
                      f"[dim]{markup(cell.interval)}[/]" if not cell.significant else markup(cell.interval)]
        t.add_row(*cells)
    return t


def print_comparison(c: dict[str, Any], console: Console, files: list[str]) -> None:
    """The answer first (analysis/headline.py compare_headline: which run is faster and why), then the table, the
    runs and each run's full sentence."""
    console.print(Text(printable(compare_headline(c)), style="bold"), highlight=False)
    shown, omitted = rows(c)
    others = list(range(1, len(c["labels"])))
    if FIXED_WIDTH + PAIR_WIDTH * len(others) <= console.width:
        console.print(comparison_table(c, shown, others))
    else:
        for i in others:
            console.print(comparison_table(c, shown, [i]))
    if omitted:
        console.print(f"[dim]Left out (zero in every run): {markup(', '.join(omitted))}.[/]")
    for r in c["runs"]:
        console.print(f"[bold]{markup(r['label'])}[/] = {markup(r['name'])}" + (" [yellow](partial)[/]"
                                                                              if r["partial"] else ""))
    if c["forced"]:
        console.print(f"[yellow]![/] compared with --force although the runs differ in "
                      f"{markup(' and '.join(c['forced']))}.")
    for s in c["sentences"].values():
        console.print(f"[bold]{markup(s)}[/]")
    if files:
        console.print("Wrote: " + ", ".join(markup(f) for f in files))
