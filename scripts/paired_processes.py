"""Paired processes: two copies of a loop, one plain and one profiled, run over the same interval on the same CPUs.

Why (the benches' method, issue 32): on the 2-core VM the host slows the whole VM down and up over seconds — the same
plain light loop, run twice in a row in one process, has cost 278 and 304 µs of CPU per step, and rounds of
alternating loops (plain, then profiled, a few seconds each) differed by -17 to +51 % with nothing profiled in
either. A cost of 1 % cannot be read through that. Two processes that share the same CPUs over the same wall-clock
interval are slowed alike, whatever the host does: two *plain* loops run this way differ by -0.7 to +1.3 % per round
(4 rounds, median +0.28 %).

Three ways to share the machine (``--method``): *slices* (the default since 2026-12-07), *shared*, *apart*.
Shared: both children pinned to the *same* CPU set at once, time-sliced by the scheduler every few ms. A process that
has grown (the profiled one: its record, its code paths warm) may lose more to each switch than its twin, so part of
what a shared pair measures could be the cost of sharing a core with a twin, not of the profiler's own work. Apart
("0/1": each tree on its own core at once, swapped every round): no sharing, but on this VM the two vCPUs drift
apart: one run's rounds went from -20 to +51 %. Slices: both on the same CPUs, *taking turns* — each runs SLICE_S
(0.1 s) of steps while its twin waits on a pipe (the baton, passed at a step boundary: ``Interval.step``), then
waits in turn. A slice is short against the VM's drift, so both still see the same host, and one switch per 0.1 s
instead of one every few ms makes the twins' sizes irrelevant; it is the issue's "alternating paired rounds" with
rounds short enough for this VM. What slices showed (2026-12-07, monitor workers=0, 7 rounds): +2.36 %, the same
as shared pairs (+2.09 % in 5 rounds of the same loop): the profiled loop's extra CPU is its own, not a sharing
effect. (Each child runs about half the interval's wall clock, as shared; a cost the profiler pays by the clock — the
monitor's probes, chunks and cuts — then weighs about twice per step what it weighs in a job alone on its CPUs;
bench_monitor.py scales the monitor's clock by that share since 2026-12-07: clock_share, scale_monitor_clock.)

How: each round starts two child processes (this file's caller, re-run with ``--child ROLE``), pinned to the same
CPU set (``os.sched_setaffinity``, inherited by the workers they fork), told one wall-clock instant to start
measuring and how long (slices: and given the two ends of the baton's pipes, ``--baton``). Each child sets up
(imports, data, model, the profiler's start, its first steps) before that instant, then counts the steps it
completes in the interval and its process tree's on-CPU time over them (the ``schedstat`` of every thread of the
process and of its descendants — the DataLoader workers — read at the step boundaries that open and close the
interval: nanoseconds, unlike ``getrusage``'s ticks, and workers still alive are counted). Roles are swapped every
round (which child is started first, which profiled), so an asymmetry of the slots cancels. The figure per round is
(profiled − plain) / plain CPU per step; the benches report the median over rounds.

What it does not measure: the one-off start and the final write (outside the interval, as in the alternating method),
and a cost the profiled loop pays only in a rare event longer than the interval (the monitor's cuts: bench_monitor.py
adds their measured share separately). Sharing a core makes both loops' caches colder alike; the ratio is what is
reported.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

SETUP_S = 12.0  # from the children's start to the measured interval: imports, data, the profiler's start, first steps
# Slices (the default method): each child runs this long, then hands the CPUs to its twin. Why 0.1 s: short against
# the VM's drift (seconds), so both see the same host; long against a switch's refill of the caches (a few tens of µs
# at most), so the twins' sizes stop mattering (shared, the scheduler switches them every few ms); and a light step
# (~0.4 ms) is 250 steps of it: the step boundary where the baton passes ends a slice within 1 % of its length.
SLICE_S = 0.1


# Where a tree's on-CPU time goes, by kind of thread (tree_split_ns): the loop's own thread, the process's other
# threads (the profiler's sampler, the queues' feeder threads), the children's main threads (DataLoader workers'
# fetches) and the children's other threads (their feeder and fd-sharing threads). Why: the difference between two
# trees says how much, this says where (2026-12-06: the profiled tree's extra was ~60 µs per step on the loop's
# thread, ~11 µs on the sampler's, ~30 µs in the workers' fetches).
SPLIT_KINDS = ("main", "threads", "workers", "worker_threads")


def tree_split_ns(pid: int | None = None) -> dict[str, int]:
    """On-CPU ns of every thread of this process (or ``pid``) and of its descendants, alive now, split by SPLIT_KINDS
    (the children's descendants counted in the children's kinds)."""
    pid = os.getpid() if pid is None else pid
    out = dict.fromkeys(SPLIT_KINDS, 0)

    def add(p: int, own: str, other: str) -> list[str]:
        kids: list[str] = []
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            return kids
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/schedstat", "rb") as f:
                    out[own if tid == str(p) else other] += int(f.read().split()[0])
                with open(f"/proc/{p}/task/{tid}/children", "rb") as f:
                    kids += f.read().split()
            except (OSError, ValueError, IndexError):
                continue  # a thread that ended meanwhile
        return kids

    todo = add(pid, "main", "threads")
    while todo:
        todo = [k for child in todo for k in add(int(child), "workers", "worker_threads")]
    return out


@dataclass
class Interval:
    """What a child measured: its steps in the interval, its tree's on-CPU ns over them, and where (``split_ns``)."""

    steps: int = 0
    cpu_ns: int = 0
    started: bool = False
    done: bool = False
    split_ns: dict[str, int] | None = None
    _n0: int = 0
    _s0: dict[str, int] | None = None

    def step(self, n: int, start_at: float, stop_at: float) -> bool:
        """Call after each completed step ``n`` (counting from 1); True once the interval is over (stop the loop).
        In *slices* (``_baton`` set by child_args) it also hands the CPUs to the twin when this child's slice is over,
        and waits for them back, at this step boundary: the wait costs no CPU, so it falls in no step."""
        now = time.time()
        if not self.started:
            if now >= start_at:
                if _baton is not None:
                    now = _baton.take()  # the first slice: the child started first has it, the other waits for it
                self.started, self._n0, self._s0 = True, n, tree_split_ns()  # one walk of the tree per edge
            return False
        if now >= stop_at:
            s1, s0 = tree_split_ns(), self._s0 or {}
            self.split_ns = {k: s1[k] - s0.get(k, 0) for k in SPLIT_KINDS}
            self.cpu_ns, self.steps, self.done = sum(self.split_ns.values()), n - self._n0, True
            if _baton is not None:
                _baton.give()  # the twin, waiting, sees the interval over at its next step
            return True
        if _baton is not None and now >= _baton.slice_end:
            _baton.give()
            _baton.take()
        return False


class Baton:
    """*Slices* (module docstring): the right to run, passed between the two children through a pair of pipes."""

    def __init__(self, read_fd: int, write_fd: int, first: bool, slice_s: float):
        self.read_fd, self.write_fd, self.first, self.slice_s = read_fd, write_fd, first, slice_s
        self.slice_end = 0.0

    def take(self) -> float:
        """Wait for the baton (the first take of the child started first does not); returns the time it came."""
        if self.first:
            self.first = False
        else:
            os.read(self.read_fd, 1)
        now = time.time()
        self.slice_end = now + self.slice_s
        return now

    def give(self) -> None:
        try:
            os.write(self.write_fd, b"b")
        except OSError:  # the twin has ended (its interval over) and closed its end: nothing to hand over
            pass


_baton: Baton | None = None  # this child's, in slices (child_args)


def child_args(argv: list[str]) -> tuple[str, float, float] | None:
    """``--child ROLE START_AT STOP_AT`` in argv (as run_pairs passes it), else None. Pins this process first."""
    if "--child" not in argv:
        return None
    global _baton
    i = argv.index("--child")
    role, start_at, stop_at, cpus = argv[i + 1], float(argv[i + 2]), float(argv[i + 3]), argv[i + 4]
    os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
    if "--baton" in argv:  # slices: READ_FD WRITE_FD FIRST(0/1) SLICE_S
        j = argv.index("--baton")
        _baton = Baton(int(argv[j + 1]), int(argv[j + 2]), argv[j + 3] == "1", float(argv[j + 4]))
    return role, start_at, stop_at


def child_share(argv: list[str]) -> float:
    """A child's ``--share`` (its share of the wall clock, as the bench passes it: clock_share), 1 if not given."""
    return float(argv[argv.index("--share") + 1]) if "--share" in argv else 1.0


def report(interval: Interval, **extra: float) -> None:
    """The child's last line: what the parent reads."""
    print(json.dumps({"steps": interval.steps, "cpu_ns": interval.cpu_ns, "split_ns": interval.split_ns, **extra}),
          flush=True)


def run_pairs(script: str, child_extra: list[str], roles: tuple[str, str], rounds: int, seconds: float, cpus: str,
              log: Callable[[str], None] = print, slice_s: float = 0.0) -> tuple[list[float], list[dict[str, dict]]]:
    """``rounds`` pairs of ``python script --child ROLE ... child_extra``; roles[0] is the baseline. ``slice_s`` > 0:
    *slices* (the children take turns of that length; module docstring), else both run at once.
    ``cpus``: the CPU set both children share ("0" or "0,1"), or two sets "A/B" (*apart*): the child started first
    runs on A, the other on B, and as the order flips every round each role has each set in turn.
    Returns the per-round (roles[1] − roles[0]) / roles[0] CPU per step, in %, and each round's two reports."""
    pct: list[float] = []
    got_all: list[dict[str, dict]] = []
    for r in range(rounds):
        order = roles if r % 2 == 0 else roles[::-1]
        start_at = time.time() + SETUP_S
        stop_at = start_at + seconds
        sets = cpus.split("/") if "/" in cpus else [cpus, cpus]  # "A/B": the first started on A, the other on B
        pipes = [os.pipe(), os.pipe()] if slice_s else []  # slices: pipes[i] carries the baton to child i
        batons = [["--baton", str(pipes[i][0]), str(pipes[1 - i][1]), "1" if i == 0 else "0", repr(slice_s)]
                  for i in range(2)] if slice_s else [[], []]
        procs = [subprocess.Popen([sys.executable, script, "--child", role, repr(start_at), repr(stop_at), sets[i],
                                   *batons[i], *child_extra], stdout=subprocess.PIPE, text=True,
                                  pass_fds=[fd for pair in pipes for fd in pair]) for i, role in enumerate(order)]
        for fd in (fd for pair in pipes for fd in pair):
            os.close(fd)
        got: dict[str, dict] = {}
        for role, p in zip(order, procs):
            out, _ = p.communicate()
            lines = [ln for ln in out.splitlines() if ln.startswith("{")]
            if p.returncode != 0 or not lines:
                raise SystemExit(f"paired child {role} failed (rc {p.returncode}): {out[-500:]}")
            got[role] = json.loads(lines[-1])
        per = {role: got[role]["cpu_ns"] / max(1, got[role]["steps"]) / 1e3 for role in roles}
        pct.append((per[roles[1]] - per[roles[0]]) / per[roles[0]] * 100)
        got_all.append(got)
        log(f"round {r + 1}: CPU per step {roles[0]} {per[roles[0]]:.1f} us ({got[roles[0]]['steps']} steps), "
            f"{roles[1]} {per[roles[1]]:.1f} us ({got[roles[1]]['steps']} steps): {pct[-1]:+.2f} %; load "
            f"{os.getloadavg()[0]:.1f}")
        where = {role: " / ".join(f"{v / max(1, got[role]['steps']) / 1e3:.1f}"
                                  for v in (got[role].get("split_ns") or {}).values()) for role in roles}
        log(f"round {r + 1}: where, us per step ({' / '.join(SPLIT_KINDS)}): "
            + "; ".join(f"{role} {where[role]}" for role in roles))
    return pct, got_all


METHODS = ("slices", "shared", "apart")


def add_method_args(parser: Any) -> None:
    """The benches' ``--method`` (and its older ``--apart``) options; read them back with :func:`method_of`."""
    parser.add_argument("--method", choices=METHODS, default="slices",
                        help="how the pair shares the machine (scripts/paired_processes.py): slices (default: the two "
                             "take turns on the same CPUs, 0.1 s each), shared (both at once on the same CPUs), apart "
                             "(at once, each on its own core)")
    parser.add_argument("--apart", action="store_true", help="the same as --method apart")
    parser.add_argument("--clock-share", default="auto",
                        help="the share of the wall clock each child runs, by which the profiler's clock-driven work "
                             "is scaled in the children (auto: the method's, 0.5 for slices and shared, 1 apart; 1: "
                             "unscaled, that work then weighs twice per step; clock_share says why)")


def method_of(args: Any) -> str:
    return "apart" if args.apart else str(args.method)


def share_of(args: Any) -> float:
    """The benches' ``--clock-share``: the method's share (auto) or the number given; a bad one is one line on stderr
    and exit status 2."""
    try:
        share = clock_share(method_of(args)) if args.clock_share == "auto" else float(args.clock_share)
        if not 0.05 <= share <= 1.0:
            raise ValueError
    except ValueError:
        print(f"{os.path.basename(sys.argv[0])}: --clock-share must be auto or a number from 0.05 to 1",
              file=sys.stderr)
        raise SystemExit(2) from None
    return share


def pair_setup(workers: int, method: str) -> tuple[str, float]:
    """run_pairs' ``cpus`` and ``slice_s`` for a loop with ``workers`` DataLoader workers: one core for workers=0, all
    of this process's otherwise; *apart*: the first two cores, one each (module docstring says why)."""
    mine = sorted(os.sched_getaffinity(0))
    cpus = ("0" if workers == 0 else ",".join(str(c) for c in mine)) if method != "apart" or len(mine) < 2 \
        else f"{mine[0]}/{mine[1]}"
    return cpus, SLICE_S if method == "slices" else 0.0


# What the monitor does by the wall clock (thresholds.py): durations, and rates (Hz). clock_share says why they scale.
MONITOR_CLOCK_DURATIONS = ("MONITOR_MIN_WINDOW_S", "MONITOR_GAP_MIN_S", "MONITOR_GAP_CLOCK_EVERY_S",
                           "MONITOR_WRITE_EVERY_S")
MONITOR_CLOCK_RATES = ("MONITOR_GAP_HZ",)


def clock_share(method: str) -> float:
    """The share of the wall clock a child's loop runs at full speed: 0.5 where the twins share the CPUs (slices:
    each holds them half the time; shared: each gets half), 1 apart (each has its own core).

    Why it matters: what the monitor does by the clock (a probe 10 times a second, a cut and its chunks every 10 s)
    is the same per second whatever the job's speed, so a child that steps at half speed pays it twice per step —
    a job alone on its CPUs (the issue's alternating rounds, or production) pays it once. Measured 2026-12-07
    (monitor, workers=0, slices, 6 rounds): the steps outside gaps (probes, chunks, cuts) +0.8-1.0 % of the plain
    loop's CPU per step; with the clock scaled by the share, +0.3-0.4 %; the gap steps the same either way."""
    return 1.0 if method == "apart" else 0.5


def scale_monitor_clock(share: float) -> dict[str, float]:
    """Make the monitor's clock-driven intervals as long per step as in a job alone on its CPUs: durations / share,
    rates * share (in this process: each child calls it before it starts the monitor, the parent before it counts
    the cuts an interval missed). Returns the values set. share 1: unchanged."""
    from profiler import thresholds as th
    from profiler.monitor import procs

    out: dict[str, float] = {}
    for name in MONITOR_CLOCK_DURATIONS:
        out[name] = getattr(th, name) / share
    for name in MONITOR_CLOCK_RATES:
        out[name] = getattr(th, name) * share
    for name, value in out.items():
        setattr(th, name, value)
    procs.USS_EVERY_S = procs.USS_EVERY_S / share
    return out


def scale_run_clock(share: float) -> int:
    """``run``'s one clock-driven cost in its tail, the sampler's ticks (5 Hz: background.TAIL_HALVINGS), made as
    frequent per step as in a job alone on its CPUs: one more halving per halving of the share (0.5: 2.5 Hz). Returns
    the tail's halvings set. share 1: unchanged. (clock_share says why.)"""
    import math

    from profiler.samplers import background

    background.TAIL_HALVINGS += max(0, round(math.log2(1.0 / share)))
    return background.TAIL_HALVINGS


def summary(pct: list[float]) -> str:
    return (f"median {statistics.median(pct):+.2f} % (rounds: {', '.join(f'{x:+.1f}' for x in pct)}; "
            f"interquartile {statistics.quantiles(pct, n=4)[0]:+.2f} .. {statistics.quantiles(pct, n=4)[2]:+.2f})"
            if len(pct) > 1 else f"{pct[0]:+.2f} %")


def split_difference(got_all: list[dict[str, dict]], roles: tuple[str, str]) -> str:
    """Where the difference went: per SPLIT_KINDS, the median over rounds of roles[1]'s less roles[0]'s on-CPU µs
    per step (e.g. "main +58.1, threads +11.0, workers +29.7, worker_threads +9.8")."""
    diffs: dict[str, list[float]] = {k: [] for k in SPLIT_KINDS}
    for got in got_all:
        per = {role: {k: v / max(1, got[role]["steps"]) / 1e3 for k, v in (got[role].get("split_ns") or {}).items()}
               for role in roles}
        for k in SPLIT_KINDS:
            if k in per[roles[0]] and k in per[roles[1]]:
                diffs[k].append(per[roles[1]][k] - per[roles[0]][k])
    return ", ".join(f"{k} {statistics.median(v):+.1f}" for k, v in diffs.items() if v) + " us per step"
