"""Not a command: a torchrun job's merged report, shared by ``run`` (rank 0, at the end of the job) and ``report
RUN_FOLDER`` (again, from the records alone). Merge the ranks' records (profiler/distributed/view.py), write the
registry's ``RANKS`` files into the run folder (ranks.json, ranks.png, trace.json, report.html) and print the terminal
view (profiler/render/ranks_terminal.py).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import signals
from ..thresholds import RANK_WAIT_S

if TYPE_CHECKING:
    from ..distributed.env import RankEnv


def write_merged(folder: Path, states: dict[int, str] | None = None, plots: bool = True) -> tuple[dict, list[Path]]:
    """Write the merged files into ``folder``; returns (view, files written). A renderer failing costs only itself
    (ranks.json and the page excepted: they propagate)."""
    from ..distributed.view import merged_view
    from ..render import write_ranks

    folder = Path(folder)
    view, recs = merged_view(folder, states)
    return view, write_ranks(view, recs, folder, plots=plots)


def finish(denv: RankEnv, rank_folder: Path, console: Any, plots: bool, timeout_s: float = RANK_WAIT_S) -> None:
    """Rank 0: wait for the other ranks' records (files only; a dead rank is not waited for), merge, report.

    Other ranks: nothing. A failure here is reported and never changes the rank's own exit status.
    """
    if not denv.is_main:
        return
    from ..distributed.layout import wait_for_ranks
    from ..render.ranks_terminal import print_ranks

    folder = Path(rank_folder).parent
    try:
        states = wait_for_ranks(folder, denv.world_size, denv.rank, timeout_s)
        with signals.deferred():
            view, files = write_merged(folder, states, plots=plots)
        print_ranks(view, console, [str(f) for f in files])
    except KeyboardInterrupt:
        print(f"profiler: interrupted while merging the ranks; run `python -m profiler report {folder}`",
              file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - each rank's record is safe already; the merge can be redone
        print(f"profiler: could not merge the ranks ({type(e).__name__}: {e}); run `python -m profiler report "
              f"{folder}`", file=sys.stderr)
