"""The per-thread counters a fetch reads (clocks.fetch_start / fetch_end): exact, at the fewest /proc reads.

A fetch's run-queue wait is re-read from schedstat only after a context switch, its read_bytes come from getrusage,
and its rchar is read at its end only, its start taking the previous fetch's end while nothing is read in between.
These tests hold the figures to fresh /proc reads and to the bytes the job really read, with real files and a real
DataLoader, and count the reads on a light loop (counts, not times: the same on any machine).
"""
from __future__ import annotations

import os
import resource
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

import profiler
from profiler.instrument import clocks

from _util import on_core_clocks

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/thread-self/io"), reason="needs /proc/thread-self/io")

ITEM_BYTES = 3000


def _profile_all(loader: DataLoader, tmp_path: Path, warmup: int, steps: int) -> Any:
    """The record of ``profile()`` over ``loader`` iterated to its end."""
    with profiler.profile(out=str(tmp_path / "out"), warmup=warmup, steps=steps, plots=False, quiet=True) as run:
        for _ in loader:
            pass
    assert run.record is not None
    return run.record


def test_runq_is_the_fresh_reading_whether_or_not_schedstat_was_read() -> None:
    """After a voluntary switch (a sleep), after plain work and after nothing: the gated value is what schedstat says
    at that moment, whenever no context switch came between the two readings (checked with getrusage), and never
    more than it."""
    fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    compared = 0
    try:
        for i in range(300):
            if i % 3 == 0:
                time.sleep(0.0005)
            elif i % 3 == 1:
                sum(range(20_000))
            before = _switches()
            gated = clocks.runq_now()
            fresh = int(os.pread(fd, 128, 0).split()[1])
            assert gated <= fresh
            if _switches() == before:
                assert gated == fresh
                compared += 1
    finally:
        os.close(fd)
    assert compared > 100


def _switches() -> int:
    ru = resource.getrusage(resource.RUSAGE_THREAD)
    return ru.ru_nvcsw + ru.ru_nivcsw


class Files(Dataset):
    """Each item reads one file of ITEM_BYTES bytes (map-style, no __getitems__: the written-out fetch)."""

    def __init__(self, root: Path, n: int) -> None:
        self.paths = [root / f"{i}.bin" for i in range(n)]
        for p in self.paths:
            p.write_bytes(os.urandom(ITEM_BYTES))

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        with open(self.paths[i], "rb") as f:
            return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)[:8].float()


@pytest.mark.parametrize("workers", [0, 2])
def test_rchar_is_what_the_dataset_read_even_when_the_loop_reads_too(tmp_path: Path, workers: int) -> None:
    """The job's loop reads a 10 kB file at every step, between the fetches: none of it is the dataset's, and every
    call's rchar is its own file's size (the profiler's own /proc reads and a worker's index queue left out too)."""
    ds = Files(tmp_path, 96)
    side = tmp_path / "side.bin"
    side.write_bytes(os.urandom(10_000))
    loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=workers)
    with profiler.profile(out=str(tmp_path / "out"), warmup=2, steps=20, plots=False, quiet=True) as run:
        for _ in loader:
            side.read_bytes()
    assert run.record is not None
    spans = run.record.timeline["sample_spans"]
    assert len(spans["rchar"]) >= 20 * 4  # the measured batches' calls (and the warm-up's)
    assert set(spans["rchar"]) == {ITEM_BYTES}


def _count_preads(monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    """Reads of each descriptor from now on (os.pread is patched everywhere: the sampler's reads land on others)."""
    n: dict[int, int] = {}
    real = os.pread

    def counting(fd: int, size: int, offset: int) -> bytes:
        n[fd] = n.get(fd, 0) + 1
        return real(fd, size, offset)

    monkeypatch.setattr(os, "pread", counting)
    return n


def test_a_light_loop_reads_proc_about_once_per_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """workers=0 over tensors in memory: /proc/thread-self/io once per batch (at the fetch's end) and at a probe
    every PROBE_EVERY batches; schedstat no more often than the thread was switched out (getrusage's count)."""
    ds = TensorDataset(torch.randn(8 * 256, 4), torch.zeros(8 * 256))
    loader = DataLoader(ds, batch_size=8, num_workers=0)
    with profiler.profile(out=str(tmp_path / "out"), warmup=5, steps=220, plots=False, quiet=True) as run:
        it = iter(loader)
        for _ in range(10):
            next(it)
        sched, io = clocks._fds()
        switches = _switches()
        n = _count_preads(monkeypatch)
        for _ in range(200):
            next(it)
        switched = _switches() - switches
        io_reads, sched_reads = n.get(io or -1, 0), n.get(sched or -1, 0)
        for _ in it:
            pass
    assert run.record is not None
    # Its fetches read nothing: after QUIET_AFTER of them, only every PROBE_EVERY-th fetch's end reads rchar.
    assert 200 // clocks.PROBE_EVERY <= io_reads <= clocks.QUIET_AFTER + 200 // clocks.PROBE_EVERY + 2, io_reads
    assert sched_reads <= switched + 1, (sched_reads, switched)


class LateFiles(Dataset):
    """In memory for its first ``quiet`` indices, then each item reads one file of ITEM_BYTES (a cache that stops
    hitting): the fetches start reading in the middle of a quiet stretch, where rchar is read only at probes."""

    def __init__(self, root: Path, n: int, quiet: int) -> None:
        self.files, self.quiet = Files(root, n), quiet

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.zeros(8) if i < self.quiet else self.files[i]


def test_a_quiet_stretch_keeps_the_bytes_read_exact(tmp_path: Path) -> None:
    """workers=0, 40 batches that read nothing, then 20 that read a file per call: the bytes the record gives the
    calls add up to what was read, and from the first reading batch the probe found on, each call has its own."""
    batch, quiet_batches = 4, 40
    ds = LateFiles(tmp_path, batch * (quiet_batches + 20), batch * quiet_batches)
    loader = DataLoader(ds, batch_size=batch, num_workers=0)
    rec = _profile_all(loader, tmp_path, warmup=2, steps=58)
    spans = rec.timeline["sample_spans"]
    rchar, index, items, batches = spans["rchar"], spans["index"], spans["items"], spans["batch"]
    # Every sample is in one row: its own (index), or its batch's, where a lean fetch timed its calls together
    # (index -1, items = the batch's samples; the loader is sequential, so batch b holds samples b * batch on).
    first = [i if i >= 0 else b * batch for i, b in zip(index, batches)]
    covered = sorted(i for f, k in zip(first, items) for i in range(f, f + k))
    assert covered == list(range(len(ds)))  # the warm-up's calls are kept too
    reading = [(f, k, r, i >= 0) for f, k, r, i in zip(first, items, rchar, index) if f >= ds.quiet]
    assert sum(rchar) == (len(ds) - ds.quiet) * ITEM_BYTES  # nothing lost, nothing of the profiler's own counted
    assert all(r == 0 for f, r in zip(first, rchar) if f < ds.quiet)
    # A quiet stretch's probe places the bytes of the fetches since the last read on its own fetch: at most
    # PROBE_EVERY batches' worth, once; every batch after it is exact per call.
    exact = [f for f, k, r, own in reading if own and r == ITEM_BYTES]
    assert sum(k for f, k, r, own in reading if not (own and r == ITEM_BYTES)) <= clocks.PROBE_EVERY * batch
    first_exact_batch = exact[0] // batch if exact else len(ds) // batch
    after = [(r, own) for f, k, r, own in reading if f >= (first_exact_batch + 1) * batch]
    assert after and all(own and r == ITEM_BYTES for r, own in after), reading


class SleepyBatches:
    """A batch sampler that sleeps 3 ms before each batch: time off the core inside next() but outside the fetch."""

    def __init__(self, n: int, batch: int) -> None:
        self.n, self.batch = n, batch

    def __len__(self) -> int:
        return self.n // self.batch

    def __iter__(self):  # type: ignore[no-untyped-def]
        for i in range(0, self.n, self.batch):
            time.sleep(0.003)
            yield list(range(i, i + self.batch))


def test_the_wait_s_on_cpu_time_counts_a_sleeping_sampler_as_off_the_core(tmp_path: Path) -> None:
    """workers=0: the wait's on-CPU time is taken from the fetch's clocks where the wait is on its core outside the
    fetch, and that is probed: a sampler that sleeps 3 ms a batch makes every step read the clock, so no measured
    step counts the sleep as on-CPU time (a derivation that never checked would count all of it)."""
    ds = TensorDataset(torch.randn(4 * 60, 4), torch.zeros(4 * 60))
    loader = DataLoader(ds, batch_sampler=SleepyBatches(4 * 60, 4), num_workers=0)
    rec = _profile_all(loader, tmp_path, warmup=2, steps=50)
    st = rec.timeline["steps"]
    measured = [i for i, m in enumerate(st["measured"]) if m]
    assert len(measured) == 50
    for i in measured:
        wait = st["wait_end"][i] - st["wait_start"][i]
        assert wait >= 0.0029 and st["main_cpu"][i] <= wait - 0.0025, (i, wait, st["main_cpu"][i])


def test_a_quiet_on_core_loop_skips_the_counters_of_most_batches(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """workers=0 over tensors in memory: once the fetches are quiet, all but one of every LEAN_STRETCH batches read no
    counters (no getrusage at either end), and the batches' counters are still zeros, as a fetch on its core has."""
    from profiler.instrument import worker

    calls = {"start": 0, "end": 0}
    real_start, real_end = clocks.fetch_start, clocks.fetch_end

    def counting_start() -> clocks.Counters:
        calls["start"] += 1
        return real_start()

    def counting_end(probe: bool = False) -> clocks.Counters:
        calls["end"] += 1
        return real_end(probe)

    ds = TensorDataset(torch.randn(8 * 300, 4), torch.zeros(8 * 300))
    loader = DataLoader(ds, batch_size=8, num_workers=0)
    with profiler.profile(out=str(tmp_path / "out"), warmup=5, steps=280, plots=False, quiet=True) as run:
        it = iter(loader)
        for _ in range(40):  # past QUIET_AFTER: the thread's fetches are quiet
            next(it)
        monkeypatch.setattr(clocks, "fetch_start", counting_start)
        monkeypatch.setattr(clocks, "fetch_end", counting_end)
        for _ in range(200):
            next(it)
        monkeypatch.undo()
        for _ in it:
            pass
    assert run.record is not None
    # One full fetch per stretch (its start and end); on a loaded machine a lean fetch that was preempted reads its
    # counters at its end and the next fetch is a full one, so a few more: never most of them (all 200 without the
    # lean stretches).
    stretches = 200 // worker.LEAN_STRETCH
    assert stretches - 1 <= calls["start"] <= 200 // 4, calls
    assert calls["start"] <= calls["end"] <= 2 * calls["start"] + 2, calls
    spans = run.record.timeline["sample_spans"]
    assert set(spans["rchar"]) == {0} and set(spans["read_bytes"]) == {0}


class SometimesSleeps(Dataset):
    """In memory, but every 37th item sleeps 3 ms (off its core): a lean fetch that leaves its core."""

    def __init__(self, n: int) -> None:
        self.x = torch.randn(n, 4)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> torch.Tensor:
        if i % 37 == 36:
            time.sleep(0.003)
        return self.x[i]


def test_a_lean_fetch_that_leaves_its_core_keeps_its_time_off_it(tmp_path: Path) -> None:
    """workers=0, a dataset in memory whose every 37th item sleeps 3 ms: the lean fetches that hold one read their
    counters then, and the record gives the sleeping call its time off the core (on-CPU time well under its wall
    time), never more run-queue wait than time off the core, and the calls around it their time on it."""
    ds = SometimesSleeps(8 * 200)
    loader = DataLoader(ds, batch_size=8, num_workers=0)
    rec = _profile_all(loader, tmp_path, warmup=2, steps=190)
    spans = rec.timeline["sample_spans"]
    index, items, start, end, cpu, runq, batch = (spans[k] for k in ("index", "items", "start", "end", "cpu", "runq",
                                                                     "batch"))
    # A row is one call (index), or a lean fetch's calls timed together (index -1; the loader is sequential, so batch
    # b holds samples 8 b on): a row holds a sleeper if one of its samples is one.
    first = [i if i >= 0 else b * 8 for i, b in zip(index, batch)]
    sleepy = [k for k, (f, n) in enumerate(zip(first, items)) if any(i % 37 == 36 for i in range(f, f + n))]
    assert len(sleepy) >= 40
    assert sorted(i for f, n in zip(first, items) for i in range(f, f + n)) == list(range(sum(items)))
    for k in sleepy:
        wall = end[k] - start[k]
        assert wall >= 0.0029 and cpu[k] <= wall - 0.0025, (k, wall, cpu[k])
    for k in range(len(index)):
        assert runq[k] <= (end[k] - start[k]) - cpu[k] + 3e-6, k  # (the record rounds to µs)
    # The calls of a batch without a sleeper are on their core; beside a sleeper, a call of a batch timed only by
    # its calls' ends shares the batch's time off the core by wall time (worker.call_cpu: the first batch after a
    # quiet one), so only those are left out here.
    with_sleeper = {batch[k] for k in sleepy}
    awake = [k for k in range(len(index)) if batch[k] not in with_sleeper]
    on_core = sum(items[k] for k in awake if cpu[k] >= 0.5 * (end[k] - start[k]))
    awake_samples = sum(items[k] for k in awake)
    assert awake_samples >= 500 and on_core >= 0.95 * awake_samples, (on_core, awake_samples)


def test_a_one_off_read_between_batches_lets_the_lean_fetches_come_back(tmp_path: Path) -> None:
    """workers=0 in memory, and the loop reads a 4-byte file once, between its first two batches (as torch's first
    backward does: glibc's sysconf reads /sys/devices/system/cpu/online). The thread reads rchar at both ends of its
    fetches for a while, then probes again, and its batches go lean: most of them are one row (index -1). Before,
    one such read kept every later batch of the epoch reading /proc and its counters."""
    once = tmp_path / "online"
    once.write_bytes(b"0-1\n")
    ds = TensorDataset(torch.randn(8 * 300, 4), torch.zeros(8 * 300))
    loader = DataLoader(ds, batch_size=8, num_workers=0)
    with profiler.profile(out=str(tmp_path / "out"), warmup=5, steps=280, plots=False, quiet=True) as run:
        for k, _ in enumerate(loader):
            if k == 0:  # between the first two fetches: the gap the first start probe looks at
                once.read_bytes()
    assert run.record is not None
    spans = run.record.timeline["sample_spans"]
    lean = {b for b, i in zip(spans["batch"], spans["index"]) if i < 0}
    assert len(lean) >= 150, len(lean)  # ~270 of 285 without load; a preemption ends a stretch early
    assert sum(spans["rchar"]) == 0  # the loop's read is not a fetch's


def test_a_lean_stretch_is_checked_as_a_whole_and_a_failed_check_is_counted() -> None:
    """lean_check.StretchCheck on clocks given to it: a whole stretch checked fetch by fetch and found on its core lets
    the next one go without per-fetch clocks (a part of one does not); one whose thread was off its core for 10 µs or
    more in all is counted as unchecked (its lean fetches, its time off the core) and sends the next stretches back
    to per-fetch checks; a stretch ended from another thread is unchecked too, with no off-core figure."""
    import threading

    from profiler.instrument.lean_check import StretchCheck, unchecked_since

    c = StretchCheck(10_000, 15)
    assert not c.by_stretch  # the first stretch is checked fetch by fetch
    c.start(0, 0)
    c.checked += 3
    c.settle(500_000, 500_000)  # on its core, but cut short after 3 checked fetches: not enough
    assert not c.by_stretch
    c.start(1_000_000, 500_000)
    c.checked += 15
    c.settle(2_000_000, 1_495_000)  # 5 µs off the core in 1 ms, 15 fetches checked one by one: the stretch was clean
    assert c.by_stretch and c.counts() == (0, 0, 0)
    at_open = c.counts()
    c.start(3_000_000, 2_000_000)
    assert c.cpu_at(3_400_000) == 2_400_000
    c.lean += 15
    c.settle(4_000_000, 2_999_000)  # 1 µs off the core: checked, nothing counted
    assert c.by_stretch and c.counts() == (0, 0, 0)
    c.start(5_000_000, 3_000_000)
    c.lean += 15
    c.settle(6_000_000, 3_950_000)  # 50 µs off the core somewhere in it
    assert not c.by_stretch and c.counts() == (1, 15, 50_000)
    c.settle(7_000_000, 4_000_000)  # no stretch under way: nothing
    assert c.counts() == (1, 15, 50_000)
    c.by_stretch = True
    c.start(8_000_000, 5_000_000)
    c.lean += 4
    t = threading.Thread(target=c.settle_now)
    t.start()
    t.join()
    assert not c.by_stretch and not c.open and c.counts() == (2, 19, 50_000)
    assert unchecked_since(c, at_open) == {"stretches": 2, "batches": 19, "off_core_s": 5e-05}


def _count_clock_reads(modules: tuple[Any, ...], loader: DataLoader, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       warmup: int, steps: int, before: int, counted: int = 256,
                       slept: list[int] | None = None) -> tuple[Any, int]:
    """Profile ``loader`` to its end, counting the reads of each module's ``_cpu`` (the on-CPU clock) in the
    ``counted`` batches after the first ``before``: (the record, the reads). ``slept`` (not None): the main thread's
    on-CPU clock is a fake for the whole run (_util.on_core_clocks: off its core only for the ns in ``slept``), so what
    is counted is the logic's, not the machine's load (a wait or stretch preempted on a busy machine is rightly
    checked step by step afterwards, and reads more)."""
    reads, counting_now = [0], [False]
    on_core = slept is not None

    def counting_of(clock: Any) -> Any:
        def counting() -> int:
            reads[0] += counting_now[0]
            return int(clock())
        return counting

    if on_core:
        on_core_clocks(monkeypatch, slept)
        for module in modules:
            monkeypatch.setattr(module, "_cpu", counting_of(module._cpu))
    with profiler.profile(out=str(tmp_path / "out"), warmup=warmup, steps=steps, plots=False, quiet=True) as run:
        it = iter(loader)
        for _ in range(before):
            next(it)
        if not on_core:
            for module in modules:
                monkeypatch.setattr(module, "_cpu", counting_of(time.thread_time_ns))
        counting_now[0] = True
        for _ in range(counted):
            next(it)
        counting_now[0] = False
        if not on_core:
            monkeypatch.undo()
        for _ in it:
            pass
    assert run.record is not None
    return run.record, reads[0]


def test_lean_fetches_after_a_clean_stretch_read_no_on_cpu_clock(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """workers=0 over tensors in memory: once a stretch was checked on its core fetch by fetch, the lean fetches read
    no on-CPU clock of their own (their stretch is checked at its end); the record says how many were left unchecked.
    On a fake on-CPU clock (_util.on_core_clocks): a loaded machine may preempt a stretch, and the next ones are then
    checked fetch by fetch, which is right but made this count depend on the load (263 reads on a busy machine)."""
    from profiler.instrument import fetch, inline_fetch, proxies, worker

    ds = TensorDataset(torch.randn(8 * 400, 4), torch.zeros(8 * 400))
    loader = DataLoader(ds, batch_size=8, num_workers=0)
    # after 80 batches: quiet, and a clean stretch checked fetch by fetch
    rec, reads = _count_clock_reads((inline_fetch, fetch, proxies), loader, tmp_path, monkeypatch, warmup=5, steps=380,
                                    before=80, slept=[0])
    # Per-fetch checks read the clock twice in each lean fetch (512 here); by stretch, only the full fetch of each
    # stretch reads it (a few reads, 16 stretches), and a stretch that failed its check costs one checked stretch
    assert reads < 64, reads
    unchecked = rec.timeline["accounting"]["lean_unchecked"]
    assert set(unchecked) == {"stretches", "batches", "off_core_s"}
    assert unchecked["batches"] <= (worker.LEAN_STRETCH - 1) * unchecked["stretches"]
    assert unchecked["off_core_s"] >= 1e-5 * unchecked["stretches"] or unchecked["stretches"] == 0


def test_a_wait_found_off_its_core_once_is_probed_again_after_calm_steps(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """workers=0 in memory, a batch sampler that sleeps 3 ms before batches 30-49 only: a probe finds a wait off its
    core outside the fetch, and from then on each step reads the on-CPU clock around its wait (every later sleep is
    off the core in the record); after WAIT_CPU_CALM steps on their core they go back to probing one step in
    WAIT_CPU_PROBE. Before, one such wait (the profiler's own sampler thread taking the GIL at a tick) made every
    later step read the clock twice."""
    from profiler.instrument import session

    slept = [0]  # the fake on-CPU clock (_util.on_core_clocks) is off the core for the sleeps and nothing else

    class SleepsOnce(SleepyBatches):
        def __iter__(self):  # type: ignore[no-untyped-def]
            for k, i in enumerate(range(0, self.n, self.batch)):
                if 30 <= k < 50:
                    t = time.perf_counter_ns()
                    time.sleep(0.003)
                    slept[0] += time.perf_counter_ns() - t
                yield list(range(i, i + self.batch))

    ds = TensorDataset(torch.randn(4 * 400, 4), torch.zeros(4 * 400))
    loader = DataLoader(ds, batch_sampler=SleepsOnce(4 * 400, 4), num_workers=0)
    # after 100 batches: the sleeps, and the calm steps after them
    rec, reads = _count_clock_reads((session,), loader, tmp_path, monkeypatch, warmup=2, steps=390, before=100,
                                    slept=slept)
    st = rec.timeline["steps"]
    off = [st["main_cpu"][st["step"].index(k)] <= st["wait_end"][st["step"].index(k)] -
           st["wait_start"][st["step"].index(k)] - 0.0025 for k in range(30, 50)]
    assert any(off[:session.WAIT_CPU_PROBE + 1]) and all(off[off.index(True):]), off  # found, then every step read
    # every step read: 512; probing: 2 in 16 steps (32). The on-CPU clock is a fake, but the run-queue wait the steps
    # also read is the machine's: in a loaded suite a preempted step is rightly probed again (60 reads seen), still
    # far from every step's
    assert reads <= 128, reads


class NamedStage(Dataset):
    """In memory, with a named stage around part of each item (a ~20 µs spin, on its core) and a file opened (not
    read) by every 50th item: what a lean fetch's reused recorder and sub-stage lists must hand to each batch."""

    def __init__(self, n: int, path: Path) -> None:
        self.x = torch.randn(n, 4)
        self.path = path
        self.around_s = 0.0  # wall time around every stage block, measured outside it (workers=0: this process)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> torch.Tensor:
        t0 = time.perf_counter_ns()
        with profiler.stage("tokenize"):
            t = time.perf_counter_ns() + 20_000
            while time.perf_counter_ns() < t:
                pass
        self.around_s += (time.perf_counter_ns() - t0) / 1e9
        if i % 50 == 49:
            open(self.path, "rb").close()  # opened, nothing read: the thread's fetches stay quiet (lean)
        return self.x[i]


def test_lean_batches_keep_their_own_stages_and_files(tmp_path: Path) -> None:
    """workers=0: each batch's named-stage events and opened files are its own, lean batches included (their recorder
    and lists are reused from batch to batch): every row has its samples' tokenize time and no other batch's, and the
    folder read from is counted once per opening."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "f.bin").write_bytes(b"x")
    ds = NamedStage(8 * 150, data / "f.bin")
    loader = DataLoader(ds, batch_size=8, num_workers=0)
    rec = _profile_all(loader, tmp_path, warmup=2, steps=140)
    spans = rec.timeline["sample_spans"]
    tok, items, index = spans["stages"]["tokenize"], spans["items"], spans["index"]
    assert any(i < 0 for i in index)  # some batches were lean
    for k, (t, n) in enumerate(zip(tok, items)):
        assert t >= 18e-6 * n, (k, t, n)  # its own samples' spins
    # and no other batch's as well: a list handed on with the next batches' events would count them again and again.
    # The bound is the wall time measured around every stage block (all calls, warm-up and prefetch included), so a
    # preemption inside a spin stretches both sides alike (a fixed 3x20 us per item failed at load ~7).
    assert sum(tok) <= ds.around_s, (sum(tok), ds.around_s, sum(items))
    opened = sum(1 for i in range((2 + 140) * 8) if i % 50 == 49)  # the batches up to the window's close
    assert rec.job["read_from"] == [{"folder": str(data), "files_opened": opened}]
