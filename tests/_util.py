"""Test helpers shared by several test files (imported as a plain module: tests/ is on sys.path)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from profiler.analysis import analyze
from profiler.config import RunConfig
from profiler.harness.runner import execute, prepare

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def run_profile(**kw) -> object:
    """Run a real profile (DataLoader, workers, model) and analyse it.

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
