"""The what-if model with known answers on hand-built rates (pure: no runs, no torch)."""
from __future__ import annotations

import pytest

from profiler.analysis.rates import Rates
from profiler.analysis.recommend import quote_predictions
from profiler.analysis.whatif import Model, analyse, predict_setting, storage_cap, worker_counts


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
    w, _ = analyse(r)
    assert pred(w, "workers=1")["samples_per_s"] == pytest.approx(87.0, rel=1e-3)
    assert w["calibration"] == pytest.approx(0.87, rel=1e-3)


def test_uncontended_workers_scale_until_the_cores_run_out():
    # 10 ms of CPU per sample, nothing else on 4 idle cores: one worker 100/s, two 200/s, then 4 cores = 400/s.
    w, _ = analyse(rates())
    assert pred(w, "workers=2")["samples_per_s"] == pytest.approx(200.0, rel=0.01)
    assert pred(w, "workers=3")["samples_per_s"] == pytest.approx(300.0, rel=0.01)
    eight = pred(w, "workers=8")
    assert eight["samples_per_s"] == pytest.approx(400.0, rel=0.02) and eight["binds"] == "cores"
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
    w, c = analyse(r)
    four = pred(w, "workers=4")
    assert four["samples_per_s"] == pytest.approx(100.0, rel=0.02) and four["binds"] == "storage"
    assert pred(w, "cache warm")["samples_per_s"] > 500  # the reads were all it waited for
    assert c["lowest"] == "storage" and c["rows"][0]["basis"] == "derived"
    rec = {"action": "Raise --workers from 1 to 4 to keep more reads in flight", "reason": "r", "expected_gain": "g",
           "cause": "io"}
    assert quote_predictions([rec], w)[0]["expected_gain"].startswith(
        "4 workers: ≈ 100 samples/s (+10 %), then storage-bound at 1 MB/s")


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
    w, _ = analyse(r)
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
    w, _ = analyse(rates(h2d_s=0.05, pin_memory=False))
    assert pred(w, "pin_memory=on")["binds"] in ("compute", "cpu")
    w, _ = analyse(rates(device_type="cpu", h2d_s=0.05))
    assert not [p for p in w["predictions"] if p["kind"] == "pin_memory"]


def test_no_steps_no_predictions():
    w, c = analyse(rates(samples_per_s=0.0))
    assert w["predictions"] == [] and c["rows"] == []


def test_recommendations_quote_the_prediction_or_are_dropped():
    w, _ = analyse(rates())
    recs = [{"action": "Raise --workers from 1 to 3", "reason": "r", "expected_gain": "g", "cause": "cpu"},
            {"action": "Pack the small files into large shards", "reason": "r", "expected_gain": "g", "cause": "io"}]
    out = quote_predictions(recs, w)
    assert out[0]["expected_gain"].startswith("3 workers: ≈ 300 samples/s (+200 %)")
    assert out[1]["expected_gain"] == "g"  # no prediction covers it: unchanged
    # A CPU run where more workers only steal the model's cores: "add workers" is not supported, so it is dropped.
    r = rates(device_type="cpu", cores=2.0, model_threads=2, cpu_s=0.002, compute_s=0.1, samples_per_s=95.0,
              job_cores=2.09, worker_cores=0.19)
    w, _ = analyse(r)
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
