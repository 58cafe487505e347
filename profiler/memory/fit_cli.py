"""``python -m profiler fit``: will this model, batch size and precision fit in this GPU's memory?

The CLI (profiler/cli.py) owns the sub-command; this module adds its arguments and runs it, so the feature can be
tested through argparse alone. Output: a rich table and a stacked-bar PNG, or with ``--json`` exactly one JSON
object on stdout holding every figure (for scripts).
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from profiler.errors import UserError
from profiler.memory.estimate import (
    MODES, OPTIMIZER_STATES, PRECISIONS, MemoryBreakdown, breakdown_max_batch, estimate_memory, oom_recommendations,
)
from profiler.memory.sizes import GPU_PRESETS, format_bytes, resolve_gpu_mem

FIT_EPILOG = """examples:
  python -m profiler fit --model resnet50 --batch-size 64 --gpu-mem rtx3060-12g
  python -m profiler fit --model vit_b_16 --batch-size 128 --amp --gpu-mem a100-40g
  python -m profiler fit --model resnet18 --batch-size 256 --mode infer --precision fp16 --gpu-mem 6GiB --json

Weights, gradients and optimizer state are exact (parameter counts); activations are measured by running the model
at two small batch sizes (on the GPU when there is one, else on the CPU) and extended linearly to --batch-size.
--gpu-mem takes a size (24GiB, 24GB = 10^9 bytes, 512MiB, 6g) or a preset: """ + ", ".join(GPU_PRESETS)

NO_GPU_NOTE = "no GPU detected; give --gpu-mem SIZE_OR_PRESET to check the fit"


def add_fit_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``fit`` options to ``parser`` (validated in :func:`run_fit`, which raises UserError)."""
    if not parser.epilog:
        parser.epilog = FIT_EPILOG
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--model", required=True, metavar="NAME",
                        help="tiny or a torchvision classification model (resnet50, vit_b_16, ...)")
    parser.add_argument("--batch-size", type=int, required=True, metavar="B", help="samples per step (> 0)")
    parser.add_argument("--mode", choices=MODES, default="train",
                        help="train: weights+gradients+optimizer+saved activations; infer: weights+live activations")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32",
                        help="dtype of weights and activations (int8: inference only; default fp32)")
    parser.add_argument("--amp", action="store_true",
                        help="mixed precision: fp32 master weights, fp16 (bf16 with --precision bf16) activations")
    parser.add_argument("--optimizer", choices=list(OPTIMIZER_STATES), default="adam",
                        help="state per parameter: sgd 0, momentum 1, adam/adamw 2 (default adam)")
    parser.add_argument("--image-size", type=int, default=224, metavar="PX", help="square input size (default 224)")
    parser.add_argument("--num-classes", type=int, default=1000, metavar="N", help="classifier outputs (default 1000)")
    parser.add_argument("--gpu-mem", default=None, metavar="SIZE_OR_PRESET",
                        help="GPU memory to fit in (default: the detected GPU's total memory)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where activations are measured (auto: the GPU when present)")
    parser.add_argument("--json", action="store_true", help="print one JSON object with every figure, nothing else")
    parser.add_argument("--out", default="reports", metavar="DIR", help="folder for the PNG (default reports/)")


def detect_gpu_mem() -> tuple[int, str] | None:
    """(total bytes, name) of CUDA device 0, or None without a usable GPU."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        props = torch.cuda.get_device_properties(0)
        return int(props.total_memory), f"{props.name} ({format_bytes(props.total_memory)}, detected)"
    except Exception:  # a broken driver is the same as no GPU for this purpose  # noqa: BLE001
        return None


def fit_result(args: argparse.Namespace) -> dict:
    """Every figure of the fit check as one dict (what ``--json`` prints); UserError on bad input."""
    if args.batch_size is None or args.batch_size <= 0:
        raise UserError(f"--batch-size must be a positive integer, got {args.batch_size}")
    if args.image_size <= 0:
        raise UserError(f"--image-size must be positive, got {args.image_size}")
    if args.gpu_mem is not None:
        gpu = resolve_gpu_mem(args.gpu_mem)
    else:
        gpu = detect_gpu_mem()
    bd = estimate_memory(args.model, args.batch_size, mode=args.mode, precision=args.precision, amp=args.amp,
                         optimizer=args.optimizer, image_size=args.image_size, num_classes=args.num_classes,
                         device=args.device)
    result: dict = {"breakdown": bd.to_dict(), "gpu_bytes": None, "gpu_label": None, "fits": None,
                    "headroom_bytes": None, "max_batch_size": None, "recommendations": [], "notes": list(bd.notes)}
    if gpu is None:
        result["notes"].append(NO_GPU_NOTE)
        return result
    gpu_bytes, label = gpu
    result.update(gpu_bytes=gpu_bytes, gpu_label=label, fits=bd.total_bytes <= gpu_bytes,
                  headroom_bytes=gpu_bytes - bd.total_bytes, max_batch_size=breakdown_max_batch(bd, gpu_bytes),
                  recommendations=oom_recommendations(bd, gpu_bytes))
    return result


def _plot_name(bd: MemoryBreakdown | dict) -> str:
    d = bd if isinstance(bd, dict) else bd.to_dict()
    prec = d["precision"] + ("-amp" if d["amp"] else "")
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"fit_{d['model']}_{d['mode']}_b{d['batch_size']}_{prec}.png")


def _print_table(result: dict, png: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    bd = result["breakdown"]
    console = Console()
    prec = bd["precision"] + (" + AMP" if bd["amp"] else "")
    title = (f"{bd['model']} {bd['mode']}, batch {bd['batch_size']}, {prec}, {bd['image_size']} px"
             + (f", {bd['optimizer']}" if bd["mode"] == "train" else ""))
    table = Table(title=title)
    table.add_column("part")
    table.add_column("memory", justify="right")
    table.add_column("how it is counted")
    pb = bd["weights_bytes"] / max(1, bd["params"])
    rows = [
        ("weights", bd["weights_bytes"], f"{bd['params']:,} params (+ buffers), ~{pb:.0f} B each"),
        ("gradients", bd["gradients_bytes"], "one per trainable param" if bd["mode"] == "train" else "none (infer)"),
        ("optimizer state", bd["optimizer_bytes"], bd["optimizer"]),
        ("activations", bd["activations_bytes"],
         f"{format_bytes(bd['activations_per_sample_bytes'])}/sample x {bd['batch_size']} (measured)"),
        ("workspace", bd["workspace_bytes"], "CUDA context, cuDNN/cuBLAS workspace, fragmentation"),
    ]
    for name, value, how in rows:
        table.add_row(name, format_bytes(value), how)
    table.add_row("[bold]total[/bold]", f"[bold]{format_bytes(bd['total_bytes'])}[/bold]", "")
    console.print(table)
    if result["gpu_bytes"] is not None:
        verdict = "[green]fits[/green]" if result["fits"] else "[red]does not fit[/red]"
        console.print(f"GPU {result['gpu_label']}: {verdict}, headroom {format_bytes(result['headroom_bytes'])}; "
                      f"largest batch that fits: {result['max_batch_size']}")
        for rec in result["recommendations"]:
            console.print(f"  - {rec['action']}: {rec['reason']} -> {rec['expected_gain']}")
    for note in result["notes"]:
        console.print(f"[dim]note: {note}[/dim]")
    console.print(f"[dim]activations: {bd['method']}[/dim]")
    console.print(f"plot: {png}")


def run_fit(args: argparse.Namespace) -> int:
    """Run the fit check for parsed ``args``; returns the exit status (0). UserError propagates to the CLI."""
    result = fit_result(args)
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return 0
    from profiler.render.fit_plot import plot_fit

    png = plot_fit(result["breakdown"], result["gpu_bytes"], Path(args.out) / _plot_name(result["breakdown"]))
    _print_table(result, png)
    return 0
