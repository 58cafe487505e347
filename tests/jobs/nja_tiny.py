"""A user's job with tiny batches (8 x 64 float32: 2 KB) on busy cores: 2 workers doing CPU work per sample and a
model step that keeps the main process's threads busy, on a 2-core machine.

Usage: nja_tiny.py [BURNERS]. BURNERS extra busy-loop processes share the cores for the job's life.
"""
import multiprocessing as mp
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Small(Dataset):
    def __len__(self):
        return 4000

    def __getitem__(self, i):
        t = time.perf_counter() + 0.0015
        while time.perf_counter() < t:
            pass
        return torch.full((64,), float(i))


def burn(stop):
    while not stop.is_set():
        pass


if __name__ == "__main__":
    burners = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    stop = mp.get_context("fork").Event()
    procs = [mp.get_context("fork").Process(target=burn, args=(stop,), daemon=True) for _ in range(burners)]
    for p in procs:
        p.start()
    w = torch.randn(256, 256)
    try:
        for x in DataLoader(Small(), batch_size=8, num_workers=2):
            y = torch.randn(256, 256)
            for _ in range(2):
                y = torch.tanh(y @ w)
    finally:
        stop.set()
        for p in procs:
            p.join()
