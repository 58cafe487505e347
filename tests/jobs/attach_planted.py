"""A long-running job with a planted cause, to attach to: argv kind [data dir] [workers] [seconds].

kind: 'cpu' (work in __getitem__), 'model' (a heavy model, input keeps up), 'io' (each file read cold: evicted from
the page cache first, so under a throttle every read waits on the device) — tests/jobs/planted.py's dataset; 'ddp'
(under torchrun: rank 1 cpu-bound, the others wait for it in the all-reduce). Runs epochs until ``seconds`` pass
from the first step (or for ever with 0), so attach finds it training; prints 'READY' once the first step is done
and, at the end, 'RATE' with the samples per second from then on, and the job's CPU seconds per sample (all its
processes); with ATTACH_PROGRESS=1 also 'N <samples>' per batch (scripts/bench_attach.py). With H4_STOP_FILE set
(not 'ddp'), it also ends at the first step after that file exists (a test ends it when its attach is done).
"""
import os
import sys
import time

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # under `run` (runpy) too
from planted import Planted  # noqa: E402  (the same planted causes as `run`'s tests)


def ddp_main(seconds):
    """kind 'ddp' under torchrun (gloo): rank SLOW_RANK (default 1) loads with the cpu cause, the others a light
    sample; every step's backward all-reduces, so the fast ranks wait for it there."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    slow = dist.get_rank() == int(os.environ.get("SLOW_RANK", "1"))
    loader = DataLoader(Planted("cpu" if slow else "light", None, length=100_000), batch_size=16, num_workers=1)
    model = DDP(torch.nn.Linear(128, 128))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    t0 = time.monotonic()
    for k, x in enumerate(loader):
        if k == 0:
            print("READY", flush=True)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if time.monotonic() - t0 >= seconds:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    kind = sys.argv[1]
    root = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] != "-" else None
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    torch.set_num_threads(1)
    if kind == "ddp":
        ddp_main(seconds or 60.0)
        sys.exit(0)
    loader = DataLoader(Planted(kind, root, length=100_000, cold=True), batch_size=16 if kind != "io" else 4,
                        num_workers=workers, shuffle=True)
    model = torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(60 if kind == "model" else 1)])
    progress = os.environ.get("ATTACH_PROGRESS") == "1"  # scripts/bench_attach.py counts samples per window
    ready = False
    n, t1 = 0, 0.0
    stop_file = os.environ.get("H4_STOP_FILE")
    # seconds count from the end of the first step: on a loaded machine the first batch alone can take most of them,
    # and an attach that starts at READY must find the job still training. READY comes after the first step's model
    # call, not with its batch: that call is the job's warm-up too (torch's kernels paged in, which under --throttle
    # reads libtorch from the throttled disk: seconds of the main thread in state D), and `run --warmup 1` leaves the
    # whole first step out of its window, so an attach from READY samples the same steady state as the run measures
    while not seconds or not ready or time.monotonic() - t1 < seconds:
        for x in loader:
            if ready:
                n += len(x)
                if progress:
                    print(f"N {n}", flush=True)
            if kind == "model":
                for _ in range(120):
                    x = model(x)
            else:
                model(x)
            if not ready:
                print("READY", flush=True)
                ready, t1 = True, time.monotonic()
            if seconds and time.monotonic() - t1 >= seconds or stop_file and os.path.exists(stop_file):
                seconds = 1e-9  # (the outer loop ends too)
                break
    elapsed = time.monotonic() - t1
    del loader  # workers joined (and reaped): their CPU time is in RUSAGE_CHILDREN
    import gc
    import resource

    gc.collect()
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"RATE {n / elapsed:.3f} CPU_PER_SAMPLE {(time.process_time() + ch.ru_utime + ch.ru_stime) / max(n, 1):.6f}",
          flush=True)
