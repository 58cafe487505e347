"""How good are the what-if predictions? Sweeps of the built-in pipeline, each point predicted from the 1-worker run.

Two configurations of the default sample dataset: CPU-bound (no model, heavy augmentation) and storage-throttled
(cold cache, 5 MB/s and 100 IOPS). Each is a ``profiler sweep`` whose first point is workers=1; the others (0, 2, 3,
4) are predicted from it alone. Prints every point and, last, ``whatif_error: X``: the median absolute relative error
of those predictions. Goal <= 0.15. About 6-8 minutes on 2 cores; on a shared host the figure moves with the load.

    PYTHONPATH=$PWD python scripts/bench_whatif.py [--out DIR] [--steps N]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CONFIGS = {
    "cpu-bound": ["--model", "none", "--augment", "heavy", "--batch-size", "16"],
    "storage-throttled": ["--model", "none", "--augment", "none", "--batch-size", "16", "--cache", "cold",
                          "--throttle", "5MB/s,100iops"],
}
WORKERS = "1,0,2,3,4"  # the first point (1 worker) is the one every other point is predicted from


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="keep the sweeps here (default: a temporary folder)")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--only", choices=tuple(CONFIGS), help="one configuration only")
    a = ap.parse_args()
    base = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="bench_whatif-"))
    errors: list[float] = []
    for name, opts in CONFIGS.items():
        if a.only and name != a.only:
            continue
        out = base / name
        cmd = [sys.executable, "-m", "profiler", "sweep", "--workers", WORKERS, "--no-progress", "--no-plots",
               "--out", str(out), "--steps", str(a.steps), "--warmup", str(a.warmup), *opts]
        rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False).returncode
        doc = json.loads((out / "sweep.json").read_text())
        print(f"{name} (exit {rc}): {' '.join(opts)}")
        for p in doc["points"]:
            m, pr = p.get("measured_samples_per_s"), p.get("predicted_samples_per_s")
            err = p.get("error")
            load = p.get("cores_available")
            print(f"  {p['label']:12s} measured {m or 0:7.1f}  predicted {pr or 0:7.1f}  cores for the job "
                  f"{load if load is not None else float('nan'):5.1f}  "
                  + ("baseline" if p["index"] == doc.get("baseline") else
                     f"error {err * 100:+6.1f} %  (binds: {p.get('predicted_binds')})" if err is not None
                     else p.get("failed", "")))
            if err is not None:
                errors.append(abs(err))
    print(f"points predicted: {len(errors)}; sweeps in {base}")
    print(f"whatif_error: {statistics.median(errors):.3f}" if errors else "whatif_error: nan")
    return 0 if errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
