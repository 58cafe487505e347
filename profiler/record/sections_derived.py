"""The record's derived sections: what the analysis writes (throughput, stages, stall, verdict, findings, RAM,
what-if and ceilings). They are never trusted on load, always recomputed.

Split from ``profiler.record.schema`` (which re-exports every name here, and which readers import from) to keep
each module short. The scalar vocabulary (``Count``, ``Seconds``, ...) is ``profiler.record.scalars``.
"""
from __future__ import annotations

from typing import Any

from .scalars import Count, Seconds, Share, TypedDict


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


# The rows of ``whatif`` and ``ceilings``, declared for their typed reads (record/read.py). The sections keep them as
# plain objects (``list[dict[str, Any]]``): analysis builds them as dicts whose extra columns vary by kind (a workers
# row has ``workers``, a storage row ``storage``...), and validation keeps unknown keys anyway.
class RejectedAdvice(TypedDict, total=False):
    """One ``whatif.advice_rejected`` row: a recommendation the consistency check dropped, and why."""
    action: str
    because: str


class Prediction(TypedDict, total=False):
    """One ``whatif.predictions`` row: a setting and the samples/s predicted for it."""
    kind: str  # "workers" | "cache" | "storage" | "model" | "pin_memory"
    setting: str
    samples_per_s: float | None  # null: this run cannot predict it (``predictable`` false, ``binds`` "unknown")
    interval: list[float] | None  # [low, high], 95 %
    change: float | None  # relative to the measured samples/s
    change_low: float | None
    binds: str
    binds_words: str
    assumption: str
    measured: bool  # the row of the measured setting itself
    predictable: bool
    workers: Count  # a workers row: its worker count
    speedup: float  # a model row: how many times faster the model is assumed
    storage: str  # a storage row: the --storage preset's name


class MeasuredPoint(TypedDict, total=False):
    """``whatif.measured``: the measured setting's samples/s, the predictions' baseline."""
    samples_per_s: float
    workers: Count
    interval: list[float]


class Steadiness(TypedDict, total=False):
    """``whatif.steadiness``: was the window steady enough to predict from."""
    steady: bool
    notices: list[str]
    widen: float
    remeasure: str


class CeilingRow(TypedDict, total=False):
    """One ``ceilings.rows`` row: samples/s one stage alone could sustain."""
    stage: str
    samples_per_s: float
    basis: str  # "measured" | "derived"
    how: str
    words: str  # the cores row: what shares them, in the what-if's words
    cores: float


class RamProcessRow(TypedDict, total=False):
    """One ``ram.processes`` row: a sampled process's peak memory (analysis/ram.py; a peak null: never read)."""
    pid: Count | None
    role: str | None  # "main" | "worker" | "child"
    worker_id: int | None
    peak_rss_bytes: Count | None
    peak_pss_bytes: Count | None
    peak_uss_bytes: Count | None


class RamProjectionRow(TypedDict, total=False):
    """One ``ram.projection`` row: the host RAM projected at a worker count (analysis/ram.py)."""
    workers: Count
    workers_now: Count | None
    projected_bytes: Count
    projected_worst_bytes: Count
    main_bytes: Count
    per_worker_bytes: Count
    shared_bytes: Count
    available_bytes: Count | None  # null: the RAM available was not read
    fits: bool | None  # null: unknown (no RAM figure)
    headroom_bytes: int | None
    basis: str  # "uss" | "pss" | "rss" | "assumed"
    warning: str | None


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
