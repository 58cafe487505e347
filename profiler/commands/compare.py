"""``python -m profiler compare RUN_A RUN_B [RUN_C ...] [--out DIR] [--force]``.

Loads and re-analyzes each run (so runs saved by an older analysis compare on today's definitions), compares them
(``profiler.analysis.compare``), writes the registry's compare outputs (``profiler.render.COMPARE``: compare.png,
compare.html, compare.json — the whole comparison, for scripts) to --out, and prints the terminal view
(``profiler.render.compare_terminal``).
"""
from __future__ import annotations

import argparse
import datetime as _dt
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..render.units import printable

DEFAULT_OUT_ROOT = "reports"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run.json files or their folders; two or more")
    parser.add_argument("--out", metavar="DIR", help="output folder (default: reports/compare-<time>)")
    parser.add_argument("--force", action="store_true", help="compare runs of different model or batch size anyway")


def load_runs(paths: list[str]) -> tuple[list[Any], list[str]]:
    """Load and analyze every run; UserError (one line) for the first that cannot be read."""
    from .. import record
    from ..analysis import analyze

    if len(paths) < 2:
        raise UserError(f"compare needs at least two runs (got {len(paths)}): python -m profiler compare RUN_A RUN_B")
    recs, names = [], []
    for p in paths:
        path = Path(p)
        if path.is_dir() and not (path / "run.json").exists():
            raise UserError(f"{printable(p)}: no run.json in this folder")
        recs.append(analyze(record.load(path)))
        names.append(str(path if path.is_dir() or path.name != "run.json" else path.parent))
    return recs, names


def out_dir(arg: str | None) -> Path:
    path = Path(arg) if arg else Path(DEFAULT_OUT_ROOT) / f"compare-{_dt.datetime.now():%Y%m%d-%H%M%S}"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--out {printable(path)}: cannot create it ({e.strerror or e})") from None
    return path


def main(args: argparse.Namespace) -> int:
    """Orchestration only: load, compare, write the registry's compare outputs, print the terminal view."""
    from rich.console import Console

    from ..analysis.compare import compare
    from ..render import COMPARE, render_all
    from ..render.compare_terminal import print_comparison

    recs, names = load_runs(list(args.runs))
    if any((r.job or {}).get("kind") == "attach" for r in recs):  # sampled shares, not per-step rows
        return _compare_attach(recs, names, out_dir(getattr(args, "out", None)))
    c = compare(recs, names=names, force=bool(getattr(args, "force", False)))
    out = out_dir(getattr(args, "out", None))
    ctx: dict[str, Any] = {}
    try:
        files = render_all(COMPARE, c, out, ctx, strict=True)
    except OSError as e:
        failed = next((r.file for r in COMPARE if r.name not in ctx.get("results", {})), "its files")
        raise UserError(f"--out {printable(out)}: cannot write {failed} ({e.strerror or e})") from None
    print_comparison(c, Console(), [str(f) for f in files])
    return 0


def _compare_attach(recs: list[Any], names: list[str], out: Path) -> int:
    import json

    from rich.console import Console

    from ..analysis.attach_compare import compare_attach
    from ..render.attach_terminal import print_attach_comparison

    c = compare_attach(recs, names)
    path = out / "compare.json"
    try:
        path.write_text(json.dumps(c, indent=1), encoding="utf-8")
    except OSError as e:
        raise UserError(f"--out {printable(out)}: cannot write compare.json ({e.strerror or e})") from None
    print_attach_comparison(c, Console(), [str(path)])
    return 0
