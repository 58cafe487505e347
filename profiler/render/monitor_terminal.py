"""The monitor's terminal summary at the job's end: the windows in brief, every change point, the files."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..monitor.record import MonitorRecord


def print_monitor(rec: MonitorRecord, files: list[str], out: Any = None) -> None:
    f = out or sys.stdout
    ws = rec.windows
    steps = rec.steps_total
    secs = sum(w.seconds for w in ws)
    idle = sum(w.idle_s for w in ws)
    print(f"Monitored {rec.job.get('target', 'the job')}: {steps:,} steps in {rec.windows_total:,} windows "
          f"({len(ws)} kept), {secs:,.1f} s, waited for input {idle / secs * 100 if secs else 0:.0f} % of it "
          f"[{rec.status}]", file=f)
    if not rec.changes:
        last = ws[-1] if ws else None
        print("No change point: the job kept one regime" + (f" ({last.summary})" if last is not None else "."),
              file=f)
    for c in rec.changes:
        print(f"  change ({c.kind}) at step {c.step:,}: {c.summary}", file=f)
        print(f"      statistic: {c.statistic}", file=f)
    cost = rec.monitor_cost
    if cost:
        print(f"Monitor's own time at cuts: {cost.get('seconds', 0):.3f} s over {cost.get('cuts', 0)} cuts", file=f)
    for p in files:
        print(f"  {p}", file=f)
