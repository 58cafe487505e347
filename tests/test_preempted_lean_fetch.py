"""NOTE [ A preempted lean fetch ends no stretch ] (profiler/instrument/inline_fetch.py): a main-thread lean fetch
that left its core but read nothing is recorded whole and its stretch goes on; one that read bytes still ends it.
A real DataLoader (num_workers=0) whose dataset puts every 10th batch off its core (a sleep, on the fake on-CPU
clock of _util.on_core_clocks: a preemption the test controls) or has it read a file."""
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
        self.slept, self.path = slept, path
        self.x = torch.randn(BATCH * BATCHES, 8)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> Any:
        if i % (BATCH * 10) == 0 and i:
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
