"""Command line: ``python -m profiler run | report | compare | sweep | attach | fit``.

This module is the top-level parser (its help and examples), the split of ``run [options] SCRIPT args...``, the
dispatch to the commands (one module each, registered in profiler/commands/__init__.py) and the error handling they
share. Exit status: 0 ok; 2 bad input (one line on stderr, no traceback); 1 internal error (with a hint to report it);
130 interrupted (after writing the partial record).
"""
from __future__ import annotations

import argparse
import sys
import traceback
from typing import NoReturn

from . import __version__
from .commands import COMMAND, COMMANDS
from .errors import UserError

MAIN_EPILOG = """examples:
  python -m profiler run train.py --epochs 3               # your own script, unchanged
  python -m profiler run                                   # built-in sample data, tiny model, CPU or GPU
  python -m profiler run --data ./imgs --workers 4 --model resnet18 --batch-size 64
  python -m profiler run --data ./imgs --cache cold --storage hdd --out reports/hdd
  python -m profiler report reports/hdd/run.json          # re-render everything from a saved run
  python -m profiler compare reports/ssd reports/hdd       # what changed between two runs, and why
  python -m profiler attach 41237 --duration 60           # a job already running: sampled from outside
  python -m profiler fit --model resnet50 --batch-size 64 --gpu-mem rtx3060-12g
  python -m profiler sweep --workers 0,1,2,4 --data ./imgs  # what would help: measured vs predicted
  torchrun --nproc-per-node 2 -m profiler run train.py     # every rank profiled, merged in <out>/
  torchrun --nnodes 2 --node-rank K --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint NODE0:29400 -m profiler
      run --out /local/prof train.py                       # one per node K; merged on rank 0's node (README)
"""


def split_run_argv(tokens: list[str], run_parser: argparse.ArgumentParser
                   ) -> tuple[list[str], str | None, bool, list[str]]:
    """``[profiler options] SCRIPT [args]`` / ``... -m MODULE [args]`` → (our tokens, target, is_module, its args).

    Everything after the script (or module) belongs to it, options included, as with ``python SCRIPT ...``.
    """
    takes_value = {opt: a.nargs != 0 for a in run_parser._actions for opt in a.option_strings}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "-m":
            if i + 1 >= len(tokens):
                run_parser.error("-m needs a module name")
            return tokens[:i], tokens[i + 1], True, tokens[i + 2:]
        if tok == "--":
            return tokens[:i], (tokens[i + 1] if i + 1 < len(tokens) else None), False, tokens[i + 2:]
        if tok.startswith("-") and tok != "-":
            name = tok.split("=", 1)[0]
            i += 2 if takes_value.get(name, False) and "=" not in tok else 1
            continue
        return tokens[:i], tok, False, tokens[i + 1:]
    return tokens, None, False, []


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit 2 (argparse prints the whole usage block).

    ``run_parser``: the ``run`` subcommand's parser, which splitting ``run SCRIPT args...`` and sweep's per-point
    runs parse with."""

    run_parser: argparse.ArgumentParser
    monitor_parser: argparse.ArgumentParser

    def error(self, message: str) -> NoReturn:
        print(f"profiler: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> _Parser:
    ap = _Parser(prog="python -m profiler", description="Find out why a PyTorch job does not keep "
                                 "its GPU busy, and what to change.", epilog=MAIN_EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"profiler {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    parsers = {}
    for c in COMMANDS:
        parsers[c.name] = sub.add_parser(c.name, help=c.help, add_help=not c.own_argv)
        c.add_arguments(parsers[c.name])
    ap.run_parser = parsers["run"]
    ap.monitor_parser = parsers["monitor"]
    return ap


def main(argv: list[str] | None = None) -> int:
    """The command line; SIGTERM/SIGHUP become exceptions while it runs (and the process's own handlers come back
    after, for callers that run it in-process)."""
    from . import signals

    taken = signals.install()
    try:
        # Only the commands that run torch import it (commands.Command.torch), and here, before anything else: its C
        # start-up clears exceptions raised in it, so a signal that came during the import would be lost; held, it is
        # raised after. The others start ~2 s sooner, and attach's process is ~45 MB, not ~520 MB.
        first = (sys.argv[1:] if argv is None else argv)[:1]
        if first and first[0] in COMMAND and COMMAND[first[0]].torch:
            with signals.holding():
                import torch  # noqa: F401
        return _main(argv)
    finally:
        signals.restore(taken)
        if "profiler.instrument.torch_hooks" in sys.modules:  # paused at the job's end (harness/job.py)
            sys.modules["profiler.instrument.torch_hooks"].resume_worker_watchdog()


def _main(argv: list[str] | None) -> int:
    from . import signals

    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    own = COMMAND.get(argv[0]) if argv else None
    if own is not None and own.own_argv:  # sweep: its lists, then everything else passed to each run
        try:
            return own.main(argparse.Namespace(command=own.name, argv=argv[1:], run_parser=parser.run_parser))
        except UserError as e:
            print(f"profiler: error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as e:
            return signals.exit_status(e)
    target, is_module, script_args = None, False, list[str]()
    try:
        if argv and argv[0] in ("run", "monitor"):
            ours, target, is_module, script_args = split_run_argv(
                argv[1:], parser.run_parser if argv[0] == "run" else parser.monitor_parser)
            argv = [argv[0], *ours]
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed its one-line usage error
        return int(e.code or 0) if e.code not in (None, 0) else 0
    if args.command in ("run", "monitor"):
        args.target, args.is_module, args.script_args = target, is_module, script_args
    if not args.command:
        parser.print_help()
        return 0
    try:
        return COMMAND[args.command].main(args)
    except UserError as e:
        print(f"profiler: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print("profiler: interrupted before anything was measured", file=sys.stderr)
        return signals.exit_status(e)
    except BrokenPipeError:
        raise  # stdout closed by the reader (| head): __main__ ends quietly with the run's work done
    except Exception:  # noqa: BLE001 - the last line of defence: a hint, and the traceback for the bug report
        traceback.print_exc()
        print("profiler: internal error; please report it with the traceback above", file=sys.stderr)
        return 1
