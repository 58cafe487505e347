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

The views are in views_raw.py, views_derived.py and views_attach.py (``view`` itself: viewing.py), all
re-exported here. ``view`` takes each declared field that the section holds (no per-field lookup code); a field
whose type is another view, or a list of views, is read as one. A test checks every field of a view is declared
in the record's schema (``schema``'s TypedDicts), so no view can invent a field the record does not hold.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .viewing import view  # noqa: F401  (re-exported)
from .views_attach import (  # noqa: F401  (re-exported: readers import every view from here)
    AttachProcessView,
    AttachSamplerView,
    AttachTargetView,
    AttachThreadView,
    AttachView,
    CollectivesView,
    DistributedView,
    TorchTraceClockView,
    TorchTracesView,
    TorchTraceView,
)
from .views_derived import (  # noqa: F401  (re-exported: readers import every view from here)
    CeilingRowView,
    CeilingsView,
    FindingView,
    HistogramView,
    MeasuredPointView,
    PredictionView,
    ProfilerCostView,
    RamProcessRowView,
    RamProjectionRowView,
    RamView,
    RecommendationView,
    RejectedAdviceView,
    StageView,
    StallView,
    SteadinessView,
    ThroughputView,
    VerdictView,
    WhatIfView,
)
from .views_raw import (  # noqa: F401  (re-exported: readers import every view from here)
    AccountingView,
    ConfigView,
    CpuInfoView,
    DatasetView,
    DeviceView,
    EnvironmentView,
    GpuSeriesView,
    JobView,
    LeanUncheckedView,
    LoaderView,
    MainProcessSamplesView,
    MemoryView,
    ModelAloneView,
    OtherLoaderView,
    OutOfMemoryView,
    ProcessSeriesView,
    RamInfoView,
    ResidencyView,
    SamplesView,
    SkippedFileView,
    StorageThrottleView,
    StorageView,
    StorageWindowView,
    TailView,
    ToolView,
    WindowView,
)

if TYPE_CHECKING:  # annotations only: record/__init__ imports nothing from here
    from . import RunRecord


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
