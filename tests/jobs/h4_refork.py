"""A job that re-forks its DataLoader workers every epoch (persistent_workers=False, short epochs), to attach to.

argv: [seconds (0: for ever)] [samples per epoch] [workers]. Prints READY after the first batch. Each epoch's
workers exit at its end and new ones are forked for the next: what `attach` must forget once they are gone
(tests/test_hardening4.py, scripts/bench_attach_long.py).
"""
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Work(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = torch.randn(64, 64)
        for _ in range(4):
            x = torch.tanh(x @ x / 64)
        return x[0]


if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    per_epoch = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    torch.set_num_threads(1)
    loader = DataLoader(Work(per_epoch), batch_size=8, num_workers=workers, persistent_workers=False)
    model = torch.nn.Linear(64, 64)
    t0 = None
    while t0 is None or not seconds or time.monotonic() - t0 < seconds:
        for x in loader:
            model(x)
            time.sleep(0.002)
            if t0 is None:
                print("READY", flush=True)
                t0 = time.monotonic()
