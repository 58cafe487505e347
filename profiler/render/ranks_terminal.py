"""The terminal view of a torchrun job's merged report (rank 0 at the end of a run, and ``report RUN_FOLDER``): the
per-rank table (80 columns), the straggler sentence, how collective wait and clocks were read, the files written.
"""
from __future__ import annotations

from typing import Any

from .ranks_rows import HEADERS, SHORT, TERMINAL_HEADERS, table_rows


def print_ranks(view: dict[str, Any], console: Any, files: list[str] | None = None) -> None:
    from rich.panel import Panel
    from rich.table import Table

    t = Table(title=f"Ranks ({len(view['present'])} of {view['world_size']}): ms per step; * straggler")
    keep = [HEADERS.index(h) for h in TERMINAL_HEADERS]
    for h in TERMINAL_HEADERS:
        t.add_column(SHORT.get(h, h), justify="right")
    for row in table_rows(view):
        t.add_row(*[row[i] for i in keep])
    console.print(t)
    console.print(Panel(view["summary"] or "-", title="Ranks", border_style="magenta"), markup=False)
    console.print(f"Collective wait: {view['collective_method']}. Clocks: {view['clocks']['note']}.", markup=False)
    if files:
        console.print("Wrote: " + ", ".join(files), markup=False)
