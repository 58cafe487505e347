"""Cross-check: the profiler's stall fraction vs a plain loop's own timing of ``next()``.

The design's first sanity check for attribution: on the CPU the idle time the profiler reports is the main loop's
wait for batches, so an input-bound plain PyTorch loop that simply times its own ``next()`` calls must see the same
share of its time waiting. Rounds alternate plain and profiled runs of the same input-bound configuration (1 worker,
standard augmentation, the tiny model at 64 px on one compute thread) on the default dataset.

    python scripts/bench_stall_agreement.py [--rounds 4]

Last line: ``stall_agreement: 0.98`` = median over rounds of (profiled stall fraction / plain wait fraction).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from bench_overhead import plain_run, profiled_run  # noqa: E402

from profiler.harness.data import ensure_sample_dataset, scan_dataset  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=4)
    a = p.parse_args()
    a.workers, a.batch_size, a.image_size, a.model, a.augment = 1, 32, 64, "tiny", "standard"
    # One compute thread + one worker on a 2-core machine: no oversubscription, so run-to-run noise is the
    # measurement's, not the scheduler's (with 2 OpenMP threads plus a worker the wait share swings 20-45 %).
    torch.set_num_threads(1)
    root = ensure_sample_dataset()
    idx = scan_dataset(root)
    ratios = []
    for r in range(a.rounds):
        waits: list[float] = []
        plain_run(idx.files, idx.labels, a, waits)
        plain_frac = sum(waits) / a.plain_window_s
        recs: list = []
        profiled_run(str(root), a, recs)
        prof_frac = recs[0].stall["fraction"]
        ratios.append(prof_frac / plain_frac)
        print(f"round {r + 1}: plain loop waited {plain_frac * 100:.1f} % of its time in next(); profiler stall "
              f"{prof_frac * 100:.1f} % (verdict {recs[0].verdict['bottleneck']}); ratio {ratios[-1]:.3f}", flush=True)
    print(f"stall_agreement: {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
