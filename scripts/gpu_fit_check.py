"""On a CUDA machine: compare `fit`'s estimate with the real peak of a training/inference step.

For resnet18 and resnet50, two batch sizes, train and infer: the estimate's tensor bytes (weights + gradients +
optimizer state + activations, i.e. what torch.cuda.max_memory_allocated can see; the fixed context/workspace
allowance is excluded from both sides) vs the measured peak of a real step at that batch on the GPU. Two estimates:
what `fit` prints on a GPU machine (activations measured on the GPU at small batches and extended linearly: the pass
criterion, within 10 %), and the CPU-only estimate (saved-tensor count on the CPU), reported for information.

    PYTHONPATH=. python scripts/gpu_fit_check.py
Last line: ``fit_within_10pct: 8/8``.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from profiler.harness.models import build_model  # noqa: E402
from profiler.fit.estimate import estimate_memory  # noqa: E402

CASES = [(m, b, mode) for m in ("resnet18", "resnet50") for b in (32, 64) for mode in ("train", "infer")]


def measured_peak(model_name: str, batch: int, mode: str) -> int:
    torch.cuda.empty_cache()
    model = build_model(model_name, num_classes=1000).cuda()
    opt = torch.optim.Adam(model.parameters()) if mode == "train" else None
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    for _ in range(2):  # the second step has optimizer state allocated, as in steady training
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        if mode == "train":
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()
        else:
            with torch.inference_mode():
                model.eval()(x)
        torch.cuda.synchronize()
    peak = int(torch.cuda.max_memory_allocated())
    del model, opt, x, y
    return peak


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        print("fit_within_10pct: skipped")
        return 0
    ok = 0
    for name, batch, mode in CASES:
        est = {}
        for dev in ("cuda", "cpu"):
            bd = estimate_memory(name, batch, mode=mode, optimizer="adam", device=dev)
            est[dev] = bd.weights_bytes + bd.gradients_bytes + bd.optimizer_bytes + bd.activations_bytes
        peak = measured_peak(name, batch, mode)
        err = {dev: (v - peak) / peak for dev, v in est.items()}
        good = abs(err["cuda"]) <= 0.10
        ok += good
        print(f"{name:9s} B={batch:3d} {mode:5s}: measured peak {peak / 2**20:7.0f} MiB; fit on GPU "
              f"{est['cuda'] / 2**20:7.0f} MiB ({err['cuda'] * 100:+5.1f} %) {'OK' if good else 'OUTSIDE 10 %'}; "
              f"CPU-only estimate {est['cpu'] / 2**20:7.0f} MiB ({err['cpu'] * 100:+5.1f} %)", flush=True)
    print(f"fit_within_10pct: {ok}/{len(CASES)}")
    return 0 if ok == len(CASES) else 1


if __name__ == "__main__":
    raise SystemExit(main())
