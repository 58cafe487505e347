"""The run record's sections as types: the one statement of what run.json holds (schema_version 2).

Why TypedDicts and not dataclasses per section: the sections are JSON objects at runtime, and analysis and renderers
read them with ``.get`` and ``[...]``; a TypedDict gives every reader a precise type without changing one line of
them or the JSON. The same types drive validation on load (``profiler.record.validate``), and a test checks that
docs/run_json.md names every field declared here, so the doc, the checker and the code cannot drift apart.

Constraints ride along as ``Annotated`` metadata: ``Min(0)`` for durations, counts and bytes, ``Min(-1)`` where -1
means "unknown" or "the main process". ``float`` accepts JSON integers (``0`` is a valid float), never booleans.
Tables are the columnar ones in ``TABLES``: every value is a list of the table's row count.

This module holds the measured raw sections, the whole ``Record`` and the table rules; it re-exports every name of
``scalars`` (the typing helpers and the scalar vocabulary), ``sections_job`` (the job, its loaders, attach, torchrun,
torch.profiler) and ``sections_derived`` (the analysis output), so readers import every section from here alone.
"""
from __future__ import annotations

from typing import Any

# Re-exported: readers import every section, and the vocabulary, from here.
from .scalars import (  # noqa: F401
    Count,
    Counter,
    Id,
    Min,
    NotRequired,
    Required,
    Seconds,
    Share,
    Time,
    TypedDict,
    get_type_hints,
    is_typeddict,
)
from .sections_derived import (  # noqa: F401
    CeilingRow,
    Ceilings,
    Finding,
    MeasuredPoint,
    Prediction,
    ProfilerCost,
    Ram,
    RamProcessRow,
    RamProjectionRow,
    Recommendation,
    RejectedAdvice,
    StageHistogram,
    StageStats,
    Stall,
    Steadiness,
    Throughput,
    Verdict,
    WhatIf,
)
from .sections_job import (  # noqa: F401
    Attach,
    AttachIo,
    AttachProcess,
    AttachSampler,
    AttachTarget,
    AttachThread,
    Collectives,
    Distributed,
    Job,
    LoaderInfo,
    OtherLoaderFigures,
    ReadFrom,
    TorchTrace,
    TorchTraceClock,
    TorchTraces,
)


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


# Declared for record/read.py's typed views only: the sections above keep these as plain objects (their types there
# stay ``dict[str, ...]``), so no builder or validation changes.
class LeanUnchecked(TypedDict, total=False):
    """``timeline.accounting.lean_unchecked`` (instrument/lean_check.py)."""
    stretches: Count
    batches: Count
    off_core_s: Seconds


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


# Declared for record/read.py's typed views only (the section keeps them as plain objects: no validation change).
class StorageWindow(TypedDict, total=False):
    """``storage.window``: the measured window's byte totals of the workers' processes (analysis/io.py)."""
    bytes_requested: Count
    bytes_from_device: Count
    page_cache_hit_fraction: Share | None
    worker_processes_with_io: Count


class StorageThrottle(TypedDict, total=False):
    """``storage.throttle``: the emulated slow storage (storage/spec.py ThrottleSpec, and how it was applied)."""
    bytes_per_s: Count | None
    iops: Count | None
    label: str
    mechanism: str  # "kernel ..." / "cgroup ..." (each limit on its own) or "userspace" (the two costs added)
    maj_min: str | None
    why_not_kernel: str


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
