"""What `attach` costs a running job, and whether it agrees with `run`.

    python scripts/bench_attach.py [--rounds 3] [--seconds 8] [--rate HZ] [--skip-agreement]

Overhead: one execution of a planted job (tests/jobs/attach_planted.py cpu, 1 worker: two busy processes), attached
to in some windows and not in others, in ABBA order, so the machine's load (and its drift) hits both alike. Per
window the job's process-tree CPU seconds per sample (from /proc; it prints its sample count) and, while attached,
the CPU attach itself spends beside the job (py-spy + its /proc reader). A loaded machine changes wall time by tens
of per cent between windows, CPU per sample by little, so these are what the ratio is made of (see ``overhead``).
Attach runs in this process, discovery once before the windows; py-spy's start-up is inside each attached window.

Agreement: each planted case (cpu, io through the kernel throttle when root allows it, model = compute, workers=0)
is run once under `python -m profiler run`, and attach samples the same execution for a few seconds; a case agrees
when both verdicts are the same. Both shares are printed as a table.

Last lines: ``attach_agreement: K/N`` then ``attach_overhead_ratio: X`` (1.0 = no cost; the goal is >= 0.98).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "jobs" / "attach_planted.py"
sys.path.insert(0, str(ROOT))

from profiler.config import AttachConfig  # noqa: E402


def _start(kind: str, data: str, workers: str, seconds: float, pre: list[str] | None = None) -> subprocess.Popen:
    p = subprocess.Popen([*(pre or [sys.executable, str(JOB)]), kind, data, workers, str(seconds)],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    line = p.stdout.readline()
    while line and "READY" not in line:
        line = p.stdout.readline()
    return p


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of the job's process tree: the main process (its reaped children included) and
    its live children, from /proc/<pid>/stat (fields 14-17, in clock ticks)."""
    from profiler.attach import procfs

    return sum(procfs.cpu_s(p, reaped_children=p == pid) or 0.0 for p in [pid, *procfs.children(pid)])


class _Progress:
    """The job's sample count as it prints it (ATTACH_PROGRESS=1: one line per batch), read on a thread."""

    def __init__(self, p: subprocess.Popen) -> None:
        self.n = 0
        self._p = p
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self._p.stdout is not None
        for line in self._p.stdout:
            if line.startswith("N "):
                self.n = int(line.split()[1])


#: Windows in ABBA order (plain, attached, attached, plain, ...): a drift of the machine's load that is linear over
#: four windows cancels out of each quadruple.
ORDER = (False, True, True, False)


def overhead(rounds: int, window_s: float, rate: int) -> dict[str, Any]:
    """One execution of the planted cpu job (1 worker, both of its processes busy), attached to in some windows and
    not in others (ABBA order, ``rounds`` quadruples of ``window_s`` each). Per window: the job's process-tree CPU
    seconds (from /proc) and the samples it made (it prints its count). Three figures:

    - the job's CPU seconds per sample, plain / attached: what sampling costs inside the job (py-spy reads its memory
      without stopping it, so 1.0 is expected). CPU time, unlike wall time, hardly moves with the machine's load,
      and the alternation cancels what drift there is;
    - attach's own CPU beside the job (py-spy, from getrusage of this process's children, plus this process's own
      /proc reader: its CPU in attached windows minus in plain ones), as a share of the machine's cores: with every
      core busy, the most throughput it can take from a job;
    - samples/s attached / plain in the same windows (wall clock: noisy on a shared machine, printed for reference).

    ``attach_overhead_ratio`` = CPU-per-sample ratio x (1 - attach's share of the cores): the job's throughput with
    attach relative to without, for a job that keeps every core busy (the worst case; 1.0 = no cost)."""
    from profiler.attach import discover, pyspy, session

    binary = pyspy.find_binary()
    total_s = rounds * len(ORDER) * window_s * 1.5 + 30
    job = subprocess.Popen([sys.executable, str(JOB), "cpu", "-", "1", str(total_s)], stdout=subprocess.PIPE,
                           text=True, env={**os.environ, "ATTACH_PROGRESS": "1"})
    assert job.stdout is not None
    while "READY" not in job.stdout.readline():
        pass
    prog = _Progress(job)
    target = discover.find(job.pid, binary)
    time.sleep(1.0)
    rows: list[dict[str, Any]] = []
    try:
        for k in range(rounds * len(ORDER)):
            on = ORDER[k % len(ORDER)]
            c0, n0, t0 = _tree_cpu_s(job.pid), prog.n, time.monotonic()
            ch0, own0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.process_time()
            if on:
                session.sample([target], binary, window_s, rate)
            else:
                time.sleep(window_s)
            ch1, own1 = resource.getrusage(resource.RUSAGE_CHILDREN), time.process_time()
            c1, n1, t1 = _tree_cpu_s(job.pid), prog.n, time.monotonic()
            rows.append({"on": on, "cpu_per_sample": (c1 - c0) / max(n1 - n0, 1), "rate": (n1 - n0) / (t1 - t0),
                         "spy_cores": (ch1.ru_utime + ch1.ru_stime - ch0.ru_utime - ch0.ru_stime) / (t1 - t0),
                         "own_cores": (own1 - own0) / (t1 - t0)})
    finally:
        job.kill()
        job.wait()
    med = statistics.median
    on_rows, off_rows = [r for r in rows if r["on"]], [r for r in rows if not r["on"]]
    cores = os.cpu_count() or 1
    spy = med([r["spy_cores"] for r in on_rows])
    own = max(0.0, med([r["own_cores"] for r in on_rows]) - med([r["own_cores"] for r in off_rows]))
    cpu_ratio = med([r["cpu_per_sample"] for r in off_rows]) / med([r["cpu_per_sample"] for r in on_rows])
    share = (spy + own) / cores
    return {"rows": rows, "cpu_ratio": cpu_ratio, "spy_cores": spy, "own_cores": own, "share": share,
            "wall_ratio": med([r["rate"] for r in on_rows]) / med([r["rate"] for r in off_rows]),
            "ratio": cpu_ratio * (1 - share), "cores": cores}


def agreement(tmp: Path, attach_s: str = "3") -> list[tuple[str, str, str, dict, dict]]:
    from profiler.cli import main
    from profiler.storage import device as sdev
    from profiler.storage import throttle as thr

    files = tmp / "files"
    files.mkdir()
    for i in range(64):
        (files / f"f{i:03d}.bin").write_bytes(os.urandom(256 * 1024))
    io_ok, why = thr.KernelThrottle.available(thr.parse_throttle("1MB/s,30iops"),
                                              sdev.describe_storage(str(files)).maj_min)
    cases = [("cpu", "1"), ("model", "1"), ("cpu", "0")] + ([("io", "1")] if io_ok else [])
    if not io_ok:
        print(f"io case skipped: {why}")
    rows = []
    for kind, workers in cases:
        out = tmp / f"run-{kind}-{workers}"
        extra = ["--throttle", "1MB/s,30iops", "--data", str(files)] if kind == "io" else []
        pre = [sys.executable, "-m", "profiler", "run", "--no-progress", "--no-plots", "--steps", "100000",
               "--warmup", "1", "--out", str(out), *extra, str(JOB)]
        p = _start(kind, str(files) if kind == "io" else "-", workers, 14, pre)
        t0 = time.monotonic()
        main(["attach", str(p.pid), "--duration", attach_s, "--rate", "50", "--out", str(tmp / f"att-{kind}-{workers}"),
              "--no-plots"])
        to_verdict = time.monotonic() - t0
        p.communicate(timeout=300)
        r = json.loads((out / "run.json").read_text())
        a = json.loads((tmp / f"att-{kind}-{workers}" / "run.json").read_text())
        a["to_verdict_s"] = to_verdict
        rows.append((kind, workers, r["verdict"]["bottleneck"], r, a))
    return rows


def main_() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="ABBA quadruples of windows (default 3)")
    ap.add_argument("--seconds", type=float, default=8.0, help="seconds per window (default 8)")
    ap.add_argument("--rate", type=int, default=AttachConfig().rate_hz, help="attach's rate (default: attach's)")
    ap.add_argument("--skip-agreement", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    ok = n = 0
    if not args.skip_agreement:
        with tempfile.TemporaryDirectory() as d:
            rows = agreement(Path(d))
        print(f"{'case':<12}{'run':>10}{'attach':>10}{'run wait':>10}{'att wait':>10}{'run cpu/io':>14}"
              f"{'att cpu/io':>14}{'to verdict':>12}")
        for kind, workers, verdict, r, a in rows:
            rs, as_ = r["stall"]["share_by_cause"], a["stall"]["share_by_cause"]
            print(f"{kind + ' w' + workers:<12}{verdict:>10}{a['verdict']['bottleneck']:>10}"
                  f"{r['stall']['fraction']:>10.2f}{a['stall']['fraction']:>10.2f}"
                  f"{rs['cpu']:>7.2f}/{rs['io']:.2f}{as_['cpu']:>9.2f}/{as_['io']:.2f}{a['to_verdict_s']:>11.1f}s")
            n += 1
            ok += verdict == a["verdict"]["bottleneck"]
    o = overhead(args.rounds, args.seconds, args.rate)
    for i, r in enumerate(o["rows"]):
        print(f"window {i + 1:2d} {'attached' if r['on'] else 'plain   '}: {r['rate']:6.1f} samples/s, "
              f"{r['cpu_per_sample'] * 1e3:6.2f} ms CPU per sample; py-spy {r['spy_cores'] * 100:.1f} %, this "
              f"process {r['own_cores'] * 100:.1f} % of a core")
    cores = o["cores"]
    print(f"job CPU per sample, plain / attached (median of {args.rounds * 2} windows each): {o['cpu_ratio']:.3f}")
    print(f"samples/s attached / plain (wall clock, noisy on a shared machine): {o['wall_ratio']:.3f}")
    print(f"attach beside the job at {args.rate} Hz: py-spy {o['spy_cores'] * 100:.1f} % + its /proc reader "
          f"{o['own_cores'] * 100:.1f} % of one core = {o['share'] * 100:.2f} % of this machine's {cores} cores "
          "(the most it can take from a job that keeps every core busy)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {cores} cores")
    print(f"attach_agreement: {ok}/{n}")
    print(f"attach_overhead_ratio: {o['ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main_())
