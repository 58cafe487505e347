"""Storage truth on whole runs: cold vs warm page cache (DS-Analyzer's differential, in one run each, no root) and a
real kernel throttle (root + cgroup blkio only)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from profiler.harness.data import make_sample_dataset
from profiler.storage.device import describe_storage
from profiler.storage.throttle import KernelThrottle, parse_throttle

from _util import run_profile


@pytest.fixture(scope="module")
def disk_jpegs(tmp_path_factory) -> Path:
    d = make_sample_dataset(tmp_path_factory.mktemp("disk"), count=160, classes=2, size=(320, 240))
    info = describe_storage(d)
    if info.tmpfs:
        pytest.skip("the temp dir is on tmpfs: its pages cannot be evicted, so cold == warm")
    return d


def _run(data: Path, **kw):
    base = dict(data=str(data), workers=2, batch_size=8, steps=10, warmup=2, model="none", image_size=32,
                augment="none")
    base.update(kw)
    return run_profile(**base)


def test_cold_reads_come_from_the_device_warm_from_page_cache(disk_jpegs):
    warm = _run(disk_jpegs, cache="warm")
    cold = _run(disk_jpegs, cache="cold")
    assert warm.storage["residency_start"]["fraction"] > 0.95
    assert cold.storage["residency_start"]["fraction"] < 0.05
    read_files_bytes = cold.stages["read"]["bytes"]
    # cold: (nearly) every byte the workers read came from the block device; warm: (nearly) none did
    assert cold.storage["bytes_from_device"] >= 0.8 * read_files_bytes
    assert warm.storage["bytes_from_device"] < 0.2 * read_files_bytes
    assert cold.storage["page_cache_hit_fraction"] < warm.storage["page_cache_hit_fraction"]
    # and the differential shows in the timing: more read time, more idle blamed on io
    assert cold.stages["read"]["total_s"] > warm.stages["read"]["total_s"]
    assert cold.stall["by_cause"]["io"] > warm.stall["by_cause"]["io"]
    # the files read during the cold run are in the page cache afterwards
    assert cold.storage["residency_end"]["fraction"] > cold.storage["residency_start"]["fraction"]


def test_warm_run_labelled_as_disk_measurement_is_called_out(disk_jpegs):
    rec = _run(disk_jpegs, cache="warm", throttle="50MB/s", throttle_mechanism="auto")
    if rec.storage["throttle"]["mechanism"] == "userspace":
        pytest.skip("userspace emulation charges only uncached bytes; nothing to call out")
    assert any(f["kind"] == "storage" and "page cache" in f["message"] for f in rec.findings)


def _kernel_throttle_ok(data: Path) -> bool:
    info = describe_storage(data)
    ok, _ = KernelThrottle.available(parse_throttle("2MB/s,100iops"), info.maj_min)
    return ok


@pytest.mark.skipif(os.geteuid() != 0, reason="the kernel throttle needs root")
def test_kernel_throttle_makes_the_same_run_slower_and_io_bound(disk_jpegs):
    if not _kernel_throttle_ok(disk_jpegs):
        pytest.skip("no cgroup blkio/io.max throttling here")
    fast = _run(disk_jpegs, cache="cold")
    slow = _run(disk_jpegs, cache="cold", throttle="2MB/s,100iops", throttle_mechanism="kernel")
    assert slow.storage["throttle"]["mechanism"].startswith("cgroup")
    assert slow.throughput["samples_per_s"] < 0.7 * fast.throughput["samples_per_s"]
    assert slow.verdict["bottleneck"] == "io", slow.verdict
    # the run's cgroup is gone afterwards
    blkio = Path("/sys/fs/cgroup/blkio")
    assert not [p for p in blkio.glob(f"profiler-{os.getpid()}*")]
