"""Shared fixtures: small real datasets in tmp dirs."""
from __future__ import annotations

import os
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


@pytest.fixture(scope="module")
def raw_files(tmp_path_factory) -> Path:
    """64 files of 4 KiB random bytes: what the DDP job reads (tests/jobs/ddp_train.py; test_ranks, test_multinode)."""
    d = tmp_path_factory.mktemp("raw")
    for i in range(64):
        (d / f"f{i:03d}.bin").write_bytes(os.urandom(4096))
    return d


# Running in parallel (pytest-xdist, ``-n auto --dist loadgroup``: the README's test line and .ci/run). A module whose
# tests share an expensive module-scoped fixture (real profiled runs) runs on one worker, so the runs are made once;
# the tests of every other module are spread one by one. The storage tests form one group: page-cache eviction and the
# kernel throttle act on the same block device, and a throttled run beside another's cold reads would measure both.
_ONE_WORKER_PER_MODULE = frozenset({
    "test_browser", "test_compare", "test_fuzz_records", "test_ram", "test_ranks", "test_render", "test_run",
    "test_samplers", "test_script", "test_sweep",
})
_GROUPS = {"test_storage": "storage", "test_storage_runs": "storage"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = item.path.stem
        group = _GROUPS.get(module) or (module if module in _ONE_WORKER_PER_MODULE else None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
