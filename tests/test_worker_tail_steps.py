"""Worker tail steps (NOTE [ Worker tail steps ], session.py): beyond the detail, a step whose batch came from a
worker's lean fetch is folded into the tail's totals without a StepRow or a BatchMeta, and the record says what the
same loop recorded row by row says: the same steps and samples in the tail, every tail step in its histograms, the
steps joined end to end, an h2d stage timed, the window's last step and an interruption handled. Real DataLoaders
with two forked workers over in-memory tensors; the path is switched off for the comparison the way flat steps are
(``Session._fast`` kept False), nothing else."""
from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import profiler
from profiler.instrument import session as session_mod
from profiler.record import load

pytestmark = [pytest.mark.xdist_group("flat_steps"),
              pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")]

# One epoch of 400 batches of 8 over two workers: each worker's first QUIET_AFTER (16) fetches are full, the rest
# mostly lean (a worker's fetch preempted on a loaded machine sends its full record: the general way, also correct)
N, BATCH, DETAIL, STEPS = 3200, 8, 20, 300
WEIGHT = torch.randn(16, 16)


def _loader(n: int = N) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(n, 16, generator=g), torch.arange(n)), batch_size=BATCH,
                      num_workers=2, multiprocessing_context="fork")


def _record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast: bool, h2d: bool = False,
            stop_at: int | None = None, untimed: list[int] | None = None, epochs: int = 1,
            n: int = N) -> tuple[Any, int]:
    """The record of a light loop with workers, DETAIL detail steps, and how many tail steps went the worker tail
    way (``fast`` False: none, every step made a row); ``untimed`` counts those whose batch came with no record."""
    monkeypatch.setattr(session_mod, "DETAIL_STEPS", DETAIL)
    taken = [0]
    end_step, open_window = session_mod.Session._end_step, session_mod.Session._open_window

    def counting(self: Any, t_ns: int) -> None:
        wt = self._open_wt
        taken[0] += wt is not None
        if untimed is not None and wt is not None and wt[session_mod.WT_WORKER] < 0:
            untimed[0] += 1
        end_step(self, t_ns)

    def window(self: Any, t0_ns: int) -> None:
        open_window(self, t0_ns)
        self._fast = self._fast and fast

    monkeypatch.setattr(session_mod.Session, "_end_step", counting)
    monkeypatch.setattr(session_mod.Session, "_open_window", window)
    with profiler.profile(out=str(tmp_path / ("fast" if fast else "rows") / str(h2d)), warmup=3, steps=STEPS,
                          plots=False, quiet=True) as run:
        for i, (x, _y) in enumerate(x for _ in range(epochs) for x in _loader(n)):
            if i == stop_at:
                raise KeyboardInterrupt
            if h2d:
                with profiler.stage("h2d"):
                    x = x.clone()
            for _ in range(3):
                x = x @ WEIGHT
    monkeypatch.undo()
    assert run.record is not None
    return run.record, taken[0]


def _tail_invariants(rec: Any, steps: int) -> dict[str, Any]:
    s, tail = rec.timeline["steps"], rec.timeline["tail"]
    assert tail["steps"] == steps - DETAIL and tail["detail_steps"] == DETAIL
    assert len(s["step"]) == 3 + DETAIL and s["step"] == list(range(3 + DETAIL))  # warm-up and detail only
    assert sum(tail["hist_us_log2"]["wait"]) == sum(tail["hist_us_log2"]["compute"]) == tail["steps"]
    assert tail["idle_s"] == tail["wait_s"] > 0 and tail["compute_s"] > 0 and tail["main_runq_s"] >= 0
    assert tail["profiler_rest_s"] > 0  # each step's bookkeeping, taken as the profiler's
    assert tail["start_s"] == s["compute_end"][-1] < tail["end_s"]  # the first tail step began where the last
    # detail step ended
    assert rec.window["samples"] == sum(s["samples"][3:]) + tail["samples"]
    return {"steps": tail["steps"], "samples": tail["samples"], "basis": rec.job["loader"]["samples_basis"],
            "window": rec.window["steps"], "pids": sorted(set(rec.timeline["batches"]["pid"]))}


def test_worker_tail_steps_record_what_rows_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    untimed = [0]
    fast, taken = _record(tmp_path, monkeypatch, fast=True, untimed=untimed)
    rows, none_taken = _record(tmp_path, monkeypatch, fast=False)
    assert taken > 0 and none_taken == 0  # the comparison is between the two paths
    # beyond the detail and the batches already asked for, the workers made their batches untimed (NOTE [ Worker
    # detail under run ], batch.py): all but each one's first of the epoch
    assert untimed[0] >= STEPS - DETAIL - 2 * 2 * 2 - 2
    a, b = _tail_invariants(fast, STEPS), _tail_invariants(rows, STEPS)
    assert a.pop("pids") != b.pop("pids")  # (each run's own workers)
    assert a == b and a["samples"] == (STEPS - DETAIL) * BATCH and a["basis"] == "batch" and a["window"] == STEPS
    assert not fast.partial
    # the sampler was told of both workers (on_first_pid) as they first sent a batch
    assert len({p["pid"] for p in fast.samples["processes"] if p.get("role") == "worker"}) == 2


def test_an_h2d_stage_in_worker_tail_steps_is_timed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec, taken = _record(tmp_path, monkeypatch, fast=True, h2d=True)
    assert taken == 0  # each step made a row by its stage, as the step it is
    _tail_invariants(rec, STEPS)
    assert rec.timeline["tail"]["h2d_s"] > 0


def test_a_run_interrupted_among_worker_tail_steps_keeps_them(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(KeyboardInterrupt):
        _record(tmp_path, monkeypatch, fast=True, stop_at=200)
    rec = load(tmp_path / "fast" / "False" / "run.json")
    assert rec.partial
    # warm-up 3, detail 20; the step under way when it was interrupted ended then, into the tail too
    assert _tail_invariants(rec, 198)["steps"] == 178


def test_workers_of_a_later_epoch_beyond_the_detail_are_still_named(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each epoch makes new workers (not persistent); the second epoch's begin beyond the detail, where the workers
    make all but their first batch untimed: that first batch still names each one (on_first_pid: the sampler labels
    it a worker), and every step is counted."""
    untimed = [0]
    rec, _ = _record(tmp_path, monkeypatch, fast=True, untimed=untimed, epochs=2, n=120 * BATCH)
    assert untimed[0] > 0 and rec.window["steps"] == 2 * 120 - 3 and rec.timeline["tail"]["steps"] == 237 - DETAIL
    assert rec.window["samples"] == 237 * BATCH
    workers = [p for p in rec.samples["processes"] if p.get("role") == "worker"]
    assert len({p["pid"] for p in workers}) == 4


def test_a_session_that_keeps_every_batch_timed_gets_no_untimed_batch(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``untimed_tail`` False (the monitor's: its detail chunks come back after the first tail step): the workers
    keep recording every batch beyond the detail, and the tail's totals are the same."""
    init = session_mod.Session.__init__

    def keeping(self: Any, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        self.untimed_tail = False

    monkeypatch.setattr(session_mod.Session, "__init__", keeping)
    untimed = [0]
    rec, taken = _record(tmp_path, monkeypatch, fast=True, untimed=untimed)
    assert taken > 0 and untimed[0] == 0
    assert _tail_invariants(rec, STEPS)["samples"] == (STEPS - DETAIL) * BATCH


def test_a_worker_tail_reads_the_waits_clocks_one_step_in_eight(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """TAIL_CLOCK_EVERY: a worker tail step reads the wait's on-CPU and run-queue clocks one time in eight (the others
    only its wall clocks), and the tail's ``main_runq_s`` is the read steps' scaled by all the waits over theirs."""
    from profiler.instrument import clocks

    reads = [0]
    start = clocks.WaitClocks.start

    def counted(self: Any) -> tuple[int, int, int]:
        reads[0] += 1
        return start(self)

    monkeypatch.setattr(clocks.WaitClocks, "start", counted)
    rec, taken = _record(tmp_path, monkeypatch, fast=True)
    every = session_mod.TAIL_CLOCK_EVERY
    assert every > 1 and taken > 2 * every
    # the warm-up's and the detail's steps read them at every step (and a full fetch's tail step may go the row way:
    # it reads them too, or not, as its turn says); the worker tail steps one in ``every``
    tail_reads = reads[0] - (3 + DETAIL)
    assert taken // every - 1 <= tail_reads <= -(-(STEPS - DETAIL) // every) + 1, (reads[0], taken)
    tail = rec.timeline["tail"]
    assert tail["main_runq_s"] >= 0 and tail["steps"] == STEPS - DETAIL


def test_the_tails_run_queue_estimate_scales_the_steps_that_read_it() -> None:
    from profiler.instrument.steps import Tail

    t = Tail()
    t.add_step(0, 1_000, 1_000, 1_000, 2_000, 8, 1_000, 300, 0, 0)  # read: 300 ns over a 1,000 ns wait
    t.add_step(2_000, 5_000, 5_000, 5_000, 6_000, 8, 3_000, -1, 0, 0)  # not read
    assert t.main_runq_ns == 300 and t.runq_read_wait_ns == 1_000 and t.wait_ns == 4_000
    assert t.runq_estimate_ns() == 1_200
    every = Tail()
    every.add_step(0, 1_000, 1_000, 1_000, 2_000, 8, 1_000, 300, 0, 0)
    assert every.runq_estimate_ns() == 300  # every step read: exact
