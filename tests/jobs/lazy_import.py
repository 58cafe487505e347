"""A job that imports PIL only inside __getitem__ (after the profiler started) and never imports torchvision.

It prints whether torchvision was imported: the profiler must not import a library the job does not use."""
from __future__ import annotations

import io
import sys

import torch
from torch.utils.data import DataLoader, Dataset


class LazyPng(Dataset):
    def __init__(self) -> None:
        self.blob: bytes | None = None

    def __len__(self) -> int:
        return 256

    def __getitem__(self, i: int) -> torch.Tensor:
        from PIL import Image  # imported on first use, after the profiler started

        if self.blob is None:
            buf = io.BytesIO()
            Image.new("RGB", (32, 32), (i % 255, 0, 0)).save(buf, format="PNG")
            self.blob = buf.getvalue()
        img = Image.open(io.BytesIO(self.blob))
        img.load()
        return torch.tensor(img.size)


if __name__ == "__main__":
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    for _ in range(3):
        for batch in DataLoader(LazyPng(), batch_size=8, num_workers=workers):
            pass
    print("TORCHVISION", "torchvision" in sys.modules)
