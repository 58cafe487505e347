"""attach's own cost over a long attach to a job that re-forks its DataLoader workers every epoch.

    python scripts/bench_attach_long.py [--minutes 30] [--every 60] [--per-epoch 64] [--rate 20]

Starts tests/jobs/h4_refork.py (2 workers, persistent_workers=False: a new pair of worker processes every epoch,
about one a second with the default 1,024 samples per epoch), attaches to it with ``python -m profiler attach`` for the
whole duration, and every ``--every`` seconds reads the CPU seconds attach has spent so far: its own process and
py-spy (its child), from /proc (utime + stime). Prints one line per interval (attach's share of one core in it, the
worker processes forked so far), then the record's size and the slope.

Why a slope and not one figure: the leak this guards against (attach reading every dead worker's threads at each
tick) showed as a share of a core that rose with time (3 % → 18 % in 45 s); flat cost is a first-quarter and last-
quarter share that agree. Last line: ``attach_cpu_last_over_first: X`` (the mean share of a core in the last quarter
of the intervals over that in the first; 1.0 = flat).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "jobs" / "h4_refork.py"
sys.path.insert(0, str(ROOT))

from profiler.attach import procfs  # noqa: E402


def _cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of attach's own process, and of its children (py-spy: live, and reaped)."""
    own = procfs.cpu_s(pid) or 0.0
    kids = (procfs.cpu_s(pid, reaped_children=True) or 0.0) - own
    return own, kids + sum(procfs.cpu_s(c) or 0.0 for c in procfs.children(pid))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--every", type=float, default=60.0, help="seconds between readings")
    ap.add_argument("--per-epoch", type=int, default=1024,
                    help="samples per epoch (smaller: more re-forks; 1,024: a new pair about every second)")
    ap.add_argument("--rate", type=int, default=20)
    args = ap.parse_args()
    seconds = args.minutes * 60
    out = Path(tempfile.mkdtemp(prefix="bench-attach-long-")) / "att"
    job = subprocess.Popen([sys.executable, str(JOB), "0", str(args.per_epoch), "2"], stdout=subprocess.PIPE,
                           text=True, start_new_session=True)
    att = None
    try:
        assert job.stdout is not None
        assert "READY" in job.stdout.readline()
        att = subprocess.Popen([sys.executable, "-m", "profiler", "attach", str(job.pid), "--duration", str(seconds),
                                "--rate", str(args.rate), "--out", str(out), "--no-plots"], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(min(15.0, args.every))  # discovery and py-spy's start-up are not the steady state
        shares: list[float] = []
        last_t, (last_a, last_p) = time.monotonic(), _cpu(att.pid)
        t_start = last_t
        print(f"job {job.pid} (re-forks its 2 workers every epoch of {args.per_epoch} samples), attach {att.pid}, "
              f"{args.minutes:g} min at {args.rate} Hz", flush=True)
        while att.poll() is None:
            time.sleep(args.every)
            if att.poll() is not None:
                break
            t, (a, py) = time.monotonic(), _cpu(att.pid)
            own, spy = (a - last_a) / (t - last_t), (py - last_p) / (t - last_t)
            shares.append(own + spy)
            print(f"t={t - t_start:7.0f} s  attach {own * 100:5.1f} % + py-spy {spy * 100:5.1f} % of a core",
                  flush=True)
            last_t, last_a, last_p = t, a, py
        _, err = att.communicate(timeout=120)
        print(f"attach exit {att.returncode}{(': ' + err.strip().splitlines()[-1]) if err.strip() else ''}")
    finally:
        if att is not None and att.poll() is None:
            att.send_signal(signal.SIGINT)
            att.wait(timeout=60)
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(timeout=30)
    rj = out / "run.json"
    if rj.exists():
        rec = json.loads(rj.read_text())
        a = rec.get("attach") or {}
        print(f"run.json {rj.stat().st_size:,} bytes; worker processes seen {a.get('workers_seen')}, folded "
              f"{a.get('workers_folded')}, thread rows {len(a.get('threads') or [])}; verdict "
              f"{(rec.get('verdict') or {}).get('bottleneck')}")
    if len(shares) < 4:
        print("attach_cpu_last_over_first: n/a (too few intervals)")
        return 1
    q = max(1, len(shares) // 4)
    first, last = sum(shares[:q]) / q, sum(shares[-q:]) / q
    print(f"attach's share of a core: first quarter {first * 100:.1f} %, last quarter {last * 100:.1f} %")
    print(f"attach_cpu_last_over_first: {last / first:.3f}" if first > 0 else "attach_cpu_last_over_first: n/a")
    return 0


if __name__ == "__main__":
    sys.exit(main())
