"""A user's job: nanoGPT / Megatron-style token files read through np.memmap (np.load(mmap_mode="r") for .npy).

Usage: nja_memmap.py DIR WORKERS [random]. Each sample is a random-offset window of a token file, copied out of the
memory map (the page faults are the reads), as nanoGPT's get_batch does. ``random``: madvise(MADV_RANDOM) on each map,
so a fault reads its own pages only (a machine's read-ahead of 8 MB otherwise reads a small test's whole file in a
few faults, and which sample's fault fetched the bytes is then chance).
"""
import mmap
import sys
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

BLOCK = 65_536  # tokens per sample (uint16: 128 KiB)


class Tokens(Dataset):
    def __init__(self, folder, random_access=False):
        self.paths = sorted(str(p) for p in Path(folder).iterdir() if p.suffix in (".bin", ".npy"))
        self.maps = None
        self.random_access = random_access

    def __len__(self):
        return 64 * len(self.paths)

    def _open(self):
        if self.maps is None:  # opened in the worker, as nanoGPT re-opens its memmap per batch
            self.maps = [np.load(p, mmap_mode="r") if p.endswith(".npy") else np.memmap(p, dtype=np.uint16, mode="r")
                         for p in self.paths]
            if self.random_access:
                for m in self.maps:
                    m._mmap.madvise(mmap.MADV_RANDOM)
        return self.maps

    def __getitem__(self, i):
        maps = self._open()
        m = maps[i % len(maps)]
        rng = np.random.default_rng(i)
        off = int(rng.integers(0, len(m) - BLOCK - 1))
        x = torch.from_numpy(m[off:off + BLOCK].astype(np.int64))
        return x[:-1], x[1:]


if __name__ == "__main__":
    folder, workers = sys.argv[1], int(sys.argv[2])
    dl = DataLoader(Tokens(folder, "random" in sys.argv[3:]), batch_size=4, shuffle=True, num_workers=workers)
    for x, y in dl:
        pass
