"""The record's sections about what was profiled and how: the job and its loaders, attach, torchrun and torch.profiler.

Split from ``profiler.record.schema`` (which re-exports every name here, and which readers import from) to keep
each module short: these are raw sections (collected, validated strictly on load) that describe the job rather
than its measurements. The scalar vocabulary (``Count``, ``Seconds``, ...) is ``profiler.record.scalars``.
"""
from __future__ import annotations

from typing import Any

from .scalars import Count, Id, Required, Seconds, Share, Time, TypedDict


class LoaderInfo(TypedDict, total=False):
    """The profiled DataLoader's own settings (a user's job may differ from config)."""
    dataset_class: str | None
    created_at: str | None  # "file:line"
    num_workers: Count
    batch_size: Count | None  # null for batch_size=None or a batch_sampler
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: Count | None
    multiprocessing_context: str | None
    collate_fn: str | None
    sampler: str | None
    iterated_at: str | None  # "file:line" of the first iter(loader)
    overridden: dict[str, list[Any]] | None  # {num_workers|batch_size: [script's, profiled]} (run --override-*)
    created_in: str | None  # "file:line" of the library frame that called DataLoader(...), beside created_at
    iterated_in: str | None  # "file:line" of the library frame that called iter(loader), beside iterated_at
    batches_per_epoch: Count | None  # len(loader); null when the loader cannot say
    chosen: str  # why this loader is the profiled one ("the first loader the job iterated", "named by --loader ...")
    recreated: Count  # times the job made it afresh for a new epoch (same line, dataset class, workers, batch size)
    samples_basis: str  # "batch" | "batch length" | "dataset calls" | "one per step": what samples were counted from
    batch_bytes: float | None  # mean bytes of a batch's tensors over the first measured batches; null: none held


class OtherLoaderFigures(TypedDict, total=False):
    """A loader the job iterated besides the profiled one, with the little measured of it."""
    dataset_class: str
    created_at: str | None
    iterated_at: str | None
    num_workers: Count
    batch_size: Count | None
    role: str  # why it is not the profiled one
    epochs: Count
    steps: Count
    samples: Count
    wait_s: Seconds
    first_s: Seconds | None  # its first iter(), s since run start
    last_s: Seconds | None  # its last batch


class ReadFrom(TypedDict, total=False):
    folder: str
    files_opened: Count


class Job(TypedDict, total=False):
    """What was profiled: the built-in benchmark, a script, a module or an API call."""
    kind: Required[str]  # "builtin" | "script" | "module" | "api" | "attach"
    target: str | None
    argv: list[str]
    then: str  # "exit" | "continue"
    ended: str  # "window closed", "script ended", "script raised ValueError", "sys.exit(3)", "interrupted"
    loader: LoaderInfo | None
    other_loaders: Count
    other_loader_figures: list[OtherLoaderFigures]  # the other loaders themselves (at most 50)
    window_restarts: Count  # times the window restarted on another loader because the profiled one stopped early
    read_from: list[ReadFrom]  # folders the profiled loader's dataset opened files in, most-opened first


# Attach (``python -m profiler attach PID``; job.kind "attach"): sampled from outside, counts not spans -----------
class AttachSampler(TypedDict, total=False):
    name: str  # "py-spy"
    version: str | None
    mode: str  # "nonblocking": the target is never stopped
    rate_hz: Count
    samples: Count  # what the sampler reported in all
    errors: Count  # samples it could not read


class AttachTarget(TypedDict, total=False):
    pid: Required[Count]  # the main process
    given_pid: Count  # the PID the user gave (a worker's: its parent was taken)
    cmdline: list[str]  # redacted
    start_time_utc: str | None
    start_ticks: Count | None  # with pid, the process's identity (stat field 22)
    torch_loaded: bool | None
    main_in_dataloader_at_start: bool


class AttachProcess(TypedDict, total=False):
    pid: Required[Count]
    role: Required[str]  # "main" | "worker" | "child" | "forkserver"
    start_method: str | None  # a worker's: "fork" | "spawn" | "forkserver"
    what: str | None  # another child's kind ("torch.compile worker", "not Python", ...)
    found: str  # "discovery" | "sampling" (a worker first seen in the stacks: forked later, or missed at first)
    cmdline: list[str]


class AttachThread(TypedDict, total=False):
    """One sampled thread: stack samples per stage and the kernel's clocks over the window."""
    pid: Required[Count]
    tid: Required[Count]
    name: str
    role: Required[str]  # "main" | "worker" | "worker_feeder" | "pin_memory" | "other"
    worker: Id  # workers in start order; -1 for the main process
    samples: Required[Count]
    stages: Required[dict[str, Count]]  # stage (or idle / wait / compute / epoch_start) -> samples
    wait_stages: dict[str, Count]  # main thread, workers = 0: what the loading inside __next__ was
    top_frames: list[dict[str, Any]]  # {where: "file:line (function)", samples}
    wall_s: Seconds
    on_cpu_s: Seconds
    runq_s: Seconds
    states: dict[str, Count]  # scheduler state samples: R, S, D, ...


class AttachIo(TypedDict):
    pid: Count
    rchar: Count
    read_bytes: Count


class Attach(TypedDict, total=False):
    sampler: Required[AttachSampler]
    proc_rate_hz: Count
    proc_ticks: Count
    requested_s: Seconds
    seconds: Required[Seconds]
    started_utc: str | None
    stopped_by: str  # "duration" | "interrupted" | "target exited"
    target: Required[AttachTarget]
    processes: list[AttachProcess]
    pin_memory_tid: Count | None
    ranks: dict[str, int] | None  # torchrun: {rank, local_rank, world_size, ...} of the target
    siblings: list[dict[str, Any]]  # torchrun: the other ranks {pid, rank, local_rank}
    gpus: list[dict[str, Any]]  # NVML: {index, name, pids, used_bytes}
    threads: Required[list[AttachThread]]
    workers_at_once: Count  # the most DataLoader workers alive at the same time in the window
    io: list[AttachIo]
    cpu_util: Share | None  # the machine's CPU share busy over the window
    absent: dict[str, str]  # figure -> why attach cannot have it


class Collectives(TypedDict, total=False):
    method: str  # how the collective wait was measured (a DDP communication hook) or derived
    kind: str  # "all_reduce"
    start: list[Time]
    end: list[Time]


class Distributed(TypedDict, total=False):
    """One rank of a torchrun job (absent for a single process)."""
    rank: Count
    local_rank: Count
    world_size: Count
    local_world_size: Count | None
    group_rank: Count | None
    backend: str | None  # "gloo" | "nccl" | null (a user's script: its own process group)
    hostname: str  # a hash of the host name ("host-…"), never the name itself
    boot_id: str | None  # ranks with one boot id share CLOCK_MONOTONIC
    pid: Count
    clock: str  # "CLOCK_MONOTONIC"
    t0_monotonic_ns: Count  # the run start all of this rank's times are relative to
    run_id: str | None
    restart_count: Count | None
    run_folder: str
    collectives: Collectives | None


class TorchTraceClock(TypedDict, total=False):
    """The clock pair that places this record's times on torch.profiler (kineto) traces (render/kineto_merge.py)."""
    ours: str  # "CLOCK_MONOTONIC": the record's times are seconds from t0_monotonic_ns on it
    theirs: str  # "CLOCK_REALTIME": kineto's events are baseTimeNanoseconds + ts µs on it
    t0_monotonic_ns: Count
    # CLOCK_REALTIME - CLOCK_MONOTONIC, the median of the reads (at the start and at each export); in µs: in ns it
    # is ~1.8e18, beyond the 2**53 a record's number may be (validate.py MAX_ABS)
    realtime_minus_monotonic_us: int
    drift_ns: int  # how far the reads spread (an NTP step between them shows here)
    read_bracket_ns: Count  # the widest bracket of one read: its uncertainty


class TorchTrace(TypedDict, total=False):
    """One Chrome trace torch.profiler exported while the job was profiled."""
    path: str  # absolute, as exported (the job's file; never changed by the profiler)
    by: str  # "job" (its own torch.profiler) | "profiler" (run --torch-profiler)
    exported_s: Time


class TorchTraces(TypedDict, total=False):
    """torch.profiler traces seen during the run (instrument/torch_profiler_hooks.py) and the clocks to merge them."""
    traces: list[TorchTrace]
    clock: TorchTraceClock
    error: str  # run --torch-profiler: why its own trace is missing
