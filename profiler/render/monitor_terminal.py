"""The monitor's terminal summary at the job's end: the windows in brief, every change point, the files."""
from __future__ import annotations

import shutil
import sys
import textwrap
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..monitor.record import MonitorRecord


def print_monitor(rec: MonitorRecord, files: list[str], out: Any = None) -> None:
    """The answer first (monitor_html.headline: the latest change point, or the one regime), then the job in brief,
    each change point, the monitor's own time and the files. Lines wrap at spaces to the terminal's width (80
    columns off a terminal): a word is never cut; a path stays whole on its own line."""
    from .monitor_html import headline

    f = out or sys.stdout
    width = shutil.get_terminal_size((80, 24)).columns

    def say(text: str, indent: str = "", more: str = "") -> None:
        for line in textwrap.wrap(text, width=max(width - 1, 40), initial_indent=indent,
                                  subsequent_indent=more or indent, break_long_words=False, break_on_hyphens=False):
            print(line, file=f)

    ws = rec.windows
    steps = rec.steps_total
    secs = sum(w.seconds for w in ws)
    idle = sum(w.idle_s for w in ws)
    say(headline(rec))
    say(f"Monitored {rec.job.get('target', 'the job')}: {steps:,} steps in {rec.windows_total:,} windows "
        f"({len(ws)} kept), {secs:,.1f} s, waited for input {idle / secs * 100 if secs else 0:.0f} % of it "
        f"[{rec.status}]")
    if not rec.changes:
        last = ws[-1] if ws else None
        say("No change point." + (f" The last window: {last.summary}" if last is not None else ""))
    for c in rec.changes:
        say(f"change ({c.kind}) at step {c.step:,}: {c.summary}", "  ", "    ")
        say(f"statistic: {c.statistic}", "      ")
    cost = rec.monitor_cost
    if cost:
        say(f"Monitor's own time at cuts: {cost.get('seconds', 0):.3f} s over {cost.get('cuts', 0)} cuts")
    for p in files:
        print(f"  {p}", file=f)


def rank_line(rec: MonitorRecord, rank: str, where: str) -> str:
    """One other rank of a torchrun job, on one line (rank 0 gets print_monitor: N summaries would interleave)."""
    n = len(rec.changes)
    return (f"{rank}: {rec.steps_total:,} steps in {rec.windows_total} windows, {n} change "
            f"point{'s' if n != 1 else ''}; {where}")
