"""MONAI's ThreadDataLoader as MONAI's fast-training guide uses it: a DataLoader whose batches are taken from its
iterator in a background thread (ThreadBuffer) and handed to the training loop over a queue.

argv: [workers] [steps] [repeats] [buffer_size]
CPU-heavy samples (~10 ms of one core each), a tiny model: the workers' CPU work is the bottleneck. Prints 'READY'
once the first step is done; steps 0: epochs for ever (to attach to).
"""
import sys

import torch
from monai.data import Dataset, ThreadDataLoader


def heavy(i):
    x = torch.randn(128, 128, generator=torch.Generator().manual_seed(i))
    for _ in range(25):
        x = torch.tanh(x @ x / 128)
    return {"image": x[0, :32], "label": i}


class HeavySamples(Dataset):
    def __init__(self, n=4096):
        super().__init__(data=list(range(n)))

    def __getitem__(self, i):
        return heavy(i)


if __name__ == "__main__":
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    buffer_size = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    torch.set_num_threads(1)
    loader = ThreadDataLoader(HeavySamples(), batch_size=8, num_workers=workers, buffer_size=buffer_size,
                              repeats=repeats)
    model = torch.nn.Linear(32, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    done = 0
    while not done or not steps or done < steps:
        for batch in loader:
            loss = model(batch["image"]).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            done += 1
            if done == 1:
                print("READY", flush=True)
            if steps and done >= steps:
                break
    print("steps", done, flush=True)
