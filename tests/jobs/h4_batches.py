"""Batches whose sample count is hard to read: argv[1] 'list' (a batch object holding a list of 16 per-sample [8]
tensors) or 'negshape' (a batch object whose ``shape`` says (-1, 8)); 12 steps of batch_size 16, workers 0."""
import sys

import torch
from torch.utils.data import DataLoader, Dataset


class Items(Dataset):
    def __len__(self):
        return 16 * 12

    def __getitem__(self, i):
        return torch.full((8,), float(i))


class ListBatch:
    def __init__(self, items):
        self.items = items


class NegShape:
    shape = (-1, 8)

    def __init__(self, items):
        self.data = torch.stack(items)


if __name__ == "__main__":
    kind = sys.argv[1]
    collate = ListBatch if kind == "list" else NegShape
    loader = DataLoader(Items(), batch_size=16, num_workers=0, collate_fn=collate)
    for b in loader:
        pass
