"""Planted causes, chosen by argv: 'cpu' (work in __getitem__), 'model' (a heavy model), 'io' (reads files)."""
import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset


class Planted(Dataset):
    """length: samples without files; cold: each file evicted from the page cache before it is read (so that under a
    throttle every read waits on the device; tests/jobs/attach_planted.py)."""

    def __init__(self, kind, root, length=10_000, cold=False):
        self.kind = kind
        self.files = sorted(os.path.join(root, f) for f in os.listdir(root)) if root else []
        self.length = length
        self.cold = cold

    def __len__(self):
        return len(self.files) if self.files else self.length

    def __getitem__(self, i):
        if self.kind == "cpu":
            x = torch.randn(128, 128)
            for _ in range(30):
                x = torch.tanh(x @ x / 128)
            return x[0]
        if self.kind == "io" and self.cold:
            fd = os.open(self.files[i], os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                data = os.read(fd, 1 << 20)
            finally:
                os.close(fd)
            return torch.tensor(len(data), dtype=torch.float32).repeat(128)
        if self.kind == "io":
            with open(self.files[i], "rb") as f:
                data = f.read()
            return torch.tensor(len(data), dtype=torch.float32).repeat(128)
        return torch.randn(128)


if __name__ == "__main__":
    kind = sys.argv[1]
    root = sys.argv[2] if len(sys.argv) > 2 else None
    torch.set_num_threads(1)
    loader = DataLoader(Planted(kind, root), batch_size=16, num_workers=1, shuffle=True)
    model = torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(60 if kind == "model" else 1)])
    for x in loader:
        if kind == "model":
            # A step long enough (~0.2 s) that the per-step hand-over of a batch (a few ms, more on a loaded
            # machine) stays far below the 5 % that would make the run input-bound.
            for _ in range(200):
                x = model(x)
        else:
            model(x)
