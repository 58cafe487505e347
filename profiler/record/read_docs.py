"""Typed views of the documents analysis builds from several records: the comparison (compare.json), the sweep
(sweep.json) and the merged view of a torchrun job's ranks (ranks.json, or attach --rank-of's).

Why here, in the record package: both the analysis (headline.py's answers) and the renderers read them, and the
layers allow both to import the record package only. The documents stay plain dicts where they are built
(analysis/compare.py, commands/sweep.py + analysis/sweep.py, distributed/merge.py: each gains fields as it is
built, and is saved as JSON); their shape, with one default per field, is stated here, once, and read through
``profiler.record.read.view`` as the record's sections are.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .read import view as typed


# The comparison's parts as the views read them. The comparison stays a plain dict where it is built
# (analysis/compare.py; it is also compare.json): its shape, with one default per field, is stated here.
@dataclass(frozen=True)
class Versus:
    """One run against the baseline on one metric: the ratio or difference, its 95 % interval and the noise test."""
    ratio: float | None = None
    difference: float | None = None
    test: str | None = None  # "ratio" | "difference"; None: no noise test (one number per run)
    ci: list[float] | None = None
    significant: bool | None = None
    changed: bool | None = None  # the verdict metric: did the bottleneck change


@dataclass(frozen=True)
class Metric:
    """One compared figure: a value per run (None: the run has none) and each run against the baseline."""
    key: str = ""
    label: str = ""
    unit: str = ""
    group: str = ""
    values: list[Any] = field(default_factory=list)
    ci_self: list[list[float] | None] = field(default_factory=list)
    vs_baseline: list[dict[str, Any] | None] = field(default_factory=list)
    higher_is_better: bool | None = None
    show: str | None = None  # "difference": shown as the change in points, not as a ratio

    def versus(self, i: int) -> Versus | None:
        """Run ``i`` against the baseline (None: the baseline itself, or nothing to compare)."""
        vs = self.vs_baseline[i] if i < len(self.vs_baseline) else None
        return None if vs is None else typed(Versus, vs)


@dataclass(frozen=True)
class ComparedRun:
    """One compared run: its label and folder, and the settings the Runs table shows."""
    label: str = ""
    name: str = ""
    partial: bool = False
    config: dict[str, Any] = field(default_factory=dict)  # the run's config section (less what is ignored)
    loader: dict[str, Any] = field(default_factory=dict)  # {num_workers, batch_size} of its loader
    target: str | None = None


@dataclass(frozen=True)
class ConfigDiff:
    """One setting that differs from the baseline (``text``: "workers 0 → 2")."""
    key: str | None = None
    text: str | None = None


@dataclass(frozen=True)
class Comparison:
    """The comparison (``profiler.analysis.compare.compare``)."""
    baseline: str = ""
    labels: list[str] = field(default_factory=list)
    runs: list[ComparedRun] = field(default_factory=list)
    metrics: list[Metric] = field(default_factory=list)
    config_diffs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # run label -> its differences
    sentences: dict[str, str] = field(default_factory=dict)  # run label -> its story
    forced: list[str] = field(default_factory=list)  # what differs that --force compared anyway

    def metric(self, key: str) -> Metric | None:
        return next((m for m in self.metrics if m.key == key), None)

    def diffs(self, label: str) -> list[ConfigDiff]:
        """The differences of run ``label`` from the baseline (entries that are not objects are left out)."""
        return [typed(ConfigDiff, d) for d in self.config_diffs.get(label) or [] if isinstance(d, dict)]


def comparison_view(c: dict[str, Any]) -> Comparison:
    """The comparison dict as :class:`Comparison` (absent or null fields: the defaults above)."""
    return typed(Comparison, c)


# The sweep ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SweepPoint:
    """One point of the sweep: its setting's label, what was measured and what the first point predicted for it."""
    index: int = 0
    label: str = ""
    measured_samples_per_s: float | None = None  # None: the point failed or was cut short (``failed`` says why)
    interval: list[float] | None = None  # the measured figure's 95 % interval
    predicted_samples_per_s: float | None = None  # None: not predicted (``predicted_binds`` "unknown": cannot be)
    predicted_interval: list[float] | None = None
    predicted_binds: str | None = None
    error: float | None = None  # (predicted - measured) / measured; None for the baseline or an unpredicted point
    bottleneck: str | None = None  # the point's own verdict
    failed: str | None = None


@dataclass(frozen=True)
class SweepBest:
    """The fastest measured point."""
    index: int | None = None
    label: str | None = None
    samples_per_s: float | None = None


@dataclass(frozen=True)
class SweepView:
    """The sweep: its points and the summary (None where no point was measured or predicted)."""
    points: list[SweepPoint] = field(default_factory=list)
    baseline: int | None = None  # the index of the point the others were predicted from
    best: SweepBest | None = None
    median_abs_error: float | None = None
    coverage: float | None = None  # share of predicted points measured inside their predicted interval
    interrupted: bool = False


def sweep_view(doc: dict[str, Any]) -> SweepView:
    """The sweep document as :class:`SweepView` (absent or null fields: the defaults above)."""
    return typed(SweepView, doc)


# The merged view's fields as the ranks views read them. The view stays a plain dict where it is built (it is also
# ranks.json, and attach --rank-of builds one of its own with the sampled shares instead of step times): its shape,
# with one default per field, is stated here, where the views read it. None: the figure is not there for that rank.
@dataclass(frozen=True)
class RankRow:
    """One rank's row: its figures (per step, ms) and verdict."""
    rank: int = 0
    hostname: str | None = None
    samples_per_s: float | None = None
    steps: int | None = None
    step_ms: float | None = None
    wait_ms: float | None = None
    compute_ms: float | None = None
    collective_ms: float | None = None
    collective_share: float | None = None  # None: no aligned step (or a zero step time)
    stall_fraction: float | None = None
    input_wait_share: float | None = None  # attach --rank-of: the sampled wait share
    stall_share_by_cause: dict[str, float] = field(default_factory=dict)
    bottleneck: str | None = None
    partial: bool = False


@dataclass(frozen=True)
class Straggler:
    """A rank the others wait for (distributed/straggler.py)."""
    rank: int = 0
    cause: str | None = None
    collective_share: float | None = None
    kind: str | None = None  # "input" (its stall's leading cause) | "compute" (slowest to compute)
    waiting_share: float = 0.0  # the waiting ranks' mean share of their step spent in the all-reduce for it
    compute_ms: float | None = None  # kind "compute": its compute per step, net of collective waits
    others_compute_ms: float | None = None


@dataclass(frozen=True)
class SlowHost:
    """A host every one of whose ranks straggles (distributed/straggler.py ``slow_hosts``)."""
    hostname: str | None = None
    ranks: list[int] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Skew:
    """Step-time skew across the ranks (ms): None where no step was aligned."""
    mean: float | None = None
    max: float | None = None


@dataclass(frozen=True)
class Clocks:
    """How the ranks' clocks were put on one axis (distributed/clocks.py)."""
    note: str = ""
    shared: bool = False
    comparable: bool | None = None  # None: a view older than the figure (``shared`` says it then)
    uncertainty_ms: float | None = None
    host_offsets: dict[str, dict[str, Any]] = field(default_factory=dict)  # host -> {offset_ms, uncertainty_ms, ...}
    round_trips: dict[str, dict[str, Any]] = field(default_factory=dict)
    versus_effect: str | None = None


@dataclass(frozen=True)
class RecordPlace:
    """Where a rank's full record is: its node, host and path there."""
    node: int | None = None
    host: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class Collected:
    """How rank 0 had the ranks' summaries (absent: merged from the records in a folder)."""
    via: str | None = None
    reports: int | None = None
    waited_s: float = 0.0
    last_report_to_merged_s: float | None = None


@dataclass(frozen=True)
class RanksView:
    """The merged view of a torchrun job's ranks (profiler/distributed/merge.py) or of attach --rank-of."""
    world_size: int = 0
    present: list[int] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    ranks: list[RankRow] = field(default_factory=list)
    stragglers: list[Straggler] = field(default_factory=list)
    straggler: Straggler | None = None
    summary: str | None = None
    collective_method: str | None = None
    collective_measured: bool = False
    clocks: Clocks = field(default_factory=Clocks)
    collected: Collected | None = None  # None: not collected over the store (report RUN_FOLDER)
    attach_note: str | None = None
    slow_hosts: list[SlowHost] = field(default_factory=list)
    skew_ms: Skew = field(default_factory=Skew)


def ranks_view(v: dict[str, Any]) -> RanksView:
    """The merged view as :class:`RanksView` (absent or null fields: the defaults above)."""
    return typed(RanksView, v)
