"""On a CUDA machine: compare `fit`'s estimate with the real peak of a training/inference step, net of baseline.

Both sides leave out what no tensor count sees and what exists before the step: the estimate's tensor bytes are
weights + gradients + optimizer state + activations (the fixed context/workspace allowance excluded); the measured
figure is torch.cuda.max_memory_allocated over the third real step minus torch.cuda.memory_allocated before the model
was built, after a warm-up that has already created the cuBLAS workspace and cuDNN state (which a first step in a
fresh process creates and keeps: counted on one side only, they would skew the comparison by ~32 MiB). Two
estimates: what `fit` prints on a GPU machine (activations measured on the GPU: the pass criterion, within 10 %),
and the CPU-only estimate (saved-tensor count on the CPU), reported for information.

    PYTHONPATH=. python scripts/gpu_fit_check.py [--models resnet18,resnet50] [--batch 32] [--modes train]
Last line: ``fit_within_10pct: N/M``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from profiler.fit.estimate import estimate_memory  # noqa: E402
from profiler.harness.models import build_model, primary_output  # noqa: E402

TOLERANCE = 0.10  # the estimate must be within 10 % of the measured peak


def warm_libraries() -> None:
    """Create the cuBLAS workspace and cuDNN handles now, so they sit in every later baseline."""
    a = torch.randn(256, 256, device="cuda", requires_grad=True)
    conv = torch.nn.Conv2d(3, 8, 3).cuda()
    (a @ a).sum().backward()
    conv(torch.randn(2, 3, 32, 32, device="cuda")).sum().backward()
    torch.cuda.synchronize()


def measured_peak(model_name: str, batch: int, mode: str) -> int:
    """Peak bytes of the third step above the memory allocated before the model existed."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    model = build_model(model_name, num_classes=1000).cuda().train(mode == "train")
    opt = torch.optim.Adam(model.parameters()) if mode == "train" else None
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    for _ in range(3):  # from the second step on, optimizer state exists, as in steady training
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        if opt is not None:
            loss = torch.nn.functional.cross_entropy(primary_output(model(x)), y)
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()
            del loss
        else:
            with torch.inference_mode():
                model(x)
        torch.cuda.synchronize()
    peak = int(torch.cuda.max_memory_allocated()) - base
    del model, opt, x, y
    torch.cuda.empty_cache()
    return peak


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,resnet50")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--modes", default="train")
    args = ap.parse_args(argv)
    cases = [(m, args.batch, mode) for m in args.models.split(",") for mode in args.modes.split(",")]
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        print(f"fit_within_10pct: 0/{len(cases)} (skipped: no GPU)")
        return 1
    warm_libraries()
    ok = 0
    for name, batch, mode in cases:
        try:
            est = {}
            for dev in ("cuda", "cpu"):
                bd = estimate_memory(name, batch, mode=mode, optimizer="adam", device=dev)
                est[dev] = bd.weights_bytes + bd.gradients_bytes + bd.optimizer_bytes + bd.activations_bytes
            peak = measured_peak(name, batch, mode)
        except Exception as exc:  # one failed case is a FAIL line, not a lost check  # noqa: BLE001
            print(f"{name:9s} B={batch:3d} {mode:5s}: FAILED {type(exc).__name__}: {exc}", flush=True)
            continue
        err = {dev: (v - peak) / peak for dev, v in est.items()}
        good = abs(err["cuda"]) <= TOLERANCE
        ok += good
        print(f"{name:9s} B={batch:3d} {mode:5s}: measured peak net of baseline {peak / 2**20:7.0f} MiB; fit on GPU "
              f"{est['cuda'] / 2**20:7.0f} MiB ({err['cuda'] * 100:+5.1f} %) {'OK' if good else 'OUTSIDE 10 %'}; "
              f"CPU-only estimate {est['cpu'] / 2**20:7.0f} MiB ({err['cpu'] * 100:+5.1f} %)", flush=True)
    print(f"fit_within_10pct: {ok}/{len(cases)}")
    return 0 if ok == len(cases) else 1


if __name__ == "__main__":
    raise SystemExit(main())
