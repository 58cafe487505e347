"""Command line: ``python -m profiler run | report | compare | fit``.

Exit status: 0 ok; 2 bad input (one line on stderr, no traceback); 1 internal error (with a hint to report it);
130 interrupted (after writing the partial record).
"""
from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

from . import __version__
from .config import AUGMENTS, CACHE_MODES, MODES, THROTTLE_MECHANISMS, RunConfig
from .errors import UserError

D = RunConfig()

MAIN_EPILOG = """examples:
  python -m profiler run                                   # built-in sample data, tiny model, CPU or GPU
  python -m profiler run --data ./imgs --workers 4 --model resnet18 --batch-size 64
  python -m profiler run --data ./imgs --cache cold --storage hdd --out reports/hdd
  python -m profiler report reports/hdd/run.json          # re-render everything from a saved run
  python -m profiler compare reports/ssd reports/hdd       # what changed between two runs, and why
  python -m profiler fit --model resnet50 --batch-size 64 --gpu-mem rtx3060-12g
"""

RUN_EPILOG = """examples:
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


def _add_run(sub) -> None:
    p = sub.add_parser("run", help="profile a real DataLoader + model loop", epilog=RUN_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", metavar="DIR", help="image folder (default: the built-in sample dataset)")
    p.add_argument("--workers", type=int, default=D.workers, metavar="N", help=f"DataLoader workers (default {D.workers})")
    p.add_argument("--batch-size", type=int, default=D.batch_size, metavar="B", help=f"default {D.batch_size}")
    p.add_argument("--model", default=D.model, metavar="NAME", help=f"none, tiny or a torchvision model (default {D.model})")
    p.add_argument("--mode", choices=MODES, default=D.mode, help="train: forward+backward+SGD step; infer: forward "
                                                                 "under inference_mode (default train)")
    p.add_argument("--device", default=D.device, help="auto, cpu, cuda or cuda:N (default auto)")
    p.add_argument("--image-size", type=int, default=D.image_size, metavar="PX", help=f"default {D.image_size}")
    p.add_argument("--augment", choices=AUGMENTS, default=D.augment, help=f"default {D.augment}")
    p.add_argument("--pin-memory", action=argparse.BooleanOptionalAction, default=None,
                   help="pin host memory for H2D copies (default: on with CUDA)")
    p.add_argument("--amp", action="store_true", help="autocast to bfloat16 in the model step")
    p.add_argument("--steps", type=int, default=D.steps, metavar="N", help=f"measured steps (default {D.steps})")
    p.add_argument("--warmup", type=int, default=D.warmup, metavar="N",
                   help=f"steps run first and excluded from every figure (default {D.warmup})")
    p.add_argument("--prefetch-factor", type=int, default=D.prefetch_factor, metavar="N",
                   help=f"batches prefetched per worker (default {D.prefetch_factor})")
    p.add_argument("--cache", choices=CACHE_MODES, default=D.cache,
                   help="page cache before the run: cold evicts the data files, warm reads them in (default as-is)")
    p.add_argument("--throttle", metavar="RATE[,IOPS]", help="emulate slower storage, e.g. 20MB/s,150iops")
    p.add_argument("--storage", choices=("hdd", "sata-ssd", "nvme", "nfs"),
                   help="emulate a storage preset (hdd 20MB/s,150iops; sata-ssd 500MB/s,20k; nvme 3GB/s,200k; "
                        "nfs 100MB/s,1k)")
    p.add_argument("--throttle-mechanism", choices=THROTTLE_MECHANISMS, default=D.throttle_mechanism,
                   help="auto: kernel cgroup throttle when root, else userspace emulation in the read stage")
    p.add_argument("--out", metavar="DIR", help="output folder (default reports/<time>_<model>_w<workers>_b<batch>)")
    p.add_argument("--seed", type=int, default=D.seed, help=f"default {D.seed}")
    p.add_argument("--no-progress", action="store_true", help="no live progress bar")
    p.add_argument("--no-plots", action="store_true", help="write run.json and the terminal summary only")


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
    _add_run(sub)
    p = sub.add_parser("report", help="re-render terminal summary, plots, HTML and trace from a saved run.json")
    p.add_argument("run_json", metavar="RUN_JSON", help="run.json (or the folder holding it)")
    p.add_argument("--out", metavar="DIR", help="output folder (default: next to run.json)")
    p = sub.add_parser("compare", help="compare runs (the first is the baseline)")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run.json files or their folders; two or more")
    p.add_argument("--out", metavar="DIR", help="output folder (default: reports/compare-<time>)")
    p.add_argument("--force", action="store_true", help="compare runs of different model or batch size anyway")
    p = sub.add_parser("fit", help="will it fit? device memory breakdown and the largest batch size")
    from .fit.command import add_fit_arguments
    add_fit_arguments(p)
    return ap



def _config_from(args: argparse.Namespace) -> RunConfig:
    return RunConfig(data=args.data, workers=args.workers, batch_size=args.batch_size, model=args.model,
                     mode=args.mode, device=args.device, image_size=args.image_size, augment=args.augment,
                     pin_memory=args.pin_memory, steps=args.steps, warmup=args.warmup, out=args.out or D.out,
                     seed=args.seed, prefetch_factor=args.prefetch_factor, cache=args.cache, throttle=args.throttle,
                     storage=args.storage, amp=args.amp, throttle_mechanism=args.throttle_mechanism)


def cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from .analysis import analyze
    from .harness.runner import default_out_dir, execute, prepare, prepare_out
    from .render import write_reports
    from .render.terminal import LiveProgress, print_report

    c = _config_from(args)
    console = Console(stderr=False)
    out = prepare_out(Path(args.out) if args.out else default_out_dir(c))
    show = not args.no_progress and console.is_terminal

    def sample_progress(i: int, n: int) -> None:
        if i == 1:
            console.print(f"Making the built-in sample dataset ({n} JPEGs, once)...")

    p = prepare(c, on_sample_progress=sample_progress)
    console.print(f"Profiling {p.index.root} ({len(p.index.files)} images, {p.index.total_bytes / 1e6:.0f} MB) "
                  f"with model={c.model} mode={c.mode} workers={c.workers} batch={c.batch_size} on {p.device}")
    with LiveProgress(c.warmup + c.steps, console=console, enabled=show) as live:
        rec = execute(p, on_step=live.on_step)
    analyze(rec)
    rec.save(out / "run.json")
    files = [str(out / "run.json")]
    if not args.no_plots:
        files += [str(f) for f in write_reports(rec, out)]
    print_report(rec, console, files)
    if rec.partial and rec.partial_reason and rec.partial_reason.startswith("interrupted"):
        return 130
    if rec.partial and rec.partial_reason and rec.partial_reason.startswith("failed"):
        print(f"profiler: the run failed ({rec.partial_reason}); the partial record is in {out / 'run.json'}",
              file=sys.stderr)
        return 1
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from rich.console import Console

    from . import record
    from .analysis import analyze
    from .harness.runner import prepare_out
    from .render import write_reports
    from .render.terminal import print_report

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
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed its one-line usage error
        return int(e.code or 0) if e.code not in (None, 0) else 0
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
    except KeyboardInterrupt:
        print("profiler: interrupted before anything was measured", file=sys.stderr)
        return 130
    except Exception:  # noqa: BLE001 - the last line of defence: a hint, and the traceback for the bug report
        traceback.print_exc()
        print("profiler: internal error; please report it with the traceback above", file=sys.stderr)
        return 1
    return 0
