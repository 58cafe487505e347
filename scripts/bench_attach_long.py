"""attach's whole cost (attach + py-spy) over a long attach to a job that re-forks its DataLoader workers every epoch.

    python scripts/bench_attach_long.py [--minutes 30] [--every 60] [--slice 300] [--per-epoch 1024] [--rate 20]
                                        [--rotate SECONDS]

Starts tests/jobs/h4_refork.py (2 workers, persistent_workers=False: a new pair of worker processes every epoch,
about one a second with the default 1,024 samples per epoch), attaches to it with ``python -m profiler attach`` for the
whole duration, and every ``--every`` seconds reads the CPU seconds spent so far by attach's own process and by py-spy
(its children: live, and reaped ones, which rotation leaves: profiler/attach/pyspy.py ROTATE_S; the
short-lived parser of each rotated-out piece, profiler/attach/pieces.py, counts there too), from /proc (utime +
stime), and their resident memory (VmRSS; py-spy's summed over its live processes). Prints one line per reading,
then one per ``--slice`` seconds: attach's and py-spy's share of one core, their RSS at most, and the machine's
1-minute load average (the bench competes with whatever else runs), then the record's size.

Why slices and a ratio: the leaks this guards against (attach reading every dead worker's threads; py-spy keeping
every dead process and stack it has seen, 7.5 -> 70 MB and 5.8 -> 7.3 % of a core over 30 min before rotation)
showed as cost that rose with time; flat cost is a first and a last slice that agree. Last lines: the last slice over
the first for py-spy's and attach's RSS, and last: ``attach_total_cpu_last_over_first: X`` (attach + py-spy's share
of a core in the last slice over the first; 1.0 = flat).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "jobs" / "h4_refork.py"
sys.path.insert(0, str(ROOT))

from profiler.attach import procfs  # noqa: E402
from profiler.attach.pyspy import ROTATE_ENV  # noqa: E402


def _cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of attach's own process, and of its children (py-spy: live, and reaped)."""
    own = procfs.cpu_s(pid) or 0.0
    kids = (procfs.cpu_s(pid, reaped_children=True) or 0.0) - own
    return own, kids + sum(procfs.cpu_s(c) or 0.0 for c in procfs.children(pid))


def _rss_mb(pid: int, field: str = "VmRSS") -> float:
    """Resident memory in MB (``RssAnon``: its anonymous part, the heap and arenas, without the shared libraries'
    pages that ``VmRSS`` also counts)."""
    text = procfs.read_text(f"/proc/{pid}/status") or ""
    line = next((ln for ln in text.splitlines() if ln.startswith(field + ":")), "")
    return int(line.split()[1]) / 1024 if line else 0.0


@dataclass
class Reading:
    t: float  # seconds since the first reading
    attach: float  # share of a core since the previous reading
    spy: float
    attach_rss: float  # MB
    attach_anon: float  # MB, the anonymous part of attach_rss
    spy_rss: float
    load: float  # 1-minute load average
    forks: int  # worker processes the job forked since the previous reading


class ForkCounter(threading.Thread):
    """Counts the job's child processes by looking every 0.1 s (a worker lives about a second). Why: py-spy attaches
    to every new child (reading its symbols), so its CPU follows the fork rate, which follows how much CPU the job
    gets on a shared machine; a slice's CPU is read beside its forks per second, not alone."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.seen, self._stop = pid, set[int](), threading.Event()

    def run(self) -> None:
        while not self._stop.wait(0.1):
            self.seen.update(procfs.children(self.pid))

    def stop(self) -> None:
        self._stop.set()


def _slices(rows: list[Reading], every: float) -> list[list[Reading]]:
    out: list[list[Reading]] = []
    for r in rows:
        k = int((r.t - 1e-6) // every)
        while len(out) <= k:
            out.append([])
        out[k].append(r)
    return [s for s in out if s]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--every", type=float, default=60.0, help="seconds between readings")
    ap.add_argument("--slice", type=float, default=300.0, help="seconds per reported slice")
    ap.add_argument("--per-epoch", type=int, default=1024,
                    help="samples per epoch (smaller: more re-forks; 1,024: a new pair about every second)")
    ap.add_argument("--rate", type=int, default=20)
    ap.add_argument("--rotate", type=float, default=None,
                    help="py-spy's rotation period in seconds (default: attach's own, 300 s); exited workers are "
                         "folded into totals and forgotten at each rotation, so a short one shows attach's memory "
                         "plateau within minutes")
    args = ap.parse_args()
    seconds = args.minutes * 60
    out = Path(tempfile.mkdtemp(prefix="bench-attach-long-")) / "att"
    job = subprocess.Popen([sys.executable, str(JOB), "0", str(args.per_epoch), "2"], stdout=subprocess.PIPE,
                           text=True, start_new_session=True)
    att = None
    forks = ForkCounter(job.pid)
    forks.start()
    last_forks = 0
    rows: list[Reading] = []
    try:
        assert job.stdout is not None
        assert "READY" in job.stdout.readline()
        att = subprocess.Popen([sys.executable, "-m", "profiler", "attach", str(job.pid), "--duration", str(seconds),
                                "--rate", str(args.rate), "--out", str(out), "--no-plots"], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **({ROTATE_ENV: str(args.rotate)} if args.rotate else {})})
        time.sleep(min(15.0, args.every))  # discovery and py-spy's start-up are not the steady state
        last_t, (last_a, last_p) = time.monotonic(), _cpu(att.pid)
        t_start, last_forks = last_t, len(forks.seen)
        print(f"job {job.pid} (re-forks its 2 workers every epoch of {args.per_epoch} samples), attach {att.pid}, "
              f"{args.minutes:g} min at {args.rate} Hz; {os.cpu_count()} cores", flush=True)
        while att.poll() is None:
            time.sleep(args.every)
            if att.poll() is not None:
                break
            t, (a, py) = time.monotonic(), _cpu(att.pid)
            # py-spy's processes only (not the short-lived parser of a rotated-out piece: profiler/attach/pieces.py)
            spy_rss = sum(_rss_mb(c) for c in procfs.children(att.pid) if procfs.comm(c) == "py-spy")
            n_forks = len(forks.seen)
            r = Reading(t - t_start, (a - last_a) / (t - last_t), (py - last_p) / (t - last_t), _rss_mb(att.pid),
                        _rss_mb(att.pid, "RssAnon"), spy_rss, os.getloadavg()[0],
                        n_forks - last_forks)
            last_forks = n_forks
            if spy_rss == 0:  # no py-spy left: the window is over and attach is building the record, not sampling
                print(f"t={r.t:7.0f} s  (window over: attach RSS {r.attach_rss:.1f} MB while it builds the record; "
                      "not counted)", flush=True)
                break
            rows.append(r)
            print(f"t={r.t:7.0f} s  attach {r.attach * 100:5.1f} % + py-spy {r.spy * 100:5.1f} % of a core; RSS "
                  f"attach {r.attach_rss:5.1f} MB (anon {r.attach_anon:5.1f}), py-spy {r.spy_rss:5.1f} MB; "
                  f"load {r.load:.1f}; "
                  f"job forked {r.forks / (t - last_t):.1f}/s", flush=True)
            last_t, last_a, last_p = t, a, py
        _, err = att.communicate(timeout=120)
        print(f"attach exit {att.returncode}{(': ' + err.strip().splitlines()[-1]) if err.strip() else ''}")
    finally:
        forks.stop()
        if att is not None and att.poll() is None:
            att.send_signal(signal.SIGINT)
            att.wait(timeout=60)
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(timeout=30)
    rj = out / "run.json"
    if rj.exists():
        rec = json.loads(rj.read_text())
        att_rec = rec.get("attach") or {}
        print(f"run.json {rj.stat().st_size:,} bytes; worker processes seen {att_rec.get('workers_seen')}, folded "
              f"{att_rec.get('workers_folded')}, thread rows {len(att_rec.get('threads') or [])}; verdict "
              f"{(rec.get('verdict') or {}).get('bottleneck')}")
    slices = _slices(rows, args.slice)
    if len(slices) < 2:
        print("attach_total_cpu_last_over_first: n/a (too few slices)")
        return 1
    cpu: list[float] = []
    rss: list[tuple[float, float]] = []
    for i, sl in enumerate(slices):
        own, spy = sum(r.attach for r in sl) / len(sl), sum(r.spy for r in sl) / len(sl)
        ar, sr, aa = max(r.attach_rss for r in sl), max(r.spy_rss for r in sl), max(r.attach_anon for r in sl)
        cpu.append(own + spy)
        rss.append((ar, sr))
        print(f"slice {i + 1} (to t={sl[-1].t:.0f} s): attach {own * 100:.1f} % + py-spy {spy * 100:.1f} % = "
              f"{(own + spy) * 100:.1f} % of a core; RSS at most attach {ar:.1f} MB (anon {aa:.1f}), "
              f"py-spy {sr:.1f} MB; "
              f"load {min(r.load for r in sl):.1f}-{max(r.load for r in sl):.1f}; job forked "
              f"{sum(r.forks for r in sl) / (sl[-1].t - (sl[0].t - args.every)):.2f} processes/s")
    if len(rows) >= 2:  # attach's own memory: MB per minute over the run, and over its second half (after a rotation)
        half = rows[len(rows) // 2]
        for name, a in (("attach_rss_mb_per_min", rows[0]), ("attach_rss_mb_per_min_second_half", half)):
            span = (rows[-1].t - a.t) / 60
            print(f"{name}: {(rows[-1].attach_rss - a.attach_rss) / span:.3f}" if span > 0 else f"{name}: n/a")
    for name, k in (("attach", 0), ("py-spy", 1)):
        first, last = rss[0][k], rss[-1][k]
        print(f"{name}_rss_last_over_first: {last / first:.3f}" if first > 0 else f"{name}_rss_last_over_first: n/a")
    print(f"attach_total_cpu_last_over_first: {cpu[-1] / cpu[0]:.3f}" if cpu[0] > 0 else
          "attach_total_cpu_last_over_first: n/a")
    return 0


if __name__ == "__main__":
    sys.exit(main())
