"""The what-if model with known answers on hand-built rates (pure: no runs, no torch)."""
from __future__ import annotations

import pytest

from profiler.analysis.rates import Rates
from profiler.analysis.recommend import quote_predictions
from profiler.analysis.whatif import Model, analyze, predict_setting, storage_cap, worker_counts


def rates(**kw) -> Rates:
    base = dict(samples_per_s=100.0, workers=1, batch=10.0, device_type="cuda", cores=4.0, model_threads=4,
                cpu_s=0.01, runq_s=0.0, blocked_s=0.0, read_blocked_s=0.0, rchar=10_000.0, read_bytes=0.0,
                cold_reads=0.0, collate_s=0.0, transfer_s=0.001, compute_s=0.001, h2d_s=0.0, loop_s=0.0,
                main_wait_cpu_s=0.0, job_cores=1.0, worker_cores=1.0, share=1.0, system_busy_cores=None,
                pin_memory=True, throttle=None, cache_mode="as-is", model_alone_s=None)
    base.update(kw)
    return Rates(**base)


def pred(w: dict, setting: str) -> dict:
    return next(p for p in w["predictions"] if p["setting"] == setting)


def test_measured_point_is_predicted_exactly():
    r = rates(samples_per_s=87.0)  # the model alone says 100: the calibration takes the rest
    w, _ = analyze(r)
    assert pred(w, "workers=1")["samples_per_s"] == pytest.approx(87.0, rel=1e-3)
    assert w["calibration"] == pytest.approx(0.87, rel=1e-3)


def test_uncontended_workers_scale_until_the_cores_run_out():
    # 10 ms of CPU per sample, nothing else on 4 idle cores: one worker 100/s, two 200/s, then 4 cores = 400/s.
    w, _ = analyze(rates())
    assert pred(w, "workers=2")["samples_per_s"] == pytest.approx(200.0, rel=0.01)
    assert pred(w, "workers=3")["samples_per_s"] == pytest.approx(300.0, rel=0.01)
    eight = pred(w, "workers=8")
    assert eight["samples_per_s"] == pytest.approx(400.0, rel=0.02) and eight["binds"] == "cores"
    # 0 workers: this run did not time a sample in the main process, so it cannot say; with that timing it can.
    assert pred(w, "workers=0")["samples_per_s"] is None and "cannot be predicted" in pred(w, "workers=0")[
        "assumption"]
    w, _ = analyze(rates(main_sample_cpu_s=0.01, main_sample_process_cpu_s=0.01))
    assert pred(w, "workers=0")["samples_per_s"] < 100.0  # the step and the loading are then serial


def test_worker_counts_cover_zero_to_twice_the_cores():
    assert worker_counts(2, 1) == [0, 1, 2, 3, 4]
    assert worker_counts(16, 3)[-3:] == [8, 16, 32]


def test_a_throttled_device_caps_every_worker_count():
    # 10 kB per sample from a 1 MB/s device: 100 samples/s at most however many workers; one worker waits 10 ms.
    spec = {"bytes_per_s": 1_000_000, "iops": None, "mechanism": "userspace"}
    assert storage_cap(10_000, 1.0, spec) == pytest.approx(100.0)
    r = rates(samples_per_s=1 / 0.011, cpu_s=0.001, blocked_s=0.010, read_blocked_s=0.010, read_bytes=10_000.0,
              cold_reads=1.0, throttle=spec, job_cores=0.1, worker_cores=0.1)
    w, c = analyze(r)
    four = pred(w, "workers=4")
    assert four["samples_per_s"] == pytest.approx(100.0, rel=0.02) and four["binds"] == "storage"
    assert pred(w, "cache warm")["samples_per_s"] > 500  # the reads were all it waited for
    assert c["lowest"] == "storage" and c["rows"][0]["basis"] == "derived"
    rec = {"action": "Raise --workers from 1 to 4 to keep more reads in flight", "reason": "r", "expected_gain": "g",
           "cause": "io"}
    # +10 % at the point, but the interval's low end (the calibration residual alone: 12 %) is under +5 %: the
    # advice stays, without claiming a gain, and says how to measure it.
    gain = quote_predictions([rec], w)[0]["expected_gain"]
    assert gain.startswith("4 workers: ≈ 100 samples/s (88.0–112); the low end is within noise") and "sweep" in gain


def test_other_load_keeps_its_cores():
    # The worker waited for a core half the time on 2 cores and the job got 0.5 core: others keep 1.5 cores, so a
    # second worker only splits the job's half core (CPU is shared per session / cgroup first, then per thread).
    r = rates(cores=2.0, samples_per_s=50.0, share=0.5, runq_s=0.01, job_cores=0.5, worker_cores=0.5,
              system_busy_cores=2.0)
    m = Model(r)
    assert m.A == pytest.approx(0.5) and m.others == pytest.approx(1.5)
    assert m.predict(2)[0] == pytest.approx(50.0, rel=0.01) and m.predict(2)[1] == "cores"
    # The same run on an otherwise idle host (others used nothing, no run-queue wait): two workers double it.
    idle = Model(rates(cores=2.0, samples_per_s=50.0, cpu_s=0.02, job_cores=1.0, system_busy_cores=1.0))
    assert idle.A == pytest.approx(2.0) and idle.predict(2)[0] == pytest.approx(100.0, rel=0.01)


def test_on_a_cpu_run_the_models_threads_compete_with_the_workers():
    # A CPU run on 2 cores: 2 model threads busy for 0.1 s per 10-sample step, one worker at 2 ms per sample.
    r = rates(device_type="cpu", cores=2.0, model_threads=2, cpu_s=0.002, compute_s=0.1, samples_per_s=95.0,
              job_cores=1.9 + 0.19, worker_cores=0.19, share=1.0)
    w, _ = analyze(r)
    one, two, four = (pred(w, f"workers={n}")["samples_per_s"] for n in (1, 2, 4))
    assert two <= one * 1.01 and four <= one * 1.01  # more workers only take cores from the model
    assert pred(w, "model 10x faster")["samples_per_s"] > 2 * one


def test_storage_presets_and_batch_size_predictions():
    r = rates(cpu_s=0.001, samples_per_s=1000.0, job_cores=1.0)
    hdd = predict_setting(r, workers=4, storage="hdd")
    # hdd: 10 kB / 20 MB/s + 1/150 s = 7.17 ms per sample in one queue -> 139.5 samples/s at most.
    assert hdd["samples_per_s"] == pytest.approx(1 / (10_000 / 20e6 + 1 / 150), rel=0.02)
    assert hdd["binds"] == "storage"
    assert predict_setting(r, workers=1)["samples_per_s"] == pytest.approx(1000.0, rel=1e-3)


def test_pin_memory_only_on_a_gpu():
    w, _ = analyze(rates(h2d_s=0.05, pin_memory=False))
    assert pred(w, "pin_memory=on")["binds"] in ("compute", "cpu")
    w, _ = analyze(rates(device_type="cpu", h2d_s=0.05))
    assert not [p for p in w["predictions"] if p["kind"] == "pin_memory"]


def test_no_steps_no_predictions():
    w, c = analyze(rates(samples_per_s=0.0))
    assert w["predictions"] == [] and c["rows"] == []


def test_recommendations_quote_the_prediction_or_are_dropped():
    w, _ = analyze(rates())
    recs = [{"action": "Raise --workers from 1 to 3", "reason": "r", "expected_gain": "g", "cause": "cpu"},
            {"action": "Pack the small files into large shards", "reason": "r", "expected_gain": "g", "cause": "io"}]
    out = quote_predictions(recs, w)
    # 3 workers (+164 %) is raised to 4 (+250 %: the what-if's best, more than 5 % above 3's rate), quoting it
    assert out[0]["action"] == "Raise --workers from 1 to 4"
    assert out[0]["expected_gain"].startswith("4 workers: ≈ 398 samples/s (350–446), at least +250 %")
    assert out[1]["expected_gain"] == "g"  # no prediction covers it: unchanged
    # A CPU run where more workers only steal the model's cores: "add workers" is not supported, so it is dropped.
    r = rates(device_type="cpu", cores=2.0, model_threads=2, cpu_s=0.002, compute_s=0.1, samples_per_s=95.0,
              job_cores=2.09, worker_cores=0.19)
    w, _ = analyze(r)
    assert quote_predictions(recs[:1], w) == []


def test_a_few_pages_from_the_device_are_not_a_device_rate():
    """A warm run that read one 4 KB page from the device per 3,000 samples (blocked 0.1 ms per sample, mostly page
    cache copies) once gave a '30 KB/s device' and a storage ceiling of 24 samples/s under a measured 100: the
    ceiling now comes from the page-cache reads, and a run that really read from the device keeps its device rate."""
    from profiler.analysis.whatif import ceilings

    warm = ceilings(rates(read_bytes=1.4, cold_reads=0.0003, read_blocked_s=0.0001))
    storage = next(row for row in warm["rows"] if row["stage"] == "storage")
    assert "page cache" in storage["how"] and storage["samples_per_s"] > 100
    assert warm["lowest"] != "storage"
    cold = ceilings(rates(read_bytes=10_000.0, cold_reads=1.0, read_blocked_s=0.05))  # 200 KB/s, 10 KB per sample
    storage = next(row for row in cold["rows"] if row["stage"] == "storage")
    assert "device reads" in storage["how"] and storage["samples_per_s"] == pytest.approx(20.0)
    assert cold["lowest"] == "storage"


# --- intervals, an unsteady baseline, one answer on shared cores, advice that agrees (pure: hand-built rates) ------
from profiler import thresholds as th  # noqa: E402
from profiler.analysis.recommend import check_advice  # noqa: E402
from profiler.analysis.whatif import ceilings, rates_from_dict  # noqa: E402

STEADY = dict(rate_rel_low=0.95, rate_rel_high=1.05, cpu_rel_half=0.01, drift=0.01, warmup_gap=0.02,
              other_load_spread=0.0, steps_measured=40)


def width(p: dict) -> float:
    return (p["interval"][1] - p["interval"][0]) / p["samples_per_s"]


def test_every_prediction_carries_an_interval_around_it():
    w, _ = analyze(rates(**STEADY))
    for p in w["predictions"]:
        if p["samples_per_s"] is None:
            continue
        lo, hi = p["interval"]
        assert lo <= p["samples_per_s"] <= hi
    # The measured point is a measurement: its interval is the bootstrap's over its own steps, nothing more.
    assert pred(w, "workers=1")["interval"] == pytest.approx([95.0, 105.0])
    assert w["measured"]["interval"] == pytest.approx([95.0, 105.0])
    # Another setting adds the calibration residual: at least that wide on each side.
    two = pred(w, "workers=2")
    assert two["interval"][0] <= two["samples_per_s"] * (1 - th.WHATIF_RESIDUAL)
    assert two["change_low"] == pytest.approx(two["interval"][0] / 100.0 - 1, abs=1e-3)
    assert w["steadiness"]["steady"] and w["steadiness"]["notices"] == []


def test_a_drifting_window_is_noticed_widened_and_told_how_to_remeasure():
    steady, _ = analyze(rates(**STEADY))
    drifting, _ = analyze(rates(**{**STEADY, "drift": -0.30}))
    st = drifting["steadiness"]
    assert not st["steady"] and any("drifted -30 %" in n for n in st["notices"])
    assert "--steps 80" in st["remeasure"] and "sweep --workers 1,2" in st["remeasure"]
    assert width(pred(drifting, "workers=2")) > width(pred(steady, "workers=2")) + 0.5
    # A script's re-measure command is a sweep of that script.
    script, _ = analyze(rates(**{**STEADY, "drift": -0.30, "target": "train.py"}))
    assert script["steadiness"]["remeasure"] == "python -m profiler sweep --workers 1,2 train.py"


def test_unsettled_warmup_and_other_load_that_came_and_went_widen_the_interval():
    steady, _ = analyze(rates(**STEADY))
    warm, _ = analyze(rates(**{**STEADY, "warmup_gap": -0.4}))
    assert any("warm-up had not settled" in n for n in warm["steadiness"]["notices"])
    assert width(pred(warm, "workers=2")) > width(pred(steady, "workers=2"))
    # 4 cores, others used 1 on average but between 0.5 and 1.5: the cores the job had are not one number.
    busy = dict(cores=4.0, system_busy_cores=2.0, job_cores=1.0)
    calm, _ = analyze(rates(**STEADY, **busy))
    moving, _ = analyze(rates(**{**STEADY, "other_load_spread": 1.0}, **busy))
    assert any("other load came and went" in n for n in moving["steadiness"]["notices"])
    assert width(pred(moving, "workers=4")) > width(pred(calm, "workers=4"))


def test_throughput_below_what_its_own_costs_allow_is_suspect():
    # 10 ms per sample on one worker allows 100 samples/s; the window ran at 50 (the 1-worker baseline that
    # ran slower than 0 workers): every prediction scaled by 0.5 may be half of the truth.
    w, _ = analyze(rates(**{**STEADY, "samples_per_s": 50.0}))
    assert w["calibration"] == pytest.approx(0.5, rel=1e-3)
    assert any("50 % of what this run's own per-sample costs allow" in n for n in w["steadiness"]["notices"])
    two = pred(w, "workers=2")
    assert two["interval"][1] >= two["samples_per_s"] / 0.5 * 0.999  # the loss may have been passing


def test_zero_workers_from_a_run_with_workers_needs_the_main_process_timing():
    r = rates(**STEADY)
    assert predict_setting(r, workers=0)["samples_per_s"] is None
    timed = rates(**STEADY, main_sample_cpu_s=0.01, main_sample_process_cpu_s=0.01)
    p = predict_setting(timed, workers=0)
    two = predict_setting(timed, workers=2)
    # It rests on a few samples timed after the window: its interval is wider than another worker count's.
    assert (p["interval"][1] - p["interval"][0]) / p["samples_per_s"] > \
        (two["interval"][1] - two["interval"][0]) / two["samples_per_s"] + 0.3


def test_on_shared_cores_whatif_and_ceilings_say_the_same_words():
    r = rates(**STEADY, device_type="cpu", cores=2.0, model_threads=2, cpu_s=0.002, compute_s=0.1,
              samples_per_s=95.0, job_cores=2.09, worker_cores=0.19)
    w, c = analyze(r)
    words = "cores: the model and 1 worker share 2 cores"
    assert w["binds"] == "cores" and w["binds_words"] == words
    assert pred(w, "workers=1")["binds_words"] == words
    assert c["lowest"] == "cores" and c["lowest_words"] == words
    assert pred(w, "workers=2")["binds_words"] == "cores: the model and 2 workers share 2 cores"
    # A loader-only CPU run (a step of microseconds): the cores are the workers' and the main process's.
    lo, _ = analyze(rates(**STEADY, device_type="cpu", cores=2.0, cpu_s=0.02, compute_s=1e-5, samples_per_s=99.0,
                          job_cores=2.0, worker_cores=2.0))
    assert pred(lo, "workers=4")["binds_words"] == "cores: 4 workers and the main process share 2 cores"
    # A GPU job whose model step is the limit names the model, not the cores.
    g, _ = analyze(rates(**STEADY, compute_s=0.5, samples_per_s=20.0))
    assert pred(g, "workers=4")["binds_words"] == "the model sets the pace"


def test_storage_rows_only_where_the_job_read_files():
    w, _ = analyze(rates(**STEADY))
    assert [p for p in w["predictions"] if p["kind"] == "storage"] and "storage_note" not in w
    # An in-memory dataset: ~50 B per sample of the profiler's own /proc reads and pipes, no read stage, nothing
    # from the device.
    mem, _ = analyze(rates(**STEADY, rchar=52.5))
    assert not [p for p in mem["predictions"] if p["kind"] == "storage"]
    assert "read no files" in mem["storage_note"] and "52 B per sample" in mem["storage_note"]
    nothing, _ = analyze(rates(**STEADY, rchar=0.0))
    assert "its data came from memory" in nothing["storage_note"]
    recs = [{"action": "Move the data to faster local storage (NVMe) or cache a pre-processed copy", "reason": "r",
             "expected_gain": "g", "cause": "io"}]
    kept, rejected = check_advice(recs, mem)
    assert kept == [] and "read no files" in rejected[0]["rejected_because"]


def _rec(action: str) -> dict:
    return {"action": action, "reason": "r", "expected_gain": "up to 117 samples/s (1.17x the measured 100)",
            "cause": "cpu"}


def test_advice_never_claims_a_gain_its_own_prediction_puts_under_5_percent():
    # A CPU run where a worker more only takes the model's cores: "num_workers 2" (a script's knob) is predicted at
    # about +0 %, so the "1.17x" the ceiling rule wrote is rejected, with the reason.
    r = rates(**STEADY, device_type="cpu", cores=2.0, model_threads=2, cpu_s=0.002, compute_s=0.1,
              samples_per_s=95.0, job_cores=2.09, worker_cores=0.19)
    w, _ = analyze(r)
    kept, rejected = check_advice([_rec("Raise num_workers from 1 to 2")], w)
    assert kept == [] and "under 5 %" in rejected[0]["rejected_because"]
    # workers = 0 -> "Use DataLoader workers: num_workers 1" is matched to the workers=1 row too.
    w0, _ = analyze(rates(**{**STEADY, "workers": 0}, device_type="cpu", cores=2.0, model_threads=2, cpu_s=0.002,
                          compute_s=0.1, samples_per_s=60.0, job_cores=2.0, worker_cores=0.0))
    kept, rejected = check_advice([_rec("Use DataLoader workers: num_workers 1")], w0)
    # (the model's two threads already fill both cores: a worker only moves the loading off the main thread)
    assert pred(w0, "workers=1")["change"] < th.GAIN_CLAIMED_FROM
    assert kept == [] and "1 worker at +0 %" in rejected[0]["rejected_because"]


def test_a_claimed_gain_is_the_low_end_of_the_interval():
    w, _ = analyze(rates(**STEADY))
    kept, _ = check_advice([_rec("Raise --workers from 1 to 3")], w)
    three = pred(w, "workers=4")  # raised to the what-if's best (test_recommendations_quote_the_prediction_...)
    gain = kept[0]["expected_gain"]
    assert f"at least {three['change_low'] * 100:+.0f} %" in gain and "(" in gain and "–" in gain
    # A prediction the what-if could not make is no ground for advice either.
    kept, rejected = check_advice([_rec("Use fewer workers: --workers (0)")], w)
    assert kept == [] and "cannot predict" in rejected[0]["rejected_because"]


def test_inputs_of_an_old_record_still_predict():
    """A run.json written before the intervals has ``whatif.inputs`` without the spread fields: the sweep still
    predicts from it (no bootstrap: the residual alone)."""
    old = {k: v for k, v in rates().to_dict().items() if k not in STEADY and k != "target"}
    p = predict_setting(rates_from_dict(old), workers=2)
    assert p["samples_per_s"] == pytest.approx(200.0, rel=0.01)
    assert p["interval"][0] == pytest.approx(p["samples_per_s"] * (1 - th.WHATIF_RESIDUAL), rel=0.01)


def test_a_cores_ceiling_row_on_every_run():
    c = ceilings(rates(**STEADY))
    row = next(r for r in c["rows"] if r["stage"] == "cores")
    assert row["samples_per_s"] > 0 and "share 4 cores" in row["how"]


def test_shared_core_words_say_what_other_load_left():
    from profiler.analysis.whatif import binds_words

    cpu = rates(**STEADY, device_type="cpu", cores=2.0, model_threads=2, cpu_s=0.002, compute_s=0.1)
    assert binds_words("cores", cpu, 2, 2.0) == "cores: the model and 2 workers share 2 cores"
    assert binds_words("cores", cpu, 2, 0.5) == \
        "cores: the model and 2 workers share the 0.50 of 2 cores other load left"
    loader = rates(**STEADY, device_type="cpu", cores=2.0, compute_s=0.0)
    assert binds_words("cores", loader, 0, 2.0) == "cores: the main process loads and steps on 2 cores"


def test_the_storage_note_is_said_as_written() -> None:
    from types import SimpleNamespace

    from profiler.render.whatif_rows import notices

    mem, _ = analyze(rates(**STEADY, rchar=230.0))
    (line,) = notices(SimpleNamespace(whatif=mem))  # type: ignore[arg-type]
    assert line.startswith("No storage rows: ") and "230 B per sample" in line and "4 KiB" in line
