"""Not a command: rank 0's side of a torchrun job at its end, and the ``run`` command's distributed steps
(:class:`RankHook`). Rank 0 collects what the other ranks send, then merges and writes the registry's ``RANKS`` files
into the run folder (ranks.json, ranks.png, trace.json, report.html) through the one save path (profiler/saving.py
``save_ranks``; ``report RUN_FOLDER`` uses it too) and prints the terminal view (profiler/render/ranks_terminal.py).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..distributed.env import RankSeam
from ..thresholds import RANK_WAIT_MIN_S, RANK_WAIT_S

if TYPE_CHECKING:
    from ..distributed.env import RankEnv


def _send(denv: RankEnv, store: Any, rank_folder: Path) -> None:
    """Any rank but 0: its summary to rank 0 through the store, then (one rank per host not on rank 0's clock) the
    clock round trips. Its full record stays where it is."""
    from ..distributed.store import needs_clock_sync, publish, read_local, request_clock_sync, sync_clock
    from ..distributed.summary import summarize

    sync = needs_clock_sync(store, denv)
    if sync:  # queued before the report: rank 0's wait may end at this report
        request_clock_sync(store, denv)
    rec = read_local(rank_folder)
    if rec is not None:
        publish(store, denv, summarize(rec, str((Path(rank_folder) / "run.json").resolve())))
    if sync:
        sync_clock(store, denv)


def _local_dead(folder: Path) -> Any:
    from ..distributed.layout import process_alive, read_marker

    def dead(rank: int) -> bool:
        m = read_marker(folder, rank)
        return m is not None and process_alive(m) is False and not (folder / f"rank{rank}" / "run.json").exists()
    return dead


def finish(denv: RankEnv, rank_folder: Path, console: Any, plots: bool, timeout_s: float = RANK_WAIT_S) -> None:
    """Every rank at its end. Through torchrun's store (profiler/distributed/store.py): the other ranks send their
    summaries; rank 0 waits for them (bounded, scaled by what the others reported), merges, writes, prints. Without a
    store: rank 0 waits for the other ranks' record files in the run folder (a shared folder), as before.

    A failure here is reported and never changes the rank's own exit status.
    """
    from ..distributed.store import connect

    folder = Path(rank_folder).parent
    try:  # a rank other than 0 gives up on a store that is gone (node 0 died) sooner: its exit is held meanwhile
        store = connect(denv, timeout_s if denv.is_main else min(timeout_s, 2 * RANK_WAIT_MIN_S))
    except Exception:  # noqa: BLE001 - no store: the files route below
        store = None
    if not denv.is_main:
        if store is not None:
            try:
                _send(denv, store, Path(rank_folder))
            except Exception as e:  # noqa: BLE001 - the rank's record is safe on its node; rank 0 names it missing
                print(f"profiler: rank {denv.rank}: could not send its summary to rank 0 ({type(e).__name__}: {e}); "
                      f"its record is in {rank_folder}", file=sys.stderr)
        return
    from ..render.ranks_terminal import print_ranks
    from ..saving import save_ranks

    try:
        if store is None:
            from ..distributed.layout import wait_for_ranks

            states = wait_for_ranks(folder, denv.world_size, denv.rank, timeout_s)
            view, files = save_ranks(folder, states, plots=plots)
        else:
            view, files = _merge_from_store(denv, store, Path(rank_folder), plots, timeout_s)
        print_ranks(view, console, [str(f) for f in files])
    except KeyboardInterrupt:
        print(f"profiler: interrupted while merging the ranks; run `python -m profiler report {folder}`",
              file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - each rank's record is safe already; the merge can be redone
        print(f"profiler: could not merge the ranks ({type(e).__name__}: {e}); run `python -m profiler report "
              f"{folder}`", file=sys.stderr)


def _merge_from_store(denv: RankEnv, store: Any, rank_folder: Path, plots: bool,
                      timeout_s: float) -> tuple[dict, list[Path]]:
    import time

    from ..distributed.store import collect, read_local
    from ..distributed.summary import summarize
    from ..saving import Collected, save_ranks

    folder = rank_folder.parent
    col = collect(store, denv, _local_dead(folder), timeout_s)
    own = read_local(rank_folder)
    if own is not None:
        col.summaries[denv.rank] = summarize(own, str((rank_folder / "run.json").resolve()))
    t = time.monotonic()
    note = {"via": "torchrun store", "waited_s": round(col.waited_s, 3), "reports": len(col.summaries)}
    view, files = save_ranks(folder, col.states, Collected(col.summaries, col.states, col.clock_sync,
                                                           denv.world_size, note), plots)
    if col.last_report_to_done_s is not None:
        view["collected"]["last_report_to_merged_s"] = round(col.last_report_to_done_s + time.monotonic() - t, 3)
    return view, files


class RankHook(RankSeam):
    """The ``run`` command's distributed steps behind one seam: under torchrun, this rank's folder, quiet terminals
    off rank 0, the record's ``distributed`` section and rank 0's merge; outside torchrun every method does nothing.
    (The built-in pipeline's own steps inside a run — device, process group, DDP — are the same kind of seam:
    profiler/distributed/pipeline.py ``PipelineRanks``.)

    Thin on purpose: each method calls the distributed package's own functions (profiler/distributed/launch.py,
    :func:`finish`), so the run command has no ``if distributed`` blocks and the package can change behind it.
    """

    @property
    def quiet(self) -> bool:
        """Terminal output comes from rank 0 only."""
        return self.denv is not None and not self.denv.is_main

    def out_dir(self, out: str | None, base: str, name: str) -> Path | None:
        """This rank's folder ``<run folder>/rank<k>`` under torchrun, else None (the caller picks the folder)."""
        if self.denv is None:
            return None
        from ..distributed.launch import rank_out

        return rank_out(self.denv, out, base, name)

    def attach(self, rec: Any, out: Path, t0_ns: int, ddp: dict[str, Any] | None = None) -> None:
        """The record's raw ``distributed`` section; ``ddp``: the built-in pipeline's backend and collective timings
        (a script's own process group is asked for its backend by the distributed package)."""
        if self.denv is None:
            return
        from ..distributed.launch import attach

        attach(rec, self.denv, out, t0_ns, ddp)

    def finish(self, out: Path, console: Any, plots: bool) -> None:
        """Rank 0: the merged report of every rank (see :func:`finish`); otherwise nothing."""
        if self.denv is not None:
            finish(self.denv, out, console, plots=plots)
