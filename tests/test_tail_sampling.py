"""The sampler in a run's tail (TAIL_HALVINGS, profiler/samplers/background.py): once a window goes beyond its
detail, the background sampler ticks half as often, its series so far halved so they stay evenly spaced; a window
that ends inside its detail keeps 10 Hz. Real Sampler threads and real profiled loops (DataLoaders over in-memory
tensors, forked workers for workers=2)."""
from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import profiler
from profiler.instrument import session as session_mod
from profiler.record import load
from profiler.samplers.background import DEFAULT_INTERVAL_S, TAIL_HALVINGS, Sampler

pytestmark = pytest.mark.xdist_group("flat_steps")


def _until(cond, timeout: float = 60.0) -> None:
    t = time.monotonic()
    while not cond():
        assert time.monotonic() - t < timeout, "timed out"
        time.sleep(0.01)


def test_slow_down_halves_the_series_and_the_rate_once():
    s = Sampler(time.perf_counter_ns(), interval_s=0.02)
    s.start()
    try:
        _until(lambda: s.ticks >= 12)
        s.slow_down()
        s.slow_down()  # a second call (a restarted session's tail) does nothing
        _until(lambda: s.halvings >= 1)
        n0 = s.ticks
        _until(lambda: s.ticks >= n0 + 8)
    finally:
        got = s.stop()
    assert got["halvings"] == TAIL_HALVINGS == 1
    assert got["interval_s"] == pytest.approx(0.04)
    t = got["t_s"]
    assert all(len(p["t_s"]) == len(t) for p in got["processes"])
    late = [b - a for a, b in zip(t[-6:], t[-5:])]
    # the new spacing (a loaded machine may tick late: a skipped tick only makes a gap longer)
    assert min(late) >= 0.03, late


def _loop(out: Path, workers: int, steps: int, detail: int, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setattr(session_mod, "DETAIL_STEPS", detail)
    n = 16 * (steps + 20)
    ds = TensorDataset(torch.randn(n, 8), torch.arange(n))
    kw = {"multiprocessing_context": "fork"} if workers else {}
    loader = DataLoader(ds, batch_size=16, num_workers=workers, **kw)
    with profiler.profile(out=str(out), warmup=2, steps=steps, plots=False, quiet=True, then="continue"):
        for _ in loader:
            time.sleep(0.0008)  # ~1 ms a step: the window lasts a few of the sampler's ticks
    return load(str(out / "run.json")).samples


@pytest.mark.parametrize("workers", [0, 2])
def test_a_window_beyond_its_detail_samples_its_tail_at_half_the_rate(tmp_path, monkeypatch, workers):
    if workers and "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("needs fork")
    # workers=0 folds its flat steps 128 at a time (flat_steps.FLAT_FOLD_EVERY): its tail is seen at the first fold
    samples = _loop(tmp_path / "long", workers, steps=2200, detail=20, monkeypatch=monkeypatch)
    assert samples["halvings"] == TAIL_HALVINGS
    assert samples["interval_s"] == pytest.approx(DEFAULT_INTERVAL_S * 2 ** TAIL_HALVINGS)


def test_a_window_inside_its_detail_keeps_the_full_rate(tmp_path, monkeypatch):
    samples = _loop(tmp_path / "short", 0, steps=400, detail=2000, monkeypatch=monkeypatch)
    assert samples["halvings"] == 0 and samples["interval_s"] == pytest.approx(DEFAULT_INTERVAL_S)
