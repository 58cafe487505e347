"""The record's raw sections as views (profiler/record/read.py says why and how): what collection wrote — the
config, the job and its loader, the device, the window, storage, memory, the samplers' series, the timeline's
totals, the environment, the dataset.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .viewing import view


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
