"""Tests for profiler.storage: residency, eviction, device facts, throttle parsing and both throttles.

Real files in tmp_path and real processes throughout. Eviction tests are skipped on tmpfs (the kernel cannot drop
tmpfs pages); kernel-throttle tests run only as root with a cgroup throttle interface.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import subprocess
import sys
import time

import pytest

from profiler.errors import UserError
from profiler.storage.cache import evict, warm
from profiler.storage.device import StorageInfo, describe_storage, find_mount, read_mountinfo
from profiler.storage.residency import ResidencyReport, measure_residency
from profiler.storage.throttle import (
    STORAGE_PRESETS,
    KernelThrottle,
    KernelThrottleError,
    ThrottleSpec,
    UserspaceThrottle,
    cleanup_stale,
    parse_throttle,
    resolve_storage,
)

FILE_BYTES = 300_000  # not a page multiple: exercises the partial last page


def _make_files(d, n: int, size: int = FILE_BYTES) -> list[str]:
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        p = d / f"f{i:03d}.bin"
        p.write_bytes(os.urandom(size))
        paths.append(str(p))
    return paths


@pytest.fixture
def disk_dir(tmp_path):
    if describe_storage(tmp_path).tmpfs:
        pytest.skip("tmp_path is on tmpfs: page-cache eviction is impossible there")
    return tmp_path


# -- residency and cache control ----------------------------------------------------------------------------------

def test_warm_makes_files_resident(disk_dir):
    paths = _make_files(disk_dir / "d", 5)
    evict(paths)
    assert warm(paths) == 5 * FILE_BYTES
    r = measure_residency(paths)
    assert isinstance(r, ResidencyReport)
    assert (r.files_total, r.files_checked, r.bytes_total, r.bytes_checked) == (5, 5, 5 * FILE_BYTES, 5 * FILE_BYTES)
    assert r.fraction > 0.99 and r.bytes_resident <= r.bytes_checked
    assert not r.sampled
    assert r.to_dict()["fraction"] == r.fraction


def test_evict_drops_files_from_cache(disk_dir):
    paths = _make_files(disk_dir / "d", 5)
    warm(paths)
    assert measure_residency(paths).fraction > 0.99
    assert evict(paths) == 5
    r = measure_residency(paths)
    assert r.fraction < 0.05, r
    # warming one of five brings back about a fifth: the measure is per byte, not all-or-nothing
    warm(paths[:1])
    assert 0.15 < measure_residency(paths).fraction < 0.3


def test_evict_drops_freshly_written_files(disk_dir):
    # Written just now, so their pages are dirty: one sync of the filesystem must make them droppable (the per-file
    # fdatasync it replaced did this file by file). Never read back, never synced by the test.
    paths = []
    for i in range(8):
        p = disk_dir / "fresh" / f"f{i}.bin"
        p.parent.mkdir(exist_ok=True)
        with open(p, "wb") as f:
            f.write(os.urandom(FILE_BYTES))
        paths.append(str(p))
    assert measure_residency(paths).fraction > 0.99  # the page cache holds what was just written
    assert evict(paths) == 8
    assert measure_residency(paths).fraction < 0.05
    assert evict(str(disk_dir / "fresh")) == 8  # a directory argument reaches the same files


def test_residency_stats_only_the_sampled_files(tmp_path, monkeypatch):
    paths = _make_files(tmp_path / "d", 300, size=100)
    calls = []
    real_stat = os.stat

    def counting_stat(path, *a, **kw):  # a spy: the real stat still answers
        calls.append(path)
        return real_stat(path, *a, **kw)

    monkeypatch.setattr(os, "stat", counting_stat)  # os.path.isdir goes through it too
    r = measure_residency(paths, max_files=20, seed=1)
    assert r.sampled and r.files_checked == 20 and r.files_total == 300
    assert len(calls) <= 20, f"{len(calls)} stat calls for a sample of 20"


def test_directory_argument_is_walked(disk_dir):
    paths = _make_files(disk_dir / "d" / "sub", 3)
    warm(disk_dir / "d")
    r = measure_residency(disk_dir / "d")
    assert r.files_total == 3 and r.fraction > 0.99
    assert evict(str(disk_dir / "d")) == 3
    assert measure_residency(paths).fraction < 0.05


def test_sampling_checks_max_files_and_scales_total(tmp_path):
    paths = _make_files(tmp_path / "d", 30, size=8192)
    warm(paths)
    r = measure_residency(paths, max_files=10, seed=3)
    assert r.sampled and r.files_total == 30 and r.files_checked == 10
    assert r.bytes_checked == 10 * 8192
    assert r.bytes_total == 30 * 8192  # equal sizes: the scaled estimate is exact
    assert measure_residency(paths, max_files=10, seed=3) == r  # seeded: reproducible
    full = measure_residency(paths, max_files=30)
    assert not full.sampled and full.files_checked == 30


def test_unreadable_and_empty_files_are_skipped(tmp_path):
    good = _make_files(tmp_path / "d", 1)[0]
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening a FIFO for reading would block forever: must be skipped, not opened
    missing = tmp_path / "missing.bin"
    r = measure_residency([good, empty, fifo, missing, tmp_path / "d"])
    assert r.files_total == 5  # the directory expands to its one file
    assert r.files_checked == 2 and r.bytes_checked == 2 * FILE_BYTES
    assert evict([empty, fifo, missing]) == 1  # only the empty regular file can be advised
    assert warm([empty, fifo, missing]) == 0
    nothing = measure_residency([empty])
    assert nothing.files_checked == 0 and nothing.fraction == 0.0


# -- device facts --------------------------------------------------------------------------------------------------

def test_describe_storage_of_tmp_path(tmp_path):
    info = describe_storage(tmp_path)
    assert info.filesystem and info.filesystem != "unknown"
    assert info.path == os.path.realpath(tmp_path)
    assert info.mount_point and info.path.startswith(info.mount_point)
    if info.tmpfs or info.network:
        pytest.skip(f"tmp_path is on {info.filesystem}: no local disk to describe")
    assert info.disk and os.path.isdir(f"/sys/block/{info.disk}")  # the whole disk, never a partition
    with open(f"/sys/block/{info.disk}/dev") as f:
        assert info.maj_min == f.read().strip()
    assert info.device and info.device.startswith("/dev/")
    assert isinstance(info.rotational, bool)
    assert set(info.to_dict()) >= {"disk", "maj_min", "rotational", "network", "tmpfs"}


def test_describe_storage_never_raises_on_odd_paths(tmp_path):
    for p in ("/proc/self", "/sys", tmp_path / "does" / "not" / "exist", "/"):
        info = describe_storage(p)
        assert info.mount_point
    assert describe_storage("/proc").disk is None


def test_mountinfo_escapes_and_longest_prefix(tmp_path):
    mi = tmp_path / "mountinfo"
    mi.write_text(
        "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
        "40 27 0:50 / /data/my\\040set rw shared:5 - nfs4 srv:/export rw,vers=4.2\n"
        "41 27 0:51 / /data rw - tmpfs tmpfs rw\n"
        "garbage line\n")
    entries = read_mountinfo(str(mi))
    assert len(entries) == 3
    assert entries[1].mount_point == "/data/my set" and entries[1].fstype == "nfs4"
    assert find_mount("/data/my set/a.jpg", entries).fstype == "nfs4"
    assert find_mount("/data/my setx/a.jpg", entries).fstype == "tmpfs"  # prefix must end at a path separator
    assert find_mount("/home/x", entries).fstype == "ext4"


# -- parsing and presets -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, bps, iops", [
    ("20MB/s,150iops", 20_000_000, 150),
    ("20MB/s", 20_000_000, None),
    ("150iops", None, 150),
    ("500KiB/s", 512_000, None),
    ("1.5GB/s", 1_500_000_000, None),
    (" 2 MiB/s , 1.5k IOPS ", 2 * 2**20, 1500),
    ("100B/s", 100, None),
])
def test_parse_throttle_good(text, bps, iops):
    spec = parse_throttle(text)
    assert (spec.bytes_per_s, spec.iops) == (bps, iops)
    assert spec.describe()


@pytest.mark.parametrize("text", [
    "", "fast", "20Mb/s", "0MB/s", "-5MB/s", "20MB/s,30MB/s", "0iops", "10iops,20iops", "20XB/s", "20MB/s,",
    "1e3MB/s", "0.1B/s",
])
def test_parse_throttle_bad(text):
    with pytest.raises(UserError) as e:
        parse_throttle(text)
    assert "\n" not in str(e.value) and str(e.value)


def test_presets_resolve():
    assert set(STORAGE_PRESETS) >= {"hdd", "sata-ssd", "nvme", "nfs"}
    for name, spec in STORAGE_PRESETS.items():
        assert resolve_storage(None, name) is spec
        assert spec.bytes_per_s and spec.iops and spec.label == name
    assert resolve_storage(None, "HDD") is STORAGE_PRESETS["hdd"]
    bw = [STORAGE_PRESETS[n].bytes_per_s for n in ("hdd", "nfs", "sata-ssd", "nvme")]
    assert bw == sorted(bw)  # slowest to fastest, as the hardware is
    assert resolve_storage("20MB/s", None).bytes_per_s == 20_000_000
    assert resolve_storage(None, None) is None
    with pytest.raises(UserError):
        resolve_storage("20MB/s", "hdd")
    with pytest.raises(UserError, match="hdd"):
        resolve_storage(None, "floppy")


def test_spec_validation_and_dict():
    with pytest.raises(ValueError):
        ThrottleSpec(None, None, "x")
    with pytest.raises(ValueError):
        ThrottleSpec(0, None, "x")
    assert ThrottleSpec(1000, 10, "x").to_dict() == {"bytes_per_s": 1000, "iops": 10, "label": "x"}
    assert ThrottleSpec(1000, 10, "x").cost_s(500) == pytest.approx(0.5 + 0.1)


# -- userspace throttle --------------------------------------------------------------------------------------------

RATE = 2_000_000
CHUNK = 100_000
CHARGES_PER_PROC = 5


def _charge_worker(throttle: UserspaceThrottle, barrier, out) -> None:
    barrier.wait()
    start = time.perf_counter_ns()
    waits = [throttle.charge(CHUNK) for _ in range(CHARGES_PER_PROC)]
    out.put((os.getpid(), start, time.perf_counter_ns(), waits))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_userspace_throttle_is_one_queue_across_processes(tmp_path, method):
    ctx = mp.get_context(method)
    spec = ThrottleSpec(bytes_per_s=RATE, iops=None, label="test")
    with UserspaceThrottle(spec, state_dir=str(tmp_path)) as thr:
        barrier, out = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_charge_worker, args=(thr, barrier, out)) for _ in range(2)]
        for p in procs:
            p.start()
        results = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        state_path = thr.path
    assert not os.path.exists(state_path)  # close() removed the state
    assert len({r[0] for r in results}) == 2
    # Reservations are serialised: from the first start to the last finish the device was busy for all bytes.
    # Two private queues would finish in about half this time.
    span_s = (max(r[2] for r in results) - min(r[1] for r in results)) / 1e9
    total_s = 2 * CHARGES_PER_PROC * CHUNK / RATE
    assert span_s >= total_s - 1e-3, (span_s, total_s)
    assert all(w >= CHUNK / RATE - 1e-3 for r in results for w in r[3])


def test_userspace_throttle_pickles_and_charges_iops(tmp_path):
    thr = UserspaceThrottle(ThrottleSpec(bytes_per_s=None, iops=50, label="t"), state_dir=str(tmp_path))
    try:
        clone = pickle.loads(pickle.dumps(thr))
        assert clone.path == thr.path and clone.spec == thr.spec
        t0 = time.perf_counter()
        assert clone.charge(0) >= 0.02 - 1e-3
        assert thr.charge(10**9) >= 0.02 - 1e-3  # shares the queue with the clone: waits behind it
        assert time.perf_counter() - t0 >= 0.04 - 1e-3
        clone.close()  # not the creator: must not delete the shared state
        assert os.path.exists(thr.path)
    finally:
        thr.close()
    assert not os.path.exists(thr.path)
    with pytest.raises(RuntimeError, match="gone"):
        pickle.loads(pickle.dumps(thr)).charge(1)  # a worker charging after the run closed the throttle


# -- kernel throttle -----------------------------------------------------------------------------------------------

def _blkio_line() -> str:
    with open("/proc/self/cgroup") as f:
        lines = f.read().splitlines()
    return next((ln for ln in lines if "blkio" in ln.split(":")[1].split(",")), lines[-1])


def _kernel_ok(path) -> tuple[StorageInfo, ThrottleSpec]:
    info = describe_storage(path)
    spec = ThrottleSpec(bytes_per_s=2_000_000, iops=None, label="test")
    ok, why = KernelThrottle.available(spec, info.maj_min)
    if not ok:
        pytest.skip(why)
    return info, spec


def test_kernel_throttle_slows_cold_reads_and_cleans_up(disk_dir):
    info, spec = _kernel_ok(disk_dir)
    path = _make_files(disk_dir / "k", 1, size=4_000_000)[0]
    evict([path])
    before = _blkio_line()
    with KernelThrottle(spec, info.maj_min) as kt:
        assert kt.mechanism in ("cgroup-v1-blkio", "cgroup-v2-io.max")
        cg = kt.cgroup_dir
        assert cg and os.path.isdir(cg) and os.getpid() in [int(x) for x in open(f"{cg}/cgroup.procs").read().split()]
        # a child started inside (as DataLoader workers are) inherits the cgroup
        child = subprocess.run([sys.executable, "-c", "print(open('/proc/self/cgroup').read())"],
                               capture_output=True, text=True, check=True).stdout
        assert os.path.basename(cg) in child
        t0 = time.perf_counter()
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass
        elapsed = time.perf_counter() - t0
    assert elapsed >= 1.2, f"4 MB at 2 MB/s took only {elapsed:.2f} s: throttle not applied"
    assert not os.path.exists(cg)
    assert _blkio_line() == before


def test_kernel_throttle_cleans_up_on_exception(tmp_path):
    info, spec = _kernel_ok(tmp_path)
    before = _blkio_line()
    with pytest.raises(ZeroDivisionError):
        with KernelThrottle(spec, info.maj_min) as kt:
            cg = kt.cgroup_dir
            assert cg and os.path.isdir(cg)
            1 / 0
    assert not os.path.exists(cg)
    assert _blkio_line() == before


_SIGINT_CHILD = """
import os, signal, sys, time
from profiler.storage.throttle import KernelThrottle, ThrottleSpec
with KernelThrottle(ThrottleSpec(2_000_000, None, "t"), sys.argv[1]) as kt:
    print(kt.cgroup_dir, flush=True)
    os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered while throttled
    time.sleep(5)
"""


def test_kernel_throttle_cleans_up_on_ctrl_c(tmp_path):
    info, _ = _kernel_ok(tmp_path)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", _SIGINT_CHILD, info.maj_min], capture_output=True, text=True,
                          timeout=30, cwd=repo, env={**os.environ, "PYTHONPATH": repo})
    assert "KeyboardInterrupt" in proc.stderr and proc.returncode != 0
    cg = proc.stdout.strip()
    assert cg and not os.path.exists(cg)


def test_ctrl_c_during_cgroup_changes_is_held_until_they_finish():
    # the guard KernelThrottle puts around enter/exit: the interrupt arrives, but only after the block completes
    from profiler.storage.kernel_throttle import _deferred_signals
    done = []
    with pytest.raises(KeyboardInterrupt):
        with _deferred_signals():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            done.append(True)
    assert done == [True]


def test_cleanup_stale_removes_dead_pid_cgroups(tmp_path):
    info, spec = _kernel_ok(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with KernelThrottle(spec, info.maj_min) as kt:  # learn where our cgroups go
        parent = os.path.dirname(kt.cgroup_dir)
    stale = os.path.join(parent, f"profiler-{dead.pid}")
    os.mkdir(stale)
    try:
        assert stale in cleanup_stale()
        assert not os.path.exists(stale)
    finally:
        if os.path.exists(stale):
            os.rmdir(stale)


def test_kernel_throttle_unavailable_reasons():
    spec = STORAGE_PRESETS["hdd"]
    ok, why = KernelThrottle.available(spec, None)
    assert not ok and why
    ok, why = KernelThrottle.available(spec, "9999:9999")
    assert not ok and why
    with pytest.raises(ValueError):
        KernelThrottle(spec, "vda")
    if os.geteuid() == 0:
        with pytest.raises(KernelThrottleError):
            KernelThrottle(spec, "9999:9999").__enter__()
