"""Steps kept flat in the steady state of a ``num_workers=0`` loader (NOTE [ Flat steps ], flat_steps.py) end up in
the record exactly as every other step does: the same rows, batches and sample counts as the same loop recorded step
by step, the steps joined end to end, an epoch's last step ended where the next ``next()`` began, an h2d stage and an
interruption handled. Real DataLoaders over in-memory tensors; the flat path is switched off for the comparison by
keeping the window from taking flat steps (``Session._fast``), nothing else."""
from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import profiler
from profiler.instrument import flat_steps as flat_steps_mod
from profiler.instrument import session as session_mod
from profiler.instrument.flat_steps import FLAT_FOLD_EVERY

from _util import on_core_clocks

pytestmark = pytest.mark.xdist_group("flat_steps")

# 50 batches an epoch, the last of 4: a new iterator's first QUIET_AFTER (16) fetches are never lean (clocks.quiet),
# so an epoch needs more than that for flat steps, and on a loaded machine some stretches never start
N, BATCH = 396, 8
WEIGHT = torch.randn(16, 16)


def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(N, 16, generator=g), torch.arange(N)), batch_size=BATCH)


def _step(x: torch.Tensor) -> None:
    for _ in range(3):  # a light step: the loop's own work, a few µs
        x = x @ WEIGHT


def _count_flat(monkeypatch: pytest.MonkeyPatch, flat: bool = True) -> list[int]:
    """[steps kept flat] once the window closes; ``flat`` False: the window takes none (every step recorded as it
    happens). The main thread's on-CPU clock is a fake that keeps it on its core (_util.on_core_clocks). Why: whether
    a step is kept flat depends on the machine (a fetch preempted for 10 µs or more ends its lean stretch, and a
    stretch that never starts keeps no step flat: a suite run beside other jobs failed here with none kept); what
    these tests check is the logic that follows, the same record from flat steps as from steps recorded one by one."""
    on_core_clocks(monkeypatch)
    kept = [0]
    materialize = session_mod.Session._materialize
    materialize_open = session_mod.Session._materialize_open
    open_window = session_mod.Session._open_window

    def counting(self: Any) -> None:
        kept[0] += len(self._flat) - self._flat_done
        materialize(self)

    def counting_open(self: Any) -> None:  # the open one, made a row by its h2d stage
        kept[0] += self._open_flat is not None
        materialize_open(self)

    def window(self: Any, t0_ns: int) -> None:
        open_window(self, t0_ns)
        self._fast = self._fast and flat

    monkeypatch.setattr(session_mod.Session, "_materialize", counting)
    monkeypatch.setattr(session_mod.Session, "_materialize_open", counting_open)
    monkeypatch.setattr(session_mod.Session, "_open_window", window)
    return kept


def _record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flat: bool, steps: int = 150,
            h2d: bool = False) -> tuple[Any, int]:
    """The record of a light loop over four epochs and how many of its steps were kept flat."""
    kept = _count_flat(monkeypatch, flat)
    loader = _loader()
    with profiler.profile(out=str(tmp_path / ("flat" if flat else "rows")), warmup=3, steps=steps, plots=False,
                          quiet=True) as run:
        for _ in range(4):
            for x, _y in loader:
                if h2d:
                    with profiler.stage("h2d"):
                        x = x.clone()
                _step(x)
    assert run.record is not None
    return run.record, kept[0]


def _structure(rec: Any) -> dict[str, list]:
    steps, batches = rec.timeline["steps"], rec.timeline["batches"]
    return {**{f"steps.{k}": steps[k] for k in ("step", "epoch", "batch", "worker", "samples", "measured")},
            **{f"batches.{k}": batches[k] for k in ("batch", "worker", "pid", "samples")},
            "basis": [rec.job["loader"]["samples_basis"]]}


def test_flat_steps_record_what_step_by_step_recording_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flat, kept = _record(tmp_path, monkeypatch, flat=True)
    rows, none_kept = _record(tmp_path, monkeypatch, flat=False)
    assert kept > 0 and none_kept == 0  # the comparison is between the two paths
    assert _structure(flat) == _structure(rows)
    s = flat.timeline["steps"]
    assert s["samples"][:50] == [8] * 49 + [4]  # the batch's own count, the short last batch too
    assert flat.window["steps"] == 150 and flat.window["samples"] == rows.window["samples"]
    # the fetch's own time, flat or not, kept to be taken out of the wait (a lean fetch's can be under the record's
    # 1 µs resolution)
    assert all(v >= 0 for v in s["profiler_wait"]) and sum(s["profiler_wait"]) > 0
    assert not flat.partial


def test_flat_steps_join_end_to_end_and_an_epoch_ends_where_the_next_call_began(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    rec, kept = _record(tmp_path, monkeypatch, flat=True)
    assert kept > 0
    s, b = rec.timeline["steps"], rec.timeline["batches"]
    iter_start = rec.timeline["epochs"]["iter_start"]
    for i in range(len(s["step"])):
        assert s["wait_start"][i] <= s["wait_end"][i] <= s["h2d_start"][i] <= s["compute_end"][i]
        assert s["main_cpu"][i] <= round(s["wait_end"][i] - s["wait_start"][i], 6) + 2e-6
        if i + 1 < len(s["step"]):
            if s["epoch"][i + 1] == s["epoch"][i]:
                assert s["compute_end"][i] == s["wait_start"][i + 1]
            else:  # its epoch's end: the next() that raised StopIteration, before the next epoch's iter()
                assert s["compute_end"][i] <= iter_start[s["epoch"][i + 1]]
    for k, batch in enumerate(b["batch"]):  # each batch inside its own step's wait
        i = s["batch"].index(batch)
        assert s["wait_start"][i] <= b["collate_start"][k] <= b["collate_end"][k] <= s["wait_end"][i]
    assert b["batch"] == sorted(b["batch"]) and [x for x in s["batch"] if x >= 0] == sorted(b["batch"])


def test_an_h2d_stage_inside_flat_steps_is_timed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec, kept = _record(tmp_path, monkeypatch, flat=True, h2d=True)
    assert kept > 0  # each taken as a row by the stage, as the step it is
    s = rec.timeline["steps"]
    measured = [i for i, m in enumerate(s["measured"]) if m]
    assert len(measured) == 150
    for i in measured:
        assert s["wait_end"][i] <= s["h2d_start"][i] < s["h2d_end"][i] <= s["compute_end"][i]


def test_a_run_interrupted_among_flat_steps_keeps_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kept = _count_flat(monkeypatch)
    loader = _loader()
    with pytest.raises(KeyboardInterrupt):
        with profiler.profile(out=str(tmp_path / "out"), warmup=3, steps=500, plots=False, quiet=True) as run:
            for n, (x, _y) in enumerate(x for _ in range(4) for x in loader):
                if n == 120:  # the 21st batch of the third epoch: its lean fetches have begun
                    raise KeyboardInterrupt
                _step(x)
    rec = run.record
    assert rec is not None and rec.partial and kept[0] > 0
    s = rec.timeline["steps"]
    assert s["step"] == list(range(121))  # the one under way when it was interrupted too, ended then
    assert s["compute_end"][-1] >= s["wait_end"][-1] > s["compute_end"][-2]
    assert rec.window["steps"] == 118 and sum(s["samples"]) == rec.window["samples"] + 3 * BATCH


def test_flat_steps_beyond_the_detail_fold_into_the_tail_totals(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A long run keeps its first DETAIL_STEPS in detail and the rest as totals: flat steps there are folded every
    FLAT_FOLD_EVERY (here 16, so that several folds happen), with the same totals as steps folded one by one."""
    monkeypatch.setattr(session_mod, "DETAIL_STEPS", 20)
    monkeypatch.setattr(session_mod, "FLAT_FOLD_EVERY", 16)
    flat, kept = _record(tmp_path, monkeypatch, flat=True)
    rows, _ = _record(tmp_path, monkeypatch, flat=False)
    assert kept > 0
    for rec in (flat, rows):
        s, tail = rec.timeline["steps"], rec.timeline["tail"]
        assert tail["steps"] == 130 and tail["detail_steps"] == 20 and rec.window["steps"] == 150
        assert len(s["step"]) == 23 and s["step"] == list(range(23))  # warm-up and detail only
        assert sum(tail["hist_us_log2"]["wait"]) == sum(tail["hist_us_log2"]["compute"]) == 130
        assert tail["idle_s"] == tail["wait_s"] > 0 and tail["profiler_wait_s"] > 0
        assert tail["start_s"] == s["compute_end"][-1] < tail["end_s"]  # the first tail step began where the last
        # detail step ended
        assert rec.window["samples"] == sum(s["samples"][3:]) + tail["samples"]
    assert flat.timeline["tail"]["samples"] == rows.timeline["tail"]["samples"]
    assert _structure(flat) == _structure(rows)


def test_an_interrupt_inside_the_flat_steps_pass_loses_none_of_them(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C (or SIGTERM under ``profiler run``) can land while the window's close makes the flat steps' rows: the
    run stops, and the close, called again, goes on from where it was, with every step recorded once."""
    kept = _count_flat(monkeypatch)
    lean_meta, materialize = flat_steps_mod.lean_meta, session_mod.Session._materialize
    calls = {"inside": False, "made": 0, "raised": False}

    def interrupted(out: Any, pid: int) -> Any:
        if calls["inside"] and not calls["raised"]:
            calls["made"] += 1
            if calls["made"] == 5:  # the fifth flat step's record: the four before it are made
                calls["raised"] = True
                raise KeyboardInterrupt
        return lean_meta(out, pid)

    def watched(self: Any) -> None:
        calls["inside"] = True
        try:
            materialize(self)
        finally:
            calls["inside"] = False

    monkeypatch.setattr(flat_steps_mod, "lean_meta", interrupted)  # the flat steps' records (_flat_row)
    monkeypatch.setattr(session_mod.Session, "_materialize", watched)
    loader = _loader()
    with pytest.raises(KeyboardInterrupt):
        with profiler.profile(out=str(tmp_path / "out"), warmup=3, steps=150, plots=False, quiet=True) as run:
            for _ in range(4):
                for x, _y in loader:
                    _step(x)
    rec = run.record
    assert calls["raised"] and kept[0] > 5 and rec is not None
    s = rec.timeline["steps"]
    assert s["step"] == list(range(153)) and rec.window["steps"] == 150
    assert rec.timeline["batches"]["batch"] == list(range(153)) == s["batch"]


class _Lazy:
    """A batch that says its shape on demand, and fails to once (a lazily built batch whose build went wrong)."""

    made = 0

    def __init__(self, x: torch.Tensor) -> None:
        _Lazy.made += 1
        self.x, self.k = x, _Lazy.made

    @property
    def shape(self) -> torch.Size:
        if self.k == 80:
            raise RuntimeError("the batch could not be built")
        return self.x.shape


def test_a_batch_that_fails_to_say_its_shape_is_not_the_jobs_error(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(N, 16, generator=g)), batch_size=BATCH,
                        collate_fn=lambda items: _Lazy(torch.stack([x for (x,) in items])))
    with profiler.profile(out=str(tmp_path / "out"), warmup=3, steps=150, plots=False, quiet=True) as run:
        for _ in range(4):
            for b in loader:  # the profiler asks every batch its shape; the job never does
                _step(b.x)
    rec = run.record
    assert rec is not None and not rec.partial and rec.window["steps"] == 150
    s = rec.timeline["steps"]
    assert s["step"] == list(range(153)) and all(k in (4, 8) for k in s["samples"])  # that one counted by its calls


def _young_collections_in_a_long_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """(garbage collections set off over 3,000 tail steps of a light loop, steps kept flat)."""
    monkeypatch.setattr(session_mod, "DETAIL_STEPS", 20)
    kept = _count_flat(monkeypatch)
    g = torch.Generator().manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(BATCH * 3300, 16, generator=g), torch.arange(BATCH * 3300)),
                        batch_size=BATCH)  # one epoch: no iterator made (and dropped) inside the counted steps
    seen: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    with profiler.profile(out=str(tmp_path / "tail"), warmup=3, steps=3250, plots=False, quiet=True):
        for i, (x, _y) in enumerate(loader):
            _step(x)
            if i == 200:  # well inside the tail, its first folds done
                gc.collect()
                gc.callbacks.append(count)
            elif i == 3200:
                gc.callbacks.remove(count)
    return len(seen), kept[0]


def test_a_long_tail_of_flat_steps_sets_off_no_garbage_collection(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Each flat step holds objects the garbage collector tracks until its fold: FLAT_FOLD_EVERY keeps them under the
    collector's young threshold, so a long tail's flat steps set off no collection: as many as with folds of 32 steps
    (the few the rest of the profiled loop sets off), where folds of 1,024 (until 2026-12-07) set off a dozen more
    over 3,000 steps, and their survivors, in time, a full collection of the job's heap."""
    assert gc.isenabled() and gc.get_threshold()[0] >= FLAT_FOLD_EVERY * 3  # the premise
    got: dict[int, int] = {}
    for every in (32, FLAT_FOLD_EVERY, 1024):
        monkeypatch.setattr(session_mod, "FLAT_FOLD_EVERY", every)
        got[every], kept = _young_collections_in_a_long_tail(tmp_path / str(every), monkeypatch)
        assert kept > 2500  # most of them (a new iterator's first fetches are never lean)
    assert got[FLAT_FOLD_EVERY] <= got[32] + 1, got
    assert got[1024] > got[32] + 4, got  # (the test can fail: the fold's size is what it measures)
