"""Overhead of profiling a user's own script: the same job run plainly and under `profiler run SCRIPT`, alternated.

    python scripts/bench_overhead_script.py [--rounds 5] [--batches 60]

The job (written to a temp dir) is user-style: a custom map-style Dataset that reads a small file and does some CPU
work per sample, 2 workers, a small model. The script times its own loop from its first batch to its last (so neither
interpreter start-up nor the profiler's report writing is counted) and prints it; the profiled run uses --steps
larger than the job so the whole loop is instrumented. Rounds alternate plain/profiled so drift hits both alike.

Whole-run ratios on a 2-core machine carry ±5-10 % noise, so the instrumentation's own cost is also measured
directly, in-process: µs per dataset call and per batch in a worker (clock reads, sub-stage bookkeeping, the batch
envelope) and µs per step on the main side.

Last line: ``overhead_ratio: X`` = median(plain loop seconds) / median(profiled loop seconds); 1.0 = no overhead,
>= 0.98 is the goal.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = '''
import os, sys, time, numpy as np, torch
from torch.utils.data import DataLoader, Dataset

class Files(Dataset):
    def __init__(self, root):
        self.files = sorted(os.path.join(root, f) for f in os.listdir(root))
    def __len__(self):
        return len(self.files)
    def __getitem__(self, i):
        with open(self.files[i], "rb") as f:
            a = np.frombuffer(f.read(), dtype=np.uint8).astype(np.float32).reshape(64, 64)
        t = torch.from_numpy(a)
        for _ in range(6):
            t = torch.tanh(t @ t / 64)
        return t.flatten(), i % 10

if __name__ == "__main__":
    torch.set_num_threads(1)
    loader = DataLoader(Files(sys.argv[1]), batch_size=16, num_workers=2, shuffle=True,
                        generator=torch.Generator().manual_seed(0))
    model = torch.nn.Sequential(torch.nn.Linear(4096, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    n, t0, want = 0, None, int(sys.argv[2])
    while n < want:
        for x, y in loader:
            if t0 is None:
                t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
            n += 1
            if n >= want:
                break
    print("LOOP_SECONDS", time.perf_counter() - t0)
'''


def loop_seconds(cmd: list[str]) -> float:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    for line in p.stdout.splitlines():
        if line.startswith("LOOP_SECONDS"):
            return float(line.split()[1])
    raise SystemExit(f"job failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")


def direct_costs() -> tuple[float, float, float]:
    """µs per dataset call, per batch (worker side) and per step (main side), measured in-process."""
    import torch
    from torch.utils.data import DataLoader

    from profiler.instrument import clocks, torch_hooks
    from profiler.instrument.session import Session

    n = 20000
    t = time.perf_counter()
    for _ in range(n):
        clocks.snapshot()
    snap_us = (time.perf_counter() - t) / n * 1e6

    class Tiny(torch.utils.data.Dataset):
        def __len__(self):
            return 1 << 30

        def __getitem__(self, i):
            return i

    fetcher = torch.utils.data._utils.fetch._MapDatasetFetcher(Tiny(), True, lambda b: b, False)
    plain = torch.utils.data._utils.fetch._MapDatasetFetcher(Tiny(), True, lambda b: b, False)
    idx = list(range(32))
    reps = 2000
    t = time.perf_counter()
    for _ in range(reps):
        plain.fetch(idx)
    base = time.perf_counter() - t
    torch_hooks.instrument_fetcher(fetcher, 0)
    t = time.perf_counter()
    for _ in range(reps):
        fetcher.fetch(idx)
    inst = time.perf_counter() - t
    per_batch_us = (inst - base) / reps * 1e6
    per_sample_us = per_batch_us / len(idx)
    # Main side: a workers-0 loader of trivial batches, iterated plainly and under a Session.
    loader = DataLoader(list(range(4000)), batch_size=1, num_workers=0)
    t = time.perf_counter()
    for _ in loader:
        pass
    base = time.perf_counter() - t
    s = Session(warmup=0, steps=10**9, then="continue").start()
    try:
        t = time.perf_counter()
        for _ in loader:
            pass
        inst = time.perf_counter() - t
    finally:
        s.stop()
    per_step_us = (inst - base) / 4000 * 1e6 - per_batch_us  # the workers-0 fetch was instrumented too
    del snap_us
    return per_sample_us, per_batch_us, per_step_us


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=200)
    a = ap.parse_args()
    import numpy as np

    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "data"
        root.mkdir()
        rng = np.random.default_rng(0)
        for i in range(512):
            (root / f"{i:04d}.bin").write_bytes(rng.integers(0, 255, 4096, dtype=np.uint8).tobytes())
        job = Path(d) / "job.py"
        job.write_text(JOB)
        plain_cmd = [sys.executable, str(job), str(root), str(a.batches)]
        prof_cmd = [sys.executable, "-m", "profiler", "run", "--no-progress", "--no-plots", "--warmup", "0",
                    "--steps", "100000", "--out", str(Path(d) / "out"), str(job), str(root), str(a.batches)]
        plain, prof = [], []
        for r in range(a.rounds):
            plain.append(loop_seconds(plain_cmd))
            prof.append(loop_seconds(prof_cmd))
            print(f"round {r + 1}: plain {plain[-1]:.3f} s, profiled {prof[-1]:.3f} s, "
                  f"ratio {plain[-1] / prof[-1]:.3f}", flush=True)
    per_sample, per_batch, per_step = direct_costs()
    loop_ms = statistics.median(prof) / a.batches * 1e3
    print(f"instrumentation, measured directly: {per_sample:.1f} us per dataset call, {per_batch:.1f} us per batch "
          f"of 32 in the worker; {per_step:.1f} us per step on the main side ({per_step / 1e3 / loop_ms * 100:.2f} % "
          f"of this job's {loop_ms:.1f} ms step)")
    print(f"overhead_ratio: {statistics.median(plain) / statistics.median(prof):.3f}")


if __name__ == "__main__":
    main()
