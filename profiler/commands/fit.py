"""``python -m profiler fit``: will this model, batch size and precision fit in this GPU's memory?

Orchestration only: check the options, compute the fit (profiler/fit/check.py), then either print it as exactly one
JSON object on stdout holding every figure (``--json``, for scripts) or write the stacked-bar PNG (the registry's
``FIT``, profiler/render) and print the table (profiler/render/fit_terminal.py).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import UserError
from ..fit.options import MAX_IMAGE_SIZE, MODES, OPTIMIZER_STATES, PRECISIONS
from ..fit.sizes import GPU_PRESETS

FIT_EPILOG = """examples:
  python -m profiler fit --model resnet50 --batch-size 64 --gpu-mem rtx3060-12g
  python -m profiler fit --model vit_b_16 --batch-size 128 --amp --gpu-mem a100-40g
  python -m profiler fit --model resnet18 --batch-size 256 --mode infer --precision fp16 --gpu-mem 6GiB --json

Weights, gradients and optimizer state are exact (parameter counts); activations are measured by running the model
at two small batch sizes (on the GPU when there is one, else on the CPU) and extended linearly to --batch-size.
--gpu-mem takes a size (24GiB, 24GB = 10^9 bytes, 512MiB, 6g) or a preset: """ + ", ".join(GPU_PRESETS)

# Largest --num-classes: ImageNet-21k has 21,841 classes and the largest public label sets ~10^6; the head's
# parameters (classes x features) grow with it, and 10^7 would be a typo costing tens of GiB to build.
MAX_NUM_CLASSES = 1_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``fit`` options to ``parser`` (validated in :func:`main`, which raises UserError)."""
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
    parser.add_argument("--device", default="auto", metavar="DEVICE",
                        help="where activations are measured: auto (the GPU when present), cpu, cuda or cuda:N")
    parser.add_argument("--json", action="store_true", help="print one JSON object with every figure, nothing else")
    parser.add_argument("--out", default="reports", metavar="DIR", help="folder for the PNG (default reports/)")


def check_out_dir(out: Path) -> None:
    """The PNG goes into folder ``out``: refuse a path that is a file (or under one) before measuring anything."""
    for path in (out, *out.parents):
        if path.exists():
            if not path.is_dir():
                raise UserError(f"--out {out} is not a folder: {path} is a file")
            return


def fit_result(args: argparse.Namespace) -> dict:
    """Every figure of the fit check for parsed ``args`` as one dict (what ``--json`` prints); UserError on bad
    input, before anything is measured."""
    from ..fit.check import fit_result as check

    if args.batch_size is None or args.batch_size <= 0:
        raise UserError(f"--batch-size must be a positive integer, got {args.batch_size}")
    if not 8 <= args.image_size <= MAX_IMAGE_SIZE:
        raise UserError(f"--image-size must be between 8 and {MAX_IMAGE_SIZE} px, got {args.image_size}")
    if not 1 <= args.num_classes <= MAX_NUM_CLASSES:
        raise UserError(f"--num-classes must be between 1 and {MAX_NUM_CLASSES:,}, got {args.num_classes}")
    if not args.json:
        check_out_dir(Path(args.out))
    return check(args.model, args.batch_size, mode=args.mode, precision=args.precision, amp=args.amp,
                 optimizer=args.optimizer, image_size=args.image_size, num_classes=args.num_classes,
                 gpu_mem=args.gpu_mem, device=args.device)


def main(args: argparse.Namespace) -> int:
    """Run the fit check for parsed ``args``; returns the exit status (0). UserError propagates to the CLI."""
    result = fit_result(args)
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return 0
    from ..render import write_fit
    from ..render.fit_terminal import print_fit

    try:
        png = write_fit(result, Path(args.out))[0]
    except OSError as exc:
        raise UserError(f"cannot write the plot into --out {args.out}: {exc.strerror or exc}") from None
    print_fit(result, png)
    return 0
