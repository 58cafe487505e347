"""``python -m profiler report RUN_JSON [--out DIR]``: re-render everything from a saved run.json (re-analysed, so a
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
    from ..analysis import analyze
    from ..distributed.layout import is_ranks_folder
    from ..outdir import prepare_out
    from ..render import write_reports
    from ..render.terminal import print_report

    if is_ranks_folder(Path(args.run_json)):  # distributed: a torchrun run folder (rank<k>/run.json): merge them
        from ..render.ranks_terminal import print_ranks
        from .ranks import write_merged

        if args.out:
            raise UserError("report RUN_FOLDER of several ranks writes next to the records; leave out --out")
        view, files = write_merged(Path(args.run_json))
        print_ranks(view, Console(), [str(f) for f in files])
        return 0
    rec = analyze(record.load(args.run_json))
    src = Path(args.run_json)
    out = prepare_out(Path(args.out) if args.out else (src if src.is_dir() else src.parent))
    files = [str(f) for f in write_reports(rec, out)]
    if args.out:
        rec.save(out / "run.json")
    print_report(rec, Console(), files)
    return 0
