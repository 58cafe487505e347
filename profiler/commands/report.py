"""``python -m profiler report RUN_JSON [--out DIR]``: re-render everything from a saved run.json (re-analyzed, so a
record saved by an older analysis reads on today's definitions): the registry's ``REPORT`` files and the terminal
summary. Given a torchrun run folder (``rank<k>/run.json``), the merged report of its ranks again.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_json", metavar="RUN_JSON", help="run.json (or the folder holding it)")
    parser.add_argument("--out", metavar="DIR", help="output folder (default: next to run.json)")


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from .. import record
    from ..distributed.layout import is_ranks_folder
    from ..outdir import claim, prepare_out
    from ..saving import save_and_report

    if is_ranks_folder(Path(args.run_json)):  # distributed: a torchrun run folder (rank<k>/run.json): merge them
        return _ranks(args)
    rec = record.load(args.run_json)
    src = Path(args.run_json)
    here = src if src.is_dir() else src.parent
    # Without --out the reports go next to the record; the error must name that folder, not an option never given.
    flag = "--out" if args.out else "report: the record's folder"
    out = claim(prepare_out(Path(args.out) if args.out else here, flag=flag))
    if rec.job and rec.job.get("kind") == "attach":  # sampled from outside: its own files (render ATTACH)
        from ..analysis import analyze
        from ..render import write_attach
        from ..render.attach_terminal import print_attach

        analyze(rec)
        files = [str(f) for f in write_attach(rec, out)]
        if args.out:
            rec.save(out / "run.json")
        print_attach(rec, Console(), files)
        return 0
    # The record is on disk already: only a new --out gets a copy (the same save path as `run`: signals held, the
    # temp folder when the folder cannot take it).
    saved = save_and_report(rec, out, console=Console(), save_raw=False, write_record=bool(args.out))
    if saved.late_signal is not None:
        from .. import signals

        return signals.exit_status(saved.late_signal)
    return 0


def _ranks(args: argparse.Namespace) -> int:
    """``report RUN_FOLDER`` of a torchrun job: the merged report again; exit 2 when no rank's record is readable."""
    from rich.console import Console

    from ..distributed.view import load_ranks
    from ..render.ranks_terminal import print_ranks
    from ..saving import save_ranks

    folder = Path(args.run_json)
    if args.out:
        raise UserError("report RUN_FOLDER of several ranks writes next to the records; leave out --out")
    recs, why = load_ranks(folder)
    if not any(r is not None for r in recs.values()):
        first = next(iter(why.items()), None)
        detail = f" (rank {first[0]}: {first[1]})" if first else ""
        raise UserError(f"{folder}: no rank's run.json could be read{detail}; nothing to merge")
    view, files = save_ranks(folder)
    print_ranks(view, Console(), [str(f) for f in files])
    return 0
