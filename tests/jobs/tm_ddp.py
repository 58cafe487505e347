"""A DDP job (gloo, CPU) whose every rank runs its own torch.profiler through tensorboard_trace_handler
(tests/test_trace_merge2.py: a torchrun pair of ``python -m profiler run``). argv: WORKERS TRACE_DIR."""
import sys
import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Slow(Dataset):
    def __len__(self):
        return 4000

    def __getitem__(self, i):
        time.sleep(0.005)  # the job waits for input most of each step
        return torch.full((16,), float(i))


if __name__ == "__main__":
    workers, trace_dir = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo")
    data = Slow()
    loader = DataLoader(data, batch_size=4, num_workers=workers, sampler=DistributedSampler(data, shuffle=False))
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 16))
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=6, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(trace_dir)) as prof:
        for n, x in enumerate(loader):
            model(x).sum().backward()
            prof.step()
            if n >= 40:
                break
    dist.destroy_process_group()
