"""The DDP tutorial's shape (multigpu_torchrun.py) on gloo/CPU: DistributedSampler, DDP model, a shape probe of one
batch from a throwaway loader before training. Planted CPU work per sample in one worker: input-bound (cpu) on
every rank.

argv: [steps]
"""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Samples(Dataset):
    def __len__(self):
        return 512

    def __getitem__(self, i):
        x = torch.ones(64, 64)
        for _ in range(14):
            x = torch.tanh(x @ x / 64)
        return torch.randn(20), torch.randn(1)


class Probe(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.randn(20), torch.randn(1)


if __name__ == "__main__":
    torch.set_num_threads(1)
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    dist.init_process_group("gloo")
    x0, _ = next(iter(DataLoader(Probe(), batch_size=4)))  # the input shape, as scripts often do
    ds = Samples()
    loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds), num_workers=1, pin_memory=False)
    model = DDP(torch.nn.Linear(x0.shape[1], 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    done, epoch = 0, 0
    while done < steps:
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            done += 1
            if done >= steps:
                break
        epoch += 1
    dist.destroy_process_group()
