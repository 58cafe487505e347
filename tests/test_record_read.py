"""The record's typed reads (profiler/record/read.py): every field a view declares is one the record's schema declares
(so a view cannot invent a field), an absent or null field reads as the view's stated default, and a real analyzed
record reads back the values its sections hold."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from profiler.record import RunRecord, schema
from profiler.record.read import (
    AccountingView,
    AttachProcessView,
    AttachSamplerView,
    AttachTargetView,
    AttachThreadView,
    AttachView,
    CeilingRowView,
    CeilingsView,
    CollectivesView,
    ConfigView,
    CpuInfoView,
    DatasetView,
    DeviceView,
    DistributedView,
    EnvironmentView,
    FindingView,
    GpuSeriesView,
    HistogramView,
    JobView,
    LeanUncheckedView,
    LoaderView,
    MainProcessSamplesView,
    MeasuredPointView,
    MemoryView,
    ModelAloneView,
    OtherLoaderView,
    OutOfMemoryView,
    PredictionView,
    ProcessSeriesView,
    ProfilerCostView,
    RamInfoView,
    RamProcessRowView,
    RamProjectionRowView,
    RamView,
    RecommendationView,
    RejectedAdviceView,
    ResidencyView,
    SamplesView,
    SkippedFileView,
    StageView,
    StallView,
    SteadinessView,
    StorageThrottleView,
    StorageView,
    StorageWindowView,
    TailView,
    ThroughputView,
    ToolView,
    TorchTraceClockView,
    TorchTracesView,
    TorchTraceView,
    VerdictView,
    WhatIfView,
    WindowView,
    read,
    view,
)

VIEWS: list[tuple[type, type]] = [
    (PredictionView, schema.Prediction), (RejectedAdviceView, schema.RejectedAdvice),
    (MeasuredPointView, schema.MeasuredPoint),
    (SteadinessView, schema.Steadiness), (CeilingRowView, schema.CeilingRow), (AttachTargetView, schema.AttachTarget),
    (CollectivesView, schema.Collectives), (DistributedView, schema.Distributed),
    (ConfigView, schema.Config), (LoaderView, schema.LoaderInfo), (JobView, schema.Job),
    (DeviceView, schema.ComputeDevice), (WindowView, schema.Window), (ThroughputView, schema.Throughput),
    (StallView, schema.Stall), (RecommendationView, schema.Recommendation), (VerdictView, schema.Verdict),
    (WhatIfView, schema.WhatIf), (CeilingsView, schema.Ceilings), (RamView, schema.Ram),
    (AttachView, schema.Attach), (AttachThreadView, schema.AttachThread), (AttachProcessView, schema.AttachProcess),
    (AttachSamplerView, schema.AttachSampler),
    (ProfilerCostView, schema.ProfilerCost), (HistogramView, schema.StageHistogram), (StageView, schema.StageStats),
    (FindingView, schema.Finding), (ToolView, schema.ToolInfo), (StorageView, schema.Storage),
    (OutOfMemoryView, schema.OutOfMemory), (MemoryView, schema.Memory), (ProcessSeriesView, schema.ProcessSeries),
    (GpuSeriesView, schema.GpuSeries), (SamplesView, schema.Samples), (SkippedFileView, schema.SkippedFile),
    (OtherLoaderView, schema.OtherLoaderFigures),
    (TorchTraceClockView, schema.TorchTraceClock), (TorchTraceView, schema.TorchTrace),
    (TorchTracesView, schema.TorchTraces),
    (RamProcessRowView, schema.RamProcessRow), (RamProjectionRowView, schema.RamProjectionRow),
    (TailView, schema.TailTotals), (AccountingView, schema.Accounting), (CpuInfoView, schema.CpuInfo),
    (RamInfoView, schema.RamInfo), (EnvironmentView, schema.Environment), (DatasetView, schema.Dataset),
    (ResidencyView, schema.Residency),
    (ModelAloneView, schema.ModelAlone), (MainProcessSamplesView, schema.MainProcessSamples),
    (LeanUncheckedView, schema.LeanUnchecked), (StorageWindowView, schema.StorageWindow),
    (StorageThrottleView, schema.StorageThrottle),
]


@pytest.mark.parametrize("view_cls, section", VIEWS, ids=lambda c: c.__name__)
def test_every_view_field_is_a_field_of_its_schema_section(view_cls: type, section: type) -> None:
    declared = set(schema.get_type_hints(section))
    fields = {f.name for f in dataclasses.fields(view_cls)}
    assert fields <= declared, sorted(fields - declared)


def test_absent_and_null_fields_read_as_the_stated_defaults() -> None:
    st = view(StallView, {"fraction": 0.25, "fraction_low": None, "by_cause": {"io": 1.5}})
    assert (st.fraction, st.seconds, st.fraction_low, st.by_cause, st.by_stage) == (0.25, 0.0, None, {"io": 1.5}, {})
    assert view(ThroughputView, {"window_s": 2.0}) == ThroughputView(window_s=2.0)  # an attach record's throughput
    assert view(JobView, None) == JobView() and JobView().builtin and not JobView().own
    j = view(JobView, {"kind": "script", "loader": {"num_workers": 3, "batch_size": None}})
    assert j.own and j.loader == LoaderView(num_workers=3)
    v = view(VerdictView, {"bottleneck": "io", "recommendations": [{"action": "a"}, {"action": "b", "cause": "io"}]})
    assert [r.action for r in v.recommendations] == ["a", "b"] and v.recommendations[1].cause == "io"
    assert view(VerdictView, "not a dict") == VerdictView()


def test_a_real_record_reads_back_what_its_sections_hold(small_jpegs: Path, tmp_path: Path) -> None:
    from profiler.cli import main

    out = tmp_path / "r"
    assert main(["run", "--data", str(small_jpegs), "--steps", "6", "--warmup", "1", "--workers", "0",
                 "--batch-size", "8", "--out", str(out), "--no-plots"]) == 0
    d: dict[str, Any] = json.loads((out / "run.json").read_text())
    rec = RunRecord.from_dict(d)
    from profiler.analysis import analyze
    analyze(rec)
    r = read(rec)
    assert r.stall.fraction == rec.stall["fraction"] and r.verdict.bottleneck == rec.verdict["bottleneck"]
    assert r.throughput.samples_per_s == rec.throughput["samples_per_s"] > 0
    assert r.window.steps == rec.window["steps"] == 6 and r.device.type == "cpu"
    assert r.workers == 0 and r.job.builtin and r.config.batch_size == 8
    assert [x.action for x in r.verdict.recommendations] == [x["action"] for x in rec.verdict["recommendations"]]


def test_optional_sub_views_read_as_none_unless_an_object() -> None:
    m = view(MemoryView, {"device_peak_bytes": 5, "oom": None})
    assert m.oom is None and m.device_peak_bytes == 5 and m.device_total_bytes is None
    assert view(MemoryView, {"oom": {"step": 3}}).oom == OutOfMemoryView(step=3)
    s = view(SamplesView, {"gpu": "damaged", "processes": [{"pid": 7, "role": "main"}]})
    assert s.gpu is None and s.processes == [ProcessSeriesView(pid=7, role="main")] and s.t_s == []
    assert view(StallView, {"profiler": {"measured": True, "seconds": 0.5}}).profiler == ProfilerCostView(0.5, 0.0,
                                                                                                            0.0, True)
    st = view(StageView, {"count": 4, "mean_ms": 1.5, "histogram": {"edges_ms": [1.0, 2.0], "counts": [4]}})
    assert st.histogram == HistogramView([1.0, 2.0], [4], 0) and st.p99_ms is None and st.per is None


def test_rows_of_whatif_and_ceilings_read_as_views() -> None:
    w = view(WhatIfView, {"predictions": [{"setting": "workers=2", "samples_per_s": None, "binds": "unknown"},
                                          {"setting": "this", "measured": True, "interval": [1.0, 2.0]}],
                          "measured": {"samples_per_s": 1.5}})
    rows = w.prediction_rows
    assert [(p.setting, p.samples_per_s, p.measured, p.interval) for p in rows] == [
        ("workers=2", None, False, None), ("this", None, True, [1.0, 2.0])]
    assert w.predictions[0]["binds"] == "unknown"  # the rows themselves stay as written
    assert w.measured.samples_per_s == 1.5 and w.measured.interval is None and w.steadiness.notices == []
    c = view(CeilingsView, {"rows": [{"stage": "decode", "samples_per_s": 90.0, "basis": "measured", "how": "h"}]})
    assert [(r.stage, r.samples_per_s, r.words) for r in c.row_views] == [("decode", 90.0, None)]
    d = view(DistributedView, {"backend": "gloo", "collectives": {"start": [1.0], "end": [2.0]}})
    assert (d.backend, d.collectives.start, view(DistributedView, None).collectives.start) == ("gloo", [1.0], [])


def test_stages_findings_and_ram_rows_of_an_analyzed_record() -> None:
    """The hand-built record (tests/_records.py) analyzed: stages keyed as in the record, a finding that is not an
    object reads as its text, and the RAM rows as views of the rows analysis wrote."""
    from _records import record_v2

    from profiler.analysis import analyze

    rec = analyze(RunRecord.from_dict(record_v2()))
    r = read(rec)
    assert set(r.stages) == set(rec.stages) and r.stages["decode"].count == rec.stages["decode"]["count"] > 0
    assert r.stages["decode"].histogram is not None and r.stages["decode"].mean_ms == rec.stages["decode"]["mean_ms"]
    assert [p.role for p in r.ram.process_rows] == [p["role"] for p in rec.ram["processes"]]
    rec.findings = [{"kind": "k", "message": "m"}, "plain text"]
    assert read(rec).findings == [FindingView("k", "m"), FindingView(message="plain text")]
    rec.stages = {"read": {"count": 2}, "bad": "not an object"}  # type: ignore[dict-item]
    assert list(read(rec).stages) == ["read"]
