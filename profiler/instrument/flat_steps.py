"""Flat steps: the steady-state steps of a ``num_workers=0`` loader, kept as a list of ints until the
window closes, and the one pass that makes them the rows and records every other step has.

NOTE [ Flat steps ]
    In the steady state of a num_workers=0 loader (the window open on host clocks, not its last step, the wait's
    on-CPU clock derived from the fetch's) a step whose batch came from a lean fetch on its core (batch.LeanOut) is
    kept as one flat list of ints (FLAT_FIELDS), and its StepRow and BatchMeta are made when the window closes, in one
    pass (:meth:`FlatSteps._materialize`). Why: on a light loop the step row, the batch's record and its envelope,
    made between two steps of the job's model (whose code and data then fill the caches), cost ~18 µs of its ~45 µs
    per batch on the 2-core VM, where the same figures kept flat cost a few (scripts/bench_overhead_light.py,
    alternated in one process). Every other step, and every step on CUDA, is recorded as it happens
    (session.Session._after_wait). A flat step must end up in the record exactly as that step recorded on the way
    would (tests/test_flat_steps.py compares the two).

    The session's fast path (Session._on_next) makes the entries and ends them (``f[F_END] = t``); this module makes
    them rows. Only the open entry is ever written after it is appended.
"""
from __future__ import annotations

from typing import Any

from .batch import LO_N, LO_OWN_NS, BatchMeta, fetch_off_core_ns, lean_meta
from .loaders import BASIS_CALLS, BASIS_STEP
from .steps import StepRow, Tail, step_of

# A flat step's entry, in this order: its step, its epoch, its wait's start and end, count_samples' answer (None or
# (samples, basis)), the fetch's LeanOut, the end of the step's bookkeeping, its end (0: open). F_* are the indices.
FLAT_FIELDS = ("step", "epoch", "wait_start", "wait_end", "samples", "lean", "rest_end", "end")
F_STEP, F_EPOCH, F_WAIT_START, F_WAIT_END, F_SAMPLES, F_LEAN, F_REST_END, F_END = range(len(FLAT_FIELDS))
# In the tail (beyond DETAIL_STEPS), flat steps are folded into its totals every this many: a long run's memory stays
# bounded (a flat step is ~300 bytes) and the fold, under a ms, is a fraction of a per cent of the steps it folds.
# 128, not 1,024 (until 2026-12-07): a flat step holds three objects the garbage collector tracks (its list, its count,
# its LeanOut), and 1,024 of them alive at once crossed the collector's young threshold (700) every few hundred steps,
# each collection promoting the live ones; the promoted ones then set off a full collection of the job's whole heap
# (~160 ms on the 2-core VM) every ~20,000 steps: ~9 µs a step, ~2 % of the light loop's CPU (gc.callbacks, counted
# over 20,000 tail steps: 53 young, 5 middle and 1 full collection at 1,024; none at 128, as in the plain loop).
FLAT_FOLD_EVERY = 128



def _samples_of(n: tuple[int, str] | None, lean: Any) -> tuple[int, str]:
    """A flat step's samples and their basis: the batch's own count when it was taken, else the dataset calls its
    fetch made, else one per step."""
    if n is not None:
        return n
    if lean[LO_N]:
        return lean[LO_N], BASIS_CALLS
    return 1, BASIS_STEP

class FlatSteps:
    """The flat-step half of session.Session (a mixin: the state is the session's, declared here for the types)."""

    _flat: list[list[Any]]  # the steps kept flat, FLAT_FIELDS each
    _flat_done: int  # of _flat, the entries already recorded (_materialize)
    _rows_unsorted: bool  # rows appended out of step order (_materialize)
    _open_flat: list[Any] | None  # the open flat step
    _open_row: StepRow | None
    _pid: int
    _pids: set[int]
    _basis: dict[str, int]
    warmup: int
    detail_steps: int
    rows: list[StepRow]
    metas: list[BatchMeta]
    tail: Tail

    def _materialize(self) -> None:
        """The flat steps (NOTE [ Flat steps ]) as the step rows and BatchMetas every other step has, in step order:
        at the window's close, every FLAT_FOLD_EVERY flat steps in the tail, or before a restart on another loader. A
        step beyond the detail (DETAIL_STEPS) goes into the tail's totals, as it would have at its end (its row and
        record are not kept).

        Resumable: a signal (Ctrl-C, SIGTERM under ``profiler run``) can land anywhere in it, and the run then stops
        and calls it again from the window's close. ``_flat_done`` counts the entries already recorded, and each one
        is counted done before it is recorded, so an interrupted pass loses at most the step in flight, as a step
        recorded on the way can be lost, and never records one twice; the rows are sorted once they all are."""
        flat = self._flat
        limit = self.warmup + self.detail_steps
        open_f = self._open_flat
        for i in range(self._flat_done, len(flat)):
            f = flat[i]
            if f[F_STEP] >= limit and f is not open_f:  # ended, in the tail: only its totals are kept
                row, basis = self._tail_row(f)
                self._flat_done = i + 1
                self._fold_tail_row(row, basis)
                continue
            made = self._flat_row(f)
            self._flat_done = i + 1
            self._keep_flat_row(f, *made)
        self._flat, self._flat_done = [], 0
        if self._rows_unsorted:
            self._sort_rows()

    def _materialize_open(self) -> None:
        """The open flat step as a row now (its h2d stage needs one); the other flat steps stay flat."""
        f, flat = self._open_flat, self._flat
        if f is None or not flat or flat[-1] is not f or len(flat) <= self._flat_done:
            self._materialize()
            return
        made = self._flat_row(f)
        flat.pop()
        self._keep_flat_row(f, *made)

    def _flat_row(self, f: list[Any]) -> tuple[StepRow, BatchMeta, str]:
        """A flat step's row, its batch's BatchMeta and its samples' basis (nothing recorded yet)."""
        step, epoch, t0, t1, n, lean, rest_end, end = f  # FLAT_FIELDS
        meta = lean_meta(lean, self._pid)
        k, basis = _samples_of(n, lean)
        tail = step >= self.warmup + self.detail_steps
        row = StepRow(step, epoch, -1, self._pid, k, t0, t1, (t1 - t0) - fetch_off_core_ns(meta.marks), 0, True,
                      compute_end_ns=end, batch=-1 if tail else len(self.metas), tail=tail,
                      own_wait_ns=meta.own_ns, own_rest_ns=max(0, rest_end - t1))
        if end:  # ended (_end_step's rule); an open one gets its h2d when it ends
            row.h2d_start_ns = row.h2d_end_ns = t1
        return row, meta, basis

    def _tail_row(self, f: list[Any]) -> tuple[StepRow, str]:
        """An ended flat step beyond the detail: the row Tail.add reads, without the BatchMeta (lean_meta) that
        _flat_row makes for a kept row — the tail keeps totals only, and the record is the same (the fields Tail.add
        reads are those _flat_row sets). Why: making the BatchMeta was most of a tail step's deferred cost (~40 % of
        _materialize, profiled), paid by every step of a long ``run`` tail and of every monitored window."""
        step, epoch, t0, t1, n, lean, rest_end, end = f  # FLAT_FIELDS
        k, basis = _samples_of(n, lean)
        row = StepRow(step, epoch, -1, self._pid, k, t0, t1, 0, 0, True, h2d_start_ns=t1, h2d_end_ns=t1,
                      compute_end_ns=end, tail=True, own_wait_ns=lean[LO_OWN_NS], own_rest_ns=max(0, rest_end - t1))
        return row, basis

    def _fold_tail_row(self, row: StepRow, basis: str) -> None:
        """_keep_flat_row's tail case: the basis counted, the step into the tail's totals."""
        self._basis[basis] = self._basis.get(basis, 0) + 1
        self._pids.add(self._pid)
        row.idle_ns = row.wait_end_ns - row.wait_start_ns
        self.tail.add(row)

    def _keep_flat_row(self, f: list[Any], row: StepRow, meta: BatchMeta, basis: str) -> None:
        """Record a flat step made a row: its basis counted, the row kept (or, in the tail, folded into the totals
        once ended), the open one made the open row."""
        self._basis[basis] = self._basis.get(basis, 0) + 1
        self._pids.add(self._pid)
        if f is self._open_flat:
            self._open_row, self._open_flat = row, None
        elif row.tail:  # _end_step's fold, for a step that ended flat
            row.idle_ns = row.wait_end_ns - row.wait_start_ns
            self.tail.add(row)
        if not row.tail:
            rows = self.rows
            if rows and rows[-1].step > row.step:
                self._rows_unsorted = True
            self.metas.append(meta)
            rows.append(row)

    def _sort_rows(self) -> None:
        """Rows in step order, and their batches numbered in that order, as they arrived. Rows made on the way for
        steps after a flat one (the full fetches) are out of order until the flat ones are made; a step made a row by
        its h2d stage comes after all the others (no sort, which would be once per step)."""
        self.rows.sort(key=step_of)
        metas = self.metas
        order = [r.batch for r in self.rows if r.batch >= 0]
        self.metas = [metas[b] for b in order]
        for i, r in enumerate(r for r in self.rows if r.batch >= 0):
            r.batch = i
        self._rows_unsorted = False

