"""The main side of profiling: which loader is profiled, one step per ``next()``, epochs, the measured window.

A *step* is the interval between two ``next()`` calls on the profiled loader's iterator: the wait inside ``next()``
(input), then the user's own work until the following ``next()`` (compute, including any H2D copy). The first
``warmup`` steps run unmeasured; the window closes when ``steps`` measured steps have ended, i.e. at the next call
to ``next()`` after the last one. The profiled loader is the first one iterated; others are unwrapped and counted.

Device time on CUDA (the job's current device and stream when the window opens): CUDA events at every boundary —
``B`` on entering ``next()``, ``A`` when the batch is in hand, and the built-in pipeline's h2d stage between its own
pair — resolved lazily (``Event.query()``), never synchronised per step. ``A - B`` is the time the device had nothing
queued because the host was waiting for input; an H2D copy on the compute stream keeps the compute units idle too
and is counted as transfer idle time. Every event is timed against the *previous* one (``elapsed_time`` of a short
pair, float32 ms of a small number) and the chain is summed in float64 from one anchor taken after a synchronize when
the window opens, so resolution does not decay over a long run (one anchor plus float32 offsets would fall to
~250 µs after an hour).
"""
from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any, Callable

from . import clocks, substages, torch_hooks
from .lean_check import unchecked_since
from .loaders import (
    BASIS_CALLS,
    BASIS_STEP,
    LoaderSelector,
    call_sites,
    count_samples,
    epoch_length,
    is_data_folder,
)
from .steps import (
    DETAIL_STEPS,
    MAX_TAIL_SKIPPED,
    ROLE_ENDED_EARLY,
    ROLE_NOT_NAMED,
    ROLE_OTHER,
    CudaTimeline,
    EpochRow,
    LoaderInfo,
    OtherIter,
    OtherLoader,
    StepRow,
    Tail,
    fetch_off_core_ns,
    loader_info,
    qualified_name,
    step_of,
)
from .worker import (
    CLOSE_TIMING_FROM_OFF_NS,
    LEAN_CHECK,
    BatchMeta,
    Instrumented,
    call_cost_ns,
    inline_call_costs,
    lean_meta,
)

_perf = time.perf_counter_ns
_cpu = time.thread_time_ns
_get_ident = threading.get_ident

# Resolve completed CUDA events every this many steps: bounds live events on long runs without a synchronize.
RESOLVE_EVERY = 32
# With num_workers=0 the wait's on-CPU time (StepRow.main_cpu_ns) is the fetch's (read at its ends, worker.py) plus
# the DataLoader's own code around it (its __next__, the sampler): straight-line code that is on its core, so the
# wait's on-CPU time is its wall time less the fetch's time off the core. Every WAIT_CPU_PROBE-th step reads the
# on-CPU clock around the wait to check that, and once a step finds the wait off its core outside the fetch for
# CLOSE_TIMING_FROM_OFF_NS or more (a sampler that reads a file), every step reads it, until WAIT_CPU_CALM steps in a
# row find it on its core again. Why: those two reads are system calls (~0.2 µs each on a VM, and a few µs more in
# the caches and TLB the kernel entry costs the loop's code after it: +6 µs per light batch for two, measured), a
# fifth of the profiler's remaining ones per light batch. Why not for ever once found: a single wait that lost its
# core once (the profiler's own sampler thread taking the GIL at a tick, a preemption) then cost every later step
# both reads; in the light benchmark that happened in some runs and not others (46 vs 62 µs per batch).
WAIT_CPU_PROBE = 16
#: Steps in a row whose wait stayed on its core (outside the fetch) before the wait is probed again: as many as
#: between two probes, so a sampler that reads a file at every step keeps every step read.
WAIT_CPU_CALM = WAIT_CPU_PROBE
# Distinct folders the record names as where the data was read from (the most-opened are kept).
MAX_FOLDERS = 256
# FAST_STEPS: in the steady state of a num_workers=0 loader (the window open on host clocks, not its last step, the
# wait's on-CPU clock derived from the fetch's) a step whose batch came from a lean fetch on its core (worker.LeanOut)
# is kept as one flat list of ints, and its StepRow and BatchMeta are made when the window closes, in one pass. Why:
# on a light loop the step row, the batch's record and its envelope, made between two steps of the job's model (whose
# code and data then fill the caches), cost ~18 µs of its ~45 µs per batch on the 2-core VM, where the same figures
# kept flat cost a few (scripts/bench_overhead_light.py, alternated in one process). Every other step, and every step
# on CUDA, is recorded as it happens.
# In the tail (beyond DETAIL_STEPS), flat steps are folded into its totals every this many: a long run's memory stays
# bounded (a flat step is ~300 bytes) and the fold, a few ms, is a fraction of a per cent of the steps it folds.
FLAT_FOLD_EVERY = 1024
_NOT_INTHREAD: Any = object()  # Session._inthread's answer for an iterator with workers (or not profiled)


class WindowClosed(BaseException):
    """Raised out of the user's ``next()`` when the window has closed and ``then='exit'``: stops the job cleanly.

    A BaseException, so a script's ``except Exception`` does not swallow it (its ``finally`` blocks still run).
    """


class Session:
    """One profiling session in this process: hooks installed from ``start()`` to ``stop()``."""

    def __init__(self, warmup: int, steps: int, then: str = "exit",
                 on_step: Callable[[bool, int, int, int], None] | None = None,
                 on_window_closed: Callable[["Session"], None] | None = None,
                 on_first_pid: Callable[[int, int], None] | None = None, t0_ns: int | None = None,
                 detail_steps: int | None = None, override: dict[str, int] | None = None,
                 select: LoaderSelector | None = None):
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
        self._epoch_done = False  # its last iterator raised StopIteration
        self._live_iter: Any = None  # weakref.ref to its last iterator (dead: the job dropped it)
        self._basis: dict[str, int] = {}  # samples basis -> steps counted on it
        self.restarts = 0  # times the window restarted on another loader
        self._open_row: StepRow | None = None
        # FAST_STEPS: the steps kept flat until the window closes, [step, epoch, wait start, wait end, count_samples'
        # answer, the fetch's LeanOut, the end of the step's bookkeeping, its end (0: open)]; the open one; whether
        # the open window takes them (host clocks).
        self._flat: list[list[Any]] = []
        self._flat_done = 0  # of _flat, the entries already recorded (_materialize)
        self._rows_unsorted = False  # rows appended out of step order (_materialize)
        self._open_flat: list[Any] | None = None
        self._fast = False
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
        torch_hooks.install(self._on_next, self._on_iter)
        substages.main_hook = self
        torch_hooks.watch_loader_creation(self._loader_created)
        return self

    def _loader_created(self, loader: Any) -> None:
        try:
            self._created[loader] = call_sites(2)
        except TypeError:  # not weak-referenceable (a DataLoader subclass with __slots__): no creation site
            pass

    def stop(self) -> None:
        """End profiling: the open step ends now, the window closes if it has not, the hooks come out."""
        if not self.closed:
            self._close(time.perf_counter_ns())
        torch_hooks.uninstall()
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

    # --- hooks ----------------------------------------------------------------------------------------------------
    def _on_iter(self, loader: Any, orig: Callable[[Any], Any]) -> Any:
        if os.getpid() != self._owner_pid or threading.get_ident() != self._owner_thread:
            return orig(loader)  # another thread, or a process the job forked: left alone (one process, one record)
        adopt = self._loader_ref is None and not self.closed and loader not in self._other_entry
        eligible = self.select is None or self.select.matches(qualified_name(loader.dataset),
                                                             self._created.get(loader, (None, None)))
        overridden = None
        if self.override and adopt and eligible:  # the profiled loader, before it starts
            overridden = torch_hooks.override_loader(loader, **self.override)
        sites = call_sites(1)
        t0 = time.perf_counter_ns()
        it = orig(loader)
        t1 = time.perf_counter_ns()
        if self.closed:
            return it
        if adopt and eligible:
            self._adopt(loader, it, sites, t0, t1, "the first loader the job iterated" if self.select is None
                        else f"named by --loader {self.select}")
            self.loader.overridden = overridden or None  # type: ignore[union-attr]
        elif self._loader_ref is not None and (self._loader_ref() is loader or self._remade(loader, eligible)):
            if self._loader_ref() is not loader:  # the same loader made afresh for this epoch: the window goes on
                self._loader_ref = weakref.ref(loader)
                self.loader.recreated += 1  # type: ignore[union-attr]
            self._iters.add(id(it))
            if loader.num_workers == 0:
                self._inthread[id(it)] = torch_hooks.lean_out_of(it)
            self.epochs.append(EpochRow(len(self.epochs), t0, t1))
            self._new_epoch(it)
        else:
            self._iters.discard(id(it))  # a dropped profiled iterator's id, reused by this one's
            self._inthread.pop(id(it), None)
            entry = self._other_entry.get(loader)
            if entry is None:
                entry = OtherLoader(qualified_name(loader.dataset), self._created.get(loader, (None, None))[0],
                                    int(loader.num_workers), loader.batch_size,
                                    ROLE_OTHER if eligible else ROLE_NOT_NAMED, iterated_at=sites[0], first_ns=t0)
                self._other_entry[loader] = entry
                self.others.append(entry)
            entry.epochs += 1
            try:
                self._other_iters[it] = OtherIter(entry, weakref.ref(loader), t0, eligible, sites)
            except TypeError:
                pass
        return it

    def _remade(self, loader: Any, eligible: bool) -> bool:
        """Is ``loader`` the profiled one made afresh, as a loop that writes ``for b in DataLoader(...)`` inside its
        epoch loop does? Made on the same line, over the same dataset class, with the same workers and batch size,
        and iterated once the profiled loader's epoch is over (or the loader is gone): then it is that loader's next
        epoch, and the window goes on over it, instead of the run ending as partial when the first one stops."""
        li, old = self.loader, self._loader_ref() if self._loader_ref is not None else None
        if li is None or not eligible or loader in self._other_entry or not (old is None or self._epoch_done):
            return False
        created = self._created.get(loader, (None, None))[0]
        return created is not None and created == li.created_at and qualified_name(loader.dataset) == li.dataset_class \
            and int(loader.num_workers) == li.num_workers and loader.batch_size == li.batch_size

    def _adopt(self, loader: Any, it: Any, sites: tuple[str | None, str | None], t0: int, t1: int,
               why: str) -> None:
        self._loader_ref = weakref.ref(loader)
        self.loader = loader_info(loader, self._created.get(loader), sites)
        self.loader.chosen = why
        self._iters = {id(it)}
        self._inthread = {id(it): torch_hooks.lean_out_of(it)} if loader.num_workers == 0 else {}
        self.epochs = [EpochRow(0, t0, t1)]
        self._new_epoch(it)

    def _new_epoch(self, it: Any) -> None:
        self._epoch_batches, self._epoch_done = 0, False
        try:
            self._live_iter = weakref.ref(it)
        except TypeError:
            self._live_iter = None

    def _takes_over(self, o: OtherIter) -> bool:
        """Does the window move to this other loader? Only when the profiled one has delivered nothing since this
        one was iterated (it stopped or was dropped, not interleaved with it) and this one's epoch promises more
        batches than the profiled one delivered in its last epoch (a sanity check, a shape probe)."""
        if not o.eligible or self.closed or self._last_next_ns > o.iter_ns:
            return False
        loader = o.loader()
        if loader is None:
            return False
        ahead = epoch_length(loader)
        if ahead is None and o.entry.steps:  # a loader seen before: the longest epoch it ran
            ahead = o.entry.steps // max(o.entry.epochs - 1, 1)
        mine = self._epoch_batches
        profiled = self._loader_ref() if self._loader_ref is not None else None
        if not self._epoch_done and self._live_iter is not None and self._live_iter() is not None \
                and profiled is not None:
            # Its epoch is unfinished and its iterator still held: a validation pass in the middle of a training
            # epoch, which returns to it. The rest of its epoch counts, so only a longer loader takes the window.
            mine = max(mine, epoch_length(profiled) or 0)
        return ahead is None or mine < ahead

    def _restart_on(self, o: OtherIter, it: Any) -> None:
        """The profiled loader stopped early: keep its short figures as an other loader, start afresh on ``o``."""
        old = self._loader_ref() if self._loader_ref is not None else None
        loader = o.loader()
        if loader is None:  # checked by _takes_over a moment ago; kept safe all the same
            return
        self._materialize()
        if self.loader is not None:
            li = self.loader
            measured = [r for r in self.rows if r.wait_end_ns]
            entry = OtherLoader(li.dataset_class, li.created_at, li.num_workers, li.batch_size, ROLE_ENDED_EARLY,
                                iterated_at=li.iterated_at, epochs=len(self.epochs),
                                steps=len(measured) + self.tail.steps,
                                samples=sum(r.n_samples for r in measured) + self.tail.samples,
                                wait_ns=sum(r.wait_end_ns - r.wait_start_ns for r in measured) + self.tail.wait_ns,
                                first_ns=self.epochs[0].iter_start_ns if self.epochs else 0,
                                last_ns=max([r.wait_end_ns for r in measured] or [0]))
            self.others.append(entry)
            if old is not None:
                self._other_entry[old] = entry
        self.others.remove(o.entry)
        del self._other_entry[loader]
        self.rows, self.metas, self.tail, self.tail_skipped, self.read_from = [], [], Tail(), [], {}
        self._n_steps = self._measured_done = 0
        self._open_row, self.cuda, self.window_start_ns = None, None, 0
        self._flat, self._flat_done, self._rows_unsorted, self._open_flat, self._fast = [], 0, False, None, False
        self._basis = {}
        self.restarts += 1
        self._adopt(loader, it, o.sites, o.iter_ns, o.iter_ns,
                    f"the job went on with it after {self._restarted_from(old)} stopped early")
        self._epoch_batches = o.entry.steps if o.entry.epochs == 1 else 0  # what it already delivered this epoch
        if self.override and self.loader is not None:  # applied when the first loader started; too late for this one
            self.loader.chosen += " (--override-* changed the first loader, not this one: name it with --loader)"

    @staticmethod
    def _restarted_from(old: Any) -> str:
        return f"the {qualified_name(old.dataset).rsplit('.', 1)[-1]} loader" if old is not None else "the first loader"

    def _other_next(self, it: Any, orig: Callable[[Any], Any]) -> Any:
        """next() of a loader that is not profiled: counted, or taking the window over (see _takes_over)."""
        o = self._other_iters.get(it)
        if o is None:
            return torch_hooks.unwrap(orig(it))
        if not o.checked:
            o.checked = True
            if self._takes_over(o):
                self._restart_on(o, it)
                return self._on_next(it, orig)
        t0 = time.perf_counter_ns()
        batch = torch_hooks.unwrap(orig(it))
        t1 = time.perf_counter_ns()
        e = o.entry
        e.steps += 1
        e.wait_ns += t1 - t0
        e.last_ns = t1
        n = count_samples(batch, e.batch_size)
        e.samples += n[0] if n is not None else (e.batch_size or 1)
        return batch

    def _on_next(self, it: Any, orig: Callable[[Any], Any]) -> Any:
        # Once per batch of the profiled loader, on the job's critical path: written for few bytecodes (locals, no
        # helper frames, no temporaries), measured by scripts/bench_overhead_light.py.
        if self.closed or _get_ident() != self._owner_thread:
            return torch_hooks.unwrap(orig(it))
        key = id(it)
        holder = self._inthread.get(key, _NOT_INTHREAD)
        if holder is _NOT_INTHREAD and key not in self._iters:
            return self._other_next(it, orig)
        step = self._n_steps
        if self._fast and holder.__class__ is list and self._wait_cpu_probe > 0 \
                and self._measured_done + 1 < self.steps:
            # The steady state of a num_workers=0 loader (FAST_STEPS): the window open, host clocks, not its last
            # step, the wait's on-CPU clock derived from the fetch's (WAIT_CPU_PROBE).
            self._wait_cpu_probe -= 1
            t0 = _perf()
            try:
                data = orig(it)
            except BaseException as e:
                self._wait_raised(e, t0)
                raise
            t1 = _perf()
            lean = holder[0]
            if data.__class__ is Instrumented or lean is None or lean[0] < t0:  # not a lean batch: a row, as below
                row = StepRow(step, len(self.epochs) - 1, -1, self._pid, 0, t0, 0, 0, 0, True,
                              tail=step - self.warmup >= self.detail_steps)
                return self._after_wait(row, data, holder, t0, t1, -1, -1, 0, 0)
            f = self._open_flat
            if f is not None:  # the previous step ends here (_end_step's flat case, written out)
                f[7] = t0
                self._open_flat = None
                self._measured_done += 1
            elif self._open_row is not None:
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
                self._materialize()
                flat = self._flat
            f = [step, len(epochs) - 1, t0, t1, n, lean, 0, 0]
            flat.append(f)
            self._open_flat = f  # after the append: an interrupt in between leaves it an unended step, not counted
            if self.on_step is not None:
                self.on_step(True, t0, t1, n[0] if n is not None else lean[5] or 1)
            f[6] = _perf()  # the end of its bookkeeping (own_rest_ns)
            return data
        # num_workers=0: the batch is made in this thread, and its fetch reads the run-queue wait itself (shared below);
        # reading it here too would only cost the step twice.
        inthread = holder is not _NOT_INTHREAD
        cuda = self.cuda
        prev = self._open_row
        if self._measured_done + (self._open_flat is not None or (prev is not None and prev.measured)) >= self.steps:
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
            t0, c0, q0 = clocks.sched_snapshot()
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
        if inthread:  # the end's clocks in the opposite order (clocks.snapshot says why)
            c1 = _cpu() if c0 >= 0 else -1
            t1 = _perf()
            q1 = 0
        else:
            t1, c1, q1 = clocks.sched_snapshot(end=True)
        return self._after_wait(row, data, holder, t0, t1, c0, c1, q0, q1)

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
            meta = data.meta
            batch = data.batch
        else:
            batch = data
            lean = holder[0] if holder.__class__ is list else None
            # A lean fetch's clocks, handed over beside the batch (worker.LeanOut): its BatchMeta, made now.
            meta = lean_meta(lean, self._pid) if lean is not None and lean[0] >= t0 else None
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
        if meta is not None:
            row.worker_id = meta.worker_id
            row.pid = meta.pid
            if meta.worker_id < 0:  # fetched in this thread, inside the wait: its instrumentation's time is ours
                row.own_wait_ns += meta.own_ns
                if inthread:
                    row.main_runq_ns = meta.marks[4]  # the fetch's run-queue wait (its byte counts wait unparsed)
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

    def _materialize(self) -> None:
        """The flat steps (FAST_STEPS) as the step rows and BatchMetas every other step has, in step order: at the
        window's close, every FLAT_FOLD_EVERY flat steps in the tail, or before a restart on another loader. A step
        beyond the detail (DETAIL_STEPS) goes into the tail's totals, as it would have at its end (its row and record
        are not kept).

        Resumable: a signal (Ctrl-C, SIGTERM under ``profiler run``) can land anywhere in it, and the run then stops
        and calls it again from the window's close. ``_flat_done`` counts the entries already recorded, and each one
        is counted done before it is recorded, so an interrupted pass loses at most the step in flight, as a step
        recorded on the way can be lost, and never records one twice; the rows are sorted once they all are."""
        flat = self._flat
        for i in range(self._flat_done, len(flat)):
            made = self._flat_row(flat[i])
            self._flat_done = i + 1
            self._keep_flat_row(flat[i], *made)
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
        step, epoch, t0, t1, n, lean, rest_end, end = f
        meta = lean_meta(lean, self._pid)
        if n is not None:
            k, basis = n
        elif lean[5]:
            k, basis = lean[5], BASIS_CALLS
        else:
            k, basis = 1, BASIS_STEP
        tail = step >= self.warmup + self.detail_steps
        row = StepRow(step, epoch, -1, self._pid, k, t0, t1, (t1 - t0) - fetch_off_core_ns(meta.marks), 0, True,
                      compute_end_ns=end, batch=-1 if tail else len(self.metas), tail=tail,
                      own_wait_ns=meta.own_ns, own_rest_ns=max(0, rest_end - t1))
        if end:  # ended (_end_step's rule); an open one gets its h2d when it ends
            row.h2d_start_ns = row.h2d_end_ns = t1
        return row, meta, basis

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
            self._fast = True  # host clocks: its num_workers=0 steps may be kept flat (FAST_STEPS)

    def _end_step(self, t_ns: int) -> None:
        f = self._open_flat
        if f is not None:  # a flat step (FAST_STEPS): measured, host clocks; made a row by _materialize
            self._open_flat = None
            f[7] = t_ns
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

    def _device_step_done(self, r: StepRow) -> None:
        """A tail step's device times are known: its idle by the device's clock, then into the totals."""
        if r.tail:
            self._device_idle(r)
            self.tail.add(r)

    @staticmethod
    def _device_idle(r: StepRow) -> bool:
        ws, we = getattr(r, "wait_start_dev", 0), getattr(r, "wait_end_dev", 0)
        if not (ws and we and r.compute_end_ns):
            r.idle_ns = r.wait_end_ns - r.wait_start_ns
            return False
        if not getattr(r, "h2d_seen", False):  # no h2d stage: the device's step starts when the batch is in hand
            r.h2d_start_ns = r.h2d_end_ns = we
        r.idle_ns = max(0, we - ws) + max(0, r.h2d_end_ns - r.h2d_start_ns)
        return True

    def _resolve_device(self) -> None:
        import torch

        cuda = self.cuda
        assert cuda is not None
        try:
            cuda.resolve(force=True)
            self.peak_device_memory_bytes = int(torch.cuda.max_memory_allocated())
        except Exception:  # noqa: BLE001 - after an OOM or a sticky error: unresolved steps keep host figures
            for ev, r, which in cuda.queue:  # tail steps whose events never resolved: host figures
                if which == "compute_end_ns" and r.tail:
                    r.idle_ns = r.wait_end_ns - r.wait_start_ns
                    self.tail.add(r)
            return
        for r in self.rows:
            if r.measured and self._device_idle(r):
                r.device_ok = True
