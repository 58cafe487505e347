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
    parser.add_argument("--torch-trace", metavar="TRACE.json", action="append",
                        help="merge this torch.profiler (kineto) trace, taken during the run, with the record: "
                             "torch_trace.json in the output folder (docs/trace_merge.md); repeatable")
    parser.add_argument("--details", action="store_true", help="print every table of the summary, not the short view")


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from .. import record
    from ..distributed.layout import is_ranks_folder
    from ..outdir import claim, prepare_out
    from ..saving import save_and_report

    if is_ranks_folder(Path(args.run_json)):  # distributed: a torchrun run folder (rank<k>/run.json): merge them
        return _monitor_ranks(args) if _monitored_ranks(Path(args.run_json)) else _ranks(args)
    if getattr(args, "torch_trace", None):
        return _torch_trace(args)
    from ..monitor.record import find as find_monitor

    if find_monitor(args.run_json) is not None and not (Path(args.run_json) / "run.json").is_file():
        return _monitor(args)  # a `monitor` folder (live or final) or its monitor.json
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
    saved = save_and_report(rec, out, console=Console(), save_raw=False, write_record=bool(args.out),
                            details=args.details)
    if saved.late_signal is not None:
        from .. import signals

        return signals.exit_status(saved.late_signal)
    return 0


def _monitor(args: argparse.Namespace) -> int:
    """``report`` of a monitored job's folder: monitor.html and monitor.png from monitor.json as it is now (the job
    may still be running: the record is rewritten whole, atomically, so what is read is complete)."""
    from ..monitor.record import find, load
    from ..outdir import prepare_out
    from ..render.monitor_html import write_monitor
    from ..render.monitor_terminal import print_monitor

    rec = load(args.run_json)
    src = find(args.run_json)
    assert src is not None
    out = prepare_out(Path(args.out) if args.out else src.parent, flag="--out" if args.out else "report")
    files = [str(f) for f in write_monitor(rec, out)]
    print_monitor(rec, files)
    return 0


def _monitored_ranks(folder: Path) -> dict[int, Path]:
    """rank -> its folder, of a torchrun job run under ``monitor`` (each holds monitor.json, none run.json)."""
    from ..distributed.layout import find_ranks

    ranks = find_ranks(folder)
    if any((d / "run.json").exists() for d in ranks.values()):
        return {}
    return {r: d for r, d in ranks.items() if (d / "monitor.json").is_file()}


def _monitor_ranks(args: argparse.Namespace) -> int:
    """``report FOLDER`` of a torchrun job under ``monitor``: each rank's monitor.html and monitor.png again, the
    full summary of rank 0 (one line for each other rank), then the ranks side by side (render/monitor_ranks.py:
    which rank's input lagged the others', monitor_ranks.png and .html in the folder)."""
    from ..monitor.record import load
    from ..monitor.side_by_side import write_ranks
    from ..render.monitor_html import write_monitor
    from ..render.monitor_terminal import print_monitor, rank_line

    if args.out:
        raise UserError("report FOLDER of several monitored ranks writes next to each rank's record; leave out --out")
    found = {}
    for i, (r, d) in enumerate(_monitored_ranks(Path(args.run_json)).items()):
        rec = load(d)
        found[r] = (d, rec)  # read once: for its own report and for the side by side
        files = [str(f) for f in write_monitor(rec, d)]
        if i == 0:
            print_monitor(rec, files)
        else:
            print(rank_line(rec, d.name, ", ".join(files)))
    write_ranks(Path(args.run_json), found=found)
    return 0


def _torch_trace(args: argparse.Namespace) -> int:
    """``report RUN --torch-trace T.json``: only the merge, from the saved record alone (re-analyzed for the wait's
    causes); into --out or the record's folder. A trace or record it cannot merge: one line, exit 2."""
    from .. import record
    from ..analysis import analyze
    from ..render import TORCH_TRACE, render_all
    from ..render.kineto_merge import MergeError

    rec = record.load(args.run_json)
    src = Path(args.run_json)
    out = Path(args.out) if args.out else (src if src.is_dir() else src.parent)
    analyze(rec)
    ctx: dict = {"torch_traces": list(args.torch_trace)}
    try:
        render_all(TORCH_TRACE, rec, out, ctx, strict=True)
    except MergeError as e:
        raise UserError(f"--torch-trace: {e}") from None
    except OSError as e:
        raise UserError(f"--torch-trace: cannot write into {out} ({e.strerror or e})") from None
    for f in ctx.get("torch_trace_files", []):
        print(f"Merged torch.profiler trace: {f}")
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
