"""The next jobs, third round (issue 31's last gaps): MONAI's ThreadDataLoader profiled through its background
thread, kornia's augmentations named ``augment``, and ``attach`` reading torchdata's StatefulDataLoader (its own worker
loop and iterator) as the DataLoader it is.

Real libraries, real jobs (tests/jobs/nj3_*.py) run as a user runs them; each test skips when its library is absent
(the ``frameworks`` extra installs them).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from profiler.attach import classify
from profiler.attach.pyspy import Frame
from profiler.instrument.relay import RELAYED_NOTE

from _util import running_job

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "tests" / "jobs"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
STEPS, WARMUP = 6, 2


def run_job(tmp_path: Path, job: str, *args: str, name: str = "run") -> tuple[subprocess.CompletedProcess,
                                                                           dict[str, Any] | None]:
    """``python -m profiler run tests/jobs/<job> ARGS``: the process and its record (None: none written)."""
    out = tmp_path / name
    p = subprocess.run([sys.executable, "-m", "profiler", "run", "--no-plots", "--no-progress", "--steps", str(STEPS),
                        "--warmup", str(WARMUP), "--out", str(out), str(JOBS / job), *args],
                       capture_output=True, text=True, timeout=400, cwd=tmp_path, env=ENV)
    f = out / "run.json"
    return p, (json.loads(f.read_text()) if f.exists() else None)


# -- 3. attach: torchdata's StatefulDataLoader is a DataLoader ------------------------------------------------------

TD = "/site-packages/torchdata/stateful_dataloader/"
TORCH = "/site-packages/torch/utils/data/"


def F(file: str, name: str) -> Frame:  # noqa: N802 - a frame, outermost first as py-spy's are read
    return Frame(name, file, 1)


STATEFUL_WORKER = [F("job.py", "<module>"), F(TD + "stateful_dataloader.py", "StatefulDataLoader.__iter__"),
                   F("multiprocessing/process.py", "BaseProcess._bootstrap"),
                   F(TD + "worker.py", "_worker_loop"), F(TORCH + "_utils/fetch.py", "_MapDatasetFetcher.fetch"),
                   F("job.py", "HeavySamples.__getitem__")]
STATEFUL_MAIN_NEXT = [F("job.py", "<module>"),
                      F(TD + "stateful_dataloader.py", "_StatefulBaseDataLoaderIter.__next__"),
                      F(TORCH + "dataloader.py", "_BaseDataLoaderIter.__next__"),
                      F(TD + "stateful_dataloader.py", "_StatefulMultiProcessingDataLoaderIter._next_data"),
                      F("multiprocessing/queues.py", "Queue.get")]
STATEFUL_MAIN_ITER = [F("job.py", "<module>"), F(TD + "stateful_dataloader.py", "StatefulDataLoader.__iter__"),
                      F(TD + "stateful_dataloader.py", "StatefulDataLoader._get_iterator")]


def test_torchdatas_worker_loop_and_iterator_are_read_as_the_dataloaders():
    """The frames py-spy shows for a StatefulDataLoader job (tests/jobs/nj3_stateful_attach.py, dumped): its workers
    run torchdata's own _worker_loop (never torch's), its epoch starts in its own __iter__."""
    assert classify.role(STATEFUL_WORKER, "MainThread", True) == classify.WORKER
    assert classify.worker_stage(STATEFUL_WORKER) == "getitem"
    assert classify.main_stage(STATEFUL_MAIN_NEXT) == ("wait", None)
    assert classify.main_stage(STATEFUL_MAIN_ITER) == ("epoch_start", None)
    assert classify.in_dataloader(STATEFUL_MAIN_ITER) and not classify.in_dataloader(STATEFUL_WORKER[:1])
    # A thread of the main process that is no worker stays what it was.
    assert classify.role([F("job.py", "<module>"), F("threading.py", "Thread.run")], "Thread-1", False) \
        == classify.OTHER


@contextmanager
def job(script: str, *argv: str) -> Iterator[subprocess.Popen]:
    """A job running until the block ends; yields once it printed READY (its first step done)."""
    with running_job([sys.executable, str(JOBS / script), *argv], env=ENV) as p:
        yield p


@pytest.mark.slow
def test_attach_finds_a_stateful_dataloaders_workers_wait_and_cause(tmp_path):
    """A StatefulDataLoader job (2 workers, ~10 ms of CPU per sample, a tiny model) attached to for 4 s: both
    workers found, the main thread's wait measured inside the loader, the cause the workers' CPU work (was: no
    worker found, and the wait read as the main process's own storage reads, verdict io)."""
    pytest.importorskip("torchdata.stateful_dataloader")
    from profiler.cli import main

    with job("nj3_stateful_attach.py", "2", "0") as p:
        out = tmp_path / "att"
        rc = main(["attach", str(p.pid), "--duration", "4", "--rate", "50", "--no-plots", "--out", str(out)])
    assert rc == 0
    rec = json.loads((out / "run.json").read_text())
    a = rec["attach"]
    workers = [q for q in a["processes"] if q["role"] == "worker"]
    assert len(workers) == 2 and a["workers_at_once"] == 2, a["processes"]
    assert rec["stall"]["wait_samples"] > 0 and rec["stall"]["fraction"] > 0.5, rec["stall"]
    assert rec["verdict"]["bottleneck"] == "cpu", rec["verdict"]["summary"]
    assert rec["stall"]["share_by_cause"]["cpu"] > 0.5, rec["stall"]
    assert "workers = 0" not in rec["verdict"]["summary"]


# -- 2. kornia's augmentations are augment ---------------------------------------------------------------------------

def test_each_kornia_augmentation_called_in_a_sample_is_augment_and_kornia_is_put_back():
    """kornia (0.9) clones its base forward into every augmentation class, so the stage is on the base's __call__
    (which it inherits from nn.Module): set while profiling, deleted after, the classes as kornia made them."""
    K = pytest.importorskip("kornia.augmentation")  # noqa: N806 - kornia's own alias
    import torch
    from kornia.augmentation.base import _BasicAugmentationBase

    from profiler.instrument import substages

    assert "__call__" not in _BasicAugmentationBase.__dict__
    flip, jitter = K.RandomHorizontalFlip(p=1.0), K.ColorJitter(0.2, 0.2, 0.2, 0.1, p=1.0)
    x = torch.rand(1, 3, 16, 16)
    want = flip(x)
    assert substages.install_library_stages() == []
    try:
        assert "__call__" in _BasicAugmentationBase.__dict__
        smp = substages.begin_batch([])
        got = flip(x)
        jitter(x)
        K.AugmentationSequential(flip, jitter)(x)
        substages.end_batch()
        assert torch.equal(got, want)  # what the job's code observes is unchanged
        names = [name for _, name, _ in smp.events]
        assert names.count("augment") == 4 and all(ns >= 0 for _, _, ns in smp.events), smp.events
    finally:
        substages.uninstall_library_stages()
    assert "__call__" not in _BasicAugmentationBase.__dict__
    assert torch.equal(flip(x), want)


def test_attach_names_kornia_and_monai_frames_as_run_does():
    kornia = [F("job.py", "Augmented.__getitem__"), F("torch/nn/modules/module.py", "Module._call_impl"),
              F("/site-packages/kornia/augmentation/base.py", "RandomAffine.forward"),
              F("/site-packages/kornia/geometry/transform/imgwarp.py", "warp_affine")]
    assert classify.sample_stage(kornia) == "augment"
    monai = [F("job.py", "D.__getitem__"), F("/site-packages/monai/transforms/compose.py", "Compose.__call__"),
             F("/site-packages/monai/transforms/io/array.py", "LoadImage.__call__"), F("/PIL/Image.py", "open")]
    assert classify.sample_stage(monai) == "decode"
    assert classify.sample_stage(monai[:2]) == "augment"


@pytest.mark.slow
def test_a_jobs_kornia_augmentations_in_its_workers_are_the_augment_stage(tmp_path):
    """tests/jobs/nj3_kornia.py: every sample goes through three kornia augmentations (an AugmentationSequential or
    called one by one) in 2 workers: every measured sample has an augment stage (was: all of it "your __getitem__
    (rest)")."""
    pytest.importorskip("kornia.augmentation")
    p, rec = run_job(tmp_path, "nj3_kornia.py", "2")
    assert p.returncode == 0 and rec is not None, p.stderr[-3000:]
    stages = rec["stages"]
    assert stages["augment"]["count"] == STEPS * 4, stages
    assert stages["augment"]["mean_ms"] > 0
    assert "Traceback" not in p.stderr, p.stderr[-3000:]


# -- 1. MONAI's ThreadDataLoader: batches taken in a background thread ----------------------------------------------

class _Threaded:
    """ThreadDataLoader's shape without MONAI (its ThreadBuffer written out): the parent's iterator taken in a
    background thread, each batch handed over a queue and yielded ``repeats`` times. Made a DataLoader subclass
    inside the session (as a job importing MONAI after the profiler started makes it)."""

    @staticmethod
    def make() -> type:
        import queue
        import threading

        from torch.utils.data import DataLoader

        class Threaded(DataLoader):
            repeats = 1

            def __iter__(self):
                q: queue.Queue = queue.Queue(1)
                src = super().__iter__()

                def pump():
                    for b in src:
                        q.put(b)
                    q.put(None)

                threading.Thread(target=pump, daemon=True).start()
                while (b := q.get()) is not None:
                    for _ in range(self.repeats):
                        yield b

        return Threaded


def _session_over(make_loader, epochs: int = 2) -> tuple[Any, list[list[list[int]]]]:
    from profiler.instrument.session import Session

    s = Session(warmup=0, steps=1000, then="continue").start()
    try:
        loader = make_loader()
        got = [[b.tolist() for b in loader] for _ in range(epochs)]
    finally:
        s.stop()
    return s, got


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_taken_in_a_background_thread_is_stepped_in_the_main_thread(workers):
    """Every batch the main thread takes is a step (was: none, the next() hook ran in the other thread), with the
    batch's own figures: its worker (2 workers) or its in-thread fetch (0), from the second batch on."""
    cls = None

    def make():
        nonlocal cls
        cls = _Threaded.make()
        return cls(list(range(32)), batch_size=4, num_workers=workers)

    s, got = _session_over(make)
    want = [[list(range(i, i + 4)) for i in range(0, 32, 4)]] * 2
    assert got == want  # what the job's loop sees is unchanged
    assert s.loader is not None and s.loader.num_workers == workers and s.loader.batch_size == 4
    assert len(s.rows) == 16 and len(s.epochs) == 2, (len(s.rows), len(s.epochs))
    assert all(r.n_samples == 4 for r in s.rows)
    assert s.loader.chosen.endswith(RELAYED_NOTE) and s.loader.chosen.count(RELAYED_NOTE) == 1
    with_meta = [r for r in s.rows if r.batch >= 0]
    assert len(with_meta) >= 15, [(r.step, r.batch, r.worker_id) for r in s.rows]  # all but the first one's, at most
    if workers:
        assert {r.worker_id for r in with_meta} == {0, 1}
    assert cls is not None and not hasattr(cls.__dict__["__iter__"], "_profiler_own")  # put back


def test_a_repeated_batch_is_a_step_without_worker_figures():
    def make():
        cls = _Threaded.make()
        cls.repeats = 3
        return cls(list(range(16)), batch_size=4, num_workers=2)

    s, got = _session_over(make, epochs=1)
    assert got == [[list(range(i, i + 4)) for i in range(0, 16, 4) for _ in range(3)]]
    assert len(s.rows) == 12
    assert 3 <= len([r for r in s.rows if r.batch >= 0]) <= 4  # each batch's figures once (the first's maybe not)


def test_a_generator_iter_taken_in_the_main_thread_is_profiled_as_before():
    """timm's MultiEpochsDataLoader / a subclass that transforms its parent's batches: the parent's iterator is
    taken in the main thread, its steps are its own (no double count, no step lost)."""
    from torch.utils.data import DataLoader

    def make():
        class Doubled(DataLoader):
            def __iter__(self):
                for b in super().__iter__():
                    yield b * 2

        return Doubled(list(range(16)), batch_size=4, num_workers=0)

    s, got = _session_over(make)
    assert got == [[[2 * i for i in range(j, j + 4)] for j in range(0, 16, 4)]] * 2
    assert len(s.rows) == 8 and s.measured_steps == 8 and len(s.epochs) == 2
    assert s.loader is not None and RELAYED_NOTE not in s.loader.chosen


@pytest.mark.slow
def test_a_monai_thread_dataloader_job_gets_its_steps_workers_and_verdict(tmp_path):
    """tests/jobs/nj3_thread.py: MONAI's ThreadDataLoader (2 workers, ~10 ms of CPU per sample, buffer_size 1) run
    through the CLI: every measured step, the dataset class, 2 workers, 8 samples per step, the workers' figures
    for every measured batch, verdict cpu (was: 0 measured steps, a partial run without a verdict)."""
    pytest.importorskip("monai.data")
    p, rec = run_job(tmp_path, "nj3_thread.py", "2", "40")
    assert p.returncode == 0 and rec is not None, p.stderr[-3000:]
    assert not rec["partial"], rec["partial_reason"]
    loader = rec["job"]["loader"]
    assert loader["dataset_class"].endswith("HeavySamples") and loader["num_workers"] == 2
    assert loader["iterated_at"].endswith("nj3_thread.py:" + str(_line_of("nj3_thread.py", "for batch in loader")))
    t = rec["throughput"]
    assert t["steps"] == STEPS and t["samples"] == STEPS * 8, t
    assert rec["stages"]["getitem"]["count"] == STEPS * 8, rec["stages"]  # every measured batch's worker figures
    assert set(rec["timeline"]["steps"]["worker"]) == {0, 1}  # each batch's own worker (round robin over 2)
    assert rec["verdict"]["bottleneck"] == "cpu", rec["verdict"]["summary"]
    assert rec["stall"]["fraction"] > 0.5
    assert "background thread" in loader["chosen"]
    assert "Traceback" not in p.stderr, p.stderr[-3000:]


def _line_of(job: str, text: str) -> int:
    return next(i for i, line in enumerate((JOBS / job).read_text().splitlines(), 1) if text in line)


def test_attach_reads_the_main_threads_wait_on_monais_thread_buffer_as_the_wait():
    mt = "/site-packages/monai/data/thread_buffer.py"
    waiting = [F("job.py", "<module>"), F(mt, "ThreadDataLoader.__iter__"), F(mt, "buffer_iterator"),
               F(mt, "ThreadBuffer.__iter__"), F("queue.py", "Queue.get"), F("threading.py", "Condition.wait")]
    assert classify.main_stage(waiting) == ("wait", None)
    starting = [F("job.py", "<module>"), F(mt, "ThreadDataLoader.__iter__"),
                F(TORCH + "dataloader.py", "DataLoader.__iter__")]
    assert classify.main_stage(starting) == ("epoch_start", None)
    assert classify.main_stage([F("job.py", "<module>"), F("job.py", "train_step")]) == ("compute", None)


def test_a_relayed_loader_that_is_not_the_profiled_one_is_left_alone_and_holds_no_batch():
    """A second relayed loader (a validation pass) iterated while the first is profiled: its batches are as without
    the profiler, nothing of it is kept, the profiled loader's steps are its own."""
    from profiler.instrument import relay
    from profiler.instrument.session import Session

    s = Session(warmup=0, steps=1000, then="continue").start()
    kept: list[int] = []
    keep = relay.Relay.keep

    def counting(self, batch, meta):
        kept.append(id(self))
        keep(self, batch, meta)

    relay.Relay.keep = counting  # type: ignore[method-assign]
    try:
        cls = _Threaded.make()
        train, val = cls(list(range(16)), batch_size=4, num_workers=0), cls(list(range(8)), batch_size=2)
        got = []
        for b in train:
            got.append(b.tolist())
            got.append([v.tolist() for v in val])
    finally:
        relay.Relay.keep = keep  # type: ignore[method-assign]
        s.stop()
    assert got[1] == [[0, 1], [2, 3], [4, 5], [6, 7]] and got[0] == [0, 1, 2, 3]
    assert len(s.rows) == 4 and s.others and s.others[0].batch_size == 2
    assert len(set(kept)) == 1  # one epoch's relay of the profiled loader kept metas, the other's none


def _thread_context() -> Any:
    """MONAI's ThreadDataLoader(use_thread_workers=True) context (monai.data.thread_buffer), written out: torch's
    worker loop started in threads of this process, thread queues for process queues."""
    import queue
    import threading
    from multiprocessing.context import SpawnContext

    class ProcessThread(threading.Thread):
        @property
        def pid(self):
            return id(self)

    class ProcessQueue(queue.Queue):
        def close(self):
            pass

        def cancel_join_thread(self):
            pass

    class ProcessThreadContext(SpawnContext):
        _name = "processthread"
        Process = ProcessThread  # type: ignore[assignment]
        Queue = ProcessQueue  # type: ignore[assignment]

    return ProcessThreadContext()


def test_thread_workers_are_profiled_and_leave_the_processes_settings_alone():
    """Workers that are threads of the job's process get the in-worker hooks only: the process's excepthook (and
    signal handling, parent-death signal) are the job's, not a worker's."""
    import sys as _sys

    from torch.utils.data import DataLoader

    hook = _sys.excepthook
    s, got = _session_over(lambda: DataLoader(list(range(16)), batch_size=4, num_workers=2,
                                              multiprocessing_context=_thread_context()), epochs=1)
    assert _sys.excepthook is hook
    assert got == [[list(range(i, i + 4)) for i in range(0, 16, 4)]]
    assert len(s.rows) == 4 and len([r for r in s.rows if r.batch >= 0]) == 4  # each batch's figures, from threads
