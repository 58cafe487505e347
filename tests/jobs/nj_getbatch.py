"""nanoGPT's training loop: get_batch() slices random windows out of a token file through np.memmap; no DataLoader.

argv: TOKENS_FILE [steps] [wrapped]   (the file is made here when missing: uint16 tokens)
  wrapped: the same get_batch() run by a DataLoader, as the profiler's "iterated no DataLoader" line suggests (an
  IterableDataset that yields get_batch() forever, batch_size=None, no workers), with its read named by
  profiler.stage("read").
"""
import os
import sys

import numpy as np
import torch

BLOCK, BATCH = 64, 8


def get_batch(path, stage=None):
    data = np.memmap(path, dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - BLOCK, (BATCH,))
    if stage is not None:
        with stage("read"):
            rows = [np.array(data[i:i + 1 + BLOCK]) for i in ix]
        del rows
    x = torch.stack([torch.from_numpy(data[i:i + BLOCK].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + BLOCK].astype(np.int64)) for i in ix])
    return x, y


if __name__ == "__main__":
    path = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    if not os.path.exists(path):
        np.random.default_rng(0).integers(0, 50_000, 200_000, dtype=np.uint16).tofile(path)
    emb = torch.nn.Embedding(50_000, 16)
    if len(sys.argv) > 3 and sys.argv[3] == "wrapped":
        from torch.utils.data import DataLoader, IterableDataset

        import profiler

        class Batches(IterableDataset):
            def __iter__(self):
                while True:
                    yield get_batch(path, profiler.stage)

        for i, (x, y) in enumerate(DataLoader(Batches(), batch_size=None)):
            emb(x).sum().backward()
            if i + 1 >= steps:
                break
    else:
        for _ in range(steps):
            x, y = get_batch(path)
            emb(x).sum().backward()
    print("steps", steps, flush=True)
