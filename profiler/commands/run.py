"""``python -m profiler run``: profile the user's own script (``run SCRIPT args`` / ``run -m MODULE args``, unchanged)
or the built-in pipeline, then write run.json first, the registry's ``REPORT`` files and the terminal summary.

Orchestration only: the measurement is profiler/harness, the analysis profiler/analysis, the files and the terminal
views profiler/render. Under torchrun each rank writes into ``<run folder>/rank<k>`` (profiler/distributed/launch.py)
and rank 0 writes the merged report at the end (profiler/commands/ranks.py).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import AUGMENTS, CACHE_MODES, MODES, THROTTLE_MECHANISMS, RunConfig
from ..errors import UserError
from .ranks import RankHook

if TYPE_CHECKING:
    from ..harness.job import Outcome, RunResult
    from ..saving import Saved

D = RunConfig()

RUN_EPILOG = """examples:
  python -m profiler run train.py --epochs 3 --lr 0.1
      your own script, unchanged: everything after the script is the script's; profiles the first DataLoader it
      iterates for --warmup + --steps batches, writes the report, then stops it (--then continue: lets it finish)
  python -m profiler run --steps 50 --out reports/mine -m mypkg.train --config cfg.yaml
  python -m profiler run --data ./shards --cache cold --storage hdd train.py
  python -m profiler run
      built-in sample dataset (1,000 synthetic ~500x375 JPEGs, made once), tiny CNN, 2 workers
  python -m profiler run --data ./imgs --workers 4 --model resnet18 --batch-size 64
  python -m profiler run --data ./imgs --model resnet50 --mode infer --device cuda --pin-memory
  python -m profiler run --data ./imgs --cache cold --storage hdd      # as if the data lived on a 7,200 rpm disk

--data takes an ImageFolder tree (one sub-folder per class) or any folder of .jpg/.jpeg/.png/.webp/.bmp files.
--model: none (loader only), tiny (small CNN) or any torchvision classification model name (random weights).
--augment: none (resize), light (resize + center crop, eval recipe), standard (torchvision ImageNet training recipe:
RandomResizedCrop, RandomHorizontalFlip, Normalize), heavy (standard + ColorJitter, RandomRotation, GaussianBlur).
Writes run.json, plots, report.html and trace.json to --out (default: reports/<time>_<model>_w<workers>_b<batch>/).
"""


# Options that describe the built-in pipeline; next to a script they have no meaning (its DataLoader decides).
BUILTIN_ONLY = ("workers", "batch_size", "model", "mode", "device", "image_size", "augment", "pin_memory", "amp",
                "prefetch_factor", "seed")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``run`` options (the script or module and its own arguments are split off before parsing: cli.py)."""
    p.usage = "python -m profiler run [options] [SCRIPT [args...] | -m MODULE [args...]]"
    p.epilog = RUN_EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    g = p.add_argument_group("any job (a script or the built-in pipeline)")
    g.add_argument("--data", metavar="DIR", help="built-in: image folder (default: the built-in sample dataset); "
                                                 "script: where its data lives (for --cache, --storage, residency)")
    g.add_argument("--steps", type=int, default=D.steps, metavar="N",
                   help=f"measured steps = batches of the profiled loader (default {D.steps})")
    g.add_argument("--warmup", type=int, default=D.warmup, metavar="N",
                   help=f"batches run first and excluded from every figure (default {D.warmup})")
    g.add_argument("--then", choices=("exit", "continue"), default="exit",
                   help="script: when the window closes, stop it (exit, default) or let it finish unprofiled")
    g.add_argument("--cache", choices=CACHE_MODES, default=D.cache,
                   help="page cache before the run: cold evicts the data files, warm reads them in (default as-is)")
    g.add_argument("--throttle", metavar="RATE[,IOPS]", help="emulate slower storage, e.g. 20MB/s,150iops")
    g.add_argument("--storage", choices=("hdd", "sata-ssd", "nvme", "nfs"),
                   help="emulate a storage preset (hdd 20MB/s,150iops; sata-ssd 500MB/s,20k; nvme 3GB/s,200k; "
                        "nfs 100MB/s,1k)")
    g.add_argument("--throttle-mechanism", choices=THROTTLE_MECHANISMS, default=D.throttle_mechanism,
                   help="auto: kernel cgroup throttle when root, else userspace emulation in the read stage "
                        "(built-in only)")
    g.add_argument("--out", metavar="DIR", help="output folder (default reports/<time>_<model|script>...)")
    g.add_argument("--sample-interval", type=float, default=D.sample_interval_s, metavar="SECONDS",
                   help=f"background sampler period (CPU, RAM, disk, GPU; default {D.sample_interval_s}); a long run "
                        "halves its series and rate beyond 4,000 points")
    g.add_argument("--no-progress", action="store_true", help="no live progress bar")
    g.add_argument("--no-plots", action="store_true", help="write run.json and the terminal summary only")
    g.add_argument("--details", action="store_true", help="print every table of the summary (stages, idle by cause, "
                   "what-if, recommendations and findings in full), not the short view")
    g.add_argument("--torch-profiler", action="store_true",
                   help="script: run torch.profiler around the measured window (CPU; CUDA when available) and write "
                        "torch_trace.json, its trace with the DataLoader's workers and the wait's causes merged in "
                        "(a script's own torch.profiler traces are merged without it: docs/trace_merge.md)")
    # sweep of a script: change the profiled loader's settings without editing the script.
    g.add_argument("--loader", metavar="CLASS|FILE:LINE", help="script: profile this DataLoader: its dataset's "
                   "class (MyDataset or pkg.data.MyDataset), where it was created (train.py:42), or both "
                   "(MyDataset@train.py:42). Default: the first loader iterated, or the one the job goes on with "
                   "when that stops early (a sanity check)")
    g.add_argument("--override-workers", type=int, metavar="N", help="script: run its profiled DataLoader with N "
                   "workers instead of its own num_workers (what `sweep --workers` uses)")
    g.add_argument("--override-batch-size", type=int, metavar="B", help="script: run its profiled DataLoader with "
                   "batch size B (a loader built with batch_size=...; what `sweep --batch-size` uses)")
    b = p.add_argument_group("built-in pipeline only")
    b.add_argument("--workers", type=int, metavar="N", help=f"DataLoader workers (default {D.workers})")
    b.add_argument("--batch-size", type=int, metavar="B", help=f"default {D.batch_size}")
    b.add_argument("--model", metavar="NAME", help=f"none, tiny or a torchvision model (default {D.model})")
    b.add_argument("--mode", choices=MODES, help="train: forward+backward+SGD step; infer: forward "
                                                 "under inference_mode (default train)")
    b.add_argument("--device", help="auto, cpu, cuda or cuda:N (default auto)")
    b.add_argument("--image-size", type=int, metavar="PX", help=f"default {D.image_size}")
    b.add_argument("--augment", choices=AUGMENTS, help=f"default {D.augment}")
    b.add_argument("--pin-memory", action=argparse.BooleanOptionalAction, default=None,
                   help="pin host memory for H2D copies (default: on with CUDA)")
    b.add_argument("--amp", action="store_true", default=None, help="autocast (bfloat16 where supported, else float16)")
    b.add_argument("--prefetch-factor", type=int, metavar="N", help=f"batches prefetched per worker "
                                                                     f"(default {D.prefetch_factor})")
    b.add_argument("--seed", type=int, help=f"default {D.seed}")


def _config_from(args: argparse.Namespace) -> RunConfig:
    given = {k: getattr(args, k) for k in BUILTIN_ONLY if getattr(args, k, None) is not None}
    return RunConfig(data=args.data, steps=args.steps, warmup=args.warmup,
                     out=args.out if args.out is not None else D.out, cache=args.cache, throttle=args.throttle,
                     storage=args.storage, throttle_mechanism=args.throttle_mechanism,
                     sample_interval_s=args.sample_interval, **given)


def _out_dir(args: argparse.Namespace, c: RunConfig, script: str | None, ranks: RankHook) -> Path:
    """The run's output folder, absolute (a script's os.chdir cannot move it); an explicit --out is claimed for this
    run, so a second run into it at the same time is refused with one line instead of replacing this record."""
    from .. import outdir
    from ..harness.runner import default_run_name

    name = default_run_name(c, script)
    ranked = ranks.out_dir(args.out, c.out, name)
    if ranked is not None:
        return ranked
    if args.out is not None:
        return outdir.claim(outdir.prepare_out(args.out))
    return outdir.create_run_dir(c.out, name)


def _override(args: argparse.Namespace) -> dict[str, int]:
    """--override-workers / --override-batch-size as Session(override=...) ; checked here, one line."""
    out = {}
    for key, flag, low in (("num_workers", "override_workers", 0), ("batch_size", "override_batch_size", 1)):
        v = getattr(args, flag, None)
        if v is None:
            continue
        if v < low or v > 1024:
            raise UserError(f"--{flag.replace('_', '-')} {v}: out of range ({low}..1024)")
        out[key] = v
    if out and args.target is None:
        raise UserError("--override-workers/--override-batch-size apply to a script; the built-in pipeline takes "
                        "--workers/--batch-size")
    return out


def _save(result: RunResult, out: Path, args: argparse.Namespace, console: Any, ranks: RankHook,
          reraise: bool = False) -> Saved:
    """This run's one save: the rank section (under torchrun), then run.json, the reports and the summary."""
    from ..saving import save_and_report

    assert result.record is not None
    ranks.attach(result.record, out, result.t0_ns, result.ddp)
    return save_and_report(result.record, out, plots=not args.no_plots, console=console, reraise=reraise,
                           details=bool(getattr(args, "details", False)))


def main(args: argparse.Namespace) -> int:
    """``run [options]``: the built-in pipeline; ``run [options] SCRIPT args`` / ``-m MODULE args``: the user's job."""
    _override(args)
    if getattr(args, "loader", None) is not None:
        if args.target is None:
            raise UserError("--loader applies to a script; the built-in pipeline has one loader")
        from ..instrument.loaders import LoaderSelector

        LoaderSelector.parse(args.loader)  # a malformed one fails here, before the script starts
    if args.target is not None:
        return run_script(args)
    from rich.console import Console

    from .. import outdir
    from ..harness.runner import execute_run, prepare
    from ..render.terminal import LiveProgress

    c = _config_from(args)
    c.validate()
    ranks = RankHook.detect()
    console = Console(stderr=False, quiet=ranks.quiet)
    out = _out_dir(args, c, None, ranks)
    show = not args.no_progress and console.is_terminal and not console.quiet

    def sample_progress(i: int, n: int) -> None:
        if i == 1:
            console.print(f"Making the built-in sample dataset ({n} JPEGs, once)...")

    with outdir.removed_if_unused(out):
        p = prepare(c, on_sample_progress=sample_progress)
        console.print(f"Profiling {p.index.root} ({len(p.index.files)} images, {p.index.total_bytes / 1e6:.0f} MB) "
                      f"with model={c.model} mode={c.mode} workers={c.workers} batch={c.batch_size} on {p.device}",
                      markup=False)
        with LiveProgress(c.warmup + c.steps, console=console, enabled=show) as live:
            result = execute_run(p, on_step=live.on_step,
                                 torch_profiler_out=out if getattr(args, "torch_profiler", False) else None)
        rec = result.record
        assert rec is not None
        if not rec.window.get("steps") and result.outcome.status == "interrupted":
            print("profiler: interrupted before the first measured step", file=sys.stderr)
        _check_something_decoded(rec, result.outcome)
        saved = _save(result, out, args, console, ranks)
        if (rec.torch_traces or {}).get("traces"):
            from ..render import write_torch_trace

            for f in write_torch_trace(rec, out):
                console.print(f"Merged torch.profiler trace: {f}", markup=False, highlight=False)
    ranks.finish(out, console, plots=not args.no_plots)
    return _exit_status(result.outcome, saved, f"the run failed ({rec.partial_reason})")


def _check_something_decoded(rec: Any, outcome: Outcome) -> None:
    """The built-in pipeline measured steps but not one sample: every file it drew failed to read or decode. A verdict
    from zero samples would be a confident judgement of nothing, so it is bad input, said in one line."""
    window, skipped = rec.window or {}, rec.skipped or {}
    if outcome.status not in ("window closed", "ended") or not window.get("steps") or window.get("samples"):
        return
    files = skipped.get("files") or []
    first = "; ".join(f"{Path(f['path']).name}: {f['reason']}" for f in files[:2])
    raise UserError(f"--data: every image the run drew failed to decode ({skipped.get('count', 0)} skipped"
                    f"{'; first: ' + first if first else ''}); nothing to measure")


def _exit_status(outcome: Outcome, saved: Saved | None, failure: str) -> int:
    """The command's exit status from how the job ended, and a signal held while its record was saved."""
    from .. import signals

    if outcome.status == "interrupted":
        return signals.exit_status(outcome.error)
    late = saved.late_signal if saved is not None else None
    if late is not None and outcome.status != "failed":
        return signals.exit_status(late)  # a signal held while saving: ended by it, with everything saved
    if outcome.status == "failed":
        if saved is not None:
            print(f"profiler: {failure}; the partial record is in {saved.run_json}", file=sys.stderr)
        return 1
    if outcome.status == "exit":
        return outcome.exit_code or 0
    return 0


def run_script(args: argparse.Namespace) -> int:
    """``run [options] SCRIPT args`` / ``run [options] -m MODULE args``: the user's job, unchanged."""
    from rich.console import Console

    from .. import outdir
    from ..harness.external import (
        ExternalRun,
        list_files,
        print_user_traceback,
        resolve_target,
        script_config,
        script_job,
    )
    from ..harness.job import JobSpec
    from ..harness.runner import storage_setup
    from ..render.terminal import LiveProgress

    given = [k for k in BUILTIN_ONLY if getattr(args, k, None) is not None]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise UserError(f"{flag} applies to the built-in pipeline only; with a script, its own DataLoader and model "
                        "decide (pass the script's own options after its name)")
    target = args.target
    path = resolve_target(target, args.is_module)
    c = _config_from(args)
    c.validate()
    name = Path(path).name if not args.is_module else target.rsplit(".", 1)[-1]
    ranks = RankHook.detect()
    console = Console(stderr=False, quiet=ranks.quiet)
    out = _out_dir(args, c, name, ranks)
    show = not args.no_progress and console.is_terminal and not console.quiet
    pid = os.getpid()
    with outdir.removed_if_unused(out):
        storage = None
        if args.data:
            files = list_files(args.data)
            section, ctx, _ = storage_setup(str(Path(args.data).resolve()), files, c, userspace_ok=False)
            section["files"] = len(files)
            section["total_bytes"] = sum(os.path.getsize(f) for f in files[:100_000])
            storage = (section, ctx)
        elif c.storage or c.throttle or c.cache != "as-is":
            raise UserError("--cache/--storage/--throttle on a script need --data DIR (where the script's data lives)")
        spec = JobSpec("module" if args.is_module else "script", target, list(args.script_args), then=args.then)
        config = script_config(c.to_dict(), then=args.then, script=target, argv=list(args.script_args),
                               loader=args.loader)
        saved: list[Saved] = []
        live = LiveProgress(c.warmup + c.steps, console=console, enabled=show)

        def on_closed(rec: Any) -> None:
            if os.getpid() != pid:
                return  # a process the script forked: the record is the parent's to write (one process, one record)
            live.__exit__(None, None, None)
            from ..harness.job import Outcome, RunResult

            saved.append(_save(RunResult(rec, Outcome("window closed"), run.t0), out, args, console, ranks,
                               reraise=True))
            console.print("Window closed; the script goes on unprofiled.")

        run = ExternalRun(spec, c.warmup, c.steps, config, data=args.data, storage=storage,
                          sample_interval_s=c.sample_interval_s, on_step=live.on_step, on_window_closed=on_closed,
                          loader=args.loader,
                          torch_profiler_out=out if getattr(args, "torch_profiler", False) else None)
        run.session.override = _override(args)  # sweep's per-point loader settings
        from ..redact import redact_argv

        shown = " ".join(redact_argv(list(args.script_args)))  # a terminal log is shared as often as a report
        console.print(f"Profiling {'-m ' if args.is_module else ''}{target} {shown} "
                      f"({c.warmup} warm-up + {c.steps} measured batches of "
                      + (f"the DataLoader --loader {args.loader} names)" if args.loader else
                         "the DataLoader it trains from: the first it iterates, or the next one if that stops "
                         "early)"),
                      markup=False, highlight=False)  # rich's highlighter is quadratic in a long argument
        with live:
            result = run.run(script_job(path if not args.is_module else target, list(args.script_args),
                                        args.is_module))
        outcome = result.outcome
        if os.getpid() != pid:  # a forked child of the script ran off its end: it is not the profiled process
            outdir.forget(out)
            return _child_status(outcome)
        if outcome.status == "failed" and outcome.error is not None:  # failed always carries its exception
            print_user_traceback(outcome.error)
        if result.record is None:
            outdir.discard_if_empty(out)  # nothing measured (a syntax error, no loader): no empty folder left
            return _nothing_iterated(target, outcome)
        if not saved:
            saved.append(_save(result, out, args, console, ranks))
        _torch_traces(run, result.record, out, saved[0], console)
    ranks.finish(out, console, plots=not args.no_plots)
    if saved and outcome.status == "failed" and not result.record.partial:
        # The window closed and its (complete) record was written; the script raised later, unprofiled.
        print(f"profiler: the script raised {type(outcome.error).__name__} after the window closed; the record "
              f"(complete) is in {saved[0].run_json}", file=sys.stderr)
        return 1
    return _exit_status(outcome, saved[0] if saved else None, f"the script raised {type(outcome.error).__name__}")


def _torch_traces(run: Any, rec: Any, out: Path, saved: Saved, console: Any) -> None:
    """The job's torch.profiler traces (or ours, --torch-profiler) merged with the record: docs/trace_merge.md."""
    for f in run.write_torch_traces(rec, out, saved.run_json if saved.run_json.parent == out else None,
                                    export_pending=True):
        console.print(f"Merged torch.profiler trace: {f}", markup=False, highlight=False)


def _child_status(outcome: Outcome) -> int:
    """The exit status of a process the script forked that returned into the profiler instead of exiting: what Python
    would give it, and no record (its parent writes the one record)."""
    from .. import signals

    if outcome.status == "interrupted":
        return signals.exit_status(outcome.error)
    if outcome.status == "failed":
        return 1
    return outcome.exit_code or 0 if outcome.status == "exit" else 0


def _nothing_iterated(target: str, outcome: Outcome) -> int:
    """A script that iterated no DataLoader: its own status when it failed, was interrupted or exited non-zero;
    otherwise (it finished, e.g. its own --help) 0 with one line, as plain Python would end it."""
    from .. import signals

    if outcome.status == "failed":
        return 1
    if outcome.status == "interrupted":
        return signals.exit_status(outcome.error)
    if outcome.status == "exit" and outcome.exit_code:
        return outcome.exit_code
    print(_nothing_iterated_line(target), file=sys.stderr)
    return 0


def _nothing_iterated_line(target: str) -> str:
    """The one line ``run`` prints when the job iterated no DataLoader: what it saw, and what to do instead.

    What to do is what the profiler measures: a DataLoader's ``next()``. ``profiler.stage()`` on the main thread
    outside a DataLoader's fetch times nothing, and ``attach`` on such a job finds no DataLoader activity, so neither
    is offered; a hand-written fetch run by a DataLoader without workers runs where it ran, and is measured."""
    from ..instrument import torchdata_hooks

    at = torchdata_hooks.nodes_loader_at
    if at is not None:
        return (f"profiler: {target} iterated a torchdata.nodes Loader ({at}) but no DataLoader: nothing to profile, "
                "no record written. torchdata.nodes pipelines are not profiled (its ParallelMapper runs the map "
                "function in threads or processes the profiler does not instrument); to profile this data, load the "
                "same dataset through torchdata's StatefulDataLoader or a torch DataLoader: both are profiled "
                "(docs/loaders.md)")
    return (f"profiler: {target} iterated no DataLoader in its main process and thread: nothing to profile, no record "
            "written (the profiler measures the first torch.utils.data.DataLoader the job iterates, subclasses such "
            "as torchdata's StatefulDataLoader included). A hand-written fetch (a get_batch() over a memmap, your own "
            "iterator) is measured once a DataLoader runs it, e.g. an IterableDataset whose __iter__ yields "
            "get_batch('train') forever, looped over as `for X, Y in DataLoader(batches, batch_size=None):` "
            "(no workers: it runs where it ran before; profiler.stage(\"read\") inside it then names its parts)")
