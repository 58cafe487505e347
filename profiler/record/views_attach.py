"""The record's attach and torchrun sections as views (profiler/record/read.py says why and how): what `attach
PID` sampled, one rank's facts of a torchrun job, and the torch.profiler traces to merge.
"""
from __future__ import annotations

from dataclasses import dataclass, field


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
