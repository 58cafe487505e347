"""How the profiler's own cost grows with the length of a run: main-process RSS and run.json size per 1,000 steps.

    python scripts/bench_long_run.py [--steps 5000,40000]

Runs the built-in pipeline on a cheap configuration (64 tiny PNGs, batch 1, no model, 1 worker: ~1 ms per step, so
the profiler's bookkeeping is most of the work) for each step count, polling the main process's RSS, and prints per
point the peak RSS and run.json size. Two caps keep a run bounded: the record keeps the first 2,000 measured steps in
full detail and folds the rest into exact totals (docs/run_json.md, `timeline.tail`), and the background sampler
halves its series and rate once they hold 4,000 points (profiler/samplers/thinning.py). At the default 10 Hz the
sampler reaches its cap after ~7 minutes, longer than these runs, so the bench samples every 2 ms
(`--sample-interval 0.002`): every point is then beyond both caps, and beyond them both figures should stop growing.

Last line: ``bytes_per_1k_steps: X`` — run.json growth per 1,000 steps between the smallest and largest step count
(goal ~0). The line before gives the same for peak RSS.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# Fine enough that the smallest run (5,000 steps, ~25 s) passes the sampler's 4,000-point cap within ~8 s (see above).
SAMPLE_INTERVAL_S = 0.002


def run(data: Path, out: Path, steps: int) -> tuple[int, int, float]:
    """(peak RSS of the main process, run.json bytes, seconds). The peak is the kernel's own (``ru_maxrss`` from
    wait4): exact, including the last moments of the process, which polling would miss or catch by chance."""
    cmd = [sys.executable, "-m", "profiler", "run", "--no-progress", "--no-plots", "--data", str(data),
           "--workers", "1", "--batch-size", "1", "--image-size", "16", "--augment", "none", "--model", "none",
           "--device", "cpu", "--warmup", "5", "--steps", str(steps), "--out", str(out),
           "--sample-interval", str(SAMPLE_INTERVAL_S)]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            err.seek(0)
            raise SystemExit(f"run failed ({p.returncode}): {err.read().decode()[-2000:]}")
    # ru_maxrss is the largest of the process and the children it waited for (its workers are smaller).
    return int(usage.ru_maxrss) * 1024, (out / "run.json").stat().st_size, time.perf_counter() - t0


def caps(out: Path) -> str:
    """Whether the run is beyond both caps: its tail of steps and the sampler's halvings."""
    rec = json.loads((out / "run.json").read_text())
    tail = ((rec.get("timeline") or {}).get("tail") or {}).get("steps", 0)
    return f"{tail} steps in the tail, sampler halved {(rec.get('samples') or {}).get('halvings', 0)}x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="5000,40000", help="comma-separated step counts (default 5000,40000)")
    a = ap.parse_args()
    counts = sorted(int(s) for s in a.steps.split(","))
    from PIL import Image

    with tempfile.TemporaryDirectory() as d:
        data = Path(d) / "data"
        data.mkdir()
        rng = np.random.default_rng(0)
        for i in range(64):
            Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(data / f"{i:02d}.png")
        points = []
        for n in counts:
            rss, size, secs = run(data, Path(d) / f"out{n}", n)
            points.append((n, rss, size))
            print(f"{n:>7} steps: peak RSS {rss / 2**20:7.1f} MiB, run.json {size / 2**20:6.2f} MiB, {secs:5.1f} s "
                  f"({caps(Path(d) / f'out{n}')})", flush=True)
    (n0, r0, s0), (n1, r1, s1) = points[0], points[-1]
    k = (n1 - n0) / 1000
    print(f"rss_bytes_per_1k_steps: {(r1 - r0) / k:.0f}")
    print(f"bytes_per_1k_steps: {(s1 - s0) / k:.0f}")


if __name__ == "__main__":
    main()
