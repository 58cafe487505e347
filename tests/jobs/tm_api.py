"""The Python API with torch_profiler=True (tests/test_trace_merge.py): profiler.profile runs torch.profiler around its
window and writes torch_trace.json into OUT. argv: OUT WORKERS."""
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

import profiler


class Slow(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.full((16,), float(i))


if __name__ == "__main__":
    out, workers = sys.argv[1], int(sys.argv[2])
    loader = DataLoader(Slow(), batch_size=4, num_workers=workers)
    with profiler.profile(out=out, warmup=2, steps=8, plots=False, quiet=True, torch_profiler=True) as run:
        for n, x in enumerate(loader):
            x.sum()
            if n >= 14:
                break
    print("files:", *run.files)
