"""Save a record and report it: the one path the ``run`` command, the Python API and ``report`` share; and the same
for a torchrun job's merged report (:func:`save_ranks`: rank 0 at the end of the job, and ``report RUN_FOLDER``).

Why one path: each front end used to save and report on its own, and only the command line held signals while
writing, fell back to the temp folder on a full disk, or kept a signal that came while the report printed. Here, in
order: the raw record first (small, safe before the expensive work), the analysis, the record again, the registry's
report files, then the terminal summary. A signal meanwhile is held until the files are written; one that comes while
the summary prints is kept too (``Saved.late_signal``), so the caller ends with 128 + N rather than 0.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import signals
from .errors import UserError

if TYPE_CHECKING:
    from .distributed.summary import RankSummary
    from .record import RunRecord


@dataclass
class Collected:
    """What rank 0 got through torchrun's store, saved with the merge (``rank_summaries.json``) so that ``report
    RUN_FOLDER`` can merge again from the folder alone; ``note``: how it was collected (the view's ``collected``)."""
    summaries: dict[int, RankSummary]
    states: dict[int, str]
    clock_sync: dict[str, dict[str, Any]]
    world_size: int
    note: dict[str, Any] = field(default_factory=dict)


@dataclass
class Saved:
    """What ``save_and_report`` wrote: run.json's path (the temp folder's when ``out`` was not writable), every file,
    and a signal received meanwhile and held (``late_signal``: the caller's exit status, or re-raised)."""
    run_json: Path
    files: list[str] = field(default_factory=list)
    late_signal: KeyboardInterrupt | None = None


def save_record(rec: RunRecord, path: Path, tag: str = "") -> Path:
    """Save run.json at ``path``; if that fails (disk full, folder gone, read-only), keep the measurement in the temp
    folder and say where, rather than lose it. UserError (one line) when neither can be written. ``tag`` tells the
    fallback files of one process's several records apart (attach's ranks)."""
    try:
        return Path(rec.save(path))
    except OSError as e:
        fallback = Path(tempfile.gettempdir()) / f"profiler-{os.getpid()}-{tag}run.json"
        try:
            rec.save(fallback)
        except OSError:
            raise UserError(f"could not save the record to {path} ({e.strerror or e}) nor to {fallback}") from None
        print(f"profiler: could not save {path} ({e.strerror or e}); the record is in {fallback}", file=sys.stderr)
        return fallback


def save_and_report(rec: RunRecord, out: Path, *, plots: bool = True, console: Any = None,
                    reraise: bool = False, save_raw: bool = True, write_record: bool = True,
                    details: bool = False) -> Saved:
    """Analyze ``rec``, write run.json and the reports into ``out`` and print the terminal summary on ``console``
    (none: nothing printed).

    ``reraise``: a signal held meanwhile is raised once everything is written (the job goes on after this call and
    must see it); otherwise it is returned in ``Saved.late_signal``. ``save_raw``: save the raw record before the
    analysis (off for ``report``, whose record is on disk already); ``write_record``: write run.json at all (off for
    ``report`` into the record's own folder: the record stays as it was). ``details``: the full terminal summary
    (``--details``), not the short one. A worker dying meanwhile cannot abort it.
    """
    from .analysis import analyze
    from .render import write_reports

    held: KeyboardInterrupt | None = None
    path = out / "run.json"
    files: list[str] = []
    # torch's watchdog over DataLoader workers exists only where a job ran here (torch_hooks loaded); `report` and
    # `compare` never import torch (commands.Command.torch)
    hooks = sys.modules.get("profiler.instrument.torch_hooks")
    with hooks.worker_watchdog_paused() if hooks is not None else contextlib.nullcontext():
        saved = False
        try:
            with signals.deferred():
                if save_raw and write_record:
                    path = save_record(rec, path)  # the raw record first: safe before the expensive work
                analyze(rec)
                if write_record:
                    path = save_record(rec, path)
                    files = [str(path)]
                if plots and path.parent == out:
                    files += [str(f) for f in write_reports(rec, out)]
                saved = True
        except KeyboardInterrupt as e:
            if not saved:
                raise  # forced (the last Ctrl-C): the block was cut short
            held = e
        if console is not None:
            from .render.terminal import print_report

            try:
                print_report(rec, console, files, details=details)
            except KeyboardInterrupt as e:  # the third signal while printing: everything is saved already
                held = e
    late = signals.pending()
    if held is None and late is not None:  # came while the summary printed: held (the run was saving), not lost
        held = signals.interrupt(late)
    if held is not None:
        print(f"profiler: {signals.describe(signals.signal_number(held) or 2)} received while saving; everything "
              f"measured is in {files[0] if files else path}", file=sys.stderr)
        if reraise:
            raise held
    return Saved(path, files, held)


def save_ranks(folder: Path, states: dict[int, str] | None = None, collected: Collected | None = None,
               plots: bool = True) -> tuple[dict[str, Any], list[Path]]:
    """Merge a torchrun job's run folder and write the merged report into it; returns (the merged view, the files
    written). ``states``: what rank 0's wait saw of each rank; ``collected``: what the store carried (saved first, then
    merged from; None: the folder's records and its rank_summaries.json).

    The conventions of :func:`save_and_report`: signals held until every file is written (then raised: the caller
    says the merge can be redone), each file written atomically (profiler/fsutil.py, through the renderers' writer),
    a renderer failing costs only itself (ranks.json and the page excepted: they propagate). No temp-folder
    fallback: the merged files belong next to the rank folders they link to, and every rank's record is already
    saved in its own folder, so a merge that cannot be written is redone with ``report RUN_FOLDER``.
    """
    from .distributed.view import SUMMARIES_FILE, collected_doc, merged_view
    from .fsutil import atomic_write_bytes
    from .render import write_ranks

    folder = Path(folder)
    with signals.deferred():
        if collected is not None:
            atomic_write_bytes(folder / SUMMARIES_FILE, collected_doc(collected.summaries, collected.states,
                                                                      collected.clock_sync, collected.world_size))
            view, recs = merged_view(folder, states, collected.summaries, collected.clock_sync, collected.world_size)
            view["collected"] = dict(collected.note)
        else:
            view, recs = merged_view(folder, states)
        return view, write_ranks(view, recs, folder, plots=plots)
