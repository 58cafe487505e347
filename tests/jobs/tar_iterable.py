"""A user's job: an IterableDataset over tar shards, split across 2 workers; dict batches."""
import os
import sys
import tarfile

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class Shards(IterableDataset):
    def __init__(self, root):
        self.shards = sorted(os.path.join(root, f) for f in os.listdir(root) if f.endswith(".tar"))

    def __iter__(self):
        info = get_worker_info()
        mine = self.shards if info is None else self.shards[info.id::info.num_workers]
        for path in mine:
            with tarfile.open(path) as tf:
                for m in tf:
                    data = tf.extractfile(m).read()
                    yield {"x": torch.frombuffer(bytearray(data[:1024]), dtype=torch.uint8).float(), "name": m.name}


if __name__ == "__main__":
    loader = DataLoader(Shards(sys.argv[1]), batch_size=4, num_workers=2)
    n = 0
    for batch in loader:
        assert isinstance(batch, dict) and batch["x"].shape[1] == 1024
        n += 1
    print("BATCHES", n)
