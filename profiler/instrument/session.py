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
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

from . import clocks, substages, torch_hooks
from .worker import BatchMeta, Instrumented

# Resolve completed CUDA events every this many steps: bounds live events on long runs without a synchronize.
RESOLVE_EVERY = 32
# Distinct folders the record names as where the data was read from (the most-opened are kept).
MAX_FOLDERS = 256
# Measured steps kept in full detail (every step, batch and dataset call). Beyond, each step is folded into exact
# running totals (Tail) and dropped, so memory and run.json stay bounded however long the run: 2,000 steps at batch
# 32 are ~64k dataset calls, ~5 MB of record — enough for stable percentiles and attribution shares.
DETAIL_STEPS = 2000
# Skipped files listed from the tail steps (the detail's are all listed): a folder of bad files must not grow the
# record without bound either.
MAX_TAIL_SKIPPED = 1000
# Log2 histogram of per-step times beyond the detail (µs): bin k holds [2^k, 2^(k+1)) µs, 0..2^40 µs (12 days).
HIST_BINS = 40


@dataclass
class Tail:
    """Exact totals of the measured steps beyond DETAIL_STEPS (their details are not kept)."""
    steps: int = 0
    samples: int = 0
    wait_ns: int = 0
    idle_ns: int = 0
    h2d_ns: int = 0
    compute_ns: int = 0
    main_runq_ns: int = 0
    first_ns: int = 0
    last_ns: int = 0
    hist: dict[str, list[int]] = field(default_factory=lambda: {k: [0] * HIST_BINS for k in ("wait", "compute")})

    def add(self, r: "StepRow") -> None:
        wait, compute = r.wait_end_ns - r.wait_start_ns, max(0, r.compute_end_ns - r.h2d_end_ns)
        self.steps += 1
        self.samples += r.n_samples
        self.wait_ns += wait
        self.idle_ns += r.idle_ns
        self.h2d_ns += max(0, r.h2d_end_ns - r.h2d_start_ns)
        self.compute_ns += compute
        self.main_runq_ns += r.main_runq_ns
        self.first_ns = self.first_ns or r.wait_start_ns
        self.last_ns = max(self.last_ns, r.compute_end_ns)
        for k, v in (("wait", wait), ("compute", compute)):
            self.hist[k][min(HIST_BINS - 1, max(0, int(v // 1000)).bit_length())] += 1


class WindowClosed(BaseException):
    """Raised out of the user's ``next()`` when the window has closed and ``then='exit'``: stops the job cleanly.

    A BaseException, so a script's ``except Exception`` does not swallow it (its ``finally`` blocks still run).
    """


@dataclass
class StepRow:
    step: int
    epoch: int
    worker_id: int
    pid: int
    n_samples: int
    wait_start_ns: int
    wait_end_ns: int
    main_cpu_ns: int
    main_runq_ns: int
    measured: bool
    h2d_start_ns: int = 0
    h2d_end_ns: int = 0
    compute_end_ns: int = 0
    idle_ns: int = 0
    batch: int = -1
    tail: bool = False  # beyond DETAIL_STEPS: folded into Session.tail once it has ended, then dropped


@dataclass
class EpochRow:
    epoch: int
    iter_start_ns: int
    iter_end_ns: int
    first_batch_ns: int = 0


@dataclass
class LoaderInfo:
    dataset_class: str
    created_at: str | None
    iterated_at: str | None
    num_workers: int
    batch_size: int | None
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    multiprocessing_context: str | None
    collate_fn: str
    sampler: str
    overridden: dict | None = None  # {setting: [script's value, profiled value]} (run --override-*; issue 10)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _name(obj: Any) -> str:
    if obj is None:
        return "None"
    t = obj if isinstance(obj, type) else type(obj)
    if callable(obj) and hasattr(obj, "__qualname__") and not isinstance(obj, type):
        return f"{getattr(obj, '__module__', '?')}.{obj.__qualname__}"
    return f"{t.__module__}.{t.__qualname__}"


_OUR_DIRS = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))),)


def _user_site() -> str | None:
    """file:line of the innermost frame outside torch, the standard library's runpy and the profiler."""
    import torch

    skip = _OUR_DIRS + (os.path.dirname(os.path.abspath(torch.__file__)),)
    f = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not fn.startswith(skip) and not fn.endswith(("runpy.py", "contextlib.py")):
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return None


def loader_info(loader: Any, created_at: str | None, iterated_at: str | None) -> LoaderInfo:
    ctx = getattr(loader, "multiprocessing_context", None)
    if ctx is not None and not isinstance(ctx, str):
        ctx = ctx.get_start_method()
    if ctx is None and loader.num_workers > 0:
        import multiprocessing

        ctx = f"{multiprocessing.get_start_method(allow_none=False)} (default)"
    return LoaderInfo(
        dataset_class=_name(loader.dataset), created_at=created_at, iterated_at=iterated_at,
        num_workers=int(loader.num_workers), batch_size=loader.batch_size, pin_memory=bool(loader.pin_memory),
        persistent_workers=bool(loader.persistent_workers),
        prefetch_factor=loader.prefetch_factor if loader.num_workers > 0 else None,
        multiprocessing_context=ctx, collate_fn=_name(loader.collate_fn),
        sampler=_name(loader.batch_sampler if loader.batch_sampler is not None else loader.sampler))


class _CudaTimeline:
    """Boundary events on the current stream, chained pairwise into host-domain nanoseconds."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        torch.cuda.synchronize()
        self.anchor_ns = time.perf_counter_ns()
        self.last = torch.cuda.Event(enable_timing=True)
        self.last.record()
        self.last_ns = float(self.anchor_ns)
        self.queue: list[tuple[Any, StepRow, str]] = []  # (event, row, which) in record order
        self.device = torch.cuda.current_device()
        self.on_step_done: Callable[[StepRow], None] | None = None  # called when a step's last event resolves

    def mark(self, row: StepRow, which: str) -> None:
        ev = self.torch.cuda.Event(enable_timing=True)
        ev.record()
        self.queue.append((ev, row, which))

    def resolve(self, force: bool = False) -> None:
        if force:
            self.torch.cuda.synchronize()
        done = 0
        for ev, row, which in self.queue:
            if not force and not ev.query():
                break
            self.last_ns += float(self.last.elapsed_time(ev)) * 1e6
            self.last = ev
            setattr(row, which, int(self.last_ns))
            done += 1
            if which == "compute_end_ns" and self.on_step_done is not None:
                self.on_step_done(row)
        del self.queue[:done]


class Session:
    """One profiling session in this process: hooks installed from ``start()`` to ``stop()``."""

    def __init__(self, warmup: int, steps: int, then: str = "exit",
                 on_step: Callable[[StepRow, bool], None] | None = None,
                 on_window_closed: Callable[["Session"], None] | None = None,
                 on_first_pid: Callable[[int, int], None] | None = None, t0_ns: int | None = None,
                 detail_steps: int | None = None, override: dict[str, int] | None = None):
        self.warmup, self.steps, self.then = warmup, steps, then
        self.detail_steps = DETAIL_STEPS if detail_steps is None else detail_steps
        self.tail = Tail()
        self._n_steps = 0
        self._measured_done = 0
        # {num_workers, batch_size}: applied to the profiled loader when first iterated (issue 10: sweep a script)
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
        self._other_loaders: set[int] = set()
        self._created: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._open_row: StepRow | None = None
        self._h2d: tuple[StepRow, int] | None = None
        self.window_start_ns = 0
        self.window_end_ns = 0
        self.closed = False
        self.cuda: _CudaTimeline | None = None
        self.device_timing = "host clocks"
        self.accounting: dict = {}
        self._pids: set[int] = set()
        self._main_thread = threading.main_thread()
        self.peak_device_memory_bytes: int | None = None
        self.read_from: dict[str, int] = {}  # folder -> files the profiled loader's dataset opened there
        self.tail_skipped: list[tuple[int, str, str]] = []  # skipped files reported in tail steps (bounded)

    # --- lifecycle ------------------------------------------------------------------------------------------------
    def start(self) -> "Session":
        self.t0_ns = self.t0_ns or time.perf_counter_ns()
        self.accounting = clocks.accounting()
        torch_hooks.install(self._on_next, self._on_iter)
        substages.main_hook = self
        _watch_loader_creation(self._created)
        return self

    def stop(self) -> None:
        """End profiling: the open step ends now, the window closes if it has not, the hooks come out."""
        if not self.closed:
            self._close(time.perf_counter_ns())
        torch_hooks.uninstall()
        substages.main_hook = None
        _watch_loader_creation(None)

    @property
    def measured_steps(self) -> int:
        """Measured steps that have ended (detail and tail)."""
        return self._measured_done

    @property
    def other_loaders(self) -> int:
        return len(self._other_loaders)

    # --- main-loop stages (the built-in pipeline's h2d) ----------------------------------------------------------
    def enter(self, name: str) -> Any:
        if threading.current_thread() is not self._main_thread or self._open_row is None or name != "h2d":
            return None
        row = self._open_row
        row.h2d_seen = True  # type: ignore[attr-defined]
        row.h2d_start_ns = time.perf_counter_ns()
        if self.cuda is not None and row.measured:
            self.cuda.mark(row, "h2d_start_ns")
        return row

    def exit(self, name: str, row: Any) -> None:
        if row is None:
            return
        row.h2d_end_ns = time.perf_counter_ns()
        if self.cuda is not None and row.measured:
            self.cuda.mark(row, "h2d_end_ns")

    # --- hooks ----------------------------------------------------------------------------------------------------
    def _on_iter(self, loader: Any, orig: Callable[[Any], Any]) -> Any:
        overridden = None
        if self.override and self._loader_ref is None and not self.closed:  # the profiled loader, before it starts
            overridden = torch_hooks.override_loader(loader, **self.override)
        t0 = time.perf_counter_ns()
        it = orig(loader)
        t1 = time.perf_counter_ns()
        if self.closed:
            return it
        if self._loader_ref is None:
            self._loader_ref = weakref.ref(loader)
            self.loader = loader_info(loader, self._created.get(loader), _user_site())
            self.loader.overridden = overridden or None
        if self._loader_ref() is loader:
            self._iters.add(id(it))
            self.epochs.append(EpochRow(len(self.epochs), t0, t1))
        else:
            self._other_loaders.add(id(loader))
        return it

    def _on_next(self, it: Any, orig: Callable[[Any], Any]) -> Any:
        if self.closed or id(it) not in self._iters:
            return torch_hooks.unwrap(orig(it))
        s0 = clocks.snapshot()
        t0 = s0[0]
        if self.cuda is not None and self._open_row is not None and self._open_row.measured:
            self.cuda.mark(self._open_row, "compute_end_ns")
        self._end_step(t0)
        if self.measured_steps >= self.steps:
            self._close(t0)
            if self.then == "exit":
                raise WindowClosed()
            return torch_hooks.unwrap(orig(it))
        step = self._n_steps  # taken only once a batch arrives (an epoch's StopIteration is no step)
        measured = step >= self.warmup
        if measured and not self.window_start_ns:
            self._open_window(t0)
            t0 = self.window_start_ns
        row = StepRow(step, max(0, len(self.epochs) - 1), -1, os.getpid(), 0, t0, 0, 0, 0, measured,
                      tail=measured and step - self.warmup >= self.detail_steps)
        if self.cuda is not None and measured:
            self.cuda.mark(row, "wait_start_dev")
        data = orig(it)
        self._n_steps += 1
        s1 = clocks.snapshot(end=True)
        row.wait_end_ns, row.main_cpu_ns, row.main_runq_ns = s1[0], s1[1] - s0[1], s1[2] - s0[2]
        if self.cuda is not None and measured:
            self.cuda.mark(row, "wait_end_dev")
        batch = data
        if isinstance(data, Instrumented):
            meta, batch = data.meta, data.batch
            row.worker_id, row.pid = meta.worker_id, meta.pid
            row.n_samples = max(0, meta.items - len(meta.skipped))
            if row.tail:  # its spans are not kept; what the record lists of it is kept here
                self.tail_skipped.extend(meta.skipped[:MAX_TAIL_SKIPPED - len(self.tail_skipped)])
            else:
                row.batch = len(self.metas)
                self.metas.append(meta)
            for folder, n in meta.opened.items():
                if folder in self.read_from or len(self.read_from) < MAX_FOLDERS:
                    self.read_from[folder] = self.read_from.get(folder, 0) + n
            if meta.pid not in self._pids:
                self._pids.add(meta.pid)
                if self.on_first_pid is not None:
                    self.on_first_pid(meta.pid, meta.worker_id)
        ep = self.epochs[-1] if self.epochs else None
        if ep is not None and not ep.first_batch_ns:
            ep.first_batch_ns = row.wait_end_ns
        if not row.tail:
            self.rows.append(row)
        self._open_row = row
        if self.cuda is not None and step % RESOLVE_EVERY == 0:
            self.cuda.resolve()
        if self.on_step is not None:
            self.on_step(row, row.measured)
        return batch

    # --- window ---------------------------------------------------------------------------------------------------
    def _open_window(self, t0_ns: int) -> None:
        """Open the measured window at the first measured step's wait start ``t0_ns`` (host timing), or after the
        CUDA set-up (device timing; the step's wait starts then): never after a step it contains, so the idle time
        of the steps can never exceed the window."""
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            self.cuda = _CudaTimeline()
            self.cuda.on_step_done = self._device_step_done
            self.device_timing = "cuda events"
            torch.cuda.reset_peak_memory_stats()
            self.window_start_ns = time.perf_counter_ns()
        else:
            self.window_start_ns = t0_ns

    def _end_step(self, t_ns: int) -> None:
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
        self.closed = True
        if self.cuda is not None:
            self._resolve_device()
        measured = [r for r in self.rows if r.measured]
        for r in self.rows:
            if self.cuda is None or not r.measured or not getattr(r, "device_ok", False):
                r.idle_ns = r.wait_end_ns - r.wait_start_ns
        if not self.window_start_ns:
            self.window_start_ns = t_ns
        self.window_end_ns = max([t_ns, self.tail.last_ns] + [r.compute_end_ns for r in measured])
        if self.on_window_closed is not None:
            self.on_window_closed(self)

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
                r.device_ok = True  # type: ignore[attr-defined]


_created_map: weakref.WeakKeyDictionary | None = None
_ORIG_INIT: Any = None


def _watch_loader_creation(target: weakref.WeakKeyDictionary | None) -> None:
    """Remember where each DataLoader was created (file:line), for the record's ``job.loader.created_at``."""
    global _created_map, _ORIG_INIT
    from torch.utils.data import DataLoader

    if target is None:
        if _ORIG_INIT is not None:
            DataLoader.__init__ = _ORIG_INIT
            _ORIG_INIT = None
        _created_map = None
        return
    _created_map = target
    if _ORIG_INIT is None:
        _ORIG_INIT = DataLoader.__init__
        orig = _ORIG_INIT

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            orig(self, *args, **kwargs)
            if _created_map is not None:
                try:
                    _created_map[self] = _user_site()
                except TypeError:
                    pass

        __init__.__wrapped__ = orig  # type: ignore[attr-defined]
        DataLoader.__init__ = __init__
