"""The commands of ``python -m profiler``: one module each, one shape, one registry.

Each command module exposes ``add_arguments(parser)`` (its options; its usage and epilog where it has its own) and
``main(args) -> int`` (the exit status). A handler is orchestration only: it loads or measures (profiler/harness,
profiler/record), analyzes (profiler/analysis, profiler/fit), writes the files of its registry in profiler/render and
prints its terminal view (profiler/render). UserError raised anywhere below is one line on stderr and exit 2; the
rest of the error handling is cli.py's, which builds the parser from :data:`COMMANDS` and dispatches to them.

``sweep`` takes its own argv (the list options are its own, everything else goes to each ``run`` unchanged), so its
sub-parser only lists it in ``--help`` and its ``main`` gets ``args.argv`` (the tokens after ``sweep``) and
``args.run_parser``. ranks.py is not a command: the merged report of a torchrun job, shared by run and report.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from . import attach, compare, fit, monitor, report, run, sweep


@dataclass(frozen=True)
class Command:
    """One sub-command: its name, its line in ``python -m profiler --help``, its options and its handler.

    ``own_argv``: the command splits the rest of the command line itself (no ``-h`` of argparse; ``main`` gets
    ``args.argv`` and ``args.run_parser``).
    ``torch``: the command runs torch (a job, a model): cli.main imports it first, with signals held (why: there);
    the others read records and files only and start without it, ~2 s sooner.
    """
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    main: Callable[[argparse.Namespace], int]
    own_argv: bool = False
    torch: bool = False


# In the order ``--help`` lists them.
COMMANDS: tuple[Command, ...] = (
    Command("run", "profile your own script (run SCRIPT / run -m MODULE) or the built-in pipeline",
            run.add_arguments, run.main, torch=True),
    Command("monitor", "watch the whole job (monitor SCRIPT / -m MODULE): windows, change points, "
                       "TensorBoard/W&B/MLflow",
            monitor.add_arguments, monitor.main, torch=True),
    Command("report", "re-render terminal summary, plots, HTML and trace from a saved run.json",
            report.add_arguments, report.main),
    Command("compare", "compare runs (the first is the baseline)", compare.add_arguments, compare.main),
    Command("sweep", "several profiled runs over --workers/--batch-size/--storage/--cache lists: "
                     "measured vs predicted, best setting", sweep.add_arguments, sweep.main, own_argv=True,
            torch=True),
    Command("attach", "diagnose a running job from outside (PID): no restart, nothing injected",
            attach.add_arguments, attach.main),
    Command("fit", "will it fit? device memory breakdown and the largest batch size", fit.add_arguments, fit.main,
            torch=True),
)
COMMAND = {c.name: c for c in COMMANDS}
