"""A user's job: a map-style Dataset of raw binary files, 2 workers, a tiny model. Prints what it observed."""
import hashlib
import os
import sys

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class RawFiles(Dataset):
    def __init__(self, root):
        self.files = sorted(os.path.join(root, f) for f in os.listdir(root))

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with open(self.files[i], "rb") as f:
            a = np.frombuffer(f.read(), dtype=np.uint8).astype(np.float32)
        return torch.from_numpy(a[:4096].copy()), i


def main():
    root, epochs = sys.argv[1], int(sys.argv[2])
    ds = RawFiles(root)
    g = torch.Generator().manual_seed(7)
    loader = DataLoader(ds, batch_size=8, shuffle=True, num_workers=2, generator=g)
    model = torch.nn.Linear(4096, 4)
    seen = hashlib.sha1()
    for _ in range(epochs):
        for x, idx in loader:
            assert type(loader.dataset) is RawFiles and isinstance(x, torch.Tensor), (type(loader.dataset), type(x))
            seen.update(idx.numpy().tobytes())
            model(x / 255).sum().backward()
    print("ORDER", seen.hexdigest())


if __name__ == "__main__":
    main()
