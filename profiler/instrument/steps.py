"""The main side's records of a profiled job while it runs: its steps (StepRow; beyond the detail, Tail's totals),
epochs, the profiled loader's facts (LoaderInfo) and the other loaders' (OtherLoader), and the device's boundary
events (CudaTimeline). session.py fills them; collect.py turns them into the record's columns.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .loaders import epoch_length

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
    main_runq_ns: int = 0  # of the steps that read it (a worker tail step reads it one time in TAIL_CLOCK_EVERY)
    runq_read_wait_ns: int = 0  # the wait of those steps (runq_estimate_ns scales by it)
    own_wait_ns: int = 0
    own_rest_ns: int = 0
    first_ns: int = 0
    last_ns: int = 0
    hist: dict[str, list[int]] = field(default_factory=lambda: {k: [0] * HIST_BINS for k in ("wait", "compute")})

    def runq_estimate_ns(self) -> int:
        """The main thread's run-queue wait over every tail step's wait: what the steps that read it measured, scaled
        by all the waits over theirs (a ratio estimate; exact where every step read it). Steps folded without any
        reading (a monitor's gaps) are not in ``wait_ns`` of the read ones, so they scale it too."""
        read = self.runq_read_wait_ns
        if read <= 0 or read >= self.wait_ns:
            return self.main_runq_ns
        return int(round(self.main_runq_ns * self.wait_ns / read))

    def add(self, r: "StepRow") -> None:
        """An ended step's row into the totals."""
        self.add_step(r.wait_start_ns, r.wait_end_ns, r.h2d_start_ns, r.h2d_end_ns, r.compute_end_ns, r.n_samples,
                      r.idle_ns, r.main_runq_ns, r.own_wait_ns, r.own_rest_ns)

    def add_step(self, w0: int, w1: int, h0: int, h1: int, end: int, n: int, idle: int, runq: int, own_wait: int,
                 own_rest: int) -> None:
        """An ended step into the totals, from its figures (StepRow's fields of the same names: its wait's ends, its
        h2d stage's, its end, samples, idle, run-queue and own ns). Once per step of a long run, on the main thread
        (a worker tail step, session.py, calls it without a row): plain arithmetic, no loops or temporaries."""
        wait, compute = w1 - w0, end - h1
        compute = compute if compute > 0 else 0
        h2d = h1 - h0
        self.steps += 1
        self.samples += n
        self.wait_ns += wait
        self.idle_ns += idle
        self.h2d_ns += h2d if h2d > 0 else 0
        self.compute_ns += compute
        if runq >= 0:  # (-1: not read, session.TAIL_CLOCK_EVERY)
            self.main_runq_ns += runq
            self.runq_read_wait_ns += wait
        self.own_wait_ns += own_wait
        self.own_rest_ns += own_rest
        if not self.first_ns or w0 < self.first_ns:  # flat steps are folded after later ones
            self.first_ns = w0
        if end > self.last_ns:
            self.last_ns = end
        hist = self.hist
        hist["wait"][min(HIST_BINS - 1, (wait // 1000 if wait > 0 else 0).bit_length())] += 1
        hist["compute"][min(HIST_BINS - 1, (compute // 1000).bit_length())] += 1


@dataclass(slots=True)
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
    # The profiler's own main-thread time in this step: inside the wait (its hook before the batch is asked for, and
    # with num_workers=0 the fetch's instrumentation, BatchMeta.own_ns), and in the rest of the step (its bookkeeping
    # after the batch is in hand). Recorded so analysis takes it out of the wait instead of blaming the job for it.
    own_wait_ns: int = 0
    own_rest_ns: int = 0
    # Device timing (CUDA events, resolved lazily by CudaTimeline): the wait's ends on the device's clock, whether
    # the step's device times resolved, and whether the step had an h2d stage (the built-in pipeline's).
    wait_start_dev: int = 0
    wait_end_dev: int = 0
    device_ok: bool = False
    h2d_seen: bool = False


@dataclass
class EpochRow:
    epoch: int
    iter_start_ns: int
    iter_end_ns: int
    first_batch_ns: int = 0


@dataclass
class LoaderInfo:
    """The profiled DataLoader's facts (run.json ``job.loader``)."""
    dataset_class: str
    created_at: str | None  # the user's line that made the loader (first frame in the user's own code)
    iterated_at: str | None  # the user's line that first iterated it
    num_workers: int
    batch_size: int | None
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    multiprocessing_context: str | None
    collate_fn: str
    sampler: str
    overridden: dict[str, list[Any]] | None = None  # {setting: [script's value, profiled value]} (run --override-*)
    created_in: str | None = None  # the library line that called DataLoader(...), when not the user's own
    iterated_in: str | None = None  # the library line that called iter(loader), when not the user's own
    batches_per_epoch: int | None = None  # len(loader); None for an IterableDataset without __len__
    chosen: str = "the first loader the job iterated"  # why this loader is the profiled one
    recreated: int = 0  # times the job made this loader afresh for a new epoch (same line, dataset, settings)
    samples_basis: str | None = None  # what a step's sample count came from (loaders.BASIS_*; most steps')
    batch_bytes: float | None = None  # mean bytes of the tensors in the first BATCH_BYTES_OF measured batches
    # The samples in an epoch's last batch (a partial one unless drop_last); None: unknown. Not in the record: the
    # monitor's gaps (instrument/gaps.py) count an epoch's steps without seeing them, and need it for the last one.
    last_batch_samples: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        del d["last_batch_samples"]
        return d


@dataclass
class OtherLoader:
    """A loader the job iterated that is not the profiled one, with the little that was measured of it."""
    dataset_class: str
    created_at: str | None
    num_workers: int
    batch_size: int | None
    role: str  # why it is not the profiled one (ROLE_*)
    iterated_at: str | None = None
    epochs: int = 0  # iter() calls
    steps: int = 0  # batches it delivered
    samples: int = 0
    wait_ns: int = 0  # time spent inside its next()
    first_ns: int = 0  # its first iter()
    last_ns: int = 0  # its last batch
    # Its loops: each iterator's time from iter() to its latest next() returning or raising (a validation pass, its
    # model time included); of it, the loops made while a step of the profiled loader was open (a validation pass
    # run inside the training loop's body, as Lightning and HF Trainer do). The monitor's windows count them as
    # time outside the profiled loader (monitor/windows.py); run.json does not carry them.
    loop_ns: int = 0
    loop_in_step_ns: int = 0

    def to_dict(self, t0_ns: int) -> dict[str, Any]:
        return {"dataset_class": self.dataset_class, "created_at": self.created_at, "iterated_at": self.iterated_at,
                "num_workers": self.num_workers, "batch_size": self.batch_size, "role": self.role,
                "epochs": self.epochs, "steps": self.steps, "samples": self.samples,
                "wait_s": round(self.wait_ns / 1e9, 6),
                "first_s": round((self.first_ns - t0_ns) / 1e9, 6) if self.first_ns else None,
                "last_s": round((self.last_ns - t0_ns) / 1e9, 6) if self.last_ns else None}


ROLE_ENDED_EARLY = "stopped early; the job went on with another loader"
ROLE_NOT_NAMED = "not the one --loader named"
ROLE_OTHER = "iterated beside or between the profiled loader's epochs"


@dataclass
class OtherIter:
    """One iterator of a loader that is not profiled: its loader's entry and when it was made."""
    entry: OtherLoader
    loader: Any  # weakref.ref to the DataLoader
    iter_ns: int
    eligible: bool  # may take the window over (not excluded by --loader)
    sites: tuple[str | None, str | None] = (None, None)  # where it was iterated (user's line, library's line)
    checked: bool = False  # the take-over question was asked (at its first next())
    in_step: bool = False  # made while a step of the profiled loader was open (OtherLoader.loop_in_step_ns)
    mark_ns: int = 0  # its loop counted up to here (OtherLoader.loop_ns)


def qualified_name(obj: Any) -> str:
    if obj is None:
        return "None"
    t = obj if isinstance(obj, type) else type(obj)
    if callable(obj) and hasattr(obj, "__qualname__") and not isinstance(obj, type):
        return f"{getattr(obj, '__module__', '?')}.{obj.__qualname__}"
    return f"{t.__module__}.{t.__qualname__}"


def loader_info(loader: Any, created: tuple[str | None, str | None] | None,
                iterated: tuple[str | None, str | None] | None) -> LoaderInfo:
    ctx = getattr(loader, "multiprocessing_context", None)
    if ctx is not None and not isinstance(ctx, str):
        ctx = ctx.get_start_method()
    if ctx is None and loader.num_workers > 0:
        import multiprocessing

        ctx = f"{multiprocessing.get_start_method(allow_none=False)} (default)"
    created = created or (None, None)
    iterated = iterated or (None, None)
    return LoaderInfo(
        dataset_class=qualified_name(loader.dataset), created_at=created[0], iterated_at=iterated[0],
        num_workers=int(loader.num_workers), batch_size=loader.batch_size, pin_memory=bool(loader.pin_memory),
        persistent_workers=bool(loader.persistent_workers),
        prefetch_factor=loader.prefetch_factor if loader.num_workers > 0 else None,
        multiprocessing_context=ctx, collate_fn=qualified_name(loader.collate_fn),
        sampler=qualified_name(loader.batch_sampler if loader.batch_sampler is not None else loader.sampler),
        created_in=created[1], iterated_in=iterated[1], batches_per_epoch=epoch_length(loader),
        last_batch_samples=last_batch_samples(loader))


def last_batch_samples(loader: Any) -> int | None:
    """Samples in an epoch's last batch under automatic batching: the sampler's length modulo the batch size (the
    whole batch size with ``drop_last``); None where the loader cannot say (no automatic batching, a sampler
    without a length). Public DataLoader attributes only."""
    bs = getattr(loader, "batch_size", None)
    if not isinstance(bs, int) or bs <= 0:
        return None
    try:
        n = len(loader.sampler)
    except TypeError:
        return None
    if n <= 0:
        return None
    return bs if getattr(loader, "drop_last", False) else (n % bs or bs)


class CudaTimeline:
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



def step_of(r: StepRow) -> int:
    return r.step

