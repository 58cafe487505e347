"""A user's job running its own torch.profiler started by hand (tests/test_trace_merge2.py): ``prof.start()``, one
``prof.step()`` per batch, ``prof.stop()`` after the loop, which the window's close (``--then exit``) cuts off, so the
profiler is still recording when the job ends (kineto left running crashed the interpreter's exit).

argv: WORKERS TRACE_DIR MODE. MODE ``cycles``: a schedule repeating every 6 steps, each cycle written by
``tensorboard_trace_handler(use_gzip=True)``, with shapes, memory events and Python stacks (kineto's own Python
spans partly overlap there); ``plain``: no schedule, ``prof.export_chrome_trace`` after the stop (no
ProfilerStep spans in the trace: a profiler never given a schedule records none); ``legacy``: a
``with torch.autograd.profiler.profile()`` block, ``export_chrome_trace`` after it."""
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
from torch.utils.data import DataLoader, Dataset

import profiler


class Slow(Dataset):
    def __len__(self):
        return 4000

    def __getitem__(self, i):
        with profiler.stage("read"):  # this project's stage names: the merged trace's spans inside each sample
            time.sleep(0.005)  # the job waits for input most of each step
        with profiler.stage("decode"):
            return torch.full((16,), float(i))


if __name__ == "__main__":
    workers, trace_dir, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    os.makedirs(trace_dir, exist_ok=True)
    loader = DataLoader(Slow(), batch_size=4, num_workers=workers)
    model = torch.nn.Linear(16, 16)
    if mode == "legacy":  # the older torch.autograd.profiler.profile, exported after its block
        with torch.autograd.profiler.profile() as old:
            for n, x in enumerate(loader):
                model(x).sum().backward()
                if n >= 20:
                    break
        old.export_chrome_trace(os.path.join(trace_dir, "legacy.json"))
        sys.exit(0)
    if mode == "cycles":
        prof = profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=4),
                       on_trace_ready=tensorboard_trace_handler(trace_dir, use_gzip=True),
                       record_shapes=True, profile_memory=True, with_stack=True)
    else:
        prof = profile(activities=[ProfilerActivity.CPU])
    prof.start()
    for n, x in enumerate(loader):
        model(x).sum().backward()
        prof.step()
        if n >= 40:
            break
    prof.stop()
    if mode == "plain":
        prof.export_chrome_trace(os.path.join(trace_dir, "plain.json"))
