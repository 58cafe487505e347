"""A job whose input is bound by moving batches from the workers to the main process: each batch is a list of 64
uncollated samples of 4 small tensors (256 tensors, each passed as its own shared-memory file descriptor and rebuilt
in the main process), made by 2 workers that are idle much of the time. argv: [seconds from the first step (0: for
ever)] [work: small matmuls per sample, 0 by default]. Prints READY after the first step. With H4_STOP_FILE set, it
also ends at the first step after that file exists (a test ends it when its attach is done)."""
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Many(Dataset):
    def __len__(self):
        return 1_000_000

    def __init__(self, work):
        self.work = work

    def __getitem__(self, i):
        x = torch.full((32, 32), float(i))
        for _ in range(self.work):
            x = torch.tanh(x @ x / 32)
        return tuple(x[k, :16].clone() for k in range(4))


def keep(b):
    return b


if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    work = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    torch.set_num_threads(1)
    loader = DataLoader(Many(work), batch_size=64, num_workers=2, collate_fn=keep)
    t0 = None
    stop_file = os.environ.get("H4_STOP_FILE")
    for batch in loader:
        sum(float(s[0][0]) for s in batch[:4])
        if t0 is None:
            print("READY", flush=True)
            t0 = time.monotonic()
        if seconds and time.monotonic() - t0 >= seconds or stop_file and os.path.exists(stop_file):
            break
