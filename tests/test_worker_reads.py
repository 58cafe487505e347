"""A DataLoader worker's per-batch kernel reads (issue 32 item 6): as few as the figures allow, and the figures right.

A worker's fetch reads /proc/thread-self/schedstat once (its run-queue wait splits between the fetch and the time
before it), /proc/thread-self/io at both ends (its index queue is a pipe read between fetches: the fetch's rchar must
leave it out) and /proc/self/io only where the fetch read bytes or every clocks.PROCESS_IO_EVERY-th batch. These
tests hold the counts (the same on any machine) and the figures (rows, sub-stage rows, bytes, the record's pickled
fields) to what happened, with real fetchers, pipes, files and DataLoader workers, both ways the written-out fetch
times its calls.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset
from torch.utils.data._utils.collate import default_collate
from torch.utils.data._utils.fetch import _MapDatasetFetcher

import profiler
from profiler.instrument import clocks
from profiler.instrument.batch import M_RCHAR, M_READ_BYTES, Instrumented
from profiler.instrument.inline_fetch import inline_map_fetch

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/thread-self/io"), reason="needs /proc/thread-self/io")

ITEM_BYTES = 2000


class Staged(Dataset):
    """Item i runs a named stage when i % 3 == 0 (and only then), and a nested one when i % 6 == 0."""

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i: int) -> torch.Tensor:
        if i % 3 == 0:
            with profiler.stage("third"):
                if i % 6 == 0:
                    with profiler.stage("sixth"):
                        sum(range(50))
                sum(range(50))
        return torch.zeros(4)


def _fetch_in_thread(close: bool, batches: list[list[int]]) -> list[Any]:
    """The written-out fetch as worker 0 would run it (``close``: timed closely, else by the calls' ends only), with
    a pipe read between fetches as a worker's index queue makes; the BatchMetas."""
    fetcher = _MapDatasetFetcher(Staged(), True, default_collate, False)
    fetch = inline_map_fetch(fetcher, 0, close=close)
    r, w = os.pipe()
    out = []
    try:
        for keys in batches:
            os.write(w, b"indices")
            os.read(r, 64)
            env = fetch(keys)
            assert isinstance(env, Instrumented)
            out.append(env.meta)
    finally:
        os.close(r)
        os.close(w)
    return out


@pytest.mark.parametrize("close", [False, True])
def test_each_call_keeps_its_own_row_and_its_own_stages(close: bool) -> None:
    """Both ways of timing the calls: one row per call in call order, each starting where the previous ended (the
    first at the fetch's start), inside the fetch; a sub-stage on the row of the call that ran it, none on others."""
    batches = [[7 * b + k for k in range(9)] for b in range(12)]
    for keys, meta in zip(batches, _fetch_in_thread(close, batches)):
        rows = meta.rows
        assert rows[:, 6].tolist() == keys
        assert rows[:, 7].tolist() == [1] * len(keys)
        assert rows[0, 0] == meta.cpu_start[0]
        assert (rows[1:, 0] == rows[:-1, 1]).all()
        assert (rows[:, 1] >= rows[:, 0]).all() and rows[-1, 1] <= meta.cpu_end[0]
        stages = meta.stages
        third = [k for k in keys if k % 3 == 0]
        assert sorted(k for k, ns in zip(keys, stages.get("third", [0] * len(keys))) if ns > 0) == third
        sixth = [k for k in keys if k % 6 == 0]
        assert sorted(k for k, ns in zip(keys, stages.get("sixth", [0] * len(keys))) if ns > 0) == sixth


def test_a_worker_fetch_reads_proc_three_times_and_its_process_io_seldom(monkeypatch: pytest.MonkeyPatch) -> None:
    """As worker 0, with the index queue's pipe read between fetches, over tensors in memory: schedstat at most once
    and the thread's io twice per fetch, /proc/self/io at the first fetch and once per PROCESS_IO_EVERY after; the
    fetches that did not read it say so (-1), the others give the process's cumulative figures."""
    n_batches = 4 * clocks.PROCESS_IO_EVERY
    batches = [[(17 * b + k) % 1000 for k in range(8)] for b in range(n_batches + 2)]
    fetcher = _MapDatasetFetcher(TensorDataset(torch.randn(1000, 4)), True, default_collate, False)
    fetch = inline_map_fetch(fetcher, 0, close=False)
    r, w = os.pipe()
    reads: dict[str, int] = {}
    real = os.pread
    names: dict[int, str] = {}

    def counting(fd: int, size: int, offset: int) -> bytes:
        name = names.get(fd)
        if name is None:
            try:
                name = names[fd] = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                name = names[fd] = "?"
        reads[name] = reads.get(name, 0) + 1
        return real(fd, size, offset)

    metas = []
    clocks.forget_last_fetch()  # as instrument_fetcher leaves a new fetcher's thread
    clocks._proc_io_left = 0  # as in a freshly forked worker: its first fetch reads /proc/self/io
    try:
        for i, keys in enumerate(batches):
            if i == 2:  # past the first fetches (descriptors opened, the pipe found between fetches)
                monkeypatch.setattr(os, "pread", counting)
            os.write(w, b"indices")
            os.read(r, 64)
            env = fetch(keys)
            assert isinstance(env, Instrumented)
            metas.append(env.meta)
    finally:
        monkeypatch.setattr(os, "pread", real)
        os.close(r)
        os.close(w)
    sched = sum(k for name, k in reads.items() if name.endswith("/schedstat"))
    thread_io = sum(k for name, k in reads.items() if "/task/" in name and name.endswith("/io"))
    process_io = sum(k for name, k in reads.items() if name.endswith("/io") and "/task/" not in name)
    assert sched <= 2 * n_batches, reads  # at its start after a switch, at its end only after one inside it
    assert thread_io == 2 * n_batches, reads  # exact: both ends of every fetch (reads between fetches)
    # Its own fetches read nothing, unless a loaded machine made one fault a page in from the disk (read_bytes).
    moved = sum(1 for m in metas[2:] if m.marks[M_RCHAR] > 0 or m.marks[M_READ_BYTES] > 0)
    assert process_io <= n_batches // clocks.PROCESS_IO_EVERY + 1 + moved, (reads, moved)
    io = [m.io for m in metas]
    assert io[0][0] >= 0  # the first fetch's reading
    readings = [i for i, (rc, _) in enumerate(io) if rc >= 0]
    assert all(b - a <= clocks.PROCESS_IO_EVERY for a, b in zip(readings, readings[1:])), readings
    assert all(rb == -1 for rc, rb in io if rc < 0)
    cumulative = [rc for rc, _ in io if rc >= 0]
    assert cumulative == sorted(cumulative)


class Files(Dataset):
    """Each item reads one file of ITEM_BYTES bytes; the first ``quiet`` indices read none (in memory)."""

    def __init__(self, root: Path, n: int, quiet: int = 0) -> None:
        self.paths = [root / f"{i}.bin" for i in range(n)]
        self.quiet = quiet
        for p in self.paths:
            p.write_bytes(os.urandom(ITEM_BYTES))

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        if i < self.quiet:
            return torch.zeros(8)
        with open(self.paths[i], "rb") as f:
            return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)[:8].float()


def test_workers_that_read_files_report_every_batch_and_every_byte(tmp_path: Path) -> None:
    """Two workers, 24 batches in memory then 24 that read a file per sample: every call's rchar is its own file's
    (or zero), every reading batch carries its process's /proc/self/io, and the storage totals count every byte the
    dataset read."""
    batch, quiet_batches, reading_batches = 4, 24, 24
    ds = Files(tmp_path, batch * (quiet_batches + reading_batches), quiet=batch * quiet_batches)
    loader = DataLoader(ds, batch_size=batch, num_workers=2)
    with profiler.profile(out=str(tmp_path / "out"), warmup=0, steps=quiet_batches + reading_batches - 4,
                          plots=False, quiet=True) as run:
        for _ in loader:
            time.sleep(0.001)
    rec = run.record
    assert rec is not None
    spans = rec.timeline["sample_spans"]
    by_index = dict(zip(spans["index"], spans["rchar"]))
    assert len(by_index) >= (quiet_batches + reading_batches - 4) * batch
    assert all(rc == (ITEM_BYTES if i >= ds.quiet else 0) for i, rc in by_index.items()), by_index
    bt = rec.timeline["batches"]
    first_of_worker: dict[int, int] = {}
    for k, (worker, rc) in enumerate(zip(bt["worker"], bt["rchar"])):
        first_of_worker.setdefault(worker, k)
    assert all(bt["rchar"][k] >= 0 for k in first_of_worker.values())
    # A batch that read files always reads its process's counters (its calls' rchar moved).
    read_files = {b for b, rc in zip(spans["batch"], spans["rchar"]) if rc > 0}
    assert read_files and all(bt["rchar"][bt["batch"].index(b)] >= 0 for b in read_files)
    storage = rec.storage or {}
    assert storage.get("bytes_requested", 0) >= (reading_batches - 4) * batch * ITEM_BYTES, storage


def test_a_batch_record_crosses_the_queue_with_every_field() -> None:
    """A BatchMeta pickled as a worker's queue thread pickles it comes back with every recorded field (each set to a
    value of its own here, so a field added to the class but not to its pickled state fails), the derived views
    rebuilt from them."""
    import pickle
    from dataclasses import fields
    from multiprocessing.reduction import ForkingPickler

    from profiler.instrument.batch import BatchMeta

    values: dict[str, Any] = {
        "worker_id": 1, "pid": 4242, "calls": bytes(range(16)), "marks": tuple(range(100, 116)),
        "stage_events": [(0, "decode", 5)], "pixel_events": [(0, 64)], "skipped": [(3, "/x", "bad")], "sent_ns": 7,
        "opened": {"/data": 2}, "n_items": 2, "own_ns": 11, "compact": True, "long_clocks": (0, 99),
        "thread_io_start": b"rchar: 1\n", "thread_io_end": b"rchar: 2\n"}
    kept = [f.name for f in fields(BatchMeta) if f.name not in ("_derived_views", "_stage_views")]
    assert sorted(kept) == sorted(values)
    meta = BatchMeta(**values)
    back = pickle.loads(ForkingPickler.dumps(meta))
    assert {name: getattr(back, name) for name in kept} == values
    assert back._derived_views is None and back._stage_views is None


class QuietThenOneFile(Dataset):
    """In memory (zeros) but for index ``reader``, which reads a file of ``size`` bytes."""

    def __init__(self, path: Path, reader: int, size: int) -> None:
        self.path, self.reader = path, reader
        path.write_bytes(os.urandom(size))

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == self.reader:
            with open(self.path, "rb") as f:
                f.read()
        return torch.zeros(4)


def test_a_worker_goes_lean_and_a_lean_fetchs_bytes_still_count(tmp_path: Path) -> None:
    """NOTE [ Lean fetches in workers ]: as worker 0, with the index queue's pipe read between fetches, over samples in
    memory: after QUIET_AFTER full fetches that read nothing its fetches go lean (a WorkerLean in the envelope, no
    BatchMeta), and a file one of them reads (late in the run, in a stretch) is counted whole, once, on a later
    fetch: the bytes of the pipe between fetches are not."""
    from profiler.instrument.batch import WL_WORKER_ID, meta_of

    size, n_batches = 5000, 240
    reader = 8 * 200 + 3  # batch 200's fourth sample
    fetcher = _MapDatasetFetcher(QuietThenOneFile(tmp_path / "f.bin", reader, size), True, default_collate, False)
    fetch = inline_map_fetch(fetcher, 0)
    clocks.forget_last_fetch()
    r, w = os.pipe()
    envs = []
    try:
        for b in range(n_batches):
            os.write(w, b"indices")
            os.read(r, 64)
            env = fetch(list(range(8 * b, 8 * b + 8)))
            assert isinstance(env, Instrumented)
            envs.append(env)
    finally:
        os.close(r)
        os.close(w)
    lean = [e for e in envs if e.meta.__class__ is tuple]
    assert lean and all(e.meta[WL_WORKER_ID] == 0 for e in lean)  # type: ignore[index]
    metas = [meta_of(e) for e in envs]
    assert all(m.worker_id == 0 and m.n_items == 8 for m in metas)
    # A lean fetch's time since the previous fetch, run-queue figure included (read at its start), as a full one's.
    lean_gaps = [m.gap for e, m in zip(envs, metas) if e.meta.__class__ is tuple]
    assert all(g0 > 0 and g1 >= g0 and cpu >= 0 and runq >= 0 for g0, g1, cpu, runq in lean_gaps), lean_gaps[:3]
    assert sum(m.marks[M_RCHAR] for m in metas) == size, [m.marks[M_RCHAR] for m in metas if m.marks[M_RCHAR]]
