"""A cpu-bound job to attach to (work in __getitem__, 1 worker), whatever its argv says: argv[1] is its seconds (0:
for ever, epoch after epoch: a module's tests share one job for minutes), the rest is only carried (a test puts text
there that once broke the parsing of py-spy's output). A thread named with a ';' runs beside it. Prints READY after
its first step. With H4_STOP_FILE set, it also ends at the first step after that file exists (a test ends it then).
With H4_IDLE set its samples sleep instead of computing (a test that only needs a job running, not a cpu-bound one,
leaves the cores to the rest of the suite)."""
import os
import sys
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

IDLE = bool(os.environ.get("H4_IDLE"))


class Cpu(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        if IDLE:
            time.sleep(0.005)
            return torch.zeros(96)
        x = torch.randn(96, 96)
        for _ in range(20):
            x = torch.tanh(x @ x / 96)
        return x[0]


if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    torch.set_num_threads(1)
    threading.Thread(target=lambda: time.sleep(3600), name="log;ger (x.py:1)", daemon=True).start()
    loader = DataLoader(Cpu(), batch_size=8, num_workers=1)
    model = torch.nn.Linear(96, 96)
    t0 = None
    stop_file = os.environ.get("H4_STOP_FILE")
    while t0 is None or not seconds or time.monotonic() - t0 < seconds:  # epochs: one is ~30 s on an idle core
        for x in loader:
            model(x)
            if t0 is None:
                print("READY", flush=True)
                t0 = time.monotonic()
            if seconds and time.monotonic() - t0 >= seconds or stop_file and os.path.exists(stop_file):
                seconds = 1e-9  # (the outer loop ends too)
                break
