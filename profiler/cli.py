"""Command line: ``python -m profiler run | report | compare | fit``.

Exit status: 0 ok; 2 bad input (one line on stderr, no traceback); 1 internal error (with a hint to report it);
130 interrupted (after writing the partial record).
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

from . import __version__
from .config import AUGMENTS, CACHE_MODES, MODES, THROTTLE_MECHANISMS, RunConfig
from .errors import UserError

D = RunConfig()

MAIN_EPILOG = """examples:
  python -m profiler run train.py --epochs 3               # your own script, unchanged
  python -m profiler run                                   # built-in sample data, tiny model, CPU or GPU
  python -m profiler run --data ./imgs --workers 4 --model resnet18 --batch-size 64
  python -m profiler run --data ./imgs --cache cold --storage hdd --out reports/hdd
  python -m profiler report reports/hdd/run.json          # re-render everything from a saved run
  python -m profiler compare reports/ssd reports/hdd       # what changed between two runs, and why
  python -m profiler fit --model resnet50 --batch-size 64 --gpu-mem rtx3060-12g
  python -m profiler sweep --workers 0,1,2,4 --data ./imgs  # what would help: measured vs predicted
  torchrun --nproc-per-node 2 -m profiler run train.py     # every rank profiled, merged in <out>/
"""

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


def _add_run(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("run", help="profile your own script (run SCRIPT / run -m MODULE) or the built-in pipeline",
                       usage="python -m profiler run [options] [SCRIPT [args...] | -m MODULE [args...]]",
                       epilog=RUN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    g.add_argument("--no-progress", action="store_true", help="no live progress bar")
    g.add_argument("--no-plots", action="store_true", help="write run.json and the terminal summary only")
    # issue 10 (sweep of a script): change the profiled loader's settings without editing the script.
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
    return p


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
    """argparse, but a usage error is one line on stderr and exit 2 (argparse prints the whole usage block)."""

    def error(self, message: str):  # type: ignore[override]
        print(f"profiler: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m profiler", description="Find out why a PyTorch job does not keep "
                                 "its GPU busy, and what to change.", epilog=MAIN_EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"profiler {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    ap.run_parser = _add_run(sub)  # type: ignore[attr-defined]
    p = sub.add_parser("report", help="re-render terminal summary, plots, HTML and trace from a saved run.json")
    p.add_argument("run_json", metavar="RUN_JSON", help="run.json (or the folder holding it)")
    p.add_argument("--out", metavar="DIR", help="output folder (default: next to run.json)")
    p = sub.add_parser("compare", help="compare runs (the first is the baseline)")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run.json files or their folders; two or more")
    p.add_argument("--out", metavar="DIR", help="output folder (default: reports/compare-<time>)")
    p.add_argument("--force", action="store_true", help="compare runs of different model or batch size anyway")
    # sweep (issue 10): its own argv splitting (profiler/sweep.py); this parser only lists it in --help.
    sub.add_parser("sweep", help="several profiled runs over --workers/--batch-size/--storage/--cache lists: "
                                 "measured vs predicted, best setting", add_help=False)
    p = sub.add_parser("fit", help="will it fit? device memory breakdown and the largest batch size")
    from .fit.command import add_fit_arguments
    add_fit_arguments(p)
    return ap



def _config_from(args: argparse.Namespace) -> RunConfig:
    given = {k: getattr(args, k) for k in BUILTIN_ONLY if getattr(args, k, None) is not None}
    return RunConfig(data=args.data, steps=args.steps, warmup=args.warmup,
                     out=args.out if args.out is not None else D.out, cache=args.cache, throttle=args.throttle,
                     storage=args.storage, throttle_mechanism=args.throttle_mechanism, **given)


def _write_outputs(rec, out: Path, args: argparse.Namespace, console) -> list[str]:
    """Analyse, save run.json first (small, safe), then the reports; a signal meanwhile waits until they are done."""
    from . import signals
    from .analysis import analyze
    from .render import write_reports
    from .render.terminal import print_report

    with signals.deferred():
        path = _save_somewhere(rec, out / "run.json")  # the raw record first: safe before the expensive work
        analyze(rec)
        path = _save_somewhere(rec, path)
        files = [str(path)]
        if not args.no_plots and path.parent == out:
            files += [str(f) for f in write_reports(rec, out)]
    print_report(rec, console, files)
    return files


def _save_somewhere(rec, path: Path) -> Path:
    """Save run.json at ``path``; if that fails (disk full, folder gone), keep the measurement in the temp folder and
    say where, rather than lose it."""
    import tempfile

    try:
        return rec.save(path)
    except OSError as e:
        fallback = Path(tempfile.gettempdir()) / f"profiler-{os.getpid()}-run.json"
        try:
            rec.save(fallback)
        except OSError:
            raise UserError(f"could not save the record to {path} ({e.strerror or e}) nor to {fallback}") from None
        print(f"profiler: could not save {path} ({e.strerror or e}); the record is in {fallback}", file=sys.stderr)
        return fallback


def _out_dir(args: argparse.Namespace, c: RunConfig, script: str | None) -> Path:
    from . import outdir
    from .harness.runner import default_run_name

    if args.out is not None:
        return outdir.prepare_out(args.out)
    return outdir.create_run_dir(c.out, default_run_name(c, script))


def _rank_out(args: argparse.Namespace, c: RunConfig, script: str | None):
    """distributed (profiler/distributed): under torchrun, (rank, <run folder>/rank<k>); else (None, None)."""
    from .distributed import detect

    denv = detect()
    if denv is None:
        return None, None
    from .distributed.launch import rank_out
    from .harness.runner import default_run_name

    return denv, rank_out(denv, args.out, c.out, default_run_name(c, script))


def _override(args: argparse.Namespace) -> dict[str, int]:
    """--override-workers / --override-batch-size as Session(override=...) (issue 10); checked here, one line."""
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


def cmd_run(args: argparse.Namespace) -> int:
    _override(args)
    if args.target is not None:
        return cmd_run_script(args)
    from rich.console import Console

    from . import outdir, signals
    from .harness.runner import execute, prepare
    from .render.terminal import LiveProgress

    c = _config_from(args)
    c.validate()
    denv, out = _rank_out(args, c, None)  # distributed: this rank's folder; terminal output from rank 0 only
    console = Console(stderr=False, quiet=denv is not None and not denv.is_main)
    out = out or _out_dir(args, c, None)
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
            rec = execute(p, on_step=live.on_step)
        if not rec.window.get("steps") and rec.outcome.status == "interrupted":  # type: ignore[attr-defined]
            print("profiler: interrupted before the first measured step", file=sys.stderr)
        if denv is not None:  # distributed: the record's rank section
            from .distributed.launch import attach
            attach(rec, denv, out)
        _write_outputs(rec, out, args, console)
    if denv is not None:  # distributed: rank 0 merges the ranks' records
        from .distributed.launch import finish
        finish(denv, out, console, plots=not args.no_plots)
    outcome = rec.outcome  # type: ignore[attr-defined]
    if outcome.status == "interrupted":
        return signals.exit_status(outcome.error)
    if outcome.status == "failed":
        print(f"profiler: the run failed ({rec.partial_reason}); the partial record is in {out / 'run.json'}",
              file=sys.stderr)
        return 1
    return 0


def cmd_run_script(args: argparse.Namespace) -> int:
    """``run [options] SCRIPT args`` / ``run [options] -m MODULE args``: the user's job, unchanged."""
    from rich.console import Console

    from . import outdir, signals
    from .harness.external import ExternalRun, list_files, print_user_traceback, resolve_target, script_job
    from .harness.job import JobSpec
    from .harness.runner import storage_setup
    from .render.terminal import LiveProgress

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
    denv, out = _rank_out(args, c, name)  # distributed: this rank's folder; terminal output from rank 0 only
    console = Console(stderr=False, quiet=denv is not None and not denv.is_main)
    out = out or _out_dir(args, c, name)
    show = not args.no_progress and console.is_terminal and not console.quiet
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
        config = {**c.to_dict(), "workers": None, "batch_size": None, "model": None, "then": args.then,
                  "script": target}
        written: list[str] = []
        live = LiveProgress(c.warmup + c.steps, console=console, enabled=show)

        def on_closed(rec) -> None:
            live.__exit__(None, None, None)
            if denv is not None:  # distributed: the record's rank section
                from .distributed.launch import attach
                attach(rec, denv, out, run.t0)
            written.extend(_write_outputs(rec, out, args, console))
            console.print("Window closed; the script goes on unprofiled.")

        run = ExternalRun(spec, c.warmup, c.steps, config, data=args.data, storage=storage,
                          sample_interval_s=c.sample_interval_s, on_step=live.on_step, on_window_closed=on_closed)
        run.session.override = _override(args)  # issue 10: sweep's per-point loader settings
        console.print(f"Profiling {'-m ' if args.is_module else ''}{target} {' '.join(args.script_args)} "
                      f"({c.warmup} warm-up + {c.steps} measured batches of the first DataLoader it iterates)",
                      markup=False)
        with live:
            rec, outcome = run.run(script_job(path if not args.is_module else target, list(args.script_args),
                                              args.is_module))
        if outcome.status == "failed":
            print_user_traceback(outcome.error)
        if rec is None:
            if outcome.status in ("failed", "interrupted"):
                return 1 if outcome.status == "failed" else signals.exit_status(outcome.error)
            if outcome.status == "exit" and outcome.exit_code:
                return outcome.exit_code
            raise UserError(f"{target} iterated no DataLoader: nothing to profile (the profiler measures the first "
                            "torch.utils.data.DataLoader the job iterates)")
        if not written:
            if denv is not None:  # distributed: the record's rank section
                from .distributed.launch import attach
                attach(rec, denv, out, run.t0)
            _write_outputs(rec, out, args, console)
    if denv is not None:  # distributed: rank 0 merges the ranks' records
        from .distributed.launch import finish
        finish(denv, out, console, plots=not args.no_plots)
    if outcome.status == "interrupted":
        return signals.exit_status(outcome.error)
    if outcome.status == "failed":
        print(f"profiler: the script raised {type(outcome.error).__name__}; the partial record is in "
              f"{out / 'run.json'}", file=sys.stderr)
        return 1
    if outcome.status == "exit":
        return outcome.exit_code or 0
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from rich.console import Console

    from . import record
    from .analysis import analyze
    from .distributed.layout import is_ranks_folder
    from .outdir import prepare_out
    from .render import write_reports
    from .render.terminal import print_report

    if is_ranks_folder(Path(args.run_json)):  # distributed: a torchrun run folder (rank<k>/run.json): merge them
        from .distributed.report import write_merged
        from .render.ranks_terminal import print_ranks

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


def cmd_compare(args: argparse.Namespace) -> int:
    from .compare_cli import run_compare

    return run_compare(args)


def main(argv: list[str] | None = None) -> int:
    """The command line; SIGTERM/SIGHUP become exceptions while it runs (and the process's own handlers come back
    after, for callers that run it in-process)."""
    from . import signals

    taken = signals.install()
    try:
        return _main(argv)
    finally:
        signals.restore(taken)


def _main(argv: list[str] | None) -> int:
    from . import signals

    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    target, is_module, script_args = None, False, []
    if argv and argv[0] == "sweep":  # sweep (issue 10): lists, then everything else passed to each run
        from .sweep import run_sweep

        try:
            return run_sweep(argv[1:], parser.run_parser)
        except UserError as e:
            print(f"profiler: error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as e:
            return signals.exit_status(e)
    try:
        if argv and argv[0] == "run":
            ours, target, is_module, script_args = split_run_argv(argv[1:], parser.run_parser)
            argv = ["run", *ours]
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed its one-line usage error
        return int(e.code or 0) if e.code not in (None, 0) else 0
    if args.command == "run":
        args.target, args.is_module, args.script_args = target, is_module, script_args
    if not args.command:
        parser.print_help()
        return 0
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "report":
            return cmd_report(args)
        if args.command == "compare":
            return cmd_compare(args)
        if args.command == "fit":
            from .fit.command import run_fit
            return run_fit(args)
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
    return 0
