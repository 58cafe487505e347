"""``python -m profiler monitor [options] SCRIPT args...`` (or ``-m MODULE args...``): watch the whole job.

``run`` measures one window; ``monitor`` measures the job's whole life as a sequence of windows (profiler/monitor/),
finds when and why it changed, writes monitor.json as it goes (``profiler report`` on the folder renders it, live or
final) and, when asked, the same windows to TensorBoard, W&B or MLflow. The job runs unchanged, as under ``run``.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .. import thresholds as th
from ..errors import UserError

MONITOR_EPILOG = """examples:
  python -m profiler monitor train.py --epochs 90
      the whole job, a window every 100 steps lasting at least 10 s; monitor.json, monitor.html and monitor.png in --out
  python -m profiler monitor --window 60s --tensorboard runs/exp1 train.py
      a window a minute; scalars under profiler/ in TensorBoard beside the job's own (x = the job's step)
  python -m profiler monitor --wandb --mlflow -m mypkg.train --config cfg.yaml
      the job's own active W&B / MLflow run is used when it has one
  torchrun --nproc-per-node 2 -m profiler monitor --tensorboard runs/exp1 train.py
      every rank into <out>/rank<k>, TensorBoard in runs/exp1/rank<k>; W&B and MLflow get rank 0's windows;
      at the end rank 0 names the rank whose input lagged the others' (<out>/monitor_ranks.html and .png)
  python -m profiler report reports/<folder>       # renders the record so far, while the job still runs
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.usage = "python -m profiler monitor [options] SCRIPT [args...] | -m MODULE [args...]"
    p.epilog = MONITOR_EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--window", metavar="N|Ns",
                   help=f"window length: N steps, or a time like 60s / 5m (default {th.MONITOR_WINDOW_STEPS} steps "
                        f"lasting at least {th.MONITOR_MIN_WINDOW_S:g} s)")
    p.add_argument("--detail", type=int, default=th.MONITOR_DETAIL_STEPS, metavar="N",
                   help=f"steps of each window seen in full detail; the rest as exact totals (default "
                        f"{th.MONITOR_DETAIL_STEPS})")
    p.add_argument("--out", metavar="DIR", help="output folder (default reports/<time>_monitor_<script>)")
    p.add_argument("--loader", metavar="CLASS|FILE:LINE", help="watch this DataLoader (as run --loader)")
    p.add_argument("--tensorboard", metavar="DIR", help="write TensorBoard event files (scalars under profiler/)")
    p.add_argument("--wandb", action="store_true", help="log to Weights & Biases (the job's active run if any)")
    p.add_argument("--wandb-project", metavar="NAME", help="W&B project of a run of the monitor's own")
    p.add_argument("--mlflow", action="store_true", help="log to MLflow (the job's active run if any)")
    p.add_argument("--mlflow-uri", metavar="URI", help="MLflow tracking URI (default: MLflow's own)")
    p.add_argument("--no-status", action="store_true", help="no live status line")
    p.add_argument("--no-plots", action="store_true", help="write monitor.json only")


def main(args: argparse.Namespace) -> int:
    from .. import outdir, signals
    from ..harness.external import print_user_traceback, resolve_target, script_job
    from ..harness.job import run_session
    from ..instrument.loaders import LoaderSelector
    from ..instrument.session import Session
    from ..monitor.exporters import make_asked
    from ..monitor.runner import FOREVER, Monitor, parse_window, rank_folder, status_printer

    target = getattr(args, "target", None)
    if target is None:
        raise UserError("monitor needs a script (monitor train.py args...) or a module (monitor -m pkg.train)")
    steps, secs = parse_window(args.window if args.window is not None else str(th.MONITOR_WINDOW_STEPS))
    min_s = th.MONITOR_MIN_WINDOW_S if args.window is None else 0.0
    if not 0 <= args.detail <= 100_000:
        raise UserError(f"--detail {args.detail}: out of range (0..100000)")
    select = LoaderSelector.parse(args.loader) if args.loader else None
    path = resolve_target(target, args.is_module)
    name = Path(path).stem if not args.is_module else target.rsplit(".", 1)[-1]
    from datetime import datetime

    from ..distributed.env import detect

    denv = detect()  # under torchrun: every rank monitors itself, into <folder>/rank<k> (one folder for the job)
    stamp = f"{datetime.now():%Y%m%d-%H%M%S}_monitor_{name}"
    if denv is not None:
        out = rank_folder(denv, args.out, stamp)
    elif args.out is not None:
        out = outdir.claim(outdir.prepare_out(args.out))
    else:
        out = outdir.create_run_dir("reports", stamp)
    from ..redact import redact_argv

    job = {"kind": "module" if args.is_module else "script", "target": target,
           "argv": redact_argv(list(args.script_args))}
    if denv is not None:
        job["rank"], job["world_size"] = denv.rank, denv.world_size
    main_rank = denv is None or denv.is_main
    show = not args.no_status and main_rank  # one status line on the terminal, rank 0's
    mon = Monitor(out, window_steps=steps, window_s=secs, detail=args.detail,
                  exporters=make_asked(args.tensorboard, (args.wandb, args.wandb_project),
                                       (args.mlflow, args.mlflow_uri), str(out),
                                       denv.rank if denv is not None else None,
                                       lambda line: print(f"profiler monitor: {line}", file=sys.stderr)),
                  status=status_printer() if show else None, job=job, min_window_s=min_s)
    pid = os.getpid()
    session = Session(0, FOREVER, then="continue", select=select)
    mon.attach(session)
    every = args.window or f"{steps} steps, at least {min_s:g} s"
    if main_rank:
        print(f"Monitoring {target} (a window every {every}{' steps' if args.window and secs is None else ''}; "
              f"record in {out.parent if denv is not None else out}"
              f"{f', each of the {denv.world_size} ranks in rank<k>' if denv is not None else ''})", file=sys.stderr)
        where = ["TensorBoard gets every rank's windows, in DIR/rank<k>"] if denv is not None and args.tensorboard \
            else []
        dests = [n for n, on in (("W&B", args.wandb), ("MLflow", args.mlflow)) if on and denv is not None]
        if dests:
            where.append(f"{' and '.join(dests)} rank 0's only")
        if where:
            print(f"  under torchrun: {'; '.join(where)}", file=sys.stderr)
    outcome = run_session(script_job(path if not args.is_module else target, list(args.script_args),
                                     args.is_module), session)
    if os.getpid() != pid:  # a forked child of the script ran off its end: its parent writes the record
        outdir.forget(out)
        return outcome.exit_code or 0
    if outcome.status == "failed" and outcome.error is not None:
        print_user_traceback(outcome.error)
    if session.loader is None and not mon.rec.windows_total and not session.rows:
        outdir.discard_if_empty(out)
        print(f"profiler: {target} iterated no DataLoader: nothing monitored, no record written", file=sys.stderr)
        return 1 if outcome.status == "failed" else (outcome.exit_code or 0)
    from ..render.monitor_terminal import print_monitor, rank_line

    with signals.deferred():
        rec_path = mon.finish(outcome.status, session.loader.to_dict() if session.loader is not None else None)
        files = [str(rec_path)]
        if not main_rank:  # its line now, before its drawing: rank 0 prints the ranks side by side once the others'
            # records are final, and a line printed after the drawing landed in the middle of that
            print(rank_line(mon.rec, f"rank {denv.rank if denv is not None else '?'}", str(out)), flush=True)
        if not args.no_plots:
            try:
                from ..render.monitor_html import write_monitor

                files += [str(f) for f in write_monitor(mon.rec, out)]
            except Exception as e:  # noqa: BLE001 - the record is written; a report that cannot be drawn is said
                print(f"profiler monitor: could not draw the report ({type(e).__name__}: {e})", file=sys.stderr)
    if show:
        print(file=sys.stderr)
    if main_rank:
        print_monitor(mon.rec, files)
        if denv is not None:
            from ..monitor.side_by_side import after_the_job

            after_the_job(out.parent, plots=not args.no_plots)
    if outcome.status == "interrupted":
        return signals.exit_status(outcome.error)
    if outcome.status == "failed":
        return 1
    return outcome.exit_code or 0 if outcome.status == "exit" else 0
