"""The profiler's own cost inside ``next()`` alone, workers=0: the main thread's on-CPU time per ``next()``.

bench_overhead_light.py measures the whole process tree's CPU, which a loaded shared machine (load 4-7 on 2 cores)
swings by ±100 µs per batch between rounds. This one reads only the main thread's CPU clock around each ``next()``
(a TensorDataset in memory, batch 32, optionally a tiny MLP step between batches: ``--model``), in 50-step chunks, and
keeps each loop's 20th-percentile chunk: contention on a loaded machine only ever inflates a chunk. Plain and profiled
loops alternate (the order flips every round).

    python scripts/bench_next_cpu.py [--model] [--rounds 6] [--steps 1000]

Last line: ``next_cpu_overhead_us: N`` — median over rounds of (profiled - plain) per ``next()``.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import profiler  # noqa: E402

CHUNK = 50


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="store_true", help="a tiny MLP training step between batches")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--steps", type=int, default=1000)
    a = p.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    n = 32 * 4096
    ds = TensorDataset(torch.randn(n, 64, generator=g), torch.randint(0, 10, (n,), generator=g))
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    tt = time.thread_time_ns

    def loop(prof: bool, steps: int) -> float:
        loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=0)
        with tempfile.TemporaryDirectory() as tmp:
            ctx = profiler.profile(out=os.path.join(tmp, "o"), warmup=10, steps=steps + 5, plots=False,
                                   quiet=True) if prof else None
            gc.collect()
            if ctx is not None:
                ctx.__enter__()
            it = iter(loader)
            for _ in range(10):
                next(it)
            per = []
            for _ in range(steps // CHUNK):
                acc = 0
                for _ in range(CHUNK):
                    t = tt()
                    x, y = next(it)
                    acc += tt() - t
                    if a.model:
                        loss = torch.nn.functional.cross_entropy(model(x), y)
                        opt.zero_grad()
                        loss.backward()
                        opt.step()
                per.append(acc / CHUNK / 1e3)
            if ctx is not None:
                ctx.__exit__(None, None, None)
        return float(np.percentile(per, 20))

    loop(False, 200)
    loop(True, 200)
    diffs, plain = [], []
    for r in range(a.rounds):
        res = {}
        for kind in ((False, True) if r % 2 == 0 else (True, False)):
            res[kind] = loop(kind, a.steps)
        diffs.append(res[True] - res[False])
        plain.append(res[False])
    what = " with a model step" if a.model else ""
    rounds = ", ".join(f"{d:.1f}" for d in diffs)
    print(f"next() main-thread CPU, workers=0{what}: plain {statistics.median(plain):.1f} us; profiled - plain per "
          f"round {rounds} us (load {os.getloadavg()[0]:.1f})")
    print(f"next_cpu_overhead_us: {statistics.median(diffs):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
