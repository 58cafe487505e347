"""Test helpers shared by several test files (imported as a plain module: tests/ is on sys.path)."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from profiler.analysis import analyze
from profiler.config import RunConfig
from profiler.harness.runner import execute, prepare

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

ROOT = Path(__file__).resolve().parents[1]
# A user's job in its own interpreter: a toy Dataset of 400 zero tensors and ``loader(workers)`` over it in batches of
# 4, with the modules the jobs' bodies use imported (the Python API's and the hostile jobs' tests).
TOY_LOADER_JOB = """
import os, sys, json, time, threading, torch
from torch.utils.data import DataLoader, Dataset

class DS(Dataset):
    def __len__(self): return 400
    def __getitem__(self, i): return torch.zeros(8)

def loader(workers=0):
    return DataLoader(DS(), batch_size=4, num_workers=workers)
"""


def repo_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment, with this checkout first on the path: a child process imports the profiler under test."""
    return {**os.environ, "PYTHONPATH": str(ROOT), **(extra or {})}


def write_job(folder: Path, body: str, name: str = "job.py") -> Path:
    """``folder/name``: :data:`TOY_LOADER_JOB` followed by ``body``."""
    path = folder / name
    path.write_text(TOY_LOADER_JOB + body)
    return path


def free_port() -> int:
    """A TCP port nothing listens on now (for torchrun's store / rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_profiler(launcher: list[str], out: Path, *run_args: str) -> list[str]:
    """The command line of ``python -m profiler run`` as a torchrun job (``launcher``: torchrun's own options): 2
    warm-up + 6 measured steps, no live progress, into ``out``; ``run_args``: the rest of ``run``'s arguments."""
    return [sys.executable, "-m", "torch.distributed.run", *launcher, "-m", "profiler", "run", "--no-progress",
            "--steps", "6", "--warmup", "2", "--out", str(out), *run_args]


def run_profile(**kw) -> object:
    """Run a real profile (DataLoader, workers, model) and analyze it.

    On the CPU unless the test says otherwise: the tests assert CPU behaviour (host timing, no device memory), and
    "auto" would pick a GPU on a machine that has one and fail them there.
    """
    kw.setdefault("out", "unused")
    kw.setdefault("device", "cpu")
    c = RunConfig(**kw)
    rec = execute(prepare(c))
    return analyze(rec)


def write_png(path: Path, size=(64, 64), seed=0) -> None:
    from PIL import Image
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(path)


def write_jpeg(path: Path, size=(1600, 1200), seed=0) -> None:
    from profiler.harness.data import synthetic_jpeg
    path.write_bytes(synthetic_jpeg(np.random.default_rng(seed), size))


def on_core_clocks(monkeypatch: pytest.MonkeyPatch, slept: list[int] | None = None) -> None:
    """Fake on-CPU clocks for the main thread's fetch and steps (patched into the modules that read it), for tests
    whose threshold is about the profiler's logic, not the machine: the thread never leaves its core but for the ns in
    ``slept`` (what the test's own code put off its core), so no preemption on a loaded machine can end a lean stretch
    or make a wait look off its core (whether steps are kept flat, how often clocks are read).

    Two readings of the wall clock stand in for it, so that every span's on-CPU interval lies within its wall
    interval, as NOTE [ Wall clock outside, on-CPU clock inside ] has it with real clocks: in the fetch's modules, the
    thread's last wall-clock reading (a fetch reads some pairs wall first at their end too); in the session, the wall
    clock now (its wait's pair is read in the NOTE's order, and the DataLoader's own code between the fetch's last
    reading and the wait's end must not count as off the core)."""
    from profiler.instrument import fetch, inline_fetch, lean_check, proxies, session

    real_perf = time.perf_counter_ns
    last = [real_perf()]
    off = slept if slept is not None else [0]
    me = threading.get_ident()

    def perf() -> int:
        v = real_perf()
        if threading.get_ident() == me:  # the profiler's sampler thread reads the clock too: its (possibly older,
            last[0] = v  # stored after a preemption) readings would move this thread's clock back
        return v

    def last_reading() -> int:
        return last[0] - 10**9 - off[0]

    def now() -> int:
        return perf() - 10**9 - off[0]

    monkeypatch.setattr(time, "perf_counter_ns", perf)
    for module in (fetch, inline_fetch, lean_check, proxies, session):
        monkeypatch.setattr(module, "_perf", perf)
        monkeypatch.setattr(module, "_cpu", now if module is session else last_reading)


@contextlib.contextmanager
def running_job(cmd: list[str], env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    """A job (``cmd``) running in a session of its own until the block ends; yields once it printed READY (its first
    step done, so an attach finds it training). Its whole process group gets SIGTERM at the end."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True, env=env)
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert "READY" in line, f"job did not start: {line!r}"
        yield p
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=30)
