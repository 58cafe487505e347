"""A num_workers=0 loop that leaves its core (a preemption) keeps its cheap paths: NOTE [ A preempted lean fetch ends
no stretch ] (profiler/instrument/inline_fetch.py) — a main-thread lean fetch that left its core but read nothing is
recorded whole and its stretch goes on, one that read bytes still ends it — and a wait off its core outside the fetch
makes no tail step a row (session.WAIT_CPU_PROBE). A real DataLoader whose dataset (or sampler) puts every 10th
batch off its core: a sleep, on the fake on-CPU clock of _util.on_core_clocks (a preemption the test controls), or
a file read."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import profiler
from profiler.instrument import inline_fetch
from profiler.instrument import session as session_mod

from _util import on_core_clocks

pytestmark = pytest.mark.xdist_group("flat_steps")

BATCH, BATCHES = 4, 400


class OffCoreEvery10th(Dataset):
    """Every 10th batch's first sample is 0.3 ms off its core: asleep (``slept`` tells the fake clock), or reading
    ``path`` as well (bytes read: what per-call detail is for)."""

    def __init__(self, slept: list[int], path: Path | None = None):
        self.slept, self.path, self.sleeps = slept, path, True
        self.x = torch.randn(BATCH * BATCHES, 8)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> Any:
        if i % (BATCH * 10) == 0 and i and self.sleeps:
            t = time.perf_counter_ns()
            time.sleep(0.0003)
            if self.path is not None:
                self.path.read_bytes()
            self.slept[0] += time.perf_counter_ns() - t
        return self.x[i]


STEADY = 150  # the batches before the steady state: the warm-up, the detail, a new iterator's first (never lean)


def _full_fetches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads: bool) -> tuple[int, int]:
    """(full fetches, batches put off their core) over the steady state (beyond STEADY) of BATCHES light steps."""
    monkeypatch.setattr(session_mod, "DETAIL_STEPS", 20)
    slept = [0]
    on_core_clocks(monkeypatch, slept)
    full = [0]
    steady = [False]
    begin = inline_fetch.begin_fetch

    def counted(*a: Any) -> Any:
        full[0] += steady[0]
        return begin(*a)

    monkeypatch.setattr(inline_fetch, "begin_fetch", counted)
    path = None
    if reads:
        path = tmp_path / "bytes"
        path.write_bytes(b"x" * 65536)
    loader = DataLoader(OffCoreEvery10th(slept, path), batch_size=BATCH)
    with profiler.profile(out=str(tmp_path / "out"), warmup=3, steps=BATCHES - 10, plots=False, quiet=True) as run:
        for i, x in enumerate(loader):
            x.sum()
            steady[0] = i >= STEADY
    assert run.record is not None and run.record.window["steps"] == BATCHES - 10
    return full[0], (BATCHES - STEADY) // 10


def test_a_lean_fetch_that_only_left_its_core_keeps_its_stretch(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    full, off = _full_fetches(tmp_path, monkeypatch, reads=False)
    # One full fetch per stretch of 16 (its probe) and, before the NOTE, one more after each lean fetch seen off its
    # core (of the 25 put off it, those in stretches that check each fetch): here the stretches go on through them
    stretches = (BATCHES - STEADY) // inline_fetch.LEAN_STRETCH
    assert full <= stretches + 3, (full, stretches, off)


def test_a_lean_fetch_that_read_bytes_ends_its_stretch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    quiet, _ = _full_fetches(tmp_path / "q", monkeypatch, reads=False)
    full, off = _full_fetches(tmp_path, monkeypatch, reads=True)
    assert full >= quiet + off // 2, (full, quiet, off)  # the reads end stretches: full fetches after them


class SleepyIndices(torch.utils.data.Sampler[int]):
    """Indices in order, every 10th batch's first one after 0.3 ms off the core: inside ``next()`` (the wait) but
    outside the fetch, which the session's wait-CPU probe (session.WAIT_CPU_PROBE) notices."""

    def __init__(self, n: int, slept: list[int]):
        self.n, self.slept = n, slept

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Any:
        for i in range(self.n):
            if i % (BATCH * 10) == 0 and i:
                t = time.perf_counter_ns()
                time.sleep(0.0003)
                self.slept[0] += time.perf_counter_ns() - t
            yield i


def test_tail_steps_stay_flat_when_the_wait_leaves_its_core(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wait found off its core outside the fetch makes every *detail* step read the wait's on-CPU clock (a row
    each: WAIT_CPU_PROBE); beyond the detail the tail keeps no such figure, so its steps stay flat."""
    monkeypatch.setattr(session_mod, "DETAIL_STEPS", 20)
    slept = [0]
    on_core_clocks(monkeypatch, slept)
    rows = [0]
    steady = [False]
    after_wait = session_mod.Session._after_wait

    def counted(self: Any, *a: Any) -> Any:
        rows[0] += steady[0]
        return after_wait(self, *a)

    monkeypatch.setattr(session_mod.Session, "_after_wait", counted)
    ds = OffCoreEvery10th(slept)
    ds.sleeps = False  # only the sampler's sleeps
    loader = DataLoader(ds, batch_size=BATCH, sampler=SleepyIndices(len(ds), slept))
    with profiler.profile(out=str(tmp_path / "out"), warmup=3, steps=BATCHES - 10, plots=False, quiet=True) as run:
        for i, x in enumerate(loader):
            x.sum()
            steady[0] = i >= STEADY
    assert run.record is not None and run.record.window["steps"] == BATCHES - 10
    assert run.record.timeline["tail"]["steps"] > 300
    # the rows made beyond STEADY: a stretch's probe fetch each (1 in 16), not every step since a sleep (most of them)
    assert rows[0] <= (BATCHES - STEADY) // inline_fetch.LEAN_STRETCH + 5, rows[0]
