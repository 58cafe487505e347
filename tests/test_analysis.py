"""Pure analysis on hand-built inputs with known answers: attribution arithmetic, verdict bands, which
recommendations the numbers allow."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from profiler import thresholds as th
from profiler import vocab
from profiler.analysis import analyze
from profiler.analysis.attribution import attribute
from profiler.analysis.context import Context
from profiler.analysis.io import io_totals
from profiler.analysis.recommend import recommend
from profiler.analysis.stats import Tables, stage_stats
from profiler.analysis.verdict import decide, severity
from profiler.record import RunRecord, schema


def _complete(table: dict, kind: type) -> dict:
    """A hand-made table with every column its schema requires (analysis reads required columns by key, as a loaded
    record has them all): the ones a test does not set are zeros, one per row."""
    n = len(next(iter(table.values()))) if table else 0
    return {**{k: np.zeros(n) for k in kind.__required_keys__ if k != "stages"}, **table}  # type: ignore[attr-defined]


def _tables(steps, batches, spans) -> Tables:
    """v2 tables from v1-style span columns (read_start..augment_end) or v2 ones (start, end, stages)."""
    st = {k: np.asarray(v) for k, v in steps.items()}
    spans = dict(spans)
    stages = spans.pop("stages", None)
    if "read_start" in spans:
        rs, re_, de, ae = (np.asarray(spans.pop(k), dtype=float) for k in ("read_start", "read_end", "decode_end",
                                                                         "augment_end"))
        spans.update(start=rs, end=ae, rchar=spans.pop("bytes", np.zeros_like(rs)))
        spans.pop("pixels", None)
        stages = {"read": re_ - rs, "decode": de - re_, "augment": ae - de}
    sp = _complete({k: np.asarray(v) for k, v in spans.items()}, schema.SpansTable)
    ss = {k: np.asarray(v, dtype=float) for k, v in (stages or {}).items()}
    bt = _complete({k: np.asarray(v) for k, v in batches.items()}, schema.BatchesTable)
    return Tables(_complete(st, schema.StepsTable), bt, sp, ss, _complete({}, schema.EpochsTable), st["batch"])


def test_attribution_splits_a_wait_by_what_the_worker_did():
    # One step waits from t=1.0 to t=2.0 for batch 7 of worker 0. Worker 0: reads 1.0-1.3 (io), decodes
    # 1.3-1.5, augments 1.5-1.6 (cpu), nothing 1.6-1.7 (other), collates 1.7-1.8 (cpu); the batch is done at 1.8
    # and reaches the main process at 2.0 (transfer 0.2).
    steps = {"batch": [7], "worker": [0], "samples": [1], "wait_start": [1.0], "wait_end": [2.0],
             "h2d_start": [2.0], "h2d_end": [2.0], "compute_end": [2.5], "idle": [1.0]}
    batches = {"batch": [7], "worker": [0], "collate_start": [1.7], "collate_end": [1.8], "received": [2.0]}
    spans = {"batch": [7], "worker": [0], "read_start": [1.0], "read_end": [1.3], "decode_end": [1.5],
             "augment_end": [1.6], "bytes": [100], "pixels": [10]}
    st = attribute(_tables(steps, batches, spans), window_s=2.0, kernel=False)
    assert st["by_cause"]["io"] == pytest.approx(0.3)
    assert st["by_cause"]["cpu"] == pytest.approx(0.2 + 0.1 + 0.1)
    assert st["by_cause"]["transfer"] == pytest.approx(0.2)
    assert st["by_cause"]["other"] == pytest.approx(0.1)
    assert st["seconds"] == pytest.approx(1.0) and st["fraction"] == pytest.approx(0.5)
    assert st["by_stage"]["decode"] == pytest.approx(0.2) and st["by_stage"]["collate"] == pytest.approx(0.1)


def test_busy_with_previous_batch_counts_and_device_gap_beyond_wait_is_other():
    # The worker is still reading for its *previous* batch (3) during the first half of the wait for batch 5;
    # on a CUDA-like record the device gap (1.5 s) is longer than the host wait (1.0 s): the excess is other.
    steps = {"batch": [5], "worker": [1], "samples": [1], "wait_start": [0.0], "wait_end": [1.0],
             "h2d_start": [1.0], "h2d_end": [1.0], "compute_end": [1.2], "idle": [1.5]}
    batches = {"batch": [3, 5], "worker": [1, 1], "collate_start": [0.5, 0.9], "collate_end": [0.5, 1.0],
               "received": [0.6, 1.0]}
    spans = {"batch": [3, 5], "worker": [1, 1], "read_start": [-0.5, 0.5], "read_end": [0.5, 0.6],
             "decode_end": [0.5, 0.8], "augment_end": [0.5, 0.9], "bytes": [1, 1], "pixels": [1, 1]}
    st = attribute(_tables(steps, batches, spans), window_s=3.0, kernel=False)
    assert st["by_cause"]["io"] == pytest.approx(0.5 + 0.1)
    assert st["by_cause"]["cpu"] == pytest.approx(0.2 + 0.1 + 0.1)
    assert st["by_cause"]["other"] == pytest.approx(0.5)  # the gap beyond the wait
    assert sum(st["by_cause"].values()) == pytest.approx(st["seconds"]) == pytest.approx(1.5)


def test_stage_stats_transfer_excludes_time_queued_before_it_was_asked_for():
    steps = {"batch": [0, 1], "worker": [0, 0], "samples": [1, 1], "wait_start": [0.0, 5.0], "wait_end": [1.0, 5.1],
             "h2d_start": [1.0, 5.1], "h2d_end": [1.0, 5.1], "compute_end": [5.0, 9.0], "idle": [1.0, 0.1]}
    batches = {"batch": [0, 1], "worker": [0, 0], "collate_start": [0.8, 1.5], "collate_end": [0.9, 2.0],
               "received": [1.0, 5.1]}
    spans = {"batch": [0, 1], "worker": [0, 0], "read_start": [0.0, 1.0], "read_end": [0.1, 1.1],
             "decode_end": [0.5, 1.2], "augment_end": [0.8, 1.5], "bytes": [1, 1], "pixels": [1, 1]}
    s = stage_stats(_tables(steps, batches, spans))
    assert s["transfer"]["total_s"] == pytest.approx(0.1 + 0.1)
    assert s["ready_ahead"]["total_s"] == pytest.approx(3.0)  # batch 1 was ready at 2.0, asked for at 5.0


@pytest.mark.parametrize("fraction, expected", [(0.0, "not input-bound"), (0.049, "not input-bound"),
                                                (0.05, "moderately input-bound"), (0.199, "moderately input-bound"),
                                                (0.2, "highly input-bound"), (0.9, "highly input-bound")])
def test_severity_bands(fraction, expected):
    assert severity(fraction) == expected


BASE = Context(device_type="cpu", device_name="CPU", window_s=10.0, steps=100, samples=3200, samples_per_s=320.0,
               batch_size=32, workers=2, usable_cores=8.0, cpu_util=0.3, compute_ms=10.0, h2d_ms=0.0,
               sample_cpu_ms=5.0, sample_read_ms=0.2, collate_ms=2.0, transfer_ms=1.0, ready_ahead_ms=0.0,
               mean_file_bytes=110_000, mean_pixels=500 * 375, read_mb_s_per_worker=500.0, dataset_bytes=10**9,
               ram_available_bytes=16 * 10**9, pin_memory=False, amp=False,
               augment="standard", image_size=224)
CPU_STALL = {"seconds": 9.0, "fraction": 0.9, "by_cause": {"io": 0.2, "cpu": 8.5, "transfer": 0.2, "other": 0.1},
             "by_stage": {"read": 0.2, "decode": 3.5, "augment": 4.5, "collate": 0.5, "transfer": 0.2, "other": 0.1}}


def _actions(ctx, stall=CPU_STALL, memory=None):
    v = decide(stall, ctx)
    return v, [r["action"] for r in recommend(v, stall, ctx, memory)]


def test_more_workers_only_when_cores_are_idle():
    v, acts = _actions(BASE)
    assert v["bottleneck"] == "cpu"
    assert any(a.startswith("Raise --workers from 2 to") for a in acts)
    saturated = dataclasses.replace(BASE, usable_cores=2.0, cpu_util=0.97)
    _, acts = _actions(saturated)
    assert not any("Raise --workers" in a for a in acts)
    assert any("augmentation" in a for a in acts)  # augment is the larger part of this wait


def test_gpu_compute_bound_suggests_amp_only_without_amp():
    stall = {"seconds": 0.1, "fraction": 0.01, "by_cause": {"io": 0, "cpu": 0.05, "transfer": 0.05, "other": 0}}
    gpu = dataclasses.replace(BASE, device_type="cuda", device_name="GPU")
    v, acts = _actions(gpu, stall)
    assert v["bottleneck"] == "compute" and any("mixed precision" in a for a in acts)
    _, acts = _actions(dataclasses.replace(gpu, amp=True), stall)
    assert not any("mixed precision" in a for a in acts)


def test_transfer_bound_suggests_pinning_only_when_off_on_cuda():
    stall = {"seconds": 5.0, "fraction": 0.5, "by_cause": {"io": 0.1, "cpu": 0.4, "transfer": 4.4, "other": 0.1},
             "by_stage": {}}
    gpu = dataclasses.replace(BASE, device_type="cuda")
    v, acts = _actions(gpu, stall)
    assert v["bottleneck"] == "transfer" and any("--pin-memory" in a for a in acts)
    _, acts = _actions(dataclasses.replace(gpu, pin_memory=True), stall)
    assert not any("--pin-memory" in a for a in acts)


def test_io_bound_suggests_ram_only_when_dataset_fits():
    stall = {"seconds": 5.0, "fraction": 0.5, "by_cause": {"io": 4.5, "cpu": 0.4, "transfer": 0.0, "other": 0.1},
             "by_stage": {}}
    v, acts = _actions(BASE, stall)
    assert v["bottleneck"] == "io" and any("from RAM" in a for a in acts)
    huge = dataclasses.replace(BASE, dataset_bytes=10**12)
    _, acts = _actions(huge, stall)
    assert not any("from RAM" in a for a in acts) and any("faster local storage" in a for a in acts)


def _record(stall_fraction: float = 0.5, dataset_bytes: int = 10**9, available_bytes: int = 16 * 10**9,
            storage: dict | None = None, batches_io: dict | None = None, **sections) -> RunRecord:
    """A hand-built v1 run record: 10 measured steps of 1 s each, one worker that spends every wait reading a
    file (so any stall is io), on a CPU device. ``stall_fraction`` of the 10 s window is spent waiting."""
    n, step_s = 10, 1.0
    wait = stall_fraction * step_s
    starts = [i * step_s for i in range(n)]
    steps = {"step": list(range(n)), "epoch": [0] * n, "batch": list(range(n)), "worker": [0] * n,
             "samples": [4] * n, "wait_start": starts, "wait_end": [t + wait for t in starts],
             "h2d_start": [t + wait for t in starts], "h2d_end": [t + wait for t in starts],
             "compute_end": [t + step_s for t in starts], "idle": [wait] * n, "measured": [True] * n}
    batches = {"batch": list(range(n)), "worker": [0] * n, "pid": [4242] * n,
               "collate_start": [t + wait for t in starts], "collate_end": [t + wait for t in starts],
               "received": [t + wait for t in starts], "samples": [4] * n,
               "rchar": [-1] * n, "read_bytes": [-1] * n, **(batches_io or {})}
    spans = {"batch": list(range(n)), "worker": [0] * n, "index": list(range(n)), "read_start": starts,
             "read_end": [t + wait for t in starts], "decode_end": [t + wait for t in starts],
             "augment_end": [t + wait for t in starts], "bytes": [100_000] * n, "pixels": [64 * 64] * n}
    d = {"schema_version": 1,
         "config": {"workers": 1, "batch_size": 4, "pin_memory": False, "amp": False, "model": "tiny",
                    "augment": "none", "image_size": 32, "mode": "train"},
         "environment": {"cpu": {"usable_cores": 2, "logical_cores": 2},
                         "ram": {"available_bytes": available_bytes, "total_bytes": 2 * available_bytes}},
         "compute_device": {"type": "cpu", "name": "CPU", "timing": "host clocks"},
         "window": {"start_s": 0.0, "end_s": n * step_s, "seconds": n * step_s, "steps": n, "samples": 4 * n,
                    "warmup_steps": 0},
         "timeline": {"steps": steps, "batches": batches, "sample_spans": spans},
         "samples": {}, "dataset": {"total_bytes": dataset_bytes}, "storage": storage, "partial": False,
         "skipped": {"count": 0, "files": []}, **sections}
    return RunRecord.from_dict(d)


@pytest.mark.parametrize("edge, below, at", [
    (th.NOT_INPUT_BOUND_BELOW, ("compute", "not input-bound"), ("io", "moderately input-bound")),
    (th.HIGHLY_INPUT_BOUND_FROM, ("io", "moderately input-bound"), ("io", "highly input-bound")),
])
def test_verdict_changes_band_exactly_at_each_threshold(edge, below, at):
    """The same io-bound record, its wait set just under a band edge and exactly on it, through analyze()."""
    under = analyze(_record(stall_fraction=edge - 1e-3)).verdict
    on = analyze(_record(stall_fraction=edge)).verdict
    assert (under["bottleneck"], under["severity"]) == below
    assert (on["bottleneck"], on["severity"]) == at


@pytest.mark.parametrize("share, fits", [(0.6, True), (th.PAGE_CACHE_SHARE_OF_AVAILABLE, True), (0.95, False)])
def test_dataset_vs_ram_finding_and_recommendations_agree(share, fits):
    """A dataset at 60 % of the available RAM used to be told it "fits in the page cache" (finding) and "is too
    large to stay in RAM" (recommendation). Both now ask one question, so they say the same thing on either side."""
    avail = 10 * 10**9
    rec = analyze(_record(stall_fraction=0.5, dataset_bytes=int(share * avail), available_bytes=avail))
    finding = next(f for f in rec.findings if f["kind"] == "dataset_vs_ram")
    actions = [r["action"] + " " + r["reason"] for r in rec.verdict["recommendations"]]
    assert rec.verdict["bottleneck"] == "io"
    assert finding["fits_in_page_cache"] is fits
    assert ("fits in the page cache" in finding["message"]) is fits
    assert any(a.startswith("Serve the dataset from RAM") for a in actions) is fits
    assert any("too large" in a for a in actions) is (not fits)


def test_served_from_ram_caution_is_said_once():
    """A cold run whose reads all hit the page cache measured RAM: the verdict says so, and no finding repeats it."""
    io = {"rchar": [(i + 1) * 10**6 for i in range(10)], "read_bytes": [0] * 10}
    rec = analyze(_record(storage={"cache_mode": "cold", "throttle": None}, batches_io=io))
    assert rec.storage["page_cache_hit_fraction"] == 1.0
    texts = [rec.verdict["summary"]] + [f["message"] for f in rec.findings]
    assert sum("measured RAM, not the storage device" in t for t in texts) == 1
    assert "measured RAM" in rec.verdict["summary"]


def test_io_totals_whole_run_and_measured_window_alone():
    """Two workers' cumulative /proc/self/io readings: the window counts only what each read inside it."""
    rec = _record()
    rec.window = {"start_s": 2.0, "end_s": 6.0, "seconds": 4.0}
    rec.timeline["batches"] = {
        "batch": [0, 1, 2, 3, 4, 5], "worker": [0, 1, 0, 1, 0, -1], "pid": [10, 11, 10, 11, 10, 9],
        "collate_end": [1.0, 1.5, 3.0, 4.0, 7.0, 3.0],
        "rchar": [100, 50, 300, 250, 900, 10**9], "read_bytes": [40, 0, 100, 200, 500, 10**9],
    }
    rec.timeline["batches"] = _complete(rec.timeline["batches"], schema.BatchesTable)
    io = io_totals(rec)
    # whole run: each worker's last (largest) reading; the main process (worker -1) is left out
    assert (io["bytes_requested"], io["bytes_from_device"]) == (900 + 250, 500 + 200)
    assert io["page_cache_hit_fraction"] == pytest.approx(1 - 700 / 1150, abs=1e-4)
    # window 2-6 s: worker 0 read 300-100, worker 1 read 250-50; worker 0's reading at 7 s is after the window
    w = io["window"]
    assert (w["bytes_requested"], w["bytes_from_device"]) == (200 + 200, 60 + 200)
    assert w["page_cache_hit_fraction"] == pytest.approx(1 - 260 / 400, abs=1e-4)


def test_oom_advice_is_recomputed_from_the_breakdown():
    """A record that ran out of device memory carries the fit breakdown; analysis derives the advice from it, so a
    stale list in the record is replaced."""
    from profiler.fit import estimate_memory

    bd = estimate_memory("resnet18", 8, mode="train", image_size=32, num_classes=2, device="cpu")
    gpu = bd.total_bytes // 2
    rec = _record(memory={"oom": {"step": 3, "message": "CUDA out of memory"}, "device_total_bytes": gpu,
                          "breakdown": bd.to_dict(), "oom_recommendations": [{"action": "stale"}]})
    out = analyze(rec)
    assert out.verdict["bottleneck"] == "memory"
    recs = out.memory["oom_recommendations"]
    assert recs and all(r["action"] != "stale" for r in recs)
    assert out.verdict["recommendations"] == recs


def test_verdict_names_causes_in_the_registry_words():
    v = decide(CPU_STALL, BASE)
    assert vocab.CAUSE["cpu"].words in v["summary"]


def test_no_measured_step_gives_no_verdict_and_no_advice():
    """A run stopped during warm-up measured nothing: the record says so instead of judging from zeros."""
    from _records import record_v2

    from profiler.record import RunRecord

    d = record_v2()
    d["timeline"]["steps"]["measured"] = [False] * len(d["timeline"]["steps"]["measured"])
    d["window"]["steps"] = 0
    d.update(partial=True, partial_reason="interrupted (Ctrl-C) after 0 of 10 measured steps")
    rec = analyze(RunRecord.from_dict(d))
    assert rec.verdict["bottleneck"] == "none" and rec.verdict["severity"] == "nothing measured"
    assert "No verdict" in rec.verdict["summary"] and rec.verdict["recommendations"] == []
    assert rec.throughput["steps"] == 0
    # the same record with its steps measured is judged as usual
    full = analyze(RunRecord.from_dict(record_v2()))
    assert full.verdict["bottleneck"] != "none" and full.throughput["steps"] > 0


def test_stage_histogram_holds_every_observation_on_a_log_axis_of_at_least_a_decade():
    """latency.png draws these bins as they are: every observation counted once, the 0 ms ones apart, and a narrow
    spread widened to one decade so the log axis has labelled ticks."""
    from profiler.analysis.stats import HISTOGRAM_BINS, histogram

    v = np.array([0.0, 0.0, 0.001, 0.002, 0.004, 0.5])  # seconds
    h = histogram(v)
    assert h["zeros"] == 2 and sum(h["counts"]) == 4 and len(h["counts"]) == HISTOGRAM_BINS
    assert h["edges_ms"][0] == pytest.approx(1.0) and h["edges_ms"][-1] == pytest.approx(500.0)
    narrow = histogram(np.array([0.010, 0.011, 0.012]))
    assert narrow["edges_ms"][-1] / narrow["edges_ms"][0] == pytest.approx(10.0, rel=1e-4)
    assert narrow["edges_ms"][0] < 10.0 < 12.0 < narrow["edges_ms"][-1] and sum(narrow["counts"]) == 3
    assert histogram(np.zeros(3)) == {"edges_ms": [], "counts": [], "zeros": 3}
    assert histogram(np.zeros(0)) == {"edges_ms": [], "counts": [], "zeros": 0}


def test_verdict_whatif_and_advice_agree_on_one_record():
    """Through analyze(): every prediction has its interval, the verdict names what binds in the what-if's words
    (a CPU run: the model and the workers share the cores), and no recommendation claims a gain its own prediction
    puts under GAIN_CLAIMED_FROM."""
    from profiler.analysis.recommend import prediction_for
    from tests._records import record_v2

    rec = analyze(RunRecord.from_dict(record_v2()))
    w = rec.whatif
    for p in w["predictions"]:
        if p["samples_per_s"] is not None:
            assert p["interval"][0] <= p["samples_per_s"] <= p["interval"][1]
    assert w["binds"] == "cores" and rec.verdict["binds"] == w["binds_words"]
    assert w["binds_words"] in rec.verdict["summary"]
    for r in rec.verdict["recommendations"]:
        p, _ = prediction_for(r["action"], w["predictions"])
        if p is not None:
            assert p["samples_per_s"] is not None and p["change"] >= th.GAIN_CLAIMED_FROM
    for r in w["advice_rejected"]:  # what was dropped says why, and is not among the advice given
        assert r["because"] and r["action"] not in [k["action"] for k in rec.verdict["recommendations"]]


def test_whatif_rows_render_old_sections_without_intervals():
    """A what-if section written before the intervals (no interval, no binds_words) still renders."""
    from profiler.render.whatif_rows import headline, notices, prediction_rows
    from tests._records import record_v2

    rec = analyze(RunRecord.from_dict(record_v2()))
    rec.whatif = {"measured": {"samples_per_s": 100.0, "workers": 1},
                  "predictions": [{"kind": "workers", "setting": "workers=2", "samples_per_s": 180.0, "binds": "cpu",
                                   "change": 0.8, "assumption": "a"}]}
    assert prediction_rows(rec)[0][1:4] == ("≈ 180", "+80 %", "cpu")
    assert notices(rec) == [] and headline(rec).startswith("This run:")


def test_the_consistency_check_rewrites_or_rejects():
    """check_advice: one function, both outcomes, on a hand-made what-if."""
    from profiler.analysis.recommend import check_advice

    wi = {"predictions": [
        {"kind": "workers", "setting": "workers=2", "workers": 2, "samples_per_s": 103.0, "change": 0.03,
         "change_low": -0.1, "interval": [90.0, 115.0], "binds": "cpu", "assumption": "a"},
        {"kind": "workers", "setting": "workers=4", "workers": 4, "samples_per_s": 212.0, "change": 1.12,
         "change_low": 0.9, "interval": [190.0, 240.0], "binds": "cores", "binds_words": "cores: x", "assumption": "a"},
    ]}
    recs = [{"action": f"Raise --workers from 1 to {n}", "reason": "r", "expected_gain": "1.17x", "cause": "cpu"}
            for n in (2, 4)]
    kept, rejected = check_advice(recs, wi)
    # 2 workers (+3 %) is raised to the fewest near the what-if's best, 4: one recommendation, quoting it
    assert [r["action"] for r in kept] == ["Raise --workers from 1 to 4"] and rejected == []
    assert kept[0]["expected_gain"].startswith("4 workers: ≈ 212 samples/s (190–240), at least +90 %, then cores: x")
    # where no count does better, the advice is rejected, with why
    kept, rejected = check_advice(recs[:1], {"predictions": wi["predictions"][:1]})
    assert kept == [] and [r["action"] for r in rejected] == ["Raise --workers from 1 to 2"]
    assert "+3 %" in rejected[0]["rejected_because"]
    # workers = 0: the rules' 1 worker (+4 %) becomes 2 (+95 %), not 3 or 4 (within 5 % of 2's rate)
    zero = {"predictions": [
        {"kind": "workers", "setting": f"workers={n}", "workers": n, "samples_per_s": sps, "change": ch,
         "change_low": ch - 0.2, "interval": [sps * 0.9, sps * 1.1], "binds": "cores", "assumption": "a"}
        for n, sps, ch in ((1, 104.0, 0.04), (2, 195.0, 0.95), (3, 196.0, 0.96), (4, 196.5, 0.965))]}
    kept, _ = check_advice([{"action": "Use DataLoader workers: num_workers 1", "reason": "r", "expected_gain": "",
                             "cause": "cpu"}], zero)
    assert [r["action"] for r in kept] == ["Use DataLoader workers: num_workers 2"]
