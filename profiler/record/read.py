"""Typed reads of an analyzed record: each section a frozen dataclass with its absent fields' defaults stated once.

Why: the sections are JSON objects (TypedDicts in ``schema``) whose fields may be absent — a raw section from an
older record or another kind of job (an attach record's throughput has only ``window_s``), a derived one that an
early return left short. Read field by field, every reader repeated ``float(_d(rec.stall).get("fraction", 0.0) or
0.0)`` with its own idea of the default. Here each field has one type and one default, and a reader writes
``read(rec).stall.fraction``.

Two kinds of default, on purpose:

- a **measured-or-unknown** field is ``X | None = None``: absent means "not measured / does not apply" and a reader
  must say so (``stall.fraction_low`` is an attach record's interval; ``loader.batch_size`` is None under a batch
  sampler);
- a **derived total** is ``X = 0`` / empty: absent means "nothing of it" (no step: 0 samples/s; no cause: empty
  ``by_cause``), which is what analysis writes on its short paths.

``view`` takes each declared field that the section holds (no per-field lookup code); a field whose type is another
view, or a list of views, is read as one. A test checks every field here is declared in the record's schema
(``schema``'s TypedDicts), so this file cannot invent a field the record does not hold.
"""
from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, get_args, get_origin, get_type_hints

if TYPE_CHECKING:  # annotations only: record/__init__ imports nothing from here
    from . import RunRecord

V = TypeVar("V")


# Raw sections (collected) ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConfigView:
    """``config``: the run's options; for a user's own job ``job.loader`` holds what its DataLoader used."""
    model: str | None = None
    mode: str | None = None
    workers: int | None = None
    batch_size: int | None = None
    data: str | None = None
    device: str | None = None
    throttle: str | None = None
    storage: str | None = None
    cache: str | None = None
    script: str | None = None
    pin_memory: bool | None = None
    amp: bool | None = None
    augment: str | None = None
    image_size: int | None = None
    prefetch_factor: int | None = None
    throttle_mechanism: str | None = None


@dataclass(frozen=True)
class LoaderView:
    """``job.loader``: the profiled DataLoader's own settings."""
    num_workers: int | None = None
    batch_size: int | None = None  # None: batch_size=None or a batch sampler (samples per step are measured)
    dataset_class: str | None = None
    created_at: str | None = None
    iterated_at: str | None = None
    pin_memory: bool | None = None
    persistent_workers: bool | None = None
    prefetch_factor: int | None = None
    multiprocessing_context: str | None = None
    chosen: str | None = None
    samples_basis: str | None = None
    batch_bytes: float | None = None  # mean bytes of a batch's tensors; None: none held (or an older record)
    created_in: str | None = None  # the library frame that called DataLoader(...); None: the job's own line did
    recreated: int = 0  # times the job made it afresh for a new epoch


@dataclass(frozen=True)
class OtherLoaderView:
    """``job.other_loader_figures[i]``: a loader the job iterated besides the profiled one."""
    dataset_class: str | None = None
    created_at: str | None = None
    num_workers: int | None = None
    batch_size: int | None = None
    role: str | None = None
    steps: int = 0
    samples: int = 0
    wait_s: float = 0.0


@dataclass(frozen=True)
class JobView:
    """``job``: what was profiled (None in the record: the built-in pipeline of an older record)."""
    kind: str | None = None  # "builtin" | "script" | "module" | "api" | "attach"
    target: str | None = None
    then: str | None = None
    ended: str | None = None
    loader: LoaderView = field(default_factory=LoaderView)
    other_loaders: int = 0
    other_loader_figures: list[OtherLoaderView] = field(default_factory=list)

    @property
    def own(self) -> bool:
        """A user's own code (script, module, ``profiler.profile``), not the built-in pipeline or an attach."""
        return self.kind in ("script", "module", "api")

    @property
    def builtin(self) -> bool:
        """The built-in image pipeline (``kind`` absent in records older than the job section)."""
        return self.kind in (None, "builtin")


@dataclass(frozen=True)
class DeviceView:
    """``compute_device``: what computes ("cpu" or "cuda") and its name."""
    type: str | None = None
    name: str | None = None
    index: int | None = None
    timing: str | None = None


@dataclass(frozen=True)
class WindowView:
    """``window``: the measured window (warm-up excluded)."""
    seconds: float = 0.0
    steps: int = 0
    samples: int = 0
    warmup_steps: int = 0
    start_s: float = 0.0
    end_s: float = 0.0


# Derived sections (analysis output) ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ThroughputView:
    samples_per_s: float = 0.0
    steps_per_s: float = 0.0
    samples: int = 0
    steps: int = 0
    window_s: float = 0.0


@dataclass(frozen=True)
class ProfilerCostView:
    """``stall.profiler``: the profiler's own main-thread time in the measured steps (``measured`` False: a record
    without the profiler_wait column, so nothing to say)."""
    seconds: float = 0.0
    rest_s: float = 0.0
    share_of_window: float = 0.0
    measured: bool = False


@dataclass(frozen=True)
class HistogramView:
    """``stages[name].histogram``: the observations kept in detail on log-spaced bins (what latency.png draws)."""
    edges_ms: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    zeros: int = 0


@dataclass(frozen=True)
class StageView:
    """``stages[name]``: one stage's statistics over the window. The latencies are None where the stage has none
    (an attach record's sampled stage has shares instead); ``histogram`` None: not kept."""
    per: str | None = None  # "sample" | "batch" | "step" | "epoch"
    count: int = 0
    total_s: float = 0.0
    mean_ms: float | None = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    bytes: int | None = None
    percentiles_over: str | None = None
    histogram: HistogramView | None = None
    share: float | None = None  # attach: the stage's share of its side's sampled time, and its 95 % interval
    share_low: float | None = None
    share_high: float | None = None
    basis: str | None = None


@dataclass(frozen=True)
class FindingView:
    """``findings[i]``: one observation; a finding that is not an object reads as its text (``message``)."""
    kind: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class StallView:
    """``stall``: the compute device's wait for input, net of the profiler's own time, and its split."""
    seconds: float = 0.0
    fraction: float = 0.0
    by_cause: dict[str, float] = field(default_factory=dict)
    share_by_cause: dict[str, float] = field(default_factory=dict)
    by_stage: dict[str, float] = field(default_factory=dict)
    by_kind: dict[str, float] = field(default_factory=dict)
    method: str | None = None
    fraction_low: float | None = None  # attach: the sampled share's 95 % interval
    fraction_high: float | None = None
    main_samples: int | None = None  # attach
    wait_samples: int | None = None  # attach
    per_step: dict[str, list[float]] = field(default_factory=dict)  # cause -> idle seconds per measured step
    profiler: ProfilerCostView = field(default_factory=ProfilerCostView)


@dataclass(frozen=True)
class RecommendationView:
    action: str = ""
    reason: str = ""
    expected_gain: str = ""
    cause: str = ""


@dataclass(frozen=True)
class VerdictView:
    """``verdict``: what binds, how badly, the summary sentence and the advice."""
    bottleneck: str | None = None  # a cause name, "compute", "memory" or "none"
    severity: str = ""
    summary: str = ""
    cause_share: float = 0.0
    recommendations: list[RecommendationView] = field(default_factory=list)
    binds: str | None = None  # on shared cores: what binds, in the what-if's words


@dataclass(frozen=True)
class RejectedAdviceView:
    """``whatif.advice_rejected[i]``: a recommendation the consistency check dropped, and why."""
    action: str = ""
    because: str = ""


@dataclass(frozen=True)
class PredictionView:
    """``whatif.predictions[i]``: one setting's predicted samples/s (None: this run cannot predict it)."""
    setting: str = ""
    kind: str | None = None
    samples_per_s: float | None = None
    interval: list[float] | None = None  # [low, high], 95 %; None: none (an older record, or not predicted)
    change: float | None = None
    binds: str | None = None
    binds_words: str | None = None
    assumption: str = ""
    measured: bool = False  # the measured setting's own row
    change_low: float | None = None  # the interval's low end as a change: the claim
    workers: int | None = None  # a workers row's count (None: another kind of row)
    predictable: bool | None = None


@dataclass(frozen=True)
class MeasuredPointView:
    """``whatif.measured``: the measured setting, the predictions' baseline."""
    samples_per_s: float | None = None
    workers: int | None = None
    interval: list[float] | None = None


@dataclass(frozen=True)
class SteadinessView:
    """``whatif.steadiness``: absent in records analyzed before it (nothing said about the window then)."""
    steady: bool | None = None
    notices: list[str] = field(default_factory=list)
    remeasure: str | None = None


@dataclass(frozen=True)
class WhatIfView:
    """``whatif``: predicted samples/s at other settings (rows stay plain dicts: their columns vary by kind)."""
    predictions: list[dict[str, Any]] = field(default_factory=list)
    advice_rejected: list[dict[str, str]] = field(default_factory=list)
    best_workers: int | None = None
    binds: str | None = None
    binds_words: str | None = None
    note: str | None = None
    error: str | None = None
    model: str | None = None
    interval_method: str | None = None
    storage_note: str | None = None
    core_share: float | None = None
    cores_available: float | None = None
    other_load_cores: float | None = None
    measured: MeasuredPointView = field(default_factory=MeasuredPointView)
    steadiness: SteadinessView = field(default_factory=SteadinessView)
    inputs: dict[str, Any] = field(default_factory=dict)  # the measured rates the model predicts from

    @property
    def prediction_rows(self) -> list[PredictionView]:
        """``predictions`` as views (the field stays the rows as written: their extra columns vary by kind)."""
        return [view(PredictionView, p) for p in self.predictions]

    @property
    def rejected(self) -> list[RejectedAdviceView]:
        """``advice_rejected`` as views."""
        return [view(RejectedAdviceView, a) for a in self.advice_rejected]


@dataclass(frozen=True)
class CeilingRowView:
    """``ceilings.rows[i]``: samples/s one stage alone could sustain (analysis writes only rows it could rate)."""
    stage: str = ""
    samples_per_s: float | None = None
    basis: str | None = None  # "measured" | "derived"
    how: str = ""
    words: str | None = None  # the cores row: what shares them, in the what-if's words


@dataclass(frozen=True)
class CeilingsView:
    """``ceilings``: samples/s each stage alone could sustain; ``lowest`` sets the pace."""
    samples_per_s: float | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    lowest: str | None = None
    lowest_words: str | None = None

    @property
    def row_views(self) -> list[CeilingRowView]:
        """``rows`` as views."""
        return [view(CeilingRowView, r) for r in self.rows]


@dataclass(frozen=True)
class RamProcessRowView:
    """``ram.processes[i]``: one sampled process's peaks (None: never read)."""
    pid: int | None = None
    role: str | None = None
    worker_id: int | None = None
    peak_rss_bytes: int | None = None
    peak_pss_bytes: int | None = None
    peak_uss_bytes: int | None = None


@dataclass(frozen=True)
class RamProjectionRowView:
    """``ram.projection[i]``: the host RAM projected at a worker count (``fits`` None: no RAM figure to fit in)."""
    workers: int | None = None
    projected_bytes: int | None = None
    available_bytes: int | None = None
    fits: bool | None = None
    warning: str | None = None


@dataclass(frozen=True)
class RamView:
    summary: str | None = None
    workers_at_once: int | None = None
    worker_processes: int | None = None
    shm_peak_bytes: int | None = None
    copy_on_read: dict[str, Any] | None = None
    processes: list[dict[str, Any]] = field(default_factory=list)
    projection: list[dict[str, Any]] = field(default_factory=list)
    projection_error: str | None = None

    @property
    def process_rows(self) -> list[RamProcessRowView]:
        """``processes`` as views (the field stays the rows as written)."""
        return [view(RamProcessRowView, p) for p in self.processes]

    @property
    def projection_rows(self) -> list[RamProjectionRowView]:
        """``projection`` as views."""
        return [view(RamProjectionRowView, r) for r in self.projection]


# Other raw sections ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolView:
    name: str | None = None
    version: str | None = None


@dataclass(frozen=True)
class StorageWindowView:
    """``storage.window``: the measured window's bytes, the workers' processes' counters (analysis/io.py)."""
    bytes_requested: int = 0
    bytes_from_device: int = 0
    page_cache_hit_fraction: float | None = None
    worker_processes_with_io: int = 0


@dataclass(frozen=True)
class StorageThrottleView:
    """``storage.throttle`` read by field (``StorageView.throttle_spec``); the limits None where not set."""
    bytes_per_s: int | None = None
    iops: int | None = None
    label: str | None = None
    mechanism: str | None = None


@dataclass(frozen=True)
class ResidencyView:
    """``storage.residency_start`` / ``_end``: the dataset's share in the page cache (``fraction`` None: unknown)."""
    files_total: int = 0
    files_checked: int = 0
    bytes_total: int = 0
    bytes_checked: int = 0
    bytes_resident: int = 0
    fraction: float | None = None
    sampled: bool | None = None


@dataclass(frozen=True)
class StorageView:
    """``storage``: what the dataset's files came from. Absent section: no storage facts (an attach record)."""
    summary: str | None = None  # the one sentence about storage bytes (analysis/io.py)
    page_cache_hit_fraction: float | None = None
    bytes_requested: int | None = None  # None: not counted (no /proc io reading of the workers)
    bytes_from_device: int | None = None
    cache_mode: str | None = None
    io_source: str | None = None
    learned_from: str | None = None
    throttle: dict[str, Any] | None = None  # None: not throttled (the spec as written: analysis hands it on)
    window: StorageWindowView | None = None  # the measured window's byte totals (analysis/io.py); None: not counted
    residency_start: ResidencyView | None = None  # None: the page-cache residency was not checked

    @property
    def throttle_spec(self) -> StorageThrottleView | None:
        """``throttle`` read by field (None: not throttled)."""
        return view(StorageThrottleView, self.throttle) if isinstance(self.throttle, Mapping) else None


@dataclass(frozen=True)
class SkippedFileView:
    """``skipped.files[i]``: a file the dataset could not read or decode, and why."""
    path: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class OutOfMemoryView:
    step: int | None = None
    message: str | None = None


@dataclass(frozen=True)
class MemoryView:
    """``memory``: the compute device's memory (None: not measured, a CPU run)."""
    device_peak_bytes: int | None = None
    device_total_bytes: int | None = None
    oom: OutOfMemoryView | None = None  # None: the run did not run out of memory
    oom_recommendations: list[Any] = field(default_factory=list)
    breakdown: dict[str, Any] | None = None  # None: no breakdown of the device memory was made


@dataclass(frozen=True)
class ProcessSeriesView:
    """``samples.processes[i]``: one sampled process's series (a None in a series: that sample was not read)."""
    pid: int | None = None
    role: str | None = None  # main | worker | child
    worker_id: int | None = None
    t_s: list[float] = field(default_factory=list)
    cpu_percent: list[float | None] = field(default_factory=list)
    rss_bytes: list[int | None] = field(default_factory=list)
    pss_bytes: list[int | None] = field(default_factory=list)
    uss_bytes: list[int | None] = field(default_factory=list)
    io: dict[str, int] | None = None  # {rchar, read_bytes}; None: not read
    alive_at_end: bool | None = None


@dataclass(frozen=True)
class GpuSeriesView:
    """``samples.gpu``: the GPU's series; the PCIe ones None where NVML gave none."""
    index: int | None = None
    name: str | None = None
    t_s: list[float] = field(default_factory=list)
    util_percent: list[float | None] = field(default_factory=list)
    mem_used_bytes: list[int | None] = field(default_factory=list)
    mem_total_bytes: int | None = None
    pcie_rx_bytes_per_s: list[float | None] | None = None
    pcie_tx_bytes_per_s: list[float | None] | None = None


@dataclass(frozen=True)
class SamplesView:
    """``samples``: the background sampler's series (~10 Hz), sharing ``t_s``; a series absent reads empty."""
    interval_s: float | None = None
    t_s: list[float] = field(default_factory=list)
    cpu_percent_per_core: list[list[float]] = field(default_factory=list)
    ram_total_bytes: int | None = None
    ram_used_bytes: list[int | None] = field(default_factory=list)
    ram_available_bytes: list[int | None] = field(default_factory=list)
    page_cache_bytes: list[int | None] = field(default_factory=list)
    shm_used_bytes: list[int | None] = field(default_factory=list)
    disk_read_bytes_per_s: list[float | None] = field(default_factory=list)
    disk: str | None = None
    processes: list[ProcessSeriesView] = field(default_factory=list)
    gpu: GpuSeriesView | None = None  # None: no GPU was sampled


@dataclass(frozen=True)
class TailView:
    """``timeline.tail``: exact totals of the measured steps beyond the detail cap (absent: none beyond it)."""
    steps: int = 0
    samples: int = 0
    wait_s: float = 0.0
    idle_s: float = 0.0
    h2d_s: float = 0.0
    compute_s: float = 0.0
    main_runq_s: float = 0.0
    profiler_wait_s: float = 0.0
    profiler_rest_s: float = 0.0
    detail_steps: int = 0
    hist_us_log2: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class LeanUncheckedView:
    """``timeline.accounting.lean_unchecked``: workers = 0 lean stretches whose check failed (absent: none)."""
    stretches: int = 0
    batches: int = 0
    off_core_s: float = 0.0


@dataclass(frozen=True)
class AccountingView:
    """``timeline.accounting``: which per-thread clocks the spans could use (None: not said, an older record)."""
    cpu_clock: str | None = None
    runqueue: bool | None = None
    thread_io: bool | None = None
    absent: dict[str, str] = field(default_factory=dict)
    lean_unchecked: LeanUncheckedView = field(default_factory=LeanUncheckedView)


@dataclass(frozen=True)
class CpuInfoView:
    model: str | None = None
    logical_cores: int | None = None
    physical_cores: int | None = None
    affinity_cores: int | None = None
    cgroup_cpu_quota: float | None = None
    usable_cores: float | None = None
    usable_cores_int: int | None = None


@dataclass(frozen=True)
class RamInfoView:
    total_bytes: int | None = None
    available_bytes: int | None = None
    cgroup_limit_bytes: int | None = None


@dataclass(frozen=True)
class EnvironmentView:
    """``environment``: the record's machine (never the analyzing one)."""
    cpu: CpuInfoView = field(default_factory=CpuInfoView)
    ram: RamInfoView = field(default_factory=RamInfoView)
    packages: dict[str, str | None] = field(default_factory=dict)
    torch: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelAloneView:
    """``model_alone``: the model step timed alone after the window (None: not measured; ``error`` says why)."""
    steps: int | None = None
    seconds_per_step: float | None = None
    batch_size: int | None = None
    cost_s: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class MainProcessSamplesView:
    """``main_process_samples``: a few samples loaded in the main process after the window (None: not measured)."""
    samples: int | None = None
    wall_s: float | None = None
    cpu_s: float | None = None
    process_cpu_s: float | None = None
    torch_threads: int | None = None
    cost_s: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class DatasetView:
    """``dataset``: the built-in pipeline's files (absent for a user's job: 0 files, 0 bytes)."""
    root: str | None = None
    files: int = 0
    classes: int = 0
    layout: str | None = None
    total_bytes: int = 0


# The attach section (raw: what `attach PID` sampled) -------------------------------------------------------------
@dataclass(frozen=True)
class AttachThreadView:
    """``attach.threads[i]``: one sampled thread's stack-sample counts and kernel clocks (clocks None: not read)."""
    pid: int = 0
    tid: int = 0
    name: str | None = None
    role: str | None = None  # "main" | "worker" | "worker_feeder" | "pin_memory" | "other"
    worker: int = -1  # workers in start order; -1: the main process (or not said)
    samples: int = 0
    stages: dict[str, int] = field(default_factory=dict)
    wait_stages: dict[str, int] = field(default_factory=dict)
    wall_s: float | None = None
    on_cpu_s: float | None = None
    runq_s: float | None = None
    states: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class AttachProcessView:
    pid: int = 0
    role: str | None = None  # "main" | "worker" | "child" | "forkserver"


@dataclass(frozen=True)
class AttachSamplerView:
    name: str | None = None
    rate_hz: int | None = None
    samples: int | None = None
    errors: int = 0  # samples it could not read (absent: none said)


@dataclass(frozen=True)
class AttachTargetView:
    """``attach.target``: the sampled main process (``pid`` is required in the record: None only without one)."""
    pid: int | None = None
    given_pid: int | None = None


@dataclass(frozen=True)
class AttachView:
    """``attach``: the sampled window (``view(AttachView, rec.attach)``; not in :class:`Reading`, attach records
    only)."""
    seconds: float | None = None
    sampler: AttachSamplerView = field(default_factory=AttachSamplerView)
    target: AttachTargetView = field(default_factory=AttachTargetView)
    stopped_by: str | None = None  # "duration" | "interrupted" | "target exited"
    threads: list[AttachThreadView] = field(default_factory=list)
    processes: list[AttachProcessView] = field(default_factory=list)
    workers_at_once: int | None = None  # None: a record older than the figure (count the workers listed)
    cpu_util: float | None = None  # None: the machine's CPU share was not read
    absent: dict[str, str] = field(default_factory=dict)


# Torchrun (raw: one rank's facts; absent for a single process) ---------------------------------------------------
@dataclass(frozen=True)
class CollectivesView:
    """``distributed.collectives``: the DDP communication hook's all-reduce spans (empty: none measured)."""
    method: str | None = None
    kind: str | None = None
    start: list[float] = field(default_factory=list)
    end: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class DistributedView:
    """``distributed``: one rank of a torchrun job (``view(DistributedView, rec.distributed)``; all None: a single
    process)."""
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None  # "gloo" | "nccl" | None: not said (a user's script's own process group)
    collectives: CollectivesView = field(default_factory=CollectivesView)
    run_folder: str | None = None  # the job's folder above the rank's (None: not said)


@dataclass(frozen=True)
class TorchTraceClockView:
    """``torch_traces.clock``: the clock pair that places the record's times on kineto's (None: not read)."""
    ours: str | None = None
    theirs: str | None = None
    t0_monotonic_ns: int | None = None
    realtime_minus_monotonic_us: int | None = None
    drift_ns: int | None = None


@dataclass(frozen=True)
class TorchTraceView:
    """``torch_traces.traces[i]``: one Chrome trace torch.profiler exported while the job was profiled."""
    path: str | None = None
    by: str | None = None  # "job" | "profiler"
    exported_s: float | None = None


@dataclass(frozen=True)
class TorchTracesView:
    """``torch_traces`` (``view(TorchTracesView, rec.torch_traces)``): none listed, no clock: nothing to merge."""
    traces: list[TorchTraceView] = field(default_factory=list)
    clock: TorchTraceClockView | None = None
    error: str | None = None


@dataclass(frozen=True)
class Reading:
    """The record's sections, typed: what every analysis step after the first and every renderer read."""
    config: ConfigView
    job: JobView
    device: DeviceView
    window: WindowView
    throughput: ThroughputView
    stall: StallView
    verdict: VerdictView
    whatif: WhatIfView
    ceilings: CeilingsView
    ram: RamView
    stages: dict[str, StageView] = field(default_factory=dict)  # the stages whose statistics are an object
    findings: list[FindingView] = field(default_factory=list)
    storage: StorageView = field(default_factory=StorageView)
    memory: MemoryView = field(default_factory=MemoryView)
    tool: ToolView = field(default_factory=ToolView)
    environment: EnvironmentView = field(default_factory=EnvironmentView)
    dataset: DatasetView = field(default_factory=DatasetView)
    accounting: AccountingView = field(default_factory=AccountingView)  # timeline.accounting
    tail: TailView | None = None  # timeline.tail; None: no measured step beyond the detail cap

    @property
    def workers(self) -> int | None:
        """The profiled loader's worker count: its own (a user's job), else the built-in's configured one."""
        if self.job.loader.num_workers is not None:
            return self.job.loader.num_workers
        return self.config.workers


@functools.lru_cache(maxsize=None)
def _fields(cls: type) -> tuple[tuple[str, type | None, bool], ...]:
    """Each field's name, the view type it holds (or None), and whether it is a list of that view. A field typed
    ``SomeView | None`` holds that view where the section has an object there, else None (absent: not recorded)."""
    hints = get_type_hints(cls)
    out: list[tuple[str, type | None, bool]] = []
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        args = get_args(t)
        if isinstance(t, types.UnionType) and len(args) == 2 and type(None) in args:
            t = next(a for a in args if a is not type(None))
            args = get_args(t)
        if isinstance(t, type) and dataclasses.is_dataclass(t):
            out.append((f.name, t, False))
        elif get_origin(t) is list and args and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
            out.append((f.name, args[0], True))
        else:
            out.append((f.name, None, False))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _optional(cls: type, name: str) -> bool:
    """Whether the field's default is None (a ``SomeView | None`` field: a non-object there reads as None)."""
    return next(f for f in dataclasses.fields(cls) if f.name == name).default is None


def view(cls: type[V], section: object) -> V:
    """``section`` (a record section, or None / anything else: all defaults) as the view ``cls``. A field holding
    null takes the view's default, as an absent one does (a nullable field's default is None anyway)."""
    if not isinstance(section, Mapping):
        return cls()
    kw: dict[str, Any] = {}
    for name, sub, many in _fields(cls):  # type: ignore[arg-type]  # a class is hashable
        if name not in section or section[name] is None:
            continue
        v = section[name]
        if sub is None:
            kw[name] = v
        elif many:
            kw[name] = [view(sub, x) for x in v] if isinstance(v, list) else []
        elif isinstance(v, Mapping) or not _optional(cls, name):  # type: ignore[arg-type]
            kw[name] = view(sub, v)
    return cls(**kw)


def _d(x: object) -> Mapping[str, Any]:
    return x if isinstance(x, Mapping) else {}


def read(rec: RunRecord) -> Reading:
    """The record's sections as views (a few µs: built afresh, so a section changed since reads as it is now)."""
    return Reading(config=view(ConfigView, rec.config), job=view(JobView, rec.job),
                   device=view(DeviceView, rec.compute_device), window=view(WindowView, rec.window),
                   throughput=view(ThroughputView, rec.throughput), stall=view(StallView, rec.stall),
                   verdict=view(VerdictView, rec.verdict), whatif=view(WhatIfView, rec.whatif),
                   ceilings=view(CeilingsView, rec.ceilings), ram=view(RamView, rec.ram),
                   stages={str(k): view(StageView, v) for k, v in (rec.stages or {}).items()
                           if isinstance(v, Mapping)},
                   findings=[view(FindingView, f) if isinstance(f, Mapping) else FindingView(message=str(f))
                             for f in rec.findings or []],
                   storage=view(StorageView, rec.storage), memory=view(MemoryView, rec.memory),
                   tool=view(ToolView, rec.tool), environment=view(EnvironmentView, rec.environment),
                   dataset=view(DatasetView, rec.dataset),
                   accounting=view(AccountingView, _d(rec.timeline).get("accounting")),
                   tail=view(TailView, _d(rec.timeline).get("tail")) if _d(rec.timeline).get("tail") else None)


def samples(rec: RunRecord) -> SamplesView:
    """The sampler's series as a view (not in :class:`Reading`: only the utilisation plot and the trace read them)."""
    return view(SamplesView, rec.samples)
