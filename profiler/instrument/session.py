"""The main side of profiling: which loader is profiled, one step per ``next()``, epochs, the measured window.

A *step* is the interval between two ``next()`` calls on the profiled loader's iterator: the wait inside ``next()``
(input), then the user's own work until the following ``next()`` (compute, including any H2D copy). The first
``warmup`` steps run unmeasured; the window closes when ``steps`` measured steps have ended, i.e. at the next call
to ``next()`` after the last one. The profiled loader is the first one iterated; others are unwrapped and counted.

Device time on CUDA (the events at every boundary, chained from one anchor): device_time.py.
"""
from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any, Callable

from torch import Tensor

from . import clocks, hooks, substages, torch_hooks
from .batch import (
    LO_N,
    LO_W_ENTRY,
    M_RUNQ,
    WL_PID,
    WL_WORKER_ID,
    BatchMeta,
    Instrumented,
    fetch_off_core_ns,
    lean_meta,
    meta_of,
    set_worker_detail,
)
from .derived import CLOSE_TIMING_FROM_OFF_NS
from .device_time import DeviceTime
from .flat_steps import F_END, F_REST_END, FLAT_FOLD_EVERY, FlatSteps
from .gaps import Gaps
from .inline_fetch import LEAN_CHECK, inline_call_costs
from .lean_check import unchecked_since
from .loaders import (
    BASIS_BATCH,
    BASIS_CALLS,
    BASIS_STEP,
    BATCH_BYTES_OF,
    LoaderSelector,
    count_samples,
    is_data_folder,
    tensor_bytes,
)
from .proxies import call_cost_ns
from .relay import Relays
from .steps import (
    DETAIL_STEPS,
    MAX_TAIL_SKIPPED,
    CudaTimeline,
    EpochRow,
    LoaderInfo,
    OtherIter,
    OtherLoader,
    StepRow,
    Tail,
)
from .tracking import LoaderTracking

_perf = time.perf_counter_ns
_cpu = time.thread_time_ns
_get_ident = threading.get_ident

# Resolve completed CUDA events every this many steps: bounds live events on long runs without a synchronize.
RESOLVE_EVERY = 32
# With num_workers=0 the wait's on-CPU time (StepRow.main_cpu_ns) is the fetch's (read at its ends, inline_fetch) plus
# the DataLoader's own code around it (its __next__, the sampler): straight-line code that is on its core, so the
# wait's on-CPU time is its wall time less the fetch's time off the core. Every WAIT_CPU_PROBE-th step reads the
# on-CPU clock around the wait to check that, and once a step finds the wait off its core outside the fetch for
# CLOSE_TIMING_FROM_OFF_NS or more (a sampler that reads a file), every step reads it, until WAIT_CPU_CALM steps in a
# row find it on its core again. Why: those two reads are system calls (~0.2 µs each on a VM, and a few µs more in
# the caches and TLB the kernel entry costs the loop's code after it: +6 µs per light batch for two, measured), a
# fifth of the profiler's remaining ones per light batch. Why not for ever once found: a single wait that lost its
# core once (the profiler's own sampler thread taking the GIL at a tick, a preemption) then cost every later step
# both reads; in the light benchmark that happened in some runs and not others (46 vs 62 µs per batch).
# Beyond the detail (DETAIL_STEPS) no step reads it: the tail keeps no wait's on-CPU time (Tail), and a step that read
# it was a step made a row (StepRow, its BatchMeta) instead of kept flat: a loop that shares its core, preempted every
# few light steps, had two thirds of its tail steps made rows so, +60-80 µs of CPU per step beside a plain twin on one
# core (2026-12-07, scripts/bench_overhead_light.py --concurrent --workers 0).
WAIT_CPU_PROBE = 16
#: Steps in a row whose wait stayed on its core (outside the fetch) before the wait is probed again: as many as
#: between two probes, so a sampler that reads a file at every step keeps every step read.
WAIT_CPU_CALM = WAIT_CPU_PROBE
# Distinct folders the record names as where the data was read from (the most-opened are kept).
MAX_FOLDERS = 256
_NOT_INTHREAD: Any = object()  # Session._inthread's answer for an iterator with workers (or not profiled)

# NOTE [ Worker tail steps ]
#     Beyond the detail (DETAIL_STEPS) a step keeps only the tail's totals (Tail), and with workers, once the window is
#     open on host clocks, a step whose batch came from a worker's lean fetch (its envelope holds a WorkerLean, no
#     sub-stage, no file opened, no sample skipped) needs nothing of its batch's record but the worker's pid: its
#     BatchMeta (batch.meta_of, ~40 % of the main side's per-step Python) and its StepRow were made only to be folded
#     into the totals and dropped. Such a step is kept as one list, WT_FIELDS, and folded when it ends
#     (Session._end_step, Tail.add_step: the figures Tail.add reads from the row it would have had). Every other
#     step (detail, a full fetch's envelope, the window's last, CUDA, the monitor's) goes the general way; a step
#     whose h2d stage begins (the built-in pipeline) is made a row then (begin_main_stage).
WT_FIELDS = ("step", "epoch", "worker_id", "pid", "samples", "wait_start", "wait_end", "main_cpu", "main_runq",
             "own_rest")
WT_STEP, WT_EPOCH, WT_WORKER, WT_PID, WT_N, WT_W0, WT_W1, WT_CPU, WT_RUNQ, WT_REST = range(len(WT_FIELDS))
# A worker tail step reads the wait's on-CPU and run-queue clocks (clocks.WaitClocks) on one step in this many, and
# only its wall clocks on the others (WT_RUNQ -1: not read). Why: the tail keeps only totals, and of the wait's
# clocks only ``main_runq_s`` (reported, not attributed: the cause split is the detail's), which Tail scales from the
# steps that read it (Tail.runq_estimate_ns); on the others they were two or three system calls per step on the
# job's thread, each after it had blocked for its batch (a cold path: the three reads WaitClocks replaced were ~3 % of
# the light loop's CPU per step, docs/performance.md).
TAIL_CLOCK_EVERY = 8


class WindowClosed(BaseException):
    """Raised out of the user's ``next()`` when the window has closed and ``then='exit'``: stops the job cleanly.

    A BaseException, so a script's ``except Exception`` does not swallow it (its ``finally`` blocks still run).
    """


class Session(Relays, LoaderTracking, FlatSteps, DeviceTime):
    """One profiling session in this process: hooks installed from ``start()`` to ``stop()``. Its halves: which loader
    is profiled (tracking.LoaderTracking), the flat steps' rows (flat_steps.FlatSteps), device time at the window's
    close (device_time.DeviceTime); here, the steps and the window."""

    def __init__(self, warmup: int, steps: int, then: str = "exit",
                 on_step: Callable[[bool, int, int, int], None] | None = None,
                 on_window_closed: Callable[["Session"], None] | None = None,
                 on_first_pid: Callable[[int, int], None] | None = None, t0_ns: int | None = None,
                 detail_steps: int | None = None, override: dict[str, int] | None = None,
                 select: LoaderSelector | None = None, on_tail: Callable[[], None] | None = None):
        self.warmup, self.steps, self.then = warmup, steps, then
        self.select = select  # --loader: only a matching loader is profiled
        self.detail_steps = DETAIL_STEPS if detail_steps is None else detail_steps
        self.tail = Tail()
        self._n_steps = 0
        self._measured_done = 0
        # {num_workers, batch_size}: applied to the profiled loader when first iterated, so that `sweep` can run a
        # user's script unchanged at other settings (run --override-*)
        self.override = dict(override or {})
        self.on_step, self.on_window_closed, self.on_first_pid = on_step, on_window_closed, on_first_pid
        self.on_tail = on_tail  # called at the first step beyond the detail (the harness slows its sampler)
        self.t0_ns = t0_ns or 0
        self.samples: dict = {}
        self.rows: list[StepRow] = []
        self.metas: list[BatchMeta] = []
        self.epochs: list[EpochRow] = []
        self.loader: LoaderInfo | None = None
        self._loader_ref: Any = None
        self._iters: set[int] = set()
        # Of _iters, those whose batches are made in this thread (num_workers=0), each with its fetch's LEAN_OUT
        # holder (torch_hooks.lean_out_of; None: its fetch hands none over).
        self._inthread: dict[int, list[Any] | None] = {}
        self.others: list[OtherLoader] = []  # every loader iterated that is not the profiled one, in first-seen order
        self._other_entry: weakref.WeakKeyDictionary[Any, OtherLoader] = weakref.WeakKeyDictionary()  # loader ->
        self._other_iters: weakref.WeakKeyDictionary[Any, OtherIter] = weakref.WeakKeyDictionary()  # iterator ->
        self._created: weakref.WeakKeyDictionary[Any, tuple[str | None, str | None]] = weakref.WeakKeyDictionary()
        self._last_next_ns = 0  # the profiled loader's last next() (a loader iterated after it may take over)
        self._epoch_batches = 0  # batches the profiled loader delivered since its last iter()
        # num_workers=0: steps until the next one reads the main thread's on-CPU clock around its wait (WAIT_CPU_PROBE
        # says why not every step); -1: every step does (its wait was found off the core outside the fetch).
        self._wait_cpu_probe = 0
        self._wait_clocks = clocks.WaitClocks()  # with workers: the wait's clocks (WaitClocks says how few reads)
        self._epoch_done = False  # its last iterator raised StopIteration
        self._live_iter: Any = None  # weakref.ref to its last iterator (dead: the job dropped it)
        self._basis: dict[str, int] = {}  # samples basis -> steps counted on it
        self._bytes_of: Any = None  # the LoaderInfo whose batches _bytes holds (a window restarted: another loader)
        self._bytes: list[int] = []  # tensor bytes of its first BATCH_BYTES_OF batches (job.loader.batch_bytes)
        self.restarts = 0  # times the window restarted on another loader
        self._open_row: StepRow | None = None
        # NOTE [ Flat steps ] (flat_steps.py): the steps kept flat until the window closes (FLAT_FIELDS each); the
        # open one; whether the open window takes them (host clocks).
        self._flat: list[list[Any]] = []
        self._flat_done = 0  # of _flat, the entries already recorded (_materialize)
        self._rows_unsorted = False  # rows appended out of step order (_materialize)
        self._open_flat: list[Any] | None = None
        self._fast = False
        self._open_wt: list[int] | None = None  # the open worker tail step (NOTE [ Worker tail steps ]), WT_FIELDS
        self._tail_entered = False  # a step beyond the detail was taken (_enter_tail)
        self._tail_clock = 0  # worker tail steps until the next that reads the wait's clocks (TAIL_CLOCK_EVERY)
        # ... and from then on the forked workers may make their batches untimed (``run``'s tail: NOTE [ Worker detail
        # under run ], batch.py); the monitor, whose detail comes back chunk after chunk, sets it False
        self.untimed_tail = True
        # NOTE [ Monitor sampling ] (batch.py): set by the monitor before the job starts (None: every step recorded,
        # ``run``); per epoch, the detail range the profiled loader's fetchers follow (batch.DETAIL_RANGE, [lo, hi)
        # of the epoch's batches); the open light step (a step outside the detail: its wait's ends and samples;
        # _lw1 0: none).
        self.sampling: tuple[int, int] | None = None
        self._plan: list[int] | None = None
        self._lw0 = self._lw1 = self._ln = 0
        # ... and a light step calls on_step only from this step and wait start on (the monitor's next chunk or
        # cut: a callback per step was most of a light step's bookkeeping); 0, 0: every step.
        self.due_step = self.due_ns = 0
        # NOTE [ Monitor gaps ] (gaps.py): the monitor's, where it takes this hook off the path between detail chunks
        self._gap: Gaps | None = None
        self.window_start_ns = 0
        self.window_end_ns = 0
        self.closed = False
        self.cuda: CudaTimeline | None = None
        self.device_timing = "host clocks"
        self.accounting: dict = {}
        self._lean_at_open = (0, 0, 0)  # LEAN_CHECK's counts when the window opened
        self._pids: set[int] = set()
        self._main_thread = threading.main_thread()
        self._pid = os.getpid()
        # One process, one record: a loader iterated in another thread or in a process the job forked (a loader
        # nested in a Dataset runs in the outer loader's workers) is left alone, never measured into this record.
        self._owner_pid = os.getpid()
        self._owner_thread = self._main_thread.ident
        self.peak_device_memory_bytes: int | None = None
        self.read_from: dict[str, int] = {}  # folder -> files the profiled loader's dataset opened there
        self.tail_skipped: list[tuple[int, str, str]] = []  # skipped files reported in tail steps (bounded)

    # --- lifecycle ------------------------------------------------------------------------------------------------
    def start(self) -> "Session":
        self.t0_ns = self.t0_ns or time.perf_counter_ns()
        self.accounting = clocks.accounting()
        self.accounting["own_per_call_ns"] = call_cost_ns()
        self.accounting["own_per_inline_call_ns"] = list(inline_call_costs())
        set_worker_detail(True)  # before the job's workers fork (NOTE [ Worker detail under run ], batch.py)
        hooks.install(self._on_next, self._on_iter, self._on_relay)
        substages.main_hook = self
        torch_hooks.watch_loader_creation(self._loader_created)
        return self

    def _enter_tail(self) -> None:
        """The first step beyond the detail: from now on the forked workers detail only each one's first batch of an
        epoch (NOTE [ Worker detail under run ], batch.py), where ``run`` keeps only the tail's totals and the
        batches count themselves (a batch counted by its dataset calls needs its fetch's record)."""
        self._tail_entered = True
        if self.on_tail is not None:
            self.on_tail()
        li = self.loader
        if self.untimed_tail and self.sampling is None and li is not None and li.num_workers > 0 and self._basis \
                and all(k == BASIS_BATCH for k in self._basis):
            set_worker_detail(False, li.num_workers)

    def stop(self) -> None:
        """End profiling: the open step ends now, the window closes if it has not, the hooks come out."""
        if self._gap is not None:  # the monitor's gap closes and its thread ends before the hooks come out
            self._gap.stop(time.perf_counter_ns())
        if not self.closed:
            self._close(time.perf_counter_ns())
        hooks.uninstall()
        set_worker_detail(True)  # persistent workers go on as they were (their envelopes unwrapped)
        substages.main_hook = None
        torch_hooks.watch_loader_creation(None)
        self._settle_basis()

    @property
    def measured_steps(self) -> int:
        """Measured steps that have ended (detail and tail)."""
        return self._measured_done

    def data_folders(self) -> dict[str, int]:
        """read_from without the interpreter's, site-packages', bytecode-cache and the profiler's own folders."""
        return {k: v for k, v in self.read_from.items() if is_data_folder(k)}

    @property
    def other_loaders(self) -> int:
        return len(self.others)

    # --- main-loop stages (the built-in pipeline's h2d) ----------------------------------------------------------
    def begin_main_stage(self, name: str) -> Any:
        """A ``profiler.stage(name)`` entered on the main thread outside any sample: for ``"h2d"`` (the built-in
        pipeline's copy) inside a step, mark the step's h2d start and return the step's row as the token; any other
        name, thread or moment is not timed (None)."""
        if threading.current_thread() is not self._main_thread or name != "h2d":
            return None
        if self._open_flat is not None:  # the step needs its row now: made here, in its own bookkeeping time
            t = time.perf_counter_ns()
            self._materialize_open()
            if self._open_row is not None:
                self._open_row.own_rest_ns += time.perf_counter_ns() - t
        wt = self._open_wt
        if wt is not None:  # a worker tail step (NOTE [ Worker tail steps ]): its row, for the stage's marks
            self._open_wt = None
            self._open_row = StepRow(wt[WT_STEP], wt[WT_EPOCH], wt[WT_WORKER], wt[WT_PID], wt[WT_N], wt[WT_W0],
                                     wt[WT_W1], wt[WT_CPU], wt[WT_RUNQ], True, tail=True, own_rest_ns=wt[WT_REST])
        if self._open_row is None:
            return None
        row = self._open_row
        row.h2d_seen = True
        row.h2d_start_ns = time.perf_counter_ns()
        if self.cuda is not None and row.measured:
            self.cuda.mark(row, "h2d_start_ns")
        return row

    def end_main_stage(self, name: str, row: Any) -> None:
        """The stage begun by :meth:`begin_main_stage` ends: mark its step's h2d end (nothing for a None token)."""
        if row is None:
            return
        row.h2d_end_ns = time.perf_counter_ns()
        if self.cuda is not None and row.measured:
            self.cuda.mark(row, "h2d_end_ns")

    # --- hooks (the loaders' half: tracking.py) -------------------------------------------------------------------
    def _on_next(self, it: Any, orig: Callable[[Any], Any]) -> Any:
        # Once per batch of the profiled loader, on the job's critical path: written for few bytecodes (locals, no
        # helper frames, no temporaries), measured by scripts/bench_overhead_light.py.
        if self.closed or _get_ident() != self._owner_thread:
            return self._off_thread_next(it, orig)  # left alone, unless relayed (relay.py)
        key = id(it)
        holder = self._inthread.get(key, _NOT_INTHREAD)
        if holder is _NOT_INTHREAD and key not in self._iters:
            return self._other_next(it, orig)
        step = self._n_steps
        plan = self._plan
        if plan is not None and self.window_start_ns and self.cuda is None \
                and not plan[0] <= self._epoch_batches < plan[1]:
            # Under the monitor, a step its fetchers make without instrumentation (NOTE [ Monitor sampling ],
            # batch.py): the wait's two wall clocks and the batch's samples, folded into the tail's totals when it
            # ends (_end_step), and nothing else.
            gap = self._gap
            if gap is not None and gap.open:  # a probe of a gap, or its close (NOTE [ Monitor gaps ], gaps.py)
                return gap.on_next(it, orig)
            t0 = _perf()
            try:
                data = orig(it)
            except BaseException as e:
                self._wait_raised(e, t0)
                raise
            t1 = _perf()
            if data.__class__ is Instrumented or (holder.__class__ is list and holder[0] is not None
                                                  and holder[0][LO_W_ENTRY] >= t0):
                # A detail batch all the same (the fetchers' count ran apart from the epoch's): a row, with the
                # wait's main-thread clocks derived from the fetch's in this thread, unknown (0) with workers.
                row = StepRow(step, len(self.epochs) - 1, -1, self._pid, 0, t0, 0, 0, 0, True)
                if holder is _NOT_INTHREAD:
                    return self._after_wait(row, data, holder, t0, t1, 0, 0, 0, 0)
                return self._after_wait(row, data, holder, t0, t1, -1, -1, 0, 0)
            w1 = self._lw1
            if w1:  # the last step was light too: it ends here, into the tail's totals (_end_step's, written out)
                tail = self.tail
                w0 = self._lw0
                tail.steps += 1
                tail.samples += self._ln
                tail.wait_ns += w1 - w0
                tail.idle_ns += w1 - w0
                tail.compute_ns += t0 - w1  # (> 0: its next() returned before this one began)
                tail.last_ns = t0
                if not tail.first_ns:
                    tail.first_ns = w0
                self._measured_done += 1
            elif self._open_flat is not None or self._open_row is not None or self._open_wt is not None:
                self._end_step(t0)
            self._n_steps = step + 1
            self._epoch_batches += 1
            self._last_next_ns = t1
            k = 0
            if data.__class__ is list and len(data) == 2:  # default_collate's (x, y): count_samples' first answer,
                x, y = data  # written out (its two frames were a fifth of this path)
                if x.__class__ is Tensor and y.__class__ is Tensor:
                    sx, sy = x.shape, y.shape
                    if sx and sy and sx[0] == sy[0]:
                        k = sx[0]
            if k < 1 or self.loader.batch_size == 2:  # type: ignore[union-attr]
                n = count_samples(data, self.loader.batch_size)  # type: ignore[union-attr]
                k = n[0] if n is not None else 1
            self._lw0, self._lw1, self._ln = t0, t1, k
            if step >= self.due_step and t0 >= self.due_ns and self.on_step is not None:
                self.on_step(True, t0, t1, k)
            return data
        if self._fast and holder.__class__ is list and self._measured_done + 1 < self.steps \
                and (self._wait_cpu_probe > 0 or step - self.warmup >= self.detail_steps):
            # The steady state of a num_workers=0 loader (NOTE [ Flat steps ], flat_steps.py): the window open, host
            # clocks, not its last step, the wait's on-CPU clock derived from the fetch's (WAIT_CPU_PROBE) or, beyond
            # the detail, not needed (WAIT_CPU_PROBE says why).
            if step - self.warmup < self.detail_steps:
                self._wait_cpu_probe -= 1
            t0 = _perf()
            try:
                data = orig(it)
            except BaseException as e:
                self._wait_raised(e, t0)
                raise
            t1 = _perf()
            lean = holder[0]
            if data.__class__ is Instrumented or lean is None or lean[LO_W_ENTRY] < t0:  # not lean: a row, as below
                row = StepRow(step, len(self.epochs) - 1, -1, self._pid, 0, t0, 0, 0, 0, True,
                              tail=step - self.warmup >= self.detail_steps)
                return self._after_wait(row, data, holder, t0, t1, -1, -1, 0, 0)
            f = self._open_flat
            if f is not None:  # the previous step ends here (_end_step's flat case, written out)
                f[F_END] = t0
                self._open_flat = None
                self._measured_done += 1
            elif self._open_row is not None or self._lw1 or self._open_wt is not None:
                self._end_step(t0)
            self._n_steps = step + 1
            self._epoch_batches += 1
            self._last_next_ns = t1
            epochs = self.epochs
            epoch = epochs[-1]
            if not epoch.first_batch_ns:
                epoch.first_batch_ns = t1
            n = count_samples(data, self.loader.batch_size)  # type: ignore[union-attr]
            flat = self._flat
            if len(flat) >= FLAT_FOLD_EVERY and step - self.warmup > self.detail_steps:
                # In the tail, the ended flat steps go into its totals (memory stays bounded); in this step's own
                # bookkeeping time, which is measured (own_rest_ns).
                if not self._tail_entered:
                    self._enter_tail()
                self._materialize()
                flat = self._flat
            f = [step, len(epochs) - 1, t0, t1, n, lean, 0, 0]  # FLAT_FIELDS
            flat.append(f)
            self._open_flat = f  # after the append: an interrupt in between leaves it an unended step, not counted
            if self.on_step is not None:
                self.on_step(True, t0, t1, n[0] if n is not None else lean[LO_N] or 1)
            f[F_REST_END] = _perf()  # the end of its bookkeeping (own_rest_ns)
            return data
        # num_workers=0: the batch is made in this thread, and its fetch reads the run-queue wait itself (shared below);
        # reading it here too would only cost the step twice.
        inthread = holder is not _NOT_INTHREAD
        cuda = self.cuda
        prev = self._open_row
        if self._fast and holder is _NOT_INTHREAD and step - self.warmup >= self.detail_steps \
                and self._measured_done + 1 < self.steps and self.sampling is None:
            # With workers, beyond the detail (NOTE [ Worker tail steps ]): a lean fetch's step is kept as WT_FIELDS.
            clock = self._tail_clock
            if clock:  # its wait's wall clocks only (TAIL_CLOCK_EVERY): run-queue -1, not read
                self._tail_clock = clock - 1
                t0 = _perf()
                c0 = q0 = 0
            else:
                self._tail_clock = TAIL_CLOCK_EVERY - 1
                t0, c0, q0 = self._wait_clocks.start()
            try:
                data = orig(it)
            except BaseException as e:
                self._wait_raised(e, t0)
                raise
            if clock:
                t1 = _perf()
                c1, q1 = 0, -1
            else:
                t1, c1, q1 = self._wait_clocks.end()
            if data.__class__ is Instrumented:
                wl = data.meta
                if wl.__class__ is not tuple:  # a full fetch's record: a row, the general way
                    row = StepRow(step, len(self.epochs) - 1, -1, self._pid, 0, t0, 0, 0, 0, True, tail=True)
                    return self._after_wait(row, data, holder, t0, t1, c0, c1, q0, q1)
                batch = data.batch
            else:  # made untimed (NOTE [ Worker detail under run ], batch.py): no record at all
                wl, batch = None, data
            if self._open_row is not None or self._open_wt is not None or self._open_flat is not None or self._lw1:
                self._end_step(t0)
            self._n_steps = step + 1
            self._epoch_batches += 1
            self._last_next_ns = t1
            k = 0
            if batch.__class__ is list and len(batch) == 2:  # default_collate's (x, y): count_samples' first answer,
                x, y = batch  # written out, as on the monitor's light steps
                if x.__class__ is Tensor and y.__class__ is Tensor:
                    sx, sy = x.shape, y.shape
                    if sx and sy and sx[0] == sy[0]:
                        k = sx[0]
            li = self.loader
            if k < 1 or li.batch_size == 2:  # type: ignore[union-attr]
                n = count_samples(batch, li.batch_size)  # type: ignore[union-attr]
                k, basis = n if n is not None else (wl[LO_N], BASIS_CALLS) if wl is not None and wl[LO_N] else \
                    (1, BASIS_STEP)
            else:
                basis = BASIS_BATCH
            counted = self._basis
            counted[basis] = counted.get(basis, 0) + 1
            if not self._tail_entered:
                self._enter_tail()
            if self._bytes_of is not li or len(self._bytes) < BATCH_BYTES_OF:
                self._note_bytes(li, batch)
            wid, pid = -1, self._pid
            if wl is not None:
                wid, pid = wl[WL_WORKER_ID], wl[WL_PID]
                if pid not in self._pids:
                    self._pids.add(pid)
                    if self.on_first_pid is not None:
                        self.on_first_pid(pid, wid)
            epochs = self.epochs
            epoch = epochs[-1]
            if not epoch.first_batch_ns:
                epoch.first_batch_ns = t1
            wt = [step, len(epochs) - 1, wid, pid, k, t0, t1, c1 - c0, q1 - q0, 0]  # WT_FIELDS
            self._open_wt = wt
            if self.on_step is not None:
                self.on_step(True, t0, t1, k)
            wt[WT_REST] = _perf() - t1  # its bookkeeping after the batch was in hand (own_rest_ns)
            return batch
        if self._measured_done + (self._open_flat is not None or self._open_wt is not None
                                  or (prev is not None and prev.measured)) >= self.steps:
            t_end = _perf()  # the last measured step ends
            if cuda is not None and prev is not None and prev.measured:
                cuda.mark(prev, "compute_end_ns")
            self._end_step(t_end)
            self._close(t_end)
            if self.then == "exit":
                raise WindowClosed()
            return torch_hooks.unwrap(orig(it))
        measured = step >= self.warmup  # the step is taken only once a batch arrives (an epoch's end is no step)
        opens = measured and not self.window_start_ns
        epochs = self.epochs
        # The step's row is made before its wait starts (its wait's ends are filled in below), and the previous step
        # is ended after the batch is in hand: the profiler's bookkeeping stays out of the wait it measures, so no
        # clock read is needed to take it out again. Where the wait's start has device work to mark (CUDA) or the
        # window to open, that work is inside the wait and measured as before.
        row = StepRow(step, len(epochs) - 1 if epochs else 0, -1, self._pid, 0, 0, 0, 0, 0, measured,
                      tail=measured and step - self.warmup >= self.detail_steps)
        if inthread:
            probe = self._wait_cpu_probe
            t0 = _perf()
            if probe <= 0 or cuda is not None or opens:
                c0 = _cpu()
            else:
                c0 = -1  # derived below from the fetch's clocks
                self._wait_cpu_probe = probe - 1
            q0 = 0
        else:
            t0, c0, q0 = self._wait_clocks.start()
        if cuda is not None or opens:
            if cuda is not None and prev is not None and prev.measured:
                cuda.mark(prev, "compute_end_ns")
            if opens:
                self._open_window(t0)
                t0 = self.window_start_ns
                cuda = self.cuda
            if cuda is not None and measured:
                cuda.mark(row, "wait_start_dev")
            row.own_wait_ns = _cpu() - c0  # on-CPU: a preemption here is the machine's, not ours
        row.wait_start_ns = t0
        try:
            data = orig(it)
        except BaseException as e:
            self._wait_raised(e, t0)
            raise
        if inthread:  # the end's clocks in the opposite order: NOTE [ Wall clock outside, on-CPU clock inside ]
            c1 = _cpu() if c0 >= 0 else -1
            t1 = _perf()
            q1 = 0
        else:
            t1, c1, q1 = self._wait_clocks.end()
        return self._after_wait(row, data, holder, t0, t1, c0, c1, q0, q1)

    def _note_bytes(self, li: Any, batch: Any) -> None:
        """Bytes of one of the loader's first batches: the transfer advice tells bytes from scheduling with it."""
        if self._bytes_of is not li:
            self._bytes_of, self._bytes = li, []
        b = tensor_bytes(batch)
        if b is not None:
            self._bytes.append(b)
            li.batch_bytes = sum(self._bytes) / len(self._bytes)

    def _wait_raised(self, e: BaseException, t0: int) -> None:
        """next() raised: the epoch's end (StopIteration) or the job's own error. The previous step ended at ``t0``."""
        if isinstance(e, StopIteration):
            self._epoch_done = True
        self._end_step(t0)

    def _after_wait(self, row: StepRow, data: Any, holder: Any, t0: int, t1: int, c0: int, c1: int, q0: int,
                    q1: int) -> Any:
        """A step's bookkeeping once its batch is in hand (``row`` made, its wait from ``t0`` to ``t1``; ``c0`` -1: the
        wait's on-CPU clock was not read, derived from the fetch's): the previous step ends, the batch is unwrapped
        and counted, its record kept."""
        self._end_step(t0)
        step = row.step
        measured = row.measured
        inthread = holder is not _NOT_INTHREAD
        cuda = self.cuda
        self._n_steps = step + 1
        self._epoch_batches += 1
        self._last_next_ns = t1
        row.wait_end_ns = t1
        row.main_cpu_ns = c1 - c0
        row.main_runq_ns = q1 - q0
        if cuda is not None and measured:
            cuda.mark(row, "wait_end_dev")
        meta: BatchMeta | None
        if data.__class__ is Instrumented:
            meta = meta_of(data)
            batch = data.batch
        else:
            batch = data
            lean = holder[0] if holder.__class__ is list else None
            # A lean fetch's clocks, handed over beside the batch (batch.LeanOut): its BatchMeta, made now.
            meta = lean_meta(lean, self._pid) if lean is not None and lean[LO_W_ENTRY] >= t0 else None
        # The step's samples: what the batch holds; else what the dataset calls returned; else one per step.
        li = self.loader
        n = count_samples(batch, li.batch_size if li is not None else None)
        if n is not None:
            row.n_samples, basis = n
        elif meta is not None and meta.n_items:
            row.n_samples, basis = max(0, meta.n_items - len(meta.skipped)), BASIS_CALLS
        else:
            row.n_samples, basis = 1, BASIS_STEP
        counted = self._basis
        counted[basis] = counted.get(basis, 0) + 1
        if row.tail and not self._tail_entered:
            self._enter_tail()
        if li is not None and (self._bytes_of is not li or len(self._bytes) < BATCH_BYTES_OF):
            self._note_bytes(li, batch)
        if meta is not None:
            row.worker_id = meta.worker_id
            row.pid = meta.pid
            if meta.worker_id < 0:  # fetched in this thread, inside the wait: its instrumentation's time is ours
                row.own_wait_ns += meta.own_ns
                if inthread:
                    row.main_runq_ns = meta.marks[M_RUNQ]  # the fetch's run-queue wait (its byte counts wait unparsed)
                    off = fetch_off_core_ns(meta.marks)
                    if c0 < 0:
                        row.main_cpu_ns = (t1 - t0) - off
                    else:  # read: was the wait off its core outside the fetch too? (WAIT_CPU_CALM for the rest)
                        probe = self._wait_cpu_probe
                        if (t1 - t0) - (c1 - c0) - off >= CLOSE_TIMING_FROM_OFF_NS:
                            self._wait_cpu_probe = -1
                        elif probe >= 0 or probe <= -WAIT_CPU_CALM:
                            self._wait_cpu_probe = WAIT_CPU_PROBE
                        else:
                            self._wait_cpu_probe = probe - 1
            if row.tail:  # its spans are not kept; what the record lists of it is kept here
                if meta.skipped:
                    self.tail_skipped.extend(meta.skipped[:MAX_TAIL_SKIPPED - len(self.tail_skipped)])
            else:
                row.batch = len(self.metas)
                self.metas.append(meta)
            if meta.opened:
                read_from = self.read_from
                for folder, k in meta.opened.items():
                    if folder in read_from or len(read_from) < MAX_FOLDERS:
                        read_from[folder] = read_from.get(folder, 0) + k
            if meta.pid not in self._pids:
                self._pids.add(meta.pid)
                if self.on_first_pid is not None:
                    self.on_first_pid(meta.pid, meta.worker_id)
        elif c0 < 0:  # no record of the fetch (not instrumented): taken as on its core; every step reads it from now
            row.main_cpu_ns = t1 - t0
            self._wait_cpu_probe = -1
        if meta is None and self._plan is not None and measured:  # under the monitor: no fetch figures, totals only
            row.tail = True
        epochs = self.epochs
        if epochs and not epochs[-1].first_batch_ns:
            epochs[-1].first_batch_ns = t1
        if not row.tail:
            self.rows.append(row)
        self._open_row = row
        if cuda is not None and step % RESOLVE_EVERY == 0:
            cuda.resolve()
        if self.on_step is not None:
            self.on_step(measured, row.wait_start_ns, t1, row.n_samples)
        # By the wall clock (a read of the on-CPU clock is a system call, ~10x the wall clock's): straight-line
        # bookkeeping of a few µs, which a preemption only rarely lands in.
        row.own_rest_ns = _perf() - t1
        return batch

    # --- window ---------------------------------------------------------------------------------------------------
    def _open_window(self, t0_ns: int) -> None:
        """Open the measured window at the first measured step's wait start ``t0_ns`` (host timing), or after the
        CUDA set-up (device timing; the step's wait starts then): never after a step it contains, so the idle time
        of the steps can never exceed the window."""
        import torch

        self._lean_at_open = LEAN_CHECK.counts()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            self.cuda = CudaTimeline()
            self.cuda.on_step_done = self._device_step_done
            self.device_timing = "cuda events"
            torch.cuda.reset_peak_memory_stats()
            self.window_start_ns = time.perf_counter_ns()
        else:
            self.window_start_ns = t0_ns
            self._fast = True  # host clocks: its num_workers=0 steps may be kept flat (NOTE [ Flat steps ])

    def _end_step(self, t_ns: int) -> None:
        w1 = self._lw1
        if w1:  # a light step (NOTE [ Monitor sampling ], batch.py): into the tail's totals, Tail.add's figures
            self._lw1 = 0
            w0, tail = self._lw0, self.tail
            wait, compute = w1 - w0, t_ns - w1
            compute = compute if compute > 0 else 0
            tail.steps += 1
            tail.samples += self._ln
            tail.wait_ns += wait
            tail.idle_ns += wait
            tail.compute_ns += compute
            if not tail.first_ns or w0 < tail.first_ns:
                tail.first_ns = w0
            if t_ns > tail.last_ns:  # (not its histograms: a window reads totals, and they are run's figures)
                tail.last_ns = t_ns
            self._measured_done += 1
            return
        wt = self._open_wt
        if wt is not None:  # a worker tail step (NOTE [ Worker tail steps ]): into the totals, as its row would go
            self._open_wt = None
            w0, w1 = wt[WT_W0], wt[WT_W1]
            self.tail.add_step(w0, w1, w1, w1, t_ns, wt[WT_N], w1 - w0, wt[WT_RUNQ], 0, wt[WT_REST])
            self._measured_done += 1
            return
        f = self._open_flat
        if f is not None:  # a flat step (NOTE [ Flat steps ]): measured, host clocks; made a row by _materialize
            self._open_flat = None
            f[F_END] = t_ns
            self._measured_done += 1
            return
        row = self._open_row
        if row is None:
            return
        self._open_row = None
        if not row.h2d_start_ns:
            row.h2d_start_ns = row.h2d_end_ns = row.wait_end_ns
        row.compute_end_ns = t_ns  # host figure; on CUDA replaced by the device's once resolved
        if row.measured:
            self._measured_done += 1
        if row.tail and self.cuda is None:
            row.idle_ns = row.wait_end_ns - row.wait_start_ns
            self.tail.add(row)

    def _close(self, t_ns: int) -> None:
        """Close the window at host time ``t_ns``: end the open step, resolve device time, freeze the figures."""
        if self.closed:
            return
        if self.cuda is not None and self._open_row is not None and self._open_row.measured:
            try:
                self.cuda.mark(self._open_row, "compute_end_ns")
            except Exception:  # noqa: BLE001 - a sticky CUDA error: keep the host figures
                pass
        self._end_step(t_ns)
        self._materialize()
        self.closed = True
        if self.window_start_ns:  # the lean stretch under way is checked now (lean_check.py)
            LEAN_CHECK.settle_now()
            self.accounting["lean_unchecked"] = unchecked_since(LEAN_CHECK, self._lean_at_open)
        if self.cuda is not None:
            self._resolve_device()
        measured = [r for r in self.rows if r.measured]
        for r in self.rows:
            if self.cuda is None or not r.measured or not getattr(r, "device_ok", False):
                r.idle_ns = r.wait_end_ns - r.wait_start_ns
        if not self.window_start_ns:
            self.window_start_ns = t_ns
        self.window_end_ns = max([t_ns, self.tail.last_ns] + [r.compute_end_ns for r in measured])
        self._settle_basis()  # then='continue' writes the record now, before stop()
        if self.on_window_closed is not None:
            self.on_window_closed(self)

    def _settle_basis(self) -> None:
        if self.loader is not None and self._basis:
            self.loader.samples_basis = max(self._basis, key=lambda k: self._basis[k])
