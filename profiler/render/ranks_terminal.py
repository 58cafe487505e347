"""The terminal view of a torchrun job's merged report (rank 0 at the end of a run, and ``report RUN_FOLDER``): the
per-rank table (80 columns), the straggler sentence, how collective wait and clocks were read, the files written.
"""
from __future__ import annotations

from typing import Any

from ..record.read_docs import ranks_view
from .ranks_rows import HEADERS, SHORT, TERMINAL_HEADERS, record_places, table_rows


def print_ranks(view: dict[str, Any], console: Any, files: list[str] | None = None) -> None:
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    from ..analysis.headline import ranks_headline
    from .units import printable

    console.print(Text(printable(ranks_headline(view)), style="bold"), highlight=False)  # the answer first
    v = ranks_view(view)
    t = Table(title=f"Ranks ({len(v.present)} of {v.world_size}): ms per step; * straggler")
    keep = [HEADERS.index(h) for h in TERMINAL_HEADERS]
    for h in TERMINAL_HEADERS:
        t.add_column(SHORT.get(h, h), justify="right")
    for row in table_rows(view):
        t.add_row(*[row[i] for i in keep])
    console.print(t)
    console.print(Panel(v.summary or "-", title="Ranks", border_style="magenta"), markup=False)
    console.print(f"Collective wait: {v.collective_method}. Clocks: {v.clocks.note}.", markup=False)
    clocks = v.clocks
    offs = clocks.host_offsets or clocks.round_trips
    if offs:
        console.print("Clock offsets to rank 0: " + "; ".join(
            f"{h} {o['offset_ms']:+.3f} ± {o['uncertainty_ms']:.3f} ms" for h, o in list(offs.items())[:8])
            + (f"; {len(offs) - 8} more hosts in ranks.json" if len(offs) > 8 else "") + ".", markup=False)
    if clocks.versus_effect:
        console.print(f"Clocks against the effect: {clocks.versus_effect}.", markup=False)
    recs = record_places(view)
    if recs and len(recs) <= 8:
        console.print("Full records: " + "; ".join(
            f"rank {r}: node {loc.node} {loc.host} {loc.path}" for r, loc in recs.items()), markup=False)
    elif recs:
        console.print("Full records: on each rank's node, listed in ranks.json (records) and report.html.",
                      markup=False)
    col = v.collected
    if col:
        took = col.last_report_to_merged_s
        console.print(f"Summaries via {col.via}: {col.reports} of {v.world_size} ranks, waited "
                      f"{col.waited_s:.1f} s" + (f"; merged {took:.1f} s after the last report" if took
                                                 is not None else "") + ".", markup=False)
    if files:
        console.print("Wrote: " + ", ".join(files), markup=False)
