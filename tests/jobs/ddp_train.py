"""A plain DDP training script (gloo, CPU), as a user would write it; run under torchrun.

argv: MODE DATA_DIR [RANK1_DATA_DIR]
  balanced  every rank reads DATA_DIR, same work
  cpu       rank 1's dataset does planted extra CPU work per sample (it becomes the straggler, cause cpu)
  io        rank 1 reads RANK1_DATA_DIR (the test makes it cold and throttled), rank 0 reads DATA_DIR (warm)
  die       rank 1 ends abruptly (os._exit) after a few batches, leaving no record
  dienode   every rank of torchrun node 1 (GROUP_RANK 1) ends abruptly after a few batches
env SLOW_RANK (default 1): the rank made slow in mode cpu; SLOW_WORK (default 40): its matmuls per sample
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Files(Dataset):
    def __init__(self, root, extra_cpu):
        self.files = sorted(os.path.join(root, f) for f in os.listdir(root))
        self.extra_cpu = extra_cpu

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with open(self.files[i], "rb") as f:
            data = f.read()
        if self.extra_cpu:
            x = torch.randn(128, 128)
            for _ in range(int(os.environ.get("SLOW_WORK", "40"))):
                x = torch.tanh(x @ x / 128)
        return torch.tensor(list(data[:64]), dtype=torch.float32) / 255


def main():
    mode, root = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if mode == "io" and rank == 1:
        root = sys.argv[3]
    ds = Files(root, extra_cpu=(mode == "cpu" and rank == int(os.environ.get("SLOW_RANK", "1"))))
    sampler = DistributedSampler(ds, seed=0)
    loader = DataLoader(ds, batch_size=8, sampler=sampler, num_workers=1, persistent_workers=True)
    model = DDP(torch.nn.Linear(64, 64))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = 0
    for epoch in range(50):
        sampler.set_epoch(epoch)
        for x in loader:
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            batches += 1
            if mode == "die" and rank == 1 and batches == 4:
                os._exit(1)
            if mode == "dienode" and os.environ.get("GROUP_RANK") == "1" and batches == 4:
                os._exit(1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
