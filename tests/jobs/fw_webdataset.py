"""A webdataset job as its docs recommend: tar shards, batching inside the pipeline (.batched(16)) and a
DataLoader(batch_size=None) — each step holds 16 samples. A planted per-sample CPU cost in .map() (in one worker)
against a tiny model makes the job input-bound (cause cpu).

argv: SHARD_DIR [steps]
"""
import glob
import sys

import torch
import webdataset as wds


def busy(sample):
    x, y = sample
    z = torch.ones(48, 48)
    for _ in range(4):
        z = torch.tanh(z @ z / 48)
    return torch.as_tensor(x, dtype=torch.float32), int(y)


if __name__ == "__main__":
    torch.set_num_threads(1)
    root, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30
    urls = sorted(glob.glob(f"{root}/shard-*.tar"))
    ds = wds.WebDataset(urls, shardshuffle=False).decode().to_tuple("x.npy", "cls").map(busy).batched(16)
    loader = wds.WebLoader(ds, batch_size=None, num_workers=1)
    model = torch.nn.Linear(32, 4)
    done = 0
    while done < steps:
        for x, y in loader:
            model(x).sum().backward()
            done += 1
            if done >= steps:
                break
