"""The profiler's own cost where it is most visible: a light loop over in-memory tensors, plain vs ``profile()``.

A light loop (a TensorDataset in memory, batch 32, a tiny MLP) spends ~0.1 ms in ``next()`` per step: a profiler
costing 0.7 ms per batch there turns a loop that waits 25 % of its time into one that "waits" 70 %, and the verdict
is then about the profiler. This benchmark measures, for ``num_workers`` 0 and 2, with plain and profiled loops
alternated in one process (the order flips every round, so drift hits both alike):

- the CPU time of the process tree per batch, plain vs profiled (``getrusage`` user+sys): this process over the
  measured steps (the loop, the profiler's hooks and its sampler thread; the one-off start and the record's writing
  are not per batch and are left out) plus the workers over their life (reaped children: the DataLoader joins them
  when the iterator ends). The difference is the profiler's cost per batch, and is what a loaded machine disturbs
  least (wall time on a shared 2-core machine swings by tens of per cent between rounds);
- the median wall time of ``next()`` as the loop itself sees it, plain vs profiled;
- the stall share: the plain loop's own timing (time in ``next()`` / loop time) vs the record's ``stall.fraction``
  (after the profiler's measured own cost is taken out of the wait), and the record's ``stall.profiler`` figure;
- the worker-side cost per dataset call and per batch, measured in-process on a no-op dataset (an instrumented
  fetcher vs a plain one, at two batch sizes: the slope is per call, the intercept per batch).

    python scripts/bench_overhead_light.py [--rounds 9] [--batches 1000] [--warmup 20]

Two figures per setting: the median over rounds of the paired difference (profiled less plain, same round), and
the difference of the fastest rounds (each loop's least CPU per batch: on a shared VM noise only ever adds time, so
the minima are what each loop costs undisturbed). A third, the median over rounds of the cost as a share of the plain
loop's CPU per batch, compares runs made while the host ran the whole VM at different speeds (other tenants slow
both loops alike: the plain loop's CPU per batch on this VM has ranged 310-620 µs in one day).

``--concurrent``: the cost by *paired processes* instead (scripts/paired_processes.py says why and how: the plain
and the profiled loop in two processes over the same interval on the same CPUs, taking turns 0.1 s each (``--method
slices``, the default since 2026-12-07; ``shared``: at the same time, as before) — workers=0: one core, workers>0:
all — over the same ``--seconds`` of wall clock, roles swapped every round; the VM's drift over seconds, larger than
the cost, then hits both alike). The profiled loop is inside ``profile()``'s measured window the whole interval,
past its first 2,000 steps (the detail, made in the 12-s set-up): the steady state of a long window, whose steps
keep the tail's totals (with workers, their batches made untimed: NOTE [ Worker detail under run ],
profiler/instrument/batch.py). ``--detail`` keeps every step in detail instead, as every step of a default window
(30-200 steps) is (letting the kept records go every KEEP_AT_MOST steps, as a window holds at most 2,000): the last
line is then ``detail_overhead_pct_workers<W>``. Each child runs about half the wall clock (its twin has the CPUs the
other half), so what ``run`` does by the clock in its tail — the sampler's ticks, 5 Hz — would weigh twice per step
what it weighs in a job alone on its CPUs: the children scale it by that share (``--clock-share``, auto: 0.5 for
slices and shared, so 2.5 Hz; 1: unscaled; paired_processes.clock_share says why). Lines ``workers=W round R: ...``,
then per setting
``overhead_pct_workers<W>: P`` (median over rounds of the process tree's extra on-CPU time per batch, % of the plain
loop's), the last line the largest ``--workers`` setting's.

``--batches`` sets how long a loop runs: a short one (600) counts the profiler's one-off start (its sampler's first
ticks, the first collections of what it imported) per batch too, a long one (2000) is the steady state.

The last lines, one per ``--workers`` setting and then the workers=0 one again (its name kept from earlier runs):
``overhead_pct_workers<W>: P`` — that setting's cost as a % of the plain loop's CPU per batch (median over rounds;
target <= 3 for workers > 0, issue 32), ``overhead_us_per_batch_workers<W>: N`` — the same in µs per batch of 32,
and last ``overhead_us_per_batch: N`` — the workers=0 case's (target <= 50). The machine's load average is printed
at the start and the end of each setting: on a shared machine the figures mean little without it.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset, TensorDataset  # noqa: E402

import profiler  # noqa: E402

BATCH = 32
FEATURES = 64


@dataclass
class Loop:
    main_cpu_s: float  # this process's user+sys over the measured steps (the loop, the profiler's hooks, its sampler)
    workers_cpu_s: float  # the workers' user+sys over their whole life (reaped when the iterator ends)
    wall_s: float  # measured steps only
    next_s: list[float]  # wall time of each measured next()
    stall_fraction: float | None = None  # the record's (profiled only)
    profiler_s: float | None = None  # the record's stall.profiler.seconds (profiled only)


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _make() -> tuple[TensorDataset, torch.nn.Module, torch.optim.Optimizer]:
    g = torch.Generator().manual_seed(0)
    n = BATCH * 4096
    ds = TensorDataset(torch.randn(n, FEATURES, generator=g), torch.randint(0, 10, (n,), generator=g))
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    return ds, model, torch.optim.SGD(model.parameters(), lr=0.01)


def run_loop(ds: Dataset, model: torch.nn.Module, opt: torch.optim.Optimizer, workers: int, warmup: int,
             batches: int, out: str | None) -> Loop:
    """``warmup + batches`` steps of a training loop; under ``profile()`` when ``out`` is given. CPU time is taken
    from just before ``profile()`` / ``iter()`` to after the workers are gone, less the record's writing (its CPU time
    is measured and left out: it happens once per run, not per batch)."""
    loader = DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers,
                        generator=torch.Generator().manual_seed(1))
    waits: list[float] = []
    gc.collect()
    children0 = _cpu(resource.RUSAGE_CHILDREN)
    main0 = 0.0
    ctx: Any = profiler.profile(out=out, warmup=warmup, steps=batches, plots=False, quiet=True) if out else None
    if ctx is not None:
        ctx.__enter__()
    it = iter(loader)
    t_start = time.perf_counter()
    for i in range(warmup + batches):
        if i == warmup:
            t_start = time.perf_counter()
            main0 = _cpu(resource.RUSAGE_SELF)
        t = time.perf_counter()
        x, y = next(it)
        if i >= warmup:
            waits.append(time.perf_counter() - t)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    wall = time.perf_counter() - t_start
    main1 = _cpu(resource.RUSAGE_SELF)
    if ctx is not None:
        ctx.__exit__(None, None, None)  # the window closes at the last step's end; the record's writing is not counted
    del it  # the workers are shut down and joined here: their CPU time lands in RUSAGE_CHILDREN
    loop = Loop(main_cpu_s=main1 - main0, workers_cpu_s=_cpu(resource.RUSAGE_CHILDREN) - children0, wall_s=wall,
                next_s=waits)
    if ctx is not None:
        stall = ctx.record.stall
        loop.stall_fraction = float(stall["fraction"])
        loop.profiler_s = float((stall.get("profiler") or {}).get("seconds", 0.0))
    return loop


def worker_costs(reps: int = 400) -> tuple[float, float]:
    """(µs per dataset call, µs per batch) of the worker-side instrumentation, on a no-op dataset in this thread."""
    from torch.utils.data._utils.fetch import _MapDatasetFetcher

    from profiler.instrument import torch_hooks

    class Noop(Dataset):
        def __len__(self) -> int:
            return 1 << 30

        def __getitem__(self, i: int) -> int:
            return i

    def per_fetch(n: int, instrumented: bool) -> float:
        f = _MapDatasetFetcher(Noop(), True, lambda b: b, False)
        if instrumented:
            torch_hooks.instrument_fetcher(f, 0)
        idx = list(range(n))
        best = float("inf")
        for _ in range(7):  # the minimum of several repeats: a fixed cost, disturbed only upwards by load
            t = time.thread_time_ns()  # on-CPU time: a preemption on the loaded machine is not counted
            for _ in range(reps):
                f.fetch(idx)
            best = min(best, (time.thread_time_ns() - t) / reps / 1e3)
        return best

    small, big = 4, 64
    d_small = per_fetch(small, True) - per_fetch(small, False)
    d_big = per_fetch(big, True) - per_fetch(big, False)
    per_call = (d_big - d_small) / (big - small)
    return per_call, d_small - small * per_call


def _load() -> str:
    """The 1-, 5- and 15-minute load averages (what else ran while the figures were taken)."""
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


# --detail: the profiled child lets its kept rows and batch records go every this many steps. Why: a window keeps at
# most DETAIL_STEPS (2,000) in detail, but the child's ~20 s hold ~10,000 steps; kept, they grew the heap until a full
# garbage collection walked it (one of ~140 ms per ~8,000 steps measured, ~17 µs a step) — a cost a real window never
# reaches (the collector's full pass waits for its long-lived objects to grow by a quarter: ~80,000 objects here).
KEEP_AT_MOST = 1500


def child(role: str, start_at: float, stop_at: float, workers: int, share: float = 1.0) -> int:
    """One side of a concurrent pair: the light loop, epoch after epoch, plain or inside ``profile()``'s window (a
    window longer than the interval), until the interval is over; the last line is its report. ``share``: the wall
    clock's share this child runs (paired_processes.clock_share): the tail's sampler scaled by it."""
    from paired_processes import Interval, report, scale_run_clock

    scale_run_clock(share)
    torch.set_num_threads(1)
    ds, model, opt = _make()
    # One epoch longer than the whole child (a shuffled pass over the data after another, as shuffle=True draws
    # them): no epoch ends in the interval, so the workers measured at its two ends are the same processes.
    from torch.utils.data import RandomSampler

    sampler = RandomSampler(ds, num_samples=len(ds) * 1000, generator=torch.Generator().manual_seed(1))
    loader = DataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=workers)
    tmp = tempfile.mkdtemp(prefix="bench-light-")
    detail = "--detail" in sys.argv  # every step of the window in detail, as a run's first DETAIL_STEPS are
    if detail:
        from profiler.instrument import session

        session.DETAIL_STEPS = 1 << 40
    ctx: Any = profiler.profile(out=os.path.join(tmp, "p"), warmup=20, steps=10_000_000, plots=False, quiet=True) \
        if role == "profiled" else None
    if ctx is not None:
        ctx.__enter__()
    iv = Interval()
    n = 0
    kept = ctx._run.session if ctx is not None and detail else None
    while not iv.done:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            n += 1
            if kept is not None and n % KEEP_AT_MOST == 0:  # (--detail) the kept rows let go: see KEEP_AT_MOST
                kept.rows.clear()
                kept.metas.clear()
            if iv.step(n, start_at, stop_at):
                break
    report(iv)
    shutil.rmtree(tmp, ignore_errors=True)  # every child made one: a day of rounds left ~500 folders in /tmp
    if ctx is not None:
        os._exit(0)  # the record of millions of steps is not what is measured: no need to build it
    return 0


def concurrent(workers_list: list[int], rounds: int, seconds: float, method: str = "slices", detail: bool = False,
               share: float = 1.0) -> int:
    from paired_processes import pair_setup, run_pairs, split_difference, summary

    medians: dict[int, float] = {}
    for workers in workers_list:
        cpus, slice_s = pair_setup(workers, method)
        pct, got = run_pairs(__file__, ["--workers", str(workers), "--share", repr(share)]
                             + (["--detail"] if detail else []),
                             ("plain", "profiled"), rounds, seconds, cpus,
                           log=lambda s, w=workers: print(f"workers={w} {s}", flush=True),
                             slice_s=slice_s)
        medians[workers] = statistics.median(pct)
        print(f"workers={workers}: run's cost, paired processes ({method}), {summary(pct)} of the plain loop's CPU per "
              f"batch; load average {_load()}", flush=True)
        print(f"workers={workers}: where (profiled less plain, median over rounds): "
              f"{split_difference(got, ('plain', 'profiled'))}", flush=True)
    for workers in sorted(medians, key=lambda w: (w == max(medians), w)):
        print(f"{'detail_' if detail else ''}overhead_pct_workers{workers}: {medians[workers]:.2f}")
    return 0


def main() -> int:
    from paired_processes import add_method_args, child_args, child_share, method_of

    pair = child_args(sys.argv)
    if pair is not None:
        return child(*pair, workers=int(sys.argv[sys.argv.index("--workers") + 1]),
                     share=child_share(sys.argv))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--batches", type=int, default=1000, help="measured batches per loop")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--workers", default="0,2", help="comma-separated num_workers values")
    p.add_argument("--concurrent", action="store_true", help="concurrent pairs instead (see above)")
    p.add_argument("--seconds", type=float, default=10.0, help="--concurrent: the measured interval per round")
    add_method_args(p)
    p.add_argument("--detail", action="store_true",
                   help="--concurrent: every step of the window kept in detail, as a run's first 2,000 are (default: "
                        "the interval lies beyond them, in the tail's totals, as a long window's steps do); the last "
                        "line is then detail_overhead_pct_workersN")
    a = p.parse_args()
    if a.concurrent:
        from paired_processes import share_of

        share = share_of(a)
        print(f"the tail's sampler scaled by the share of the wall clock each child runs ({share:g})", flush=True)
        return concurrent([int(w) for w in a.workers.split(",")], a.rounds, a.seconds, method_of(a),
                          a.detail, share)
    torch.set_num_threads(1)  # the tiny model on one thread, as a light job on a shared machine would be
    ds, model, opt = _make()
    per_worker_setting: dict[int, float] = {}
    share_of_setting: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workers in [int(w) for w in a.workers.split(",")]:
            print(f"workers={workers}: load average {_load()} at the start", flush=True)
            # One discarded loop of each first: one-off costs (imports, allocator growth, the profiler's first use).
            run_loop(ds, model, opt, workers, a.warmup, 50, None)
            run_loop(ds, model, opt, workers, a.warmup, 50, os.path.join(tmp, f"w{workers}-discard"))
            overhead, plain_share, prof_share, rec_share, next_plain, next_prof, own = [], [], [], [], [], [], []
            tree_plain, tree_prof = [], []  # the process tree's CPU per batch of each loop (for the minima)
            for r in range(a.rounds):
                order = ("plain", "profiled") if r % 2 == 0 else ("profiled", "plain")
                res: dict[str, Loop] = {}
                for kind in order:
                    out = os.path.join(tmp, f"w{workers}-r{r}") if kind == "profiled" else None
                    res[kind] = run_loop(ds, model, opt, workers, a.warmup, a.batches, out)
                pl, pr = res["plain"], res["profiled"]
                n = a.warmup + a.batches  # the workers made (at least) this many batches
                main_us = (pr.main_cpu_s - pl.main_cpu_s) / a.batches * 1e6
                workers_us = (pr.workers_cpu_s - pl.workers_cpu_s) / n * 1e6
                overhead.append(main_us + workers_us)
                plain_share.append(sum(pl.next_s) / pl.wall_s)
                prof_share.append(sum(pr.next_s) / pr.wall_s)
                rec_share.append(pr.stall_fraction or 0.0)
                next_plain.append(_median(pl.next_s) * 1e6)
                next_prof.append(_median(pr.next_s) * 1e6)
                own.append((pr.profiler_s or 0.0) / a.batches * 1e6)
                tree_pl = pl.main_cpu_s / a.batches * 1e6 + pl.workers_cpu_s / n * 1e6
                tree_plain.append(tree_pl)
                tree_prof.append(pr.main_cpu_s / a.batches * 1e6 + pr.workers_cpu_s / n * 1e6)
                print(f"workers={workers} round {r + 1}: CPU per batch plain {tree_pl:.0f} us, profiled "
                      f"{tree_pl + overhead[-1]:.0f} us ({overhead[-1]:+.0f}: main {main_us:+.0f}, workers "
                      f"{workers_us:+.0f}); next() median {next_plain[-1]:.0f} vs "
                      f"{next_prof[-1]:.0f} us; stall share plain {plain_share[-1]:.1%}, record {rec_share[-1]:.1%} "
                      f"(loop's own timing under the profiler {prof_share[-1]:.1%}; profiler's own "
                      f"{own[-1]:.1f} us/step taken out)", flush=True)
            med = _median(overhead)
            per_worker_setting[workers] = med
            # The same cost as a share of the plain loop's CPU per batch, round by round: a host that runs the whole
            # VM slower (other tenants) scales both loops alike, so this compares runs made at different speeds.
            share = share_of_setting[workers] = _median([o / p for o, p in zip(overhead, tree_plain) if p > 0])
            print(f"workers={workers}: fastest rounds: plain {min(tree_plain):.0f} us, profiled {min(tree_prof):.0f} "
                  f"us per batch: {min(tree_prof) - min(tree_plain):+.0f} us", flush=True)
            print(f"workers={workers}: overhead {med:.0f} us per batch of {BATCH} = {share:.1%} of the plain loop's "
                  f"CPU per batch (medians over rounds), at plain {_median(tree_plain):.0f} us per batch")
            print(f"workers={workers}: overhead {med:.0f} us per batch of {BATCH} (CPU, process tree; rounds "
                  f"{', '.join(f'{x:.0f}' for x in overhead)}); next() median {_median(next_plain):.0f} us plain, "
                  f"{_median(next_prof):.0f} us profiled; stall share plain {_median(plain_share):.1%} vs record "
                  f"{_median(rec_share):.1%} (difference {(_median(rec_share) - _median(plain_share)) * 100:+.1f} "
                  f"points); profiler's own time taken out of the wait {_median(own):.1f} us per step", flush=True)
            print(f"workers={workers}: load average {_load()} at the end", flush=True)
    per_call, per_batch = worker_costs()
    print(f"worker side, in-process on a no-op dataset: {per_call:.2f} us per dataset call, {per_batch:.1f} us per "
          f"batch (fixed)")
    for workers, us in per_worker_setting.items():
        print(f"overhead_pct_workers{workers}: {share_of_setting[workers] * 100:.1f}")
        print(f"overhead_us_per_batch_workers{workers}: {us:.1f}")
    print(f"overhead_us_per_batch: {per_worker_setting.get(0, float('nan')):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
