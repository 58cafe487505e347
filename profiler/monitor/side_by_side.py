"""Rank 0's and ``report``'s side of the ranks side by side: the ranks' saved monitor.json files read (waiting a little
for the ones still running, at a job's end), compared (ranks.analyze) and drawn (render/monitor_ranks.py) into the
job's folder, beside its rank<k> folders."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from ..distributed.layout import find_ranks
from ..errors import UserError
from ..render.monitor_ranks import ranks_lines, write_html, write_png
from ..thresholds import MONITOR_RANKS_WAIT_S
from .ranks import analyze
from .record import MonitorRecord, load


def load_ranks(folder: Path, wait_s: float = 0.0) -> dict[int, tuple[Path, MonitorRecord]]:
    """rank -> (its folder, its record), for every ``rank<k>`` folder of ``folder`` holding a monitor.json. With
    ``wait_s``, a rank whose record still says "running" is read again until it has ended or ``wait_s`` has passed
    (rank 0 at its own end: the others end within seconds of it); records are rewritten whole, so any read is whole."""
    deadline = time.monotonic() + wait_s
    out: dict[int, tuple[Path, MonitorRecord]] = {}
    while True:
        for r, d in find_ranks(folder).items():
            if (d / "monitor.json").is_file() and (r not in out or out[r][1].status == "running"):
                try:
                    out[r] = (d, load(d))
                except UserError:  # (a rank's folder that is not a monitor record: not ours to draw)
                    continue
        if all(rec.status != "running" for _, rec in out.values()) or time.monotonic() >= deadline:
            return dict(sorted(out.items()))
        time.sleep(0.2)


def write_ranks(folder: Path, wait_s: float = 0.0, plots: bool = True, say: Any = print,
                found: dict[int, tuple[Path, MonitorRecord]] | None = None) -> list[Path]:
    """The ranks of the monitored job in ``folder`` side by side: the lines said (``say``), and with ``plots``
    monitor_ranks.png and monitor_ranks.html written there (``found``: the ranks' records already read, as
    load_ranks returns them). Nothing with fewer than two ranks' records."""
    if found is None:
        found = load_ranks(folder, wait_s)
    if len(found) < 2:
        return []
    view = analyze({r: rec for r, (_, rec) in found.items()})
    say("")
    for line in ranks_lines(view):
        say(line)
    still = [r for r, (_, rec) in found.items() if rec.status == "running"]
    if still:
        say(f"  (still running, drawn as far as recorded: rank{'s' if len(still) > 1 else ''} "
            f"{', '.join(map(str, still))})")
    if not plots:
        return []
    png = write_png(view, folder / "monitor_ranks.png") if view.bins else None
    files = ([png] if png is not None else []) + [write_html(view, {r: d for r, (d, _) in found.items()}, folder,
                                                             png)]
    for p in files:
        say(f"  {p}")
    return files


def after_the_job(folder: Path, plots: bool = True, say: Any = print) -> list[Path]:
    """Rank 0 of a monitored torchrun job at its end: the ranks side by side, once the others have written their
    final records (at most MONITOR_RANKS_WAIT_S). Never fails the job: a problem is one line on stderr."""
    try:
        return write_ranks(folder, MONITOR_RANKS_WAIT_S, plots, say)
    except KeyboardInterrupt:  # (Ctrl-C while waiting for the others: their records are saved; `report` draws this)
        print(f"profiler monitor: the ranks side by side were not drawn; `profiler report {folder}` draws them",
              file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - every rank's record is written; the comparison is extra
        print(f"profiler monitor: could not draw the ranks side by side ({type(e).__name__}: {e})", file=sys.stderr)
    return []
