"""The run record's sections as types: the one statement of what run.json holds (schema_version 2).

Why TypedDicts and not dataclasses per section: the sections are JSON objects at runtime, and analysis and renderers
read them with ``.get`` and ``[...]``; a TypedDict gives every reader a precise type without changing one line of
them or the JSON. The same types drive validation on load (``profiler.record.validate``), and a test checks that
docs/run_json.md names every field declared here, so the doc, the checker and the code cannot drift apart.

Constraints ride along as ``Annotated`` metadata: ``Min(0)`` for durations, counts and bytes, ``Min(-1)`` where -1
means "unknown" or "the main process". ``float`` accepts JSON integers (``0`` is a valid float), never booleans.
Tables are the columnar ones in ``TABLES``: every value is a list of the table's row count.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Annotated, Any

# Required/NotRequired are in typing from 3.11; on 3.10 (the oldest we support) typing_extensions has them, with the
# TypedDict and introspection helpers that understand them. validate.py takes them from here so they match.
if sys.version_info >= (3, 11):
    from typing import NotRequired, Required, TypedDict, get_type_hints, is_typeddict  # noqa: F401
else:  # pragma: no cover - exercised on 3.10 only
    from typing_extensions import NotRequired, Required, TypedDict, get_type_hints, is_typeddict  # noqa: F401



@dataclass(frozen=True)
class Min:
    """The smallest value a number may take (inclusive)."""
    value: float


# Scalar vocabulary -------------------------------------------------------------------------------------------------
Count = Annotated[int, Min(0)]  # how many of something; also bytes
Id = Annotated[int, Min(-1)]  # a row's batch/worker/index/step number; -1 = unknown, or the main process (worker)
Counter = Annotated[int, Min(-1)]  # a cumulative /proc/<pid>/io counter; -1 = unreadable
Seconds = Annotated[float, Min(0)]  # a duration
Time = float  # an instant: seconds since the run started (host clock)
Share = Annotated[float, Min(0)]  # a fraction or a percentage


# Raw sections (collected; validated strictly on load) ------------------------------------------------------------
class ToolInfo(TypedDict, total=False):
    name: str
    version: str


class Config(TypedDict, total=False):
    """Every option of the run (profiler.config.RunConfig). For a user's own job, job.loader is the truth."""
    data: str | None
    workers: Count | None  # null for a user's own job: its DataLoader decides (job.loader)
    batch_size: Count | None
    model: str | None
    mode: str
    device: str
    image_size: Count
    augment: str
    pin_memory: bool | None
    amp: bool
    steps: Count
    warmup: Count
    prefetch_factor: Count | None
    cache: str
    throttle: str | None
    storage: str | None
    throttle_mechanism: str
    out: str
    seed: int
    sample_interval_s: Seconds
    extra: dict[str, Any]
    then: str  # a user's own job: "exit" | "continue"
    script: str  # a user's own job: the script or module


class CpuInfo(TypedDict, total=False):
    model: str | None
    logical_cores: Count | None
    physical_cores: Count | None
    affinity_cores: Count | None
    cgroup_cpu_quota: Share | None
    usable_cores: Share | None
    usable_cores_int: Count | None


class RamInfo(TypedDict, total=False):
    total_bytes: Count | None
    available_bytes: Count | None
    cgroup_limit_bytes: Count | None


class Residency(TypedDict, total=False):
    """Page-cache residency of the dataset's files (mincore on a seeded sample)."""
    files_total: Count
    files_checked: Count
    bytes_total: Count
    bytes_checked: Count
    bytes_resident: Count
    fraction: Share | None
    sampled: bool


class Environment(TypedDict, total=False):
    cpu: CpuInfo
    ram: RamInfo
    os: dict[str, Any]
    python: dict[str, Any]
    packages: dict[str, str | None]
    pillow_libjpeg_turbo: bool | None
    torch: dict[str, Any]
    gpu: dict[str, Any] | None
    storage: dict[str, Any] | None
    residency_start: Residency | None


class ComputeDevice(TypedDict, total=False):
    type: Required[str]  # "cpu" | "cuda"
    index: int | None
    name: str | None
    timing: str  # "host clocks" | "cuda events"


class Window(TypedDict, total=False):
    """The measured window (warm-up excluded)."""
    start_s: Required[Time]
    end_s: Required[Time]
    seconds: Required[Seconds]
    steps: Count
    samples: Count
    warmup_steps: Count


class StepsTable(TypedDict):
    """One row per next() of the profiled loader that returned a batch, warm-up included."""
    step: list[Id]
    epoch: list[Count]
    batch: list[Id]
    worker: list[Id]
    samples: list[Count]
    wait_start: list[Time]
    wait_end: list[Time]
    h2d_start: list[Time]
    h2d_end: list[Time]
    compute_end: list[Time]
    idle: list[Seconds]
    measured: list[bool]
    main_cpu: list[Seconds]
    main_runq: list[Seconds]
    # The profiler's own main-thread on-CPU seconds in the step: inside its wait (taken out of the idle time before
    # attribution) and in the rest of it. Absent: not measured (records written before they were).
    profiler_wait: NotRequired[list[Seconds]]
    profiler_rest: NotRequired[list[Seconds]]


class BatchesTable(TypedDict):
    """One row per batch received."""
    batch: list[Id]
    worker: list[Id]
    pid: list[Count]
    collate_start: list[Time]
    collate_end: list[Time]
    sent: list[Time]
    received: list[Time]
    samples: list[Count]
    rchar: list[Counter]
    read_bytes: list[Counter]
    collate_cpu: list[Seconds]
    collate_runq: list[Seconds]
    gap_start: NotRequired[list[Time]]
    gap_end: NotRequired[list[Time]]
    gap_cpu: NotRequired[list[Seconds]]
    gap_runq: NotRequired[list[Seconds]]


class SpansTable(TypedDict):
    """One row per dataset call (__getitem__, __getitems__, or one item of an IterableDataset)."""
    batch: list[Id]
    worker: list[Id]
    index: list[Id]
    items: list[Count]
    start: list[Time]
    end: list[Time]
    cpu: list[Seconds]
    runq: list[Seconds]
    rchar: list[Count]
    read_bytes: list[Count]
    stages: dict[str, list[Seconds]]  # {stage name: column of self seconds per row}; see TABLE_COLUMN_GROUPS
    pixels: NotRequired[list[Count]]  # decoded image pixels in the call (PIL / torchvision.io), 0 if none
    # v1 columns, kept next to the v2 ones when a v1 record is migrated (readers that predate v2 still use them).
    read_start: NotRequired[list[Time]]
    read_end: NotRequired[list[Time]]
    decode_end: NotRequired[list[Time]]
    augment_end: NotRequired[list[Time]]
    bytes: NotRequired[list[Count]]


class EpochsTable(TypedDict):
    epoch: list[Count]
    iter_start: list[Time]
    iter_end: list[Time]
    first_batch: list[Time | None]  # null: the epoch ended before its first batch arrived


class Accounting(TypedDict, total=False):
    """Which per-thread clocks the spans could use on this host."""
    cpu_clock: str  # "thread_time" (CLOCK_THREAD_CPUTIME_ID)
    runqueue: bool
    thread_io: bool
    absent: dict[str, str]  # facility -> why it is missing
    own_per_call_ns: Count  # the per-dataset-call cost of the profiler's own timing, calibrated when profiling starts
    # the same for the written-out map fetch (worker.inline_map_fetch): [recording each call's end, timing it closely]
    own_per_inline_call_ns: list[Count]
    # num_workers=0: lean stretches whose once-per-stretch check failed (instrument/lean_check.py):
    # {stretches, batches, off_core_s}
    lean_unchecked: dict[str, float]


class TailTotals(TypedDict, total=False):
    """Exact totals of the measured steps beyond the detail cap (their rows, batches and spans are not kept)."""
    steps: Count
    samples: Count
    wait_s: Seconds
    idle_s: Seconds
    h2d_s: Seconds
    compute_s: Seconds
    main_runq_s: Seconds
    profiler_wait_s: Seconds  # sums of the steps' profiler_wait / profiler_rest
    profiler_rest_s: Seconds
    start_s: Time
    end_s: Time
    detail_steps: Count  # how many measured steps were kept in detail
    hist_us_log2: dict[str, list[Count]]  # {wait, compute}: steps per bin k = [2^k, 2^(k+1)) µs


class Timeline(TypedDict, total=False):
    steps: Required[StepsTable]
    batches: Required[BatchesTable]
    sample_spans: Required[SpansTable]
    epochs: Required[EpochsTable]
    accounting: Required[Accounting]
    time_unit: str
    tail: TailTotals


class ProcessSeries(TypedDict, total=False):
    pid: Required[Count]
    role: str  # main | worker | child
    worker_id: Id | None
    t_s: list[Time]
    cpu_percent: list[Share | None]
    rss_bytes: list[Count | None]
    pss_bytes: list[Count | None]
    uss_bytes: list[Count | None]
    io: dict[str, Counter] | None  # {rchar, read_bytes}
    cpu_times: dict[str, Seconds] | None  # {user_s, system_s}
    alive_at_end: bool


class GpuSeries(TypedDict, total=False):
    index: int | None
    name: str | None
    t_s: list[Time]
    util_percent: list[Share | None]
    mem_used_bytes: list[Count | None]
    mem_total_bytes: Count | None
    pcie_rx_bytes_per_s: list[Share | None]
    pcie_tx_bytes_per_s: list[Share | None]


class SamplerOverhead(TypedDict, total=False):
    ticks: Count
    thread_cpu_s: Seconds
    mean_tick_us: Seconds | None  # null: the sampler never ticked (a run shorter than one interval)
    worst_tick_us: Seconds | None


class Samples(TypedDict, total=False):
    """Background sampler series (~10 Hz); the list-valued series share t_s's length."""
    interval_s: Seconds
    t_s: list[Time]
    cpu_percent_per_core: list[list[Share]]
    ram_total_bytes: Count | None
    ram_used_bytes: list[Count | None]
    ram_available_bytes: list[Count | None]
    page_cache_bytes: list[Count | None]
    disk_read_bytes_per_s: list[Share | None]
    disk: str | None
    shm_used_bytes: list[Count | None]
    processes: list[ProcessSeries]
    gpu: GpuSeries | None
    absent: dict[str, str]
    halvings: Count  # times the series were halved (samplers/thinning.py); interval_s is the final spacing
    sampler_overhead: SamplerOverhead


class Dataset(TypedDict, total=False):
    root: str | None
    files: Count
    classes: Count
    layout: str  # "imagefolder" | "flat"
    total_bytes: Count
    sample: bool


class SkippedFile(TypedDict):
    path: str
    reason: str


class Skipped(TypedDict, total=False):
    count: Required[Count]
    files: list[SkippedFile]


class Storage(TypedDict, total=False):
    device: dict[str, Any] | None
    cache_mode: str
    evicted_files: Count
    warmed_bytes: Count
    residency_start: Residency | None
    residency_end: Residency | None
    throttle: dict[str, Any] | None
    io_source: str | None
    window: dict[str, Any] | None  # the byte totals of the measured window alone (analysis/io.py)
    bytes_requested: Count
    bytes_from_device: Count
    page_cache_hit_fraction: Share | None
    worker_processes_with_io: Count
    learned_from: str  # a script run without --data: the storage facts are of the folder its workers read most
    files: Count  # a script run with --data: files listed under it
    total_bytes: Count
    # The measured window's bytes as its dataset calls counted them (per-thread read_bytes / rchar; analysis/io.py)
    dataset_calls: dict[str, Any]
    summary: str  # the one sentence about storage bytes, each figure named by its counter (analysis/io.py)


class OutOfMemory(TypedDict, total=False):
    step: Id
    message: str


class Memory(TypedDict, total=False):
    device_peak_bytes: Count | None
    device_total_bytes: Count | None
    oom: OutOfMemory | None
    oom_recommendations: list[Any]
    oom_recommendations_error: str  # why the advice could not be recomputed (the record's own list is kept)
    breakdown: dict[str, Any]


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


# Derived sections (analysis output; never trusted on load, always recomputed) -------------------------------------
class Throughput(TypedDict, total=False):
    samples_per_s: Share
    steps_per_s: Share
    samples: Count
    steps: Count
    window_s: Seconds


class StageHistogram(TypedDict):
    """The stage's observations on log-spaced bins (ms): what latency.png draws, so it needs no timeline."""
    edges_ms: list[float]  # bin edges, one more than counts; empty when no observation was above 0 ms
    counts: list[Count]
    zeros: Count  # observations of 0 ms (not on a log axis)


class StageStats(TypedDict, total=False):
    per: str  # "sample" | "batch" | "step" | "epoch"
    count: Count
    total_s: Seconds
    mean_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    bytes: Count
    percentiles_over: str  # a run longer than the detail cap: which steps the percentiles describe
    histogram: StageHistogram  # the observations kept in detail (analysis/stats.py)
    share: Share  # attach: the stage's share of its side's sampled time
    share_low: Share  # attach: 95 % Wilson interval of that share
    share_high: Share
    basis: str  # attach: "sampled" (count = stack samples, total_s = share x sampled thread time)


class ProfilerCost(TypedDict, total=False):
    """The profiler's own main-thread time in the measured steps: reported apart, never attributed to the job."""
    seconds: Seconds  # taken out of the waits: stall.seconds is net of it
    rest_s: Seconds  # in the rest of the steps (its bookkeeping after the batch is in hand)
    share_of_window: Share  # both, over the window
    measured: bool  # false: the record has no profiler_wait column (written before it was measured)


class Stall(TypedDict, total=False):
    seconds: Seconds
    fraction: Share
    by_cause: dict[str, float]
    share_by_cause: dict[str, float]
    by_stage: dict[str, float]
    by_kind: dict[str, float]
    per_step: dict[str, list[float]]
    method: str
    tail: dict[str, Any]  # {steps, idle_s, method}: how the steps beyond the detail were added
    fraction_low: Share  # attach: 95 % Wilson interval of the sampled wait share
    fraction_high: Share
    main_samples: Count  # attach: main-thread stack samples behind the fraction
    wait_samples: Count  # attach: ... of them inside DataLoader.__next__
    profiler: ProfilerCost


class Recommendation(TypedDict, total=False):
    action: str
    reason: str
    expected_gain: str
    cause: str


class Verdict(TypedDict, total=False):
    bottleneck: str
    severity: str
    summary: str
    cause_share: float
    recommendations: list[Recommendation]
    binds: str  # optional: on shared cores, what binds in the what-if's words ("cores: the model and 2 workers ...")


class Finding(TypedDict, total=False):
    kind: str
    message: str


class Ram(TypedDict, total=False):
    copy_on_read: dict[str, Any] | None
    shm_peak_bytes: Count | None
    processes: list[dict[str, Any]]
    projection: list[dict[str, Any]]
    projection_error: str
    workers_at_once: Count  # the loader's num_workers (analysis/ram.py)
    worker_processes: Count  # worker processes sampled over the run (more: workers restarted each epoch)
    summary: str  # the RAM sentence, workers counted at once (analysis/ram.py)


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


class WhatIf(TypedDict, total=False):
    """Predicted samples/s for other settings, from this run alone (analysis/whatif.py)."""
    measured: dict[str, Any]
    calibration: float
    cores_available: float
    other_load_cores: float
    core_share: float
    model: str
    predictions: list[dict[str, Any]]
    best_workers: int
    inputs: dict[str, Any]
    note: str
    error: str  # the model could not read this record (no predictions then)
    # Optional (absent from records analyzed before the intervals; renderers cope without them):
    binds: str | None  # what binds at the measured setting (a stage name, or "cores")
    binds_words: str | None  # the same in the words the verdict and the ceilings use
    steadiness: dict[str, Any]  # {steady, notices, widen, remeasure}: was the window steady enough to predict from
    interval_method: str  # what each prediction's [low, high] interval is made of
    storage_note: str  # why there are no storage rows (the job read no files, or their bytes were not measured)
    advice_rejected: list[dict[str, str]]  # [{action, because}]: advice the consistency check dropped


class Ceilings(TypedDict, total=False):
    """Samples/s each stage alone could sustain, measured or derived; the lowest sets the pace."""
    samples_per_s: float
    rows: list[dict[str, Any]]
    lowest: str | None
    lowest_words: str  # optional: the shared cores, in the what-if's words, when they set the pace


class ModelAlone(TypedDict, total=False):
    """The model step on a batch already on the device, a few steps after the window (harness/ceiling.py)."""
    steps: Count
    seconds_per_step: Seconds
    batch_size: Count
    cost_s: Seconds
    error: str  # why it was not measured


class MainProcessSamples(TypedDict, total=False):
    """A few samples loaded in the main process after the window: what 0 workers would cost (harness/ceiling.py)."""
    samples: Count
    wall_s: Seconds
    cpu_s: Seconds
    process_cpu_s: Seconds
    torch_threads: Count
    cost_s: Seconds
    error: str


class Record(TypedDict, total=False):
    """The whole run.json object: what ``validate`` checks the top level against."""
    schema_version: Required[int]
    tool: ToolInfo
    created_utc: str
    partial: Required[bool]
    partial_reason: str | None
    job: Job | None
    config: Required[Config]
    environment: Required[Environment]
    compute_device: Required[ComputeDevice]
    window: Required[Window]
    timeline: Required[Timeline]
    samples: Required[Samples]
    dataset: Dataset
    skipped: Skipped
    storage: Storage | None
    memory: Memory | None
    distributed: Distributed | None
    model_alone: ModelAlone | None
    main_process_samples: MainProcessSamples | None
    attach: Attach | None
    torch_traces: TorchTraces | None
    throughput: Throughput
    stages: dict[str, StageStats]
    stall: Stall
    verdict: Verdict
    findings: list[Finding]
    ram: Ram
    whatif: WhatIf
    ceilings: Ceilings


# Table rules (columnar tables: all values are lists of one length; see profiler.record.validate) -----------------
TABLES: tuple[type, ...] = (StepsTable, BatchesTable, SpansTable, EpochsTable)
# Keys of a table whose value is an object of further columns of the table's length (SpansTable.stages).
TABLE_COLUMN_GROUPS: dict[type, tuple[str, ...]] = {SpansTable: ("stages",)}
# Per row, the first column's instant is not after the second's: they bound a duration measured on one clock.
ORDERED: dict[type, tuple[tuple[str, str], ...]] = {
    StepsTable: (("wait_start", "wait_end"), ("h2d_start", "h2d_end")),
    BatchesTable: (("collate_start", "collate_end"),),
    SpansTable: (("start", "end"), ("read_start", "read_end"), ("read_end", "decode_end"),
                 ("decode_end", "augment_end")),
    EpochsTable: (("iter_start", "iter_end"),),
    Window: (("start_s", "end_s"),),
}
# List-valued series that share one time axis (the first key): plotted against each other, so equal length.
SAME_LENGTH: dict[type, tuple[str, ...]] = {
    Samples: ("t_s", "cpu_percent_per_core", "ram_used_bytes", "ram_available_bytes", "page_cache_bytes",
              "disk_read_bytes_per_s", "shm_used_bytes"),
    ProcessSeries: ("t_s", "cpu_percent", "rss_bytes", "pss_bytes", "uss_bytes"),
    GpuSeries: ("t_s", "util_percent", "mem_used_bytes", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s"),
}

RAW_SECTIONS = ("schema_version", "tool", "created_utc", "partial", "partial_reason", "job", "config", "environment",
                "compute_device", "window", "timeline", "samples", "dataset", "skipped", "storage", "memory",
                "distributed", "model_alone", "main_process_samples", "attach",
                "torch_traces")
DERIVED_SECTIONS = ("throughput", "stages", "stall", "verdict", "findings", "ram", "whatif", "ceilings")
