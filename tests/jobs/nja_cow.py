"""A user's job with copy-on-read (pytorch#13246): a dataset holding a list of 100k Python dicts, 4 forked workers.

Usage: nja_cow.py [ITEMS]. Every __getitem__ touches one dict (and its strings): reference counts are written, so
the pages that hold them turn private in each worker, one by one, through the epoch.
"""
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Records(Dataset):
    def __init__(self, n):
        self.rows = [{"path": f"/data/shard{i % 97:03d}/img_{i:08d}.jpg", "label": i % 1000, "box": [i, i + 1, 7, 9],
                      "caption": "a photo of item number " + str(i) * 8} for i in range(n)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        r = self.rows[i]
        t = time.perf_counter() + 0.0004  # a little work per sample, so the epoch spans several memory readings
        while time.perf_counter() < t:
            pass
        return torch.tensor([r["label"], len(r["path"]), r["box"][0], len(r["caption"])])


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    dl = DataLoader(Records(n), batch_size=64, shuffle=False, num_workers=4, multiprocessing_context="fork")
    for x in dl:
        pass
