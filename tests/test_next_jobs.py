"""The next jobs people run (issue 31, items 1-3 and 8): torchdata's StatefulDataLoader profiled like any DataLoader
(its state checkpointed and resumed as without the profiler), a torchdata.nodes pipeline named for what it is, the
job's own child processes (multiprocessing.Pool, torchdata.nodes' process mappers) left with the job's signal
dispositions, and a job with no DataLoader told what to do.

The jobs are tests/jobs/nj_*.py, run as a user runs them (``python -m profiler run JOB``); torchdata comes from the
``frameworks`` extra (its tests skip without it).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from profiler import signals
from profiler.instrument import overrides, torch_hooks, torchdata_hooks
from profiler.instrument.session import Session

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "tests" / "jobs"
STEPS, WARMUP = 6, 2
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def run_job(tmp_path: Path, job: str, *args: str, opts: tuple[str, ...] = (), name: str = "run",
            ) -> tuple[subprocess.CompletedProcess, dict[str, Any] | None]:
    """``python -m profiler run [opts] tests/jobs/<job> ARGS``: the process and its record (None: none written)."""
    out = tmp_path / name
    p = subprocess.run([sys.executable, "-m", "profiler", "run", "--no-plots", "--no-progress", "--steps", str(STEPS),
                        "--warmup", str(WARMUP), "--out", str(out), *opts, str(JOBS / job), *args],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path, env=ENV)
    f = out / "run.json"
    return p, (json.loads(f.read_text()) if f.exists() else None)


def plain(tmp_path: Path, job: str, *args: str) -> subprocess.CompletedProcess:
    """The same job under plain Python."""
    return subprocess.run([sys.executable, str(JOBS / job), *args], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=ENV)


def line_of(job: str, text: str) -> int:
    return next(i for i, line in enumerate((JOBS / job).read_text().splitlines(), 1) if text in line)


def no_profiler_traceback(stderr: str) -> None:
    assert "profiler.signals" not in stderr and "Terminated" not in stderr, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]


# -- overrides: which subclasses bypass a hook -----------------------------------------------------------------------

class _Routes(DataLoader):
    def __iter__(self):  # calls DataLoader's: its hook sees it
        return super().__iter__()


class _Generator(DataLoader):
    def __iter__(self):  # MONAI ThreadDataLoader's shape: the body runs at the first next()
        yield from super().__iter__()


class _MakesItsOwn(DataLoader):
    def __iter__(self):  # StatefulDataLoader's shape
        return self._get_iterator()


def test_bypasses_is_decided_by_what_the_method_does():
    assert not overrides.bypasses(_Routes.__dict__["__iter__"], "__iter__")
    assert not overrides.bypasses(_Generator.__dict__["__iter__"], "__iter__")
    assert overrides.bypasses(_MakesItsOwn.__dict__["__iter__"], "__iter__")
    assert all(overrides.seen_by_hooks(c, "__iter__") for c in (_Routes, _Generator, _MakesItsOwn, DataLoader))

    class Lost(DataLoader):
        def __iter__(self):  # a generator that never calls DataLoader's: nothing to time (docs/loaders.md)
            yield from self._get_iterator()

    assert not overrides.seen_by_hooks(Lost, "__iter__")


def test_a_subclass_defined_while_profiling_is_followed_and_put_back():
    s = Session(warmup=0, steps=100, then="continue").start()
    try:
        class Later(DataLoader):
            def __iter__(self):
                return self._get_iterator()

        own = Later.__dict__["__iter__"]
        assert getattr(own, "_profiler_own", None) is not None  # wrapped at its definition
        batches = [b.tolist() for b in Later(list(range(8)), batch_size=4)]
        later = [b.tolist() for b in Later(list(range(8)), batch_size=4)]
    finally:
        s.stop()
    assert batches == later == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert s.loader is not None and s.loader.batch_size == 4 and len(s.rows) == 2
    assert not hasattr(Later.__dict__["__iter__"], "_profiler_own")  # put back
    assert "__init_subclass__" not in DataLoader.__dict__


# -- torchdata: the seams, and StatefulDataLoader in-process -----------------------------------------------------------

def test_torchdata_internals_are_where_the_profiler_expects_them():
    pytest.importorskip("torchdata")
    assert torchdata_hooks.check() == [], f"torchdata {torchdata_hooks.torchdata_version()} moved an internal"


def test_check_fails_loudly_when_torchdata_moves_a_seam(monkeypatch):
    pytest.importorskip("torchdata")
    import torchdata.nodes.loader as nl
    import torchdata.stateful_dataloader.stateful_dataloader as sdl
    import torchdata.stateful_dataloader.worker as sw

    monkeypatch.setattr(sdl, "_worker_loop", lambda *a: None)
    assert any("_worker_loop is no longer" in p for p in torchdata_hooks.check())
    monkeypatch.undo()

    def make_state_dict(worker_id, dataset_kind, fetcher, dataset):
        return {}

    monkeypatch.setattr(sw, "_make_state_dict", make_state_dict)
    assert any("checkpoints an iterable's iterator" in p for p in torchdata_hooks.check())
    monkeypatch.undo()

    def __iter__(self):  # a generator making its own iterator: no hook would see its epochs
        yield from self._get_iterator()

    monkeypatch.setattr(sdl.StatefulDataLoader, "__iter__", __iter__)
    assert any("StatefulDataLoader.__iter__" in p for p in torchdata_hooks.check())
    monkeypatch.undo()
    monkeypatch.delattr(nl.Loader, "__iter__")
    assert any("torchdata.nodes.Loader.__iter__" in p for p in torchdata_hooks.check())
    monkeypatch.undo()
    assert torchdata_hooks.check() == []


class _Stream(torch.utils.data.IterableDataset):
    """0..n-1 in one process; the iterator's position is its state (torchdata's Stateful protocol)."""

    def __init__(self, n: int = 40):
        self.n = n

    def __iter__(self):
        return _StreamIter(self.n)


class _StreamIter:
    def __init__(self, n: int):
        self.n, self.pos = n, 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.pos >= self.n:
            raise StopIteration
        self.pos += 1
        return torch.tensor([self.pos - 1])

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.pos = state["pos"]


def _resume(make: Any) -> tuple[list, list]:
    """Take 3 batches, the state, the 4th; a new loader given the state: its first batch. (4th, resumed first)"""
    loader = make()
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    after = next(it).tolist()
    again = make()
    again.load_state_dict(state)
    return after, next(iter(again)).tolist()


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_stateful_dataloader_in_a_session_is_profiled_and_resumes_as_without_it(workers, kind):
    sdl = pytest.importorskip("torchdata.stateful_dataloader")

    def make():
        if kind == "map":
            return sdl.StatefulDataLoader(list(range(40)), batch_size=4, num_workers=workers, shuffle=True,
                                          generator=torch.Generator().manual_seed(0))
        return sdl.StatefulDataLoader(_Stream(), batch_size=4, num_workers=workers)

    want = _resume(make)
    assert want[0] == want[1]
    s = Session(warmup=1, steps=100, then="continue").start()
    try:
        got = _resume(make)
    finally:
        s.stop()
    assert got == want
    assert s.loader is not None and s.loader.dataset_class.endswith("_Stream" if kind == "iterable" else "list")
    assert s.loader.num_workers == workers
    # (the iterable's second loader, of unknown length, takes the window over: its row is the one kept)
    assert s.rows and all(r.n_samples == 4 for r in s.rows)
    if workers:
        assert s.metas and all(m.worker_id >= 0 for m in s.metas)  # the workers' own fetches were measured
    assert getattr(sys.modules["torchdata.stateful_dataloader.stateful_dataloader"], "_worker_loop") \
        is sys.modules["torchdata.stateful_dataloader.worker"]._worker_loop  # put back


def test_override_batch_size_keeps_torchdatas_stateful_sampler():
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    loader = sdl.StatefulDataLoader(list(range(40)), batch_size=4)
    kind = type(loader.batch_sampler)
    assert torch_hooks.override_loader(loader, batch_size=8) == {"batch_size": [4, 8]}
    assert type(loader.batch_sampler) is kind and len(next(iter(loader))) == 8


# -- torchdata: real jobs ----------------------------------------------------------------------------------------------

def test_a_stateful_dataloader_job_gets_a_record_like_any_dataloaders(tmp_path):
    pytest.importorskip("torchdata")
    out = tmp_path / "resume.json"
    p, rec = run_job(tmp_path, "nj_stateful.py", str(out), "2", "10", opts=("--then", "continue"))
    assert p.returncode == 0 and rec is not None, p.stderr[-3000:]
    loader = rec["job"]["loader"]
    assert loader["dataset_class"] == "__main__.HeavySamples" and loader["num_workers"] == 2
    assert loader["created_at"].endswith(f"nj_stateful.py:{line_of('nj_stateful.py', 'return cls(HeavySamples()')}")
    assert loader["sampler"].startswith("torchdata.stateful_dataloader")
    assert not rec["partial"] and rec["throughput"]["steps"] == STEPS
    assert rec["throughput"]["samples"] / rec["throughput"]["steps"] == 8 and loader["samples_basis"] == "batch"
    assert set(rec["timeline"]["batches"]["worker"]) == {0, 1}  # measured inside torchdata's own worker loop
    assert rec["verdict"]["bottleneck"] == "cpu"  # ~10 ms of matmuls per sample in 2 workers vs a Linear(32, 4)
    assert "Profiled loader: HeavySamples, 2 workers, batch size 8" in " ".join(p.stdout.split())
    # state_dict() mid-window and load_state_dict() into a new loader: the same next batch as under plain Python.
    profiled = json.loads(out.read_text())
    assert profiled["after"] == profiled["resumed"] and profiled["steps"] == 10
    q = plain(tmp_path, "nj_stateful.py", str(tmp_path / "plain.json"), "2", "10")
    assert q.returncode == 0, q.stderr[-3000:]
    assert json.loads((tmp_path / "plain.json").read_text()) == profiled


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_a_stateful_iterable_resumes_under_spawned_profiled_workers(tmp_path, context):
    pytest.importorskip("torchdata")
    out = tmp_path / "resume.json"
    p, rec = run_job(tmp_path, "nj_stateful.py", str(out), "2", "10", "iterable", "stateful", context,
                     opts=("--then", "continue"))
    assert p.returncode == 0 and rec is not None, p.stderr[-3000:]
    assert rec["job"]["loader"]["dataset_class"] == "__main__.HeavyStream"
    assert rec["job"]["loader"]["multiprocessing_context"] == context
    assert set(rec["timeline"]["batches"]["worker"]) == {0, 1}  # the spawned workers ran our entry point
    got = json.loads(out.read_text())
    assert got["after"] == got["resumed"] == [33, 35, 37, 39, 41, 43, 45, 47]  # 2 workers, 5th batch: odd ones


def test_loader_option_names_a_stateful_dataloader_and_a_users_subclass(tmp_path):
    pytest.importorskip("torchdata")
    p, rec = run_job(tmp_path, "nj_stateful.py", str(tmp_path / "a.json"), "2", "10", opts=("--loader", "HeavySamples"))
    assert p.returncode == 0 and rec is not None, p.stderr[-3000:]
    assert rec["job"]["loader"]["chosen"] == "named by --loader HeavySamples"
    site = f"nj_stateful.py:{line_of('nj_stateful.py', 'return cls(HeavyStream()')}"
    p, rec = run_job(tmp_path, "nj_stateful.py", str(tmp_path / "b.json"), "0", "10", "iterable", "sub",
                     opts=("--loader", site), name="sub")
    assert p.returncode == 0 and rec is not None, p.stderr[-3000:]
    loader = rec["job"]["loader"]
    assert loader["chosen"] == f"named by --loader {site}" and loader["num_workers"] == 0
    assert rec["throughput"]["samples"] / rec["throughput"]["steps"] == 8


def test_a_torchdata_nodes_pipeline_is_named_with_what_to_do(tmp_path):
    pytest.importorskip("torchdata.nodes")
    p, rec = run_job(tmp_path, "nj_nodes.py", "12")
    assert p.returncode == 0 and rec is None, p.stderr[-3000:]
    assert "nodes batches 12" in p.stdout
    err = [line for line in p.stderr.splitlines() if line.startswith("profiler:")]
    assert len(err) == 1, p.stderr
    assert "iterated a torchdata.nodes Loader (" in err[0]
    assert f"nj_nodes.py:{line_of('nj_nodes.py', 'for batch in')}" in err[0]
    assert "StatefulDataLoader" in err[0] and "no record written" in err[0]
    no_profiler_traceback(p.stderr)


# -- the job's own child processes keep its signal dispositions -------------------------------------------------------

@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_jobs_own_pool_is_left_its_signals_and_the_run_is_profiled(tmp_path, method):
    p, rec = run_job(tmp_path, "nj_pool.py", "20", method)
    assert p.returncode == 0 and rec is not None, p.stderr[-3000:]
    no_profiler_traceback(p.stderr)
    assert rec["job"]["loader"]["dataset_class"] == "__main__.Squares" and rec["job"]["loader"]["num_workers"] == 2
    assert not rec["partial"] and rec["throughput"]["steps"] == STEPS


def test_torchdata_nodes_process_mappers_are_left_their_signals(tmp_path):
    pytest.importorskip("torchdata.nodes")
    p, rec = run_job(tmp_path, "nj_nodes.py", "12", "then-loader", opts=("--then", "continue"))
    assert p.returncode == 0 and rec is not None, p.stderr[-3000:]
    assert "nodes batches 12" in p.stdout and "trained 12" in p.stdout
    no_profiler_traceback(p.stderr)
    assert rec["job"]["loader"]["dataset_class"] == "__main__.Samples" and not rec["partial"]


def _in_child(report: Any) -> dict[str, Any]:
    """Fork; ``report()`` in the child; what it returned (through a pipe)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(w, json.dumps(report()).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return json.loads(text)


def _what(sig: int) -> str:
    h = signal.getsignal(sig)
    return "ours" if h is signals._handler else "job's" if h is _jobs_handler else \
        "default" if h in (signal.SIG_DFL, signal.default_int_handler) else repr(h)


def _jobs_handler(signum: int, frame: Any) -> None:
    pass


def test_a_forked_child_gets_the_jobs_dispositions_and_a_profiled_worker_ours():
    before = {s: signal.getsignal(s) for s in signals.HANDLED}
    taken = signals.install()
    try:
        assert taken, "the test needs default dispositions to start from"
        child = _in_child(lambda: {"plain": [_what(s) for s in taken],
                                   "worker": (signals.keep_in_worker(), [_what(s) for s in taken])[1]})
        assert child["plain"] == ["default"] * len(taken)
        assert child["worker"] == ["ours"] * len(taken)  # the DataLoader workers the profiler's loop sets up
        assert [_what(s) for s in taken] == ["ours"] * len(taken)  # the parent keeps them
        signal.signal(signal.SIGTERM, _jobs_handler)  # the job's own handler, set while profiled
        child = _in_child(lambda: [_what(signal.SIGTERM), (signals.keep_in_worker(), _what(signal.SIGTERM))[1]])
        assert child == ["job's", "job's"]
    finally:
        signals.restore(taken)
        for s, h in before.items():
            signal.signal(s, h)


# -- no DataLoader at all --------------------------------------------------------------------------------------------

def test_a_job_with_no_dataloader_is_told_what_to_do_and_the_advice_works(tmp_path):
    tokens = tmp_path / "tokens.bin"
    p, rec = run_job(tmp_path, "nj_getbatch.py", str(tokens), "10")
    assert p.returncode == 0 and rec is None, p.stderr[-3000:]
    assert p.stderr.strip().count("\n") == 0, p.stderr  # one line, as before
    err = p.stderr.strip()
    assert err.startswith("profiler: ") and "iterated no DataLoader" in err and "no record written" in err
    assert "DataLoader(batches, batch_size=None)" in err and "get_batch" in err
    # What it says, done (tests/jobs/nj_getbatch.py 'wrapped'): the same get_batch() is profiled.
    p, rec = run_job(tmp_path, "nj_getbatch.py", str(tokens), "20", "wrapped", name="wrapped")
    assert p.returncode == 0 and rec is not None, p.stderr[-3000:]
    assert rec["job"]["loader"]["dataset_class"] == "__main__.Batches" and rec["job"]["loader"]["num_workers"] == 0
    assert rec["throughput"]["samples"] / rec["throughput"]["steps"] == 8  # nanoGPT's batch of 8 windows
    assert "read" in rec["stages"]  # its profiler.stage("read")


def test_a_failing_or_exiting_job_without_a_dataloader_keeps_its_status(tmp_path):
    job = tmp_path / "exits.py"
    job.write_text("import sys\nsys.exit(3)\n")
    p = subprocess.run([sys.executable, "-m", "profiler", "run", "--no-progress", str(job)], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path, env=ENV)
    assert p.returncode == 3 and "iterated no DataLoader" not in p.stderr
