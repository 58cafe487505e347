"""A training script with an input stall of known length, for scripts/gpu_check.sh (profiled with `profiler run`).

A map-style dataset of ready-made tensors (so a normal batch costs well under a millisecond to load) whose
__getitem__ sleeps SLEEP seconds on the first sample of every EVERY-th batch. The loader has workers=0, no shuffling,
so batch k holds samples k*B .. k*B+B-1 and sleeps exactly when k % EVERY == 0: the stall over any window of steps is
known to the millisecond, and the device (a small CUDA model, a few ms per step) is idle for all of it.

    python -m profiler run [profiler options] scripts/gpu_jobs/planted_stall.py [--sleep 0.2] [--every 5]
"""
from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class PlantedStall(Dataset):
    """``length`` samples of 3x64x64 zeros; the first sample of every ``every``-th batch sleeps ``sleep`` s."""

    def __init__(self, length: int, batch_size: int, sleep: float, every: int) -> None:
        self.length, self.batch_size, self.sleep, self.every = length, batch_size, sleep, every
        self.image = torch.zeros(3, 64, 64)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if index % (self.batch_size * self.every) == 0:
            time.sleep(self.sleep)
        return self.image, index % 10


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sleep", type=float, default=0.2, help="seconds of the planted stall (default 0.2)")
    ap.add_argument("--every", type=int, default=5, help="one stall every N batches (default 5)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--batches", type=int, default=200, help="batches in the one epoch (default 200)")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = PlantedStall(args.batches * args.batch_size, args.batch_size, args.sleep, args.every)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=False, num_workers=0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(16, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        loss = nn.functional.cross_entropy(model(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
