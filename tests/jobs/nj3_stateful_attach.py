"""torchdata's StatefulDataLoader training for a while, to attach to: argv [workers] [seconds].

CPU-heavy samples (~10 ms of one core each) and a tiny model: the workers' CPU work is the bottleneck. Prints
'READY' once the first step is done; runs epochs until ``seconds`` pass from then (0: for ever).
"""
import sys
import time

import torch
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader


class HeavySamples(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        x = torch.randn(128, 128, generator=torch.Generator().manual_seed(i))
        for _ in range(25):
            x = torch.tanh(x @ x / 128)
        return x[0, :32]


if __name__ == "__main__":
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    torch.set_num_threads(1)
    loader = StatefulDataLoader(HeavySamples(), batch_size=8, num_workers=workers, shuffle=True)
    model = torch.nn.Linear(32, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    t0 = 0.0
    while True:
        for x in loader:
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if not t0:
                t0 = time.monotonic()
                print("READY", flush=True)
            if seconds and time.monotonic() - t0 >= seconds:
                sys.exit(0)
