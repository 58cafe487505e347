"""The profiler's own cost: the lean per-call path records what the old one did, and its measured time is reported
and taken out of the wait, never attributed to the job (timing *claims* are in scripts/bench_overhead_light.py)."""
from __future__ import annotations

import copy
import multiprocessing as mp
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset
from torch.utils.data._utils.fetch import _IterableDatasetFetcher, _MapDatasetFetcher

import profiler
from profiler.analysis import analyze
from profiler.analysis.stats import stage_stats, tables
from profiler.instrument import clocks, torch_hooks, worker
from profiler.record import RunRecord, load


class Staged(Dataset):
    """Each call names a stage and nests one inside it; index 13 raises inside both."""

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i: int) -> torch.Tensor:
        with profiler.stage("tokenize"):
            with profiler.stage("inner"):
                if i == 13:
                    raise KeyError(i)
                x = torch.full((4,), float(i))
        return x


def _instrumented(ds: Any, collate: Any = None, auto: bool = True) -> Any:
    f = _MapDatasetFetcher(ds, auto, collate or torch.utils.data.default_collate, False)
    return torch_hooks.instrument_fetcher(f, 3)


def test_per_call_rows_stages_and_items() -> None:
    def collate(items: list) -> torch.Tensor:
        with profiler.stage("in_collate"):  # outside any call: no row takes it
            return torch.stack(items)

    out = _instrumented(Staged(), collate).fetch([5, 7, 9])
    assert isinstance(out, worker.Instrumented)
    assert torch.equal(out.batch[:, 0], torch.tensor([5.0, 7.0, 9.0]))  # the user's batch, untouched
    meta = out.meta
    rows = meta.rows
    assert rows.shape == (3, len(worker.ROW_COLUMNS)) and meta.items == 3 and meta.worker_id == 3
    assert rows[:, 6].tolist() == [5, 7, 9] and rows[:, 7].tolist() == [1, 1, 1]
    wall = rows[:, 1] - rows[:, 0]
    assert (wall > 0).all() and (rows[:, 2] >= 0).all() and (rows[:, 2] <= wall).all()  # on-CPU never above wall
    assert (rows[1:, 0] >= rows[:-1, 1]).all()  # calls in order, not overlapping
    assert set(meta.stages) == {"tokenize", "inner"}  # the collate's stage belongs to no call
    for name in ("tokenize", "inner"):
        assert (meta.stages[name] > 0).all()
    assert (meta.stages["tokenize"] + meta.stages["inner"] <= wall).all()  # exclusive (self) times
    c0, c1, ccpu, crunq = meta.collate
    assert c1 >= c0 >= rows[-1, 1] and 0 <= ccpu <= c1 - c0 and crunq >= 0
    assert meta.own_ns >= 3 * worker.call_cost_ns() > 0


def test_a_call_that_raises_is_timed_and_the_error_is_the_users() -> None:
    f = _instrumented(Staged())
    with pytest.raises(KeyError):
        f.fetch([1, 13])
    meta = f.fetch([2, 3]).meta  # the next batch starts clean
    assert meta.items == 2 and meta.stages["inner"].shape == (2,)


def test_meta_pickles_without_its_derived_views() -> None:
    meta = _instrumented(Staged()).fetch([1, 2]).meta
    underived = pickle.dumps(meta)
    before = meta.rows.copy()
    assert meta._derived_views is not None and meta.stages
    blob = pickle.dumps(meta)
    clone = pickle.loads(blob)
    assert clone._derived_views is None and clone._stage_views is None
    assert blob == underived, "the derived views travelled with the batch"
    assert np.array_equal(clone.rows, before) and set(clone.stages) == {"tokenize", "inner"}


def test_getitems_keys_and_odd_indices() -> None:
    class Many(Dataset):
        def __len__(self) -> int:
            return 10

        def __getitem__(self, k: Any) -> int:
            return 0

        def __getitems__(self, keys: list) -> list:
            return [torch.tensor(k) for k in keys]

    meta = _instrumented(Many()).fetch([1, 2, 3, 4]).meta
    assert meta.items == 4 and meta.rows[:, 7].tolist() == [4] and meta.rows[:, 6].tolist() == [-1]

    class Keys(Dataset):  # keys a dataset may be indexed by: numpy ints, hash ids beyond int64, strings
        def __getitem__(self, k: Any) -> torch.Tensor:
            return torch.zeros(1)

    meta = _instrumented(Keys(), lambda b: b).fetch([np.int64(4), 1 << 70, "a"]).meta
    assert meta.rows[:, 6].tolist() == [4, -1, -1]


def test_iterable_end_is_no_row() -> None:
    class Three(IterableDataset):
        def __iter__(self) -> Any:
            for i in range(3):
                with profiler.stage("make"):
                    pass
                yield torch.tensor(i)

    f = _IterableDatasetFetcher(Three(), True, torch.utils.data.default_collate, False)
    torch_hooks.instrument_fetcher(f, 0)
    meta = f.fetch([0, 0, 0, 0, 0]).meta  # asks for 5, the iterator ends after 3 (a short last batch)
    assert meta.items == 3 and meta.rows.shape[0] == 3 and meta.stages["make"].shape == (3,)
    with pytest.raises(StopIteration):
        f.fetch([0])


def _child_fds(q: Any) -> None:
    q.put((clocks._fds(), clocks.process_io()))


def test_a_forked_child_opens_its_own_proc_descriptors() -> None:
    parent = clocks._fds()
    clocks.process_io()
    if parent[0] is None:
        pytest.skip("/proc/thread-self is not readable here")
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_fds, args=(q,))
    p.start()
    child, io = q.get(timeout=60)
    p.join(60)
    # The parent's descriptors are still open in the child, so its own get other numbers: it re-opened them.
    assert child[0] is not None and child[0] != parent[0] and child[1] != parent[1]
    assert io[0] >= 0


class Memory(TensorDataset):
    pass


def _profiled(tmp_path: Path, workers: int, steps: int = 40) -> RunRecord:
    g = torch.Generator().manual_seed(0)
    ds = Memory(torch.randn(32 * 60, 16, generator=g), torch.randint(0, 4, (32 * 60,), generator=g))
    loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=workers)
    model = torch.nn.Linear(16, 4)
    with profiler.profile(out=str(tmp_path / "out"), warmup=2, steps=steps, plots=False, quiet=True) as run:
        for x, y in loader:
            torch.nn.functional.cross_entropy(model(x), y).backward()
    return load(Path(run.out) / "run.json")


@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory) -> RunRecord:
    return _profiled(tmp_path_factory.mktemp("light"), workers=0)


def test_the_record_carries_its_own_cost(light: RunRecord) -> None:
    st = light.timeline["steps"]
    n = len(st["step"])
    assert len(st["profiler_wait"]) == len(st["profiler_rest"]) == n
    measured = [i for i in range(n) if st["measured"][i]]
    # workers=0: every step's wait holds the fetch's instrumentation; this dataset has no __getitems__, so it is
    # fetched by the written-out fetch, whose timed calls cost at least what it calibrated, each. A lean fetch
    # (worker.LEAN_STRETCH) times no call, so its own time is its per-batch work alone (its calls are one span,
    # index -1).
    acc = light.timeline["accounting"]
    assert acc["own_per_call_ns"] > 0
    lean, close = acc["own_per_inline_call_ns"]
    per_call_s = min(lean, close) / 1e9
    assert per_call_s > 0
    spans = light.timeline["sample_spans"]
    untimed = {b for b, k in zip(spans["batch"], spans["index"]) if k == -1}
    timed = [i for i in measured if st["batch"][i] not in untimed]
    assert timed  # the full fetches (every 16th, and those after one that left its core)
    assert all(st["profiler_wait"][i] >= 32 * per_call_s * 0.99 for i in timed)
    assert all(st["profiler_wait"][i] >= 0 for i in measured)  # a lean fetch's can be under the record's 1 µs
    assert all(0 <= st["profiler_wait"][i] <= st["wait_end"][i] - st["wait_start"][i] + 1e-6 for i in measured)
    assert all(v >= 0 for v in st["profiler_rest"])
    prof = light.stall["profiler"]
    assert prof["measured"] and prof["seconds"] > 0 and prof["rest_s"] >= 0
    want = sum(min(st["profiler_wait"][i], st["idle"][i]) for i in measured)
    assert prof["seconds"] == pytest.approx(want, abs=1e-5)
    idle = sum(st["idle"][i] for i in measured)
    assert light.stall["seconds"] == pytest.approx(idle - prof["seconds"], abs=1e-5)  # net of its own time
    for key in ("by_cause", "by_kind", "by_stage"):
        assert sum(light.stall[key].values()) == pytest.approx(light.stall["seconds"], abs=1e-5)


def test_its_own_time_is_taken_out_of_other_first(light: RunRecord) -> None:
    d = copy.deepcopy(light.to_dict())
    n = len(d["timeline"]["steps"]["step"])
    d["timeline"]["steps"]["profiler_wait"] = [0.0] * n
    gross = analyze(RunRecord.from_dict(d)).stall
    assert gross["profiler"]["seconds"] == 0.0
    st = d["timeline"]["steps"]
    measured = [i for i in range(n) if st["measured"][i]]
    other = gross["per_step"]["other"]
    # a known own time per step, below what each step left unexplained: all of it comes out of `other`
    take = [0.5 * other[k] for k in range(len(measured))]
    for k, i in enumerate(measured):
        st["profiler_wait"][i] = take[k]
    net = analyze(RunRecord.from_dict(d)).stall
    assert net["seconds"] == pytest.approx(gross["seconds"] - sum(take), abs=1e-5)
    assert net["by_stage"]["other"] == pytest.approx(gross["by_stage"]["other"] - sum(take), abs=1e-5)
    for k, v in gross["by_stage"].items():
        if k != "other":
            assert net["by_stage"][k] == pytest.approx(v, abs=1e-5)


def test_a_record_without_the_columns_reads_as_before(light: RunRecord) -> None:
    d = copy.deepcopy(light.to_dict())
    for col in ("profiler_wait", "profiler_rest"):
        del d["timeline"]["steps"][col]
    d["timeline"]["accounting"].pop("own_per_call_ns", None)
    d["timeline"]["accounting"].pop("own_per_inline_call_ns", None)
    stall = analyze(RunRecord.from_dict(d)).stall
    st = d["timeline"]["steps"]
    idle = sum(v for v, m in zip(st["idle"], st["measured"]) if m)
    assert stall["seconds"] == pytest.approx(idle, abs=1e-5)
    assert stall["profiler"] == {"seconds": 0.0, "rest_s": 0.0, "share_of_window": 0.0, "measured": False}


def test_time_off_the_core_in_unchecked_lean_stretches_is_a_finding_only_when_it_matters(light: RunRecord) -> None:
    """accounting.lean_unchecked (num_workers=0, instrument/lean_check.py): a bound on the wait counted as on-core. The
    record a light run writes carries it; a finding names it once it is LEAN_UNCHECKED_NOTE_FROM of the wait or more,
    with its figures, and never below."""
    from profiler import thresholds as th

    assert set(light.timeline["accounting"]["lean_unchecked"]) == {"stretches", "batches", "off_core_s"}
    d = copy.deepcopy(light.to_dict())
    wait = analyze(RunRecord.from_dict(d)).stall["seconds"]
    d["timeline"]["accounting"]["lean_unchecked"] = {"stretches": 2, "batches": 30,
                                                     "off_core_s": 0.5 * th.LEAN_UNCHECKED_NOTE_FROM * wait}
    assert not [f for f in analyze(RunRecord.from_dict(d)).findings if f["kind"] == "lean_unchecked"]
    d["timeline"]["accounting"]["lean_unchecked"]["off_core_s"] = 2 * th.LEAN_UNCHECKED_NOTE_FROM * wait
    (f,) = [f for f in analyze(RunRecord.from_dict(d)).findings if f["kind"] == "lean_unchecked"]
    assert f["batches"] == 30 and f["stretches"] == 2 and f["share_of_stall"] == pytest.approx(
        2 * th.LEAN_UNCHECKED_NOTE_FROM, abs=1e-3)
    assert "30 batches" in f["message"] and "counted as on their core" in f["message"]


def test_with_workers_only_the_main_hook_is_taken_out(tmp_path: Path) -> None:
    rec = _profiled(tmp_path, workers=2, steps=20)
    st = rec.timeline["steps"]
    assert all(w >= 0 for w, m in zip(st["worker"], st["measured"]) if m)
    # With workers the fetch's instrumentation runs in the workers, not in this wait: what is taken out is the
    # hook's own on-CPU time, which lies inside the wait's on-CPU time (wall-clock preemptions are not counted).
    for i in range(len(st["step"])):
        assert 0 <= st["profiler_wait"][i] <= st["main_cpu"][i] + 1e-6
    assert rec.stall["profiler"]["measured"]
    assert sum(rec.stall["by_cause"].values()) == pytest.approx(rec.stall["seconds"], abs=1e-5)
    # Batches that crossed the workers' queue have a transfer stage; a workers=0 run has none (next test).
    assert {"transfer", "ready_ahead"} <= set(stage_stats(tables(rec.timeline)))


def test_a_run_without_workers_has_no_transfer_stage(light: RunRecord) -> None:
    """A batch made in the main process crossed no queue: the stage table shows no "transfer (worker → main)"."""
    stages = stage_stats(tables(light.timeline))
    assert "collate" in stages and "transfer" not in stages and "ready_ahead" not in stages


def test_the_terminal_says_its_own_cost_apart(light: RunRecord) -> None:
    import io

    from rich.console import Console

    from profiler.render.terminal import own_cost_line, print_report

    line = own_cost_line(light)
    assert line is not None and "Profiler's own time" in line and "not the job's" in line
    buf = io.StringIO()
    print_report(light, Console(file=buf, width=200))
    assert "Profiler's own time" in buf.getvalue()
    d = copy.deepcopy(light.to_dict())
    d["stall"]["profiler"]["measured"] = False
    assert own_cost_line(RunRecord.from_dict(d)) is None


def test_call_cpu_gives_off_core_time_to_the_long_call_first() -> None:
    # Three calls of 2, 50 and 3 µs after a 1 µs gap each; the clock is read at the fetch's ends and after the long
    # call only. Off-core time: 30 µs in the long call's segment, 2 µs in the last one.
    us = 1000
    start = np.array([1, 4, 55], dtype=np.int64) * us
    end = np.array([3, 54, 58], dtype=np.int64) * us
    clock = np.array([worker.NO_CPU, 100 * us + 54 * us - 30 * us, worker.NO_CPU], dtype=np.int64)
    cpu = worker.call_cpu(start, end, clock, (0, 100 * us), (59 * us, 100 * us + 59 * us - 32 * us))
    assert cpu.tolist() == [2 * us, 20 * us, 1 * us]
    # A segment whose off-core time is more than its long call's wall time: the rest goes to its short calls.
    cpu = worker.call_cpu(start[:2], end[:2], clock[:2] - 25 * us, (0, 100 * us),
                          (54 * us, 100 * us + 54 * us - 55 * us))
    assert cpu.tolist() == [0, 0]
    # Nothing off core: every call's on-CPU time is its wall time; never above it, never below zero.
    cpu = worker.call_cpu(start, end, np.full(3, worker.NO_CPU), (0, 0), (59 * us, 59 * us))
    assert cpu.tolist() == (end - start).tolist()


def test_the_written_out_map_fetch_is_used_and_matches_torch() -> None:
    if not torch_hooks.map_fetch_is_known():
        pytest.skip("this torch's map fetch differs from the one the profiler writes out: the general path runs")
    ds = TensorDataset(torch.arange(40.0).reshape(20, 2))
    plain = _MapDatasetFetcher(ds, True, torch.utils.data.default_collate, False)
    f = _instrumented(ds)
    assert f.dataset is ds and f.collate_fn is torch.utils.data.default_collate  # only fetch was replaced
    out = f.fetch([3, 1, 7])
    assert torch.equal(out.batch[0], plain.fetch([3, 1, 7])[0])
    assert out.meta.items == 3 and out.meta.rows[:, 6].tolist() == [3, 1, 7]
    one = _instrumented(ds, auto=False).fetch(5)  # batch_size=None: one call per sample
    assert torch.equal(one.batch[0], ds[5][0]) and one.meta.rows[:, 6].tolist() == [5]
    with pytest.raises(IndexError):
        f.fetch([1, 99])
    assert f.fetch([2]).meta.items == 2 - 1  # the failed fetch left nothing open
