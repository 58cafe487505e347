"""A user's job that runs its own torch.profiler (tests/test_trace_merge.py): a slow dataset (sleeps, then CPU work:
the job waits for input), prof.step() at the end of each step, the trace written by tensorboard_trace_handler (or,
with ``export``, by prof.export_chrome_trace after the block; with ``none`` it runs no torch.profiler: for run
--torch-profiler). argv: WORKERS TRACE_DIR [handler|export|none] [STEPS]."""
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 4000

    def __getitem__(self, i):
        time.sleep(0.01)  # 40 ms a batch of 4 per worker: the job waits for input most of each step
        x = torch.full((64, 64), float(i))
        return (x @ x).sum(), i


if __name__ == "__main__":
    workers, trace_dir = int(sys.argv[1]), sys.argv[2]
    how = sys.argv[3] if len(sys.argv) > 3 else "handler"
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 12
    os.makedirs(trace_dir, exist_ok=True)
    loader = DataLoader(Slow(), batch_size=4, num_workers=workers)
    model = torch.nn.Linear(64, 64)
    ready = tensorboard_trace_handler(trace_dir) if how == "handler" else None
    if how == "none":
        for n, (x, y) in enumerate(loader):
            model(torch.randn(4, 64)).sum().backward()
            if n >= steps + 4:
                break
        sys.exit(0)
    # export: every step of the block is active, exported after it
    sched = schedule(wait=1, warmup=1, active=steps) if how == "handler" else schedule(wait=0, warmup=1, active=999)
    with profile(activities=[ProfilerActivity.CPU], schedule=sched, on_trace_ready=ready) as prof:
        for n, (x, y) in enumerate(loader):
            model(torch.randn(4, 64)).sum().backward()
            prof.step()
            if n >= steps + 4:
                break
    if how == "export":
        prof.export_chrome_trace(os.path.join(trace_dir, "job_trace.json"))
