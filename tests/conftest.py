"""Shared fixtures: small real datasets in tmp dirs."""
from __future__ import annotations

from pathlib import Path

import pytest

from profiler.harness.data import make_sample_dataset


@pytest.fixture(autouse=True)
def _sample_dir(tmp_path_factory, monkeypatch):
    """Never let a test write the built-in sample dataset into the checkout."""
    monkeypatch.setenv("PROFILER_SAMPLE_DIR", str(tmp_path_factory.getbasetemp() / "sample"))


@pytest.fixture(scope="session")
def small_jpegs(tmp_path_factory) -> Path:
    """64 small synthetic JPEGs in 4 class folders (fast to decode)."""
    return make_sample_dataset(tmp_path_factory.mktemp("small"), count=64, classes=4, size=(160, 120))
