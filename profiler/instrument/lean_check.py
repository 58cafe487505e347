"""Checking that a lean stretch's fetches stayed on their core, once for the whole stretch (``num_workers=0``).

A lean fetch (inline_fetch.LEAN_STRETCH: the main thread's fetches of a quiet, in-memory loader, 15 of every 16) is
recorded as having run on its core throughout: no wait for a core, no blocking read, its on-CPU time its wall time.
That must be checked. Reading the thread's on-CPU clock at both ends of every lean fetch checks each one, but each
read is a system call, and two per batch were 6 µs of a light batch's ~50 µs profiler cost on the 2-core VM this was
measured on (scripts/bench_overhead_light.py, alternated: the call's own ~0.2 µs and the caches and TLB a kernel
entry costs the loop's code after it).

So the check is made once per stretch: the on-CPU and wall clocks are read at the entry of the fetch that starts a
stretch (a full fetch, which reads them anyway) and at the entry of the next full fetch. Between the two, the thread's
time off its core in all is the wall time less the on-CPU time; every lean fetch in between was off its core for no
longer than that. Under CLOSE_TIMING_FROM_OFF_NS (10 µs) the stretch is *checked*: each of its fetches ran on its
core, to within what the per-fetch check allowed, and the record is as exact as before.

Over it, the stretch is *unchecked*: some time off the core fell somewhere in it — in one of its fetches, or in the
job's own steps between them (a preemption, the GIL taken by another thread, a blocking call in the loop) — and which
cannot be told. Its fetches stay recorded as on their core; how many, and how long the thread was off its core in
those stretches (an upper bound on what was counted as on-core), go in the record (``accounting.lean_unchecked``),
and the stretches after it check each lean fetch itself (two clock reads, as before) until a whole stretch, all of
its lean fetches checked one by one, is seen on its core again (a part of one, cut short by a fetch that left its
core or by the window's close, is not enough). The first stretch is checked fetch by fetch too: a job whose fetches
or loop leave their core at every step (a dataset that sleeps or waits on a lock, a CUDA synchronisation) never has
a whole stretch on its core, and so never an unchecked one; a light CPU loop on a quiet machine reads no clock in its
lean fetches after its first stretch. Measured on the light benchmark's loop: 2 % of 16-batch stretches plain, 8 %
profiled (the sampler thread's ticks take the GIL) had 10 µs or more off the core.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

_perf = time.perf_counter_ns
_cpu = time.thread_time_ns


@dataclass
class StretchCheck:
    """The main thread's lean-stretch check (one per process: forked workers never start one)."""

    off_limit_ns: int  # derived.CLOSE_TIMING_FROM_OFF_NS: off the core this long or longer in all, the check fails
    full: int  # lean fetches in a whole stretch (inline_fetch.LEAN_STRETCH - 1)
    # Lean fetches read no clock (True) or each reads its own (False): at first, and after a failed check, until a
    # whole stretch checked fetch by fetch is found on its core (a job whose fetches leave their core never has one)
    by_stretch: bool = False
    open: bool = False  # a stretch is under way, started at (w0, c0) in thread ``ident``
    w0: int = 0
    c0: int = 0
    ident: int = 0
    lean: int = 0  # lean fetches made in it without a clock of their own
    checked: int = 0  # lean fetches made in it that checked themselves (by_stretch False)
    # Totals over the process's life (a session takes the difference over its window: counts()).
    unchecked_stretches: int = 0
    unchecked_batches: int = 0
    unchecked_off_ns: int = 0

    def start(self, w_ns: int, c_ns: int) -> None:
        """A stretch starts at a full fetch's entry, whose wall and on-CPU clocks are these."""
        self.open, self.w0, self.c0, self.ident, self.lean, self.checked = True, w_ns, c_ns, threading.get_ident(), 0, 0

    def cpu_at(self, w_ns: int) -> int:
        """The thread's on-CPU clock at wall time ``w_ns`` inside the stretch, as the check will find it when it
        passes (on its core since the stretch started): what a lean fetch records instead of reading it."""
        return self.c0 + (w_ns - self.w0)

    def settle(self, w_ns: int, c_ns: int) -> None:
        """The stretch ends at a full fetch's entry (or the window's close) with these clocks of the same thread."""
        if not self.open:
            return
        self.open = False
        off = (w_ns - self.w0) - (c_ns - self.c0)
        same = threading.get_ident() == self.ident
        if self.lean:  # its lean fetches read no clock: this is their check
            if off >= self.off_limit_ns or not same:
                self.unchecked_stretches += 1
                self.unchecked_batches += self.lean
                self.unchecked_off_ns += max(0, off) if same else 0
                self.by_stretch = False
        elif same and off < self.off_limit_ns and self.checked >= self.full:
            # a whole stretch, checked fetch by fetch, stayed on its core (a part of one, cut short by a fetch that
            # left its core or by the window's close, says too little)
            self.by_stretch = True
        self.lean = self.checked = 0

    def settle_now(self) -> None:
        """At the window's close: the open stretch is checked with the clocks now (in another thread: unchecked)."""
        if self.open:
            w = _perf()
            self.settle(w, _cpu())

    def restart(self) -> None:
        """A new iterator's fetches (another loader, another epoch, another profile): the stretch under way is checked
        now, and the new fetches' first stretch is checked fetch by fetch (they may leave their core where the last
        ones did not)."""
        self.settle_now()
        self.by_stretch = False

    def counts(self) -> tuple[int, int, int]:
        return self.unchecked_stretches, self.unchecked_batches, self.unchecked_off_ns


def unchecked_since(check: StretchCheck, at_start: tuple[int, int, int]) -> dict[str, float]:
    """``accounting.lean_unchecked`` of a window: the unchecked stretches since ``at_start`` (counts() then)."""
    s, b, off = (now - then for now, then in zip(check.counts(), at_start))
    return {"stretches": s, "batches": b, "off_core_s": round(off / 1e9, 6)}
