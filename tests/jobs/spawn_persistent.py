"""A user's job: spawn start method, persistent workers, 3 epochs, a custom batch object from a custom collate."""
import sys

import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, i):
        return torch.full((16,), float(i * i))


class Batch:
    def __init__(self, x):
        self.x = x


def collate(items):
    return Batch(torch.stack(items))


if __name__ == "__main__":
    loader = DataLoader(Squares(), batch_size=6, num_workers=2, multiprocessing_context="spawn",
                        persistent_workers=True, collate_fn=collate)
    total = 0.0
    for epoch in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
        for b in loader:
            assert type(b).__name__ == "Batch", type(b)
            total += float(b.x.sum())
    print("TOTAL", total)
