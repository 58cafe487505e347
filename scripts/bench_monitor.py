"""The monitor's own cost: a light training loop plain vs under ``profile(monitor=True)``, in paired rounds.

The loop is scripts/bench_overhead_light.py's (a TensorDataset in memory, batch 32, a tiny MLP on one thread), for
``num_workers`` 0 and 2. With the default window nearly every monitored step passes in a gap (NOTE [ Monitor gaps ],
profiler/instrument/gaps.py: the hook off the path, looks on the job's thread every few steps): each setting says
what share did.

    python scripts/bench_monitor.py [--rounds 7] [--seconds S] [--workers 0,2] [--method slices|shared|apart]
                                    [--clock-share auto|X] [--control]

Per setting: the median over rounds of the paired difference in the process tree's CPU per step, as a share of the
plain loop's, each round with the monitor's cuts its interval missed (below). Last line: ``monitor_overhead_pct: N``
— the larger of the settings' figures; target <= 1.0.

Method (the default since 2026-12-06): *paired processes* (scripts/paired_processes.py): each round runs the plain
and the monitored loop in two processes over the same 10 s of wall clock, pinned to the same CPUs (workers=0: one
core; workers=2: both), and compares their process trees' on-CPU time per step; roles swap every round. Since
2026-12-07 the two take turns on the CPUs, 0.1 s each (``--method slices``; ``shared``: both at once, as before).
Why: the VM's speed drifts over seconds by more than the cost being measured (plain loops alternated in one process
differed by -17 to +51 % per round); two loops sharing the CPUs over the same interval see the same host.

The clock's share (since 2026-12-07, ``--clock-share``): each child of a pair runs its loop only about half the
wall clock (its twin has the CPUs the other half), but what the monitor does by the clock — a probe 10 times a
second, a window's chunks and cut every 10 s — happens per second, not per step: at half speed a child would pay it
twice per step, where the issue's alternating rounds (each loop alone on the machine) and a job on its own CPUs pay
it once. So the children run the monitor with its clock-driven intervals scaled by their share
(paired_processes.scale_monitor_clock: 0.5 for slices and shared, windows of 20 s and probes at 5 Hz), which puts
as many probes, chunks and cuts in each step as the defaults do in a job that has its CPUs; ``--clock-share 1``
measures unscaled. The interval (``--seconds``, default one default window: 10 s / the share) holds the monitor's
gaps, probes, detail chunks and cuts as a long job has them; a round whose interval held fewer cuts than its length's
worth of default windows gets the missing ones added, each at the cost of the cut it held (else at the whole job's
mean cut, its final write included).
``--sequential`` runs the alternating method instead (one process, loops of ``--batches`` one after the other), as
every figure before 2026-12-06 was taken: each round runs both loops, the order flipped every round, and takes the
process tree's CPU time per batch (``getrusage``: this process over the measured steps, plus the workers over their
life, prorated); the monitor's start, the loop's first SKIP (100) steps and its final write are left out of both
loops alike, and one default window's cut is added as a share (a loop of a few seconds holds none). It also prints
the fastest rounds' difference (each loop's least CPU per batch).

``--control``: the same pairs with both children plain (an A/A test): the method's own noise floor on this machine
today, to read the monitored figure against (2026-12-08, workers=0, 7 rounds: median +0.52 %, rounds -1.2 .. +1.1,
where the monitored pairs of the same hour gave +2.81 % and +1.47 %). Last line then ``monitor_control_pct: N``.

``--long N``: one monitored light loop of N steps (workers=0) instead: the record's size and the process's RSS at
every window (from the record), first vs last quarter — the bounded-record claim (a 1,000,000-step job's record
under 20 MB, RSS flat). Last line then: ``monitor_long: steps=N record_bytes=B rss_first_mb=X rss_last_mb=Y``.
"""
from __future__ import annotations

import argparse
import gc
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import profiler  # noqa: E402
from profiler import thresholds as th  # noqa: E402

BATCH = 32
FEATURES = 64
SKIP = 100  # steps each loop runs before its measured ones (both loops alike)


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _make() -> tuple[TensorDataset, torch.nn.Module, torch.optim.Optimizer]:
    g = torch.Generator().manual_seed(0)
    n = BATCH * 8192  # one epoch holds SKIP + --batches (up to 8,092)
    ds = TensorDataset(torch.randn(n, FEATURES, generator=g), torch.randint(0, 10, (n,), generator=g))
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    return ds, model, torch.optim.SGD(model.parameters(), lr=0.01)


def run_loop(ds: TensorDataset, model: torch.nn.Module, opt: torch.optim.Optimizer, workers: int, batches: int,
             window: int | None, out: str | None) -> tuple[float, float, float, float, float]:
    """(this process's CPU s over the steps, the workers' CPU s over their life, the steps' wall s, the monitor's own
    s per cut, the share of the steps that passed in gaps: NOTE [ Monitor gaps ]) of ``batches`` steps."""
    loader = DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers,
                        generator=torch.Generator().manual_seed(1))
    gc.collect()
    children0 = _cpu(resource.RUSAGE_CHILDREN)
    ctx: Any = profiler.profile(out=out, monitor=True, window=window, plots=False, quiet=True) if out else None
    if ctx is not None:
        ctx.__enter__()
    it = iter(loader)
    main0 = wall0 = 0.0
    for i in range(SKIP + batches):
        if i == SKIP:  # the job's first steps (the loader's adoption, first-batch probes) happen once per job
            main0, wall0 = _cpu(resource.RUSAGE_SELF), time.perf_counter()
        x, y = next(it)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    main1 = _cpu(resource.RUSAGE_SELF)
    wall = time.perf_counter() - wall0
    per_cut = gapped = 0.0
    if ctx is not None:
        ctx.__exit__(None, None, None)  # the last window's cut and the final write: once per job, not per batch
        cost = ctx.record.monitor_cost if ctx.record is not None else {}
        per_cut = float(cost.get("seconds", 0.0)) / max(1, int(cost.get("cuts", 0)))
        ws = ctx.record.windows if ctx.record is not None else []
        gapped = sum(w.estimated_steps for w in ws) / max(1, sum(w.steps for w in ws))
    del it
    workers_s = (_cpu(resource.RUSAGE_CHILDREN) - children0) * batches / (SKIP + batches)  # their share of the steps
    return main1 - main0, workers_s, wall, per_cut, gapped


def per_step(ds: TensorDataset, model: torch.nn.Module, opt: torch.optim.Optimizer, rounds: int, batches: int,
             tmp: str) -> int:
    """--per-step (module docstring)."""
    kinds = ("plain", "gaps", "hook every step")
    got: dict[str, list[float]] = {k: [] for k in kinds}
    tt = time.thread_time_ns
    for r in range(-1, rounds):  # round -1: one-off costs first, not counted
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            loader = DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=0,
                                generator=torch.Generator().manual_seed(1))
            gc.collect()
            ctx: Any = None
            if kind != "plain":
                ctx = profiler.profile(out=os.path.join(tmp, f"s{r}{kind[0]}"), monitor=True, plots=False, quiet=True)
                ctx.__enter__()
                if kind == "hook every step" and ctx._session is not None:
                    ctx._session._gap = None
            it = iter(loader)
            marks = [0] * (SKIP + batches + 1)
            for i in range(SKIP + batches):
                marks[i] = tt()
                x, y = next(it)
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            marks[-1] = tt()
            if ctx is not None:
                ctx.__exit__(None, None, None)
            del it
            if r >= 0:
                got[kind].append(statistics.median(marks[j + 1] - marks[j] for j in range(SKIP, SKIP + batches)) / 1e3)
        if r >= 0:
            print(f"round {r + 1}: median step's CPU " + ", ".join(f"{k} {got[k][-1]:.1f} us" for k in kinds),
                  flush=True)
    med = {k: statistics.median(v) for k, v in got.items()}
    pct = {k: (med[k] - med["plain"]) / med["plain"] * 100 for k in kinds[1:]}
    print("median over rounds: " + ", ".join(f"{k} {med[k]:.1f} us" for k in kinds) + f"; load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"monitor_step_pct: gaps={pct['gaps']:.2f} hook_every_step={pct['hook every step']:.2f}")
    return 0


def long_run(ds: TensorDataset, model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int,
             window: int | None) -> int:
    """One monitored loop of ``steps`` steps, epoch after epoch: the record's size and RSS along the job."""
    from profiler.monitor.record import load

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "long")
        loader = DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=0)
        t = time.perf_counter()
        n = 0
        with profiler.profile(out=out, monitor=True, window=window, plots=False, quiet=True):
            while n < steps:
                for x, y in loader:
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    n += 1
                    if n >= steps:
                        break
        size = os.path.getsize(os.path.join(out, "monitor.json"))
        rec = load(out)
        ws = rec.windows
        q = max(1, len(ws) // 4)
        first = statistics.median(w.rss_bytes for w in ws[:q]) / 1e6
        last = statistics.median(w.rss_bytes for w in ws[-q:]) / 1e6
        print(f"{steps:,} steps in {time.perf_counter() - t:.0f} s: {rec.windows_total:,} windows cut, {len(ws)} kept "
              f"({rec.log.folds:,} folds), {len(rec.changes)} change points; monitor.json {size / 1e6:.2f} MB; RSS "
              f"(whole tree, median of the first / last quarter of the kept windows) {first:.0f} / {last:.0f} MB; "
              f"monitor's own time at cuts {rec.monitor_cost.get('seconds', 0):.1f} s")
        for c in rec.changes:
            print(f"  change ({c.kind}) at step {c.step:,}: {c.summary} [{c.statistic}]")
        print(f"monitor_long: steps={steps} record_bytes={size} rss_first_mb={first:.0f} rss_last_mb={last:.0f}")
    return 0


def child(role: str, start_at: float, stop_at: float, workers: int, share: float = 1.0) -> int:
    """One side of a concurrent pair (paired_processes.py): the light loop, epoch after epoch, plain or monitored,
    until the interval is over; its last line is the report (steps, on-CPU ns, the monitor's cost per cut).
    ``share``: the wall clock's share this child runs (paired_processes.clock_share): the monitor's clock scaled."""
    from paired_processes import Interval, report, scale_monitor_clock

    scale_monitor_clock(share)
    torch.set_num_threads(1)
    ds, model, opt = _make()
    # One epoch longer than the whole child (a shuffled pass over the data after another, as shuffle=True draws
    # them): no epoch ends in the interval, so the workers measured at its two ends are the same processes.
    from torch.utils.data import RandomSampler

    sampler = RandomSampler(ds, num_samples=len(ds) * 1000, generator=torch.Generator().manual_seed(1))
    loader = DataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=workers)
    tmp = tempfile.mkdtemp(prefix="bench-monitor-")
    ctx: Any = profiler.profile(out=os.path.join(tmp, "m"), monitor=True, plots=False, quiet=True) \
        if role == "monitored" else None
    if ctx is not None:
        ctx.__enter__()
    iv = Interval()
    n = 0
    wall0 = 0.0
    mon = getattr(ctx, "_mon", None)
    cost0 = cuts0 = 0  # the monitor's own ns at its cuts and chunks, and its cuts, when the interval began
    while not iv.done:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            n += 1
            if not iv.started:
                wall0 = time.time()
                if mon is not None:
                    cost0, cuts0 = mon.cost_ns, mon.cuts
            if iv.step(n, start_at, stop_at):
                break
    wall = time.time() - wall0
    per_cut = gapped = 0.0
    cuts_in = 0
    if ctx is not None:
        cuts_in, cost_in = mon.cuts - cuts0, mon.cost_ns - cost0
        ctx.__exit__(None, None, None)
        cost = ctx.record.monitor_cost if ctx.record is not None else {}
        # A cut inside the interval: the monitor's own time over it (its cuts and chunks) per cut; else the whole
        # job's (its first cut and its final one, with the record's write: more than a steady cut, on the safe side)
        per_cut = cost_in / 1e9 / cuts_in if cuts_in else \
            float(cost.get("seconds", 0.0)) / max(1, int(cost.get("cuts", 0)))
        ws = ctx.record.windows if ctx.record is not None else []
        gapped = sum(w.estimated_steps for w in ws) / max(1, sum(w.steps for w in ws))
    report(iv, per_cut_s=per_cut, cuts_in=cuts_in, gapped=gapped, wall_per_step_s=wall / max(1, iv.steps))
    shutil.rmtree(tmp, ignore_errors=True)  # every child made one: a day of rounds left ~500 folders in /tmp
    return 0


def concurrent(workers: int, rounds: int, seconds: float, window: int | None, method: str = "slices",
               share: float = 1.0, control: bool = False) -> float:
    """Concurrent pairs (module docstring) for one ``workers`` setting: the median over rounds of the paired %, each
    with the cuts its interval missed; ``share``: the monitor's clock scaled in the children (and here, for the
    missed cuts' count) by it."""
    from paired_processes import pair_setup, run_pairs, split_difference, summary

    cpus, slice_s = pair_setup(workers, method)
    roles = ("plain", "control") if control else ("plain", "monitored")
    pct, got = run_pairs(__file__, ["--workers", str(workers), "--share", repr(share)], roles,
                         rounds, seconds, cpus,
                         log=lambda s: print(f"workers={workers} {s}", flush=True),
                         slice_s=slice_s)
    if control:  # an A/A test: two plain loops, the bench's own noise floor (module docstring)
        print(f"workers={workers}: control (plain vs plain), paired processes ({method}), {summary(pct)}; load "
              f"{os.getloadavg()[0]:.1f}", flush=True)
        return statistics.median(pct)
    cut_pct = []
    for g in got:
        m = g["monitored"]
        plain_step_s = g["plain"]["cpu_ns"] / max(1, g["plain"]["steps"]) / 1e9
        # The interval holds as many cuts as fell in it (0 or 1 for a default window as long as the interval): the
        # ones a job of that length makes on average (its wall over one default window's: MONITOR_MIN_WINDOW_S, at
        # least MONITOR_WINDOW_STEPS of the monitored loop's steps) and did not fall in it are added, each at its
        # measured cost as a share of the plain loop's CPU over the interval's steps.
        window_s = max(th.MONITOR_MIN_WINDOW_S, (window or th.MONITOR_WINDOW_STEPS) * m["wall_per_step_s"])
        missing = max(0.0, m["wall_per_step_s"] * m["steps"] / window_s - m.get("cuts_in", 0))
        cut_pct.append(missing * m["per_cut_s"] / (g["plain"]["steps"] * plain_step_s) * 100)
    total = statistics.median([p + c for p, c in zip(pct, cut_pct)])
    print(f"workers={workers}: monitor cost, paired processes ({method}), {summary(pct)} of the plain loop's CPU per "
          f"step (cuts in the intervals: {', '.join(str(g['monitored'].get('cuts_in', 0)) for g in got)}), with the "
          f"cuts an interval missed (median {statistics.median(cut_pct):.3f} %): {total:+.2f} %; steps in gaps "
          f"{statistics.median(g['monitored']['gapped'] for g in got) * 100:.0f} %; load {os.getloadavg()[0]:.1f}",
          flush=True)
    print(f"workers={workers}: where (monitored less plain, median over rounds): "
          f"{split_difference(got, ('plain', 'monitored'))}", flush=True)
    return total


def main() -> int:
    from paired_processes import add_method_args, child_args, child_share, method_of

    pair = child_args(sys.argv)
    if pair is not None:
        return child(*pair, workers=int(sys.argv[sys.argv.index("--workers") + 1]),
                     share=child_share(sys.argv))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--batches", type=int, default=3000, help="batches per loop (both loops)")
    p.add_argument("--window", type=int, default=None, help=f"monitor window, steps (default: monitor's own, "
                                                             f"{th.MONITOR_WINDOW_STEPS} steps lasting at least "
                                                             f"{th.MONITOR_MIN_WINDOW_S:g} s)")
    p.add_argument("--workers", default="0,2", help="comma-separated num_workers values")
    p.add_argument("--long", type=int, default=0, metavar="N", help="one monitored loop of N steps (see above)")
    p.add_argument("--per-step", action="store_true", help="per-step CPU: plain, gaps, hook every step (see above)")
    p.add_argument("--sequential", action="store_true", help="alternate the loops in one process (the method before "
                                                             "2026-12-06) instead of concurrent pairs")
    p.add_argument("--control", action="store_true",
                   help="concurrent pairs of two plain loops (an A/A test: the method's noise floor; last line "
                        "monitor_control_pct)")
    p.add_argument("--seconds", type=float, default=None,
                   help="concurrent pairs: the measured interval per round (default: one default window, 10 s "
                        "divided by the clock's share)")
    add_method_args(p)
    a = p.parse_args()
    if not (a.long or a.per_step or a.sequential):
        from paired_processes import scale_monitor_clock, share_of

        share = share_of(a)
        scaled = scale_monitor_clock(share)  # here too: the missed cuts are counted in the scaled windows
        print(f"the monitor's clock scaled by the share of the wall clock each child runs ({share:g}): "
              + ", ".join(f"{k} {v:g}" for k, v in scaled.items()), flush=True)
        seconds = a.seconds if a.seconds is not None else th.MONITOR_MIN_WINDOW_S
        medians = {w: concurrent(w, a.rounds, seconds, a.window, method_of(a), share, a.control)
                   for w in (int(x) for x in a.workers.split(","))}
        if a.control:
            print(f"monitor_control_pct: {max(medians.values(), key=abs):.2f}")
            return 0
        print(f"monitor_overhead_pct: {max(medians.values()):.2f}")
        return 0
    torch.set_num_threads(1)
    ds, model, opt = _make()
    if a.long:
        return long_run(ds, model, opt, a.long, a.window)
    if a.per_step:
        with tempfile.TemporaryDirectory() as tmp:
            return per_step(ds, model, opt, a.rounds, a.batches, tmp)
    medians: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workers in [int(w) for w in a.workers.split(",")]:
            run_loop(ds, model, opt, workers, 100, a.window, None)  # one-off costs (imports, first use) first
            run_loop(ds, model, opt, workers, 100, a.window, os.path.join(tmp, f"w{workers}-discard"))
            pct: list[float] = []
            cut_pct: list[float] = []
            least: dict[str, float] = {}  # each loop's least CPU per batch over the rounds
            for r in range(a.rounds):
                order = ("plain", "monitored") if r % 2 == 0 else ("monitored", "plain")
                got: dict[str, float] = {}
                t = time.perf_counter()
                per_cut = wall_per_batch = gapped = 0.0
                for kind in order:
                    out = os.path.join(tmp, f"w{workers}-r{r}") if kind == "monitored" else None
                    m, w, wall, cut, g = run_loop(ds, model, opt, workers, a.batches, a.window, out)
                    got[kind] = (m + w) / a.batches * 1e6
                    least[kind] = min(least.get(kind, got[kind]), got[kind])
                    if kind == "monitored":
                        per_cut, gapped = cut, g
                    else:
                        wall_per_batch = wall / a.batches
                pct.append((got["monitored"] - got["plain"]) / got["plain"] * 100)
                # One default window of the plain loop: its steps in MONITOR_MIN_WINDOW_S, at least the window's
                steps = a.window or max(th.MONITOR_WINDOW_STEPS, th.MONITOR_MIN_WINDOW_S / max(wall_per_batch, 1e-9))
                cut_pct.append(per_cut / (steps * got["plain"] / 1e6) * 100)
                print(f"workers={workers} round {r + 1}: CPU per batch plain {got['plain']:.0f} us, monitored "
                      f"{got['monitored']:.0f} us ({pct[-1]:+.2f} %); a cut {per_cut * 1e3:.1f} ms, "
                      f"{cut_pct[-1]:.3f} % of a window; {gapped * 100:.0f} % of the steps in gaps; "
                      f"{time.perf_counter() - t:.1f} s", flush=True)
            medians[workers] = statistics.median(pct) + statistics.median(cut_pct)
            print(f"workers={workers}: monitor cost, median of {a.rounds} paired rounds: {statistics.median(pct):+.2f} "
                  f"% of the plain loop's CPU per batch (rounds: {', '.join(f'{x:+.1f}' for x in pct)}), + cuts "
                  f"{statistics.median(cut_pct):.3f} %: {medians[workers]:+.2f} %; fastest rounds: plain "
                  f"{least['plain']:.0f} us, monitored {least['monitored']:.0f} us "
                  f"({(least['monitored'] - least['plain']) / least['plain'] * 100:+.2f} %)", flush=True)
    print(f"monitor_overhead_pct: {max(medians.values()):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
