"""A loaded machine preempts a worker where it reads its clocks, between dataset calls and between fetches: those waits
for a core are the job's CPU contention and must be attributed as such, not left "other" (unexplained)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch
from torch.utils.data._utils.fetch import _MapDatasetFetcher

from profiler.instrument import torch_hooks, worker

ROOT = Path(__file__).resolve().parents[1]
JOBS = Path(__file__).parent / "jobs"


class Squares(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        x = torch.full((64, 64), float(i))
        return (x @ x).sum(0)  # tens of µs: long enough that each call reads the on-CPU clock


def test_the_calls_and_the_collate_cover_the_fetch_end_to_end() -> None:
    fetcher = torch_hooks.instrument_fetcher(_MapDatasetFetcher(Squares(), True, torch.utils.data.default_collate,
                                                                False), 0)
    meta = fetcher.fetch(list(range(8))).meta
    rows = meta.rows
    assert rows[0, 0] == meta.cpu_start[0]  # from the fetch's start
    assert (rows[1:, 0] == rows[:-1, 1]).all()  # each call from the previous one's end
    c0, c1, ccpu, _ = meta.collate
    assert c0 == rows[-1, 1] < c1 and 0 <= ccpu <= c1 - c0
    assert ((rows[:, 2] >= 0) & (rows[:, 2] <= rows[:, 1] - rows[:, 0])).all()


def test_join_calls_keeps_an_unexpected_order() -> None:
    rows = np.zeros((3, len(worker.ROW_COLUMNS)), dtype=np.int64)
    rows[:, 0], rows[:, 1] = [10, 30, 25], [20, 40, 50]  # the third starts before the second ends: left as it is
    assert worker.join_calls(rows, 5, 60) == 50
    assert rows[:, 0].tolist() == [5, 20, 25]
    assert worker.join_calls(rows, 0, 0) == 0  # no collate stays no collate


def _pinned(cpu: int) -> Callable[[], None]:
    return lambda: os.sched_setaffinity(0, {cpu})


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity (Linux)")
def test_a_worker_preempted_by_a_neighbour_is_cpu_bound_not_unexplained(tmp_path: Path) -> None:
    """The planted CPU-bound job (1 worker) and a busy loop share one core: the worker waits for it over and over.
    Before the calls were joined end to end and the worker's time between fetches was measured, a quarter of the
    wait came out "other" on this machine under load; now it is the job's CPU (on a core or waiting for one)."""
    cpu = sorted(os.sched_getaffinity(0))[-1]
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=_pinned(cpu))
    try:
        out = tmp_path / "run"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        p = subprocess.run([sys.executable, "-m", "profiler", "run", "--no-progress", "--no-plots", "--steps", "24",
                            "--warmup", "2", "--out", str(out), str(JOBS / "attach_planted.py"), "cpu", "-", "1", "0"],
                           capture_output=True, text=True, timeout=240, env=env, preexec_fn=_pinned(cpu))
    finally:
        burner.kill()
        burner.wait()
    assert p.returncode == 0, p.stderr[-3000:]
    rec = json.loads((out / "run.json").read_text())
    stall = rec["stall"]
    assert rec["verdict"]["bottleneck"] == "cpu", rec["verdict"]["summary"]
    assert stall["by_kind"]["runqueue"] > 0.2 * stall["seconds"], stall["by_kind"]  # it did wait for the core
    assert stall["share_by_cause"]["other"] < 0.08, stall["by_kind"]
    bt = rec["timeline"]["batches"]
    gaps = [e - s for s, e in zip(bt["gap_start"], bt["gap_end"])]
    assert sum(g > 0 for g in gaps) >= len(gaps) - 2  # every batch but each worker's first knows its gap
