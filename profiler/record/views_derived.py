"""The record's derived sections as views (profiler/record/read.py says why and how): what analysis wrote —
throughput, stages, stall, verdict, findings, what-if, ceilings, RAM.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .viewing import view


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
    speedup: float | None = None  # a model row's assumed speed-up (None: another kind of row)
    storage: str | None = None  # a storage row's --storage preset (None: another kind of row)


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
