"""Overhead of profiling: the same DataLoader + model loop in plain PyTorch and under the profiler.

Both loops use the same files, transform, model, batch size, workers and steps; rounds alternate which goes first
so drift (thermal, page cache, other load) hits both equally. Throughput is measured over the same window in both
(after the warm-up steps, to the end of the last step). The ratio profiled/plain is the median over rounds.

    python scripts/bench_overhead.py [--rounds 4] [--steps 20] [--warmup 4] [--workers 2] [--model tiny]

Last line: ``overhead_ratio: 0.99`` (1.0 = no overhead; the goal is >= 0.98).
"""
from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from profiler.analysis import analyze  # noqa: E402
from profiler.config import RunConfig  # noqa: E402
from profiler.harness.builtin import make_step_fn  # noqa: E402
from profiler.harness.data import ensure_sample_dataset, scan_dataset  # noqa: E402
from profiler.harness.models import build_model  # noqa: E402
from profiler.harness.runner import execute, prepare  # noqa: E402
from profiler.harness.transforms import build_transform  # noqa: E402


class PlainImages(Dataset):
    """The profiler's dataset without its instrumentation: read the bytes, decode, transform → (tensor, label).

    (Reading the whole file before decoding, as the profiler does, is a little cheaper than letting PIL read from
    the file object in small chunks; the plain loop must do the same work for the ratio to measure overhead only.)"""

    def __init__(self, files, labels, transform):
        # numpy arrays, as in the profiler's dataset (lists of Python objects get copied into workers on access).
        self.files = np.array(files, dtype=np.str_)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.transform = transform

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with open(str(self.files[i]), "rb") as f:
            data = f.read()
        img = Image.open(io.BytesIO(data)).convert("RGB")
        return self.transform(img), int(self.labels[i])


def stack_collate(items):
    """torch.stack, as the profiler's collate does (default_collate stacks straight into a new shared-memory block,
    which on this kind of machine is measurably slower; the benchmark must compare like with like)."""
    return torch.stack([x for x, _ in items]), torch.tensor([y for _, y in items])


def plain_run(files, labels, a, waits: list | None = None) -> float:
    torch.manual_seed(0)
    model = build_model(a.model, num_classes=10)
    step = make_step_fn(model, "train", torch.device("cpu"), False)
    a.plain_window_s = None
    # The same shuffled order as the profiler's batch sampler (seed 0), as plain lists of indices.
    need = (a.warmup + a.steps) * a.batch_size
    order: list[int] = []
    while len(order) < need:  # epoch after epoch, reshuffled with seed + epoch, as StreamBatchSampler does
        order += np.random.default_rng(len(order) // len(files)).permutation(len(files)).tolist()
    batches = [order[i:i + a.batch_size] for i in range(0, need, a.batch_size)]
    loader = DataLoader(PlainImages(files, labels, build_transform(getattr(a, "augment", "standard"), a.image_size)),
                        batch_sampler=batches,
                        num_workers=a.workers, collate_fn=stack_collate)
    # Same window as the profiler's: from asking for the first measured batch to the end of the last step.
    it = iter(loader)
    n = 0
    t_start = time.perf_counter()
    for i in range(a.warmup + a.steps):
        if i == a.warmup:
            t_start = time.perf_counter()
        t_wait = time.perf_counter()
        x, y = next(it)
        if waits is not None and i >= a.warmup:
            waits.append(time.perf_counter() - t_wait)
        step(x, y)
        if i >= a.warmup:
            n += len(x)
    elapsed = time.perf_counter() - t_start
    a.plain_window_s = elapsed
    del it
    return n / elapsed


def profiled_run(data: str, a, records: list | None = None) -> float:
    c = RunConfig(data=data, workers=a.workers, batch_size=a.batch_size, model=a.model, steps=a.steps,
                  warmup=a.warmup, image_size=a.image_size, out="unused", augment=getattr(a, "augment", "standard"))
    rec = analyze(execute(prepare(c)))
    if records is not None:
        records.append(rec)
    return rec.throughput["samples_per_s"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--model", default="tiny")
    a = p.parse_args()
    root = ensure_sample_dataset()
    idx = scan_dataset(root)
    # One discarded round of each first: the first loop in a fresh process pays one-off costs (imports, allocator
    # growth, lazy module init) that would otherwise land on whichever variant happens to go first.
    plain_run(idx.files, idx.labels, a)
    profiled_run(str(root), a)
    ratios = []
    for r in range(a.rounds):
        order = ("plain", "profiled") if r % 2 == 0 else ("profiled", "plain")
        res = {}
        for kind in order:
            res[kind] = plain_run(idx.files, idx.labels, a) if kind == "plain" else profiled_run(str(root), a)
        ratios.append(res["profiled"] / res["plain"])
        print(f"round {r + 1}: plain {res['plain']:.1f} samples/s, profiled {res['profiled']:.1f} samples/s, "
              f"ratio {ratios[-1]:.3f}", flush=True)
    print(f"rounds: {', '.join(f'{x:.3f}' for x in ratios)}; spread {min(ratios):.3f}-{max(ratios):.3f}")
    print(f"overhead_ratio: {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
