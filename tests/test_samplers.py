"""Tests for profiler.samplers: real threads, real child processes, a real DataLoader; nothing mocked.

No timing assertions (the machine may be a loaded 2-core box); per-tick cost is measured by the sampler itself
(`sampler_overhead`) and belongs in benchmarks.
"""
from __future__ import annotations

import json
import mmap
import multiprocessing as mp
import os
import time
from collections.abc import Callable

import psutil
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from profiler.samplers import Sampler, gpu_facts, probe_environment
from profiler.samplers.gpu import (
    GpuSampler,
    NvmlDevice,
    map_cuda_device,
    parse_visible_devices,
    pcie_counter_rate,
)

SYSTEM_SERIES = ("cpu_percent_per_core", "ram_used_bytes", "ram_available_bytes", "page_cache_bytes",
                 "disk_read_bytes_per_s", "shm_used_bytes")
PROCESS_SERIES = ("cpu_percent", "rss_bytes")
FILE_BYTES = 2 * 1024 * 1024


def _busy(seconds: float, read_path: str | None) -> None:
    """Child body: optionally read a file (so /proc/<pid>/io has bytes), then spin on the CPU."""
    if read_path:
        with open(read_path, "rb") as f:
            while f.read(1 << 16):
                pass
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def _until(done: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """Poll ``done`` until true (a wait for an event, not a guess of how long it takes on a loaded machine)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.005)


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def _whole_disk() -> str | None:
    try:
        names = [line.split()[2] for line in open("/proc/diskstats") if len(line.split()) >= 14]
        block = set(os.listdir("/sys/block"))
    except OSError:
        return None
    disks = [n for n in names if n in block and not n.startswith(("loop", "ram", "zram", "dm-", "md"))]
    return disks[0] if disks else None


def _assert_plain_json_types(obj: object, where: str = "samples") -> None:
    """Only dict/list/str/int/float/bool/None, exactly: numpy scalars would break other JSON writers."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            assert type(k) is str, where
            _assert_plain_json_types(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _assert_plain_json_types(v, f"{where}[{i}]")
    else:
        assert obj is None or type(obj) in (str, int, float, bool), f"{where}: {type(obj)}"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One sampled run (~1.5 s): two labelled busy workers (one exits early after reading a file and is labelled
    only after it exited), one unlabelled sleeping child."""
    path = tmp_path_factory.mktemp("io") / "data.bin"
    path.write_bytes(os.urandom(FILE_BYTES))
    ctx = mp.get_context("fork")
    disk = _whole_disk()
    sampler = Sampler(time.perf_counter_ns(), interval_s=0.05, disk=disk, full_memory_every=2, children_every=2)
    sampler.start()
    long_worker = ctx.Process(target=_busy, args=(1.2, None))
    short_worker = ctx.Process(target=_busy, args=(0.6, str(path)))
    other = ctx.Process(target=_sleep, args=(1.0,))
    for p in (long_worker, short_worker, other):
        p.start()
    sampler.label_pid(long_worker.pid, "worker", 0)
    time.sleep(0.3)
    short_worker.join()
    time.sleep(0.2)  # let the sampler notice the exit before the (late) label arrives
    sampler.label_pid(short_worker.pid, "worker", 1)
    long_worker.join()
    other.join()
    first = sampler.stop()
    second = sampler.stop()
    return {"samples": first, "again": second, "disk": disk,
            "pids": {"long": long_worker.pid, "short": short_worker.pid, "other": other.pid}}


def _proc(samples: dict, pid: int) -> dict:
    matches = [p for p in samples["processes"] if p["pid"] == pid]
    assert len(matches) == 1, f"pid {pid} recorded {len(matches)} times"
    return matches[0]


def test_schema_keys_and_lengths(run: dict) -> None:
    s = run["samples"]
    for key in ("interval_s", "t_s", "ram_total_bytes", "disk", "processes", "gpu", "absent", *SYSTEM_SERIES):
        assert key in s, key
    n = len(s["t_s"])
    assert n >= 10  # ~1.5 s at 50 ms, with a wide margin for a loaded machine
    assert all(b > a for a, b in zip(s["t_s"], s["t_s"][1:])), "t_s must increase"
    for key in SYSTEM_SERIES:
        assert len(s[key]) == n, key
    assert all(len(row) == psutil.cpu_count() for row in s["cpu_percent_per_core"])
    assert all(0.0 <= v <= 100.0 for row in s["cpu_percent_per_core"] for v in row)
    assert max(max(row) for row in s["cpu_percent_per_core"]) > 0  # two busy children were running
    assert s["ram_total_bytes"] > 0 and all(0 < u < s["ram_total_bytes"] for u in s["ram_used_bytes"])
    assert all(a > 0 for a in s["ram_available_bytes"]) and all(c >= 0 for c in s["page_cache_bytes"])
    assert all(v is None or v >= 0 for v in s["disk_read_bytes_per_s"])
    assert s["disk"] == run["disk"]
    for p in s["processes"]:
        assert set(p) >= {"pid", "role", "worker_id", "t_s", "cpu_percent", "rss_bytes", "pss_bytes",
                          "uss_bytes", "io"}
        m = len(p["t_s"])
        assert m > 0
        for key in PROCESS_SERIES:
            assert len(p[key]) == m, (p["pid"], key)
        for key in ("pss_bytes", "uss_bytes"):
            assert p[key] is None or len(p[key]) == m, (p["pid"], key)
        assert all(r > 0 for r in p["rss_bytes"])


def test_json_serialisable_with_plain_types(run: dict) -> None:
    s = run["samples"]
    assert json.loads(json.dumps(s)) == s
    _assert_plain_json_types(s)


def test_stop_twice_returns_same_result(run: dict) -> None:
    assert run["again"] is run["samples"]


def test_gpu_absent_without_gpu_index(run: dict) -> None:
    assert run["samples"]["gpu"] is None
    assert run["samples"]["absent"]["gpu"]


def test_roles_labels_and_cpu(run: dict) -> None:
    s, pids = run["samples"], run["pids"]
    main = _proc(s, os.getpid())
    assert main["role"] == "main" and main["worker_id"] is None
    long_w, short_w, other = _proc(s, pids["long"]), _proc(s, pids["short"]), _proc(s, pids["other"])
    assert (long_w["role"], long_w["worker_id"]) == ("worker", 0)
    assert (short_w["role"], short_w["worker_id"]) == ("worker", 1)  # labelled after it had exited
    assert (other["role"], other["worker_id"]) == ("child", None)  # found by the tree scan, never labelled
    assert max(long_w["cpu_percent"]) > 0 and max(short_w["cpu_percent"]) > 0
    assert all(set(p["t_s"]) <= set(s["t_s"]) for p in s["processes"])  # process ticks are sampler ticks


def test_io_kept_after_exit(run: dict) -> None:
    short_w = _proc(run["samples"], run["pids"]["short"])
    assert short_w["alive_at_end"] is False
    assert short_w["io"] is not None
    assert short_w["io"]["rchar"] >= FILE_BYTES  # it read the whole file before the ticks that saw it
    assert short_w["io"]["read_bytes"] >= 0
    assert _proc(run["samples"], os.getpid())["io"] is not None


def test_pss_sampled_sometimes(run: dict) -> None:
    values = [v for p in run["samples"]["processes"] if p["pss_bytes"] for v in p["pss_bytes"] if v is not None]
    assert values, run["samples"]["absent"]
    assert all(v > 0 for v in values)


def test_stop_without_start_is_safe() -> None:
    sampler = Sampler(time.perf_counter_ns())
    first = sampler.stop()
    assert first["t_s"] == [] and first["processes"] == [] and first["gpu"] is None
    assert "sampler" in first["absent"]
    assert sampler.stop() is first
    sampler.start()  # after stop: does nothing
    assert sampler.stop() is first
    json.dumps(first)


def test_bad_label_and_bad_disk() -> None:
    sampler = Sampler(time.perf_counter_ns(), interval_s=0.05, disk="no-such-disk")
    with pytest.raises(ValueError):
        sampler.label_pid(os.getpid(), "boss", None)
    sampler.start()
    time.sleep(0.3)
    s = sampler.stop()
    assert s["disk"] is None and "no-such-disk" in s["absent"]["disk"]
    assert len(s["disk_read_bytes_per_s"]) == len(s["t_s"])


class _PidDataset(Dataset):
    """Each item says which process produced it, so the test learns the worker pids without private APIs."""

    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.01)
        return torch.tensor([os.getpid(), i])


def test_dataloader_workers_appear_as_children() -> None:
    sampler = Sampler(time.perf_counter_ns(), interval_s=0.05)
    sampler.start()
    worker_pids: set[int] = set()
    for batch in DataLoader(_PidDataset(), batch_size=4, num_workers=2):
        worker_pids.update(int(p) for p in batch[:, 0])
    s = sampler.stop()
    assert len(worker_pids) == 2 and os.getpid() not in worker_pids
    seen = {p["pid"]: p for p in s["processes"]}
    for pid in worker_pids:
        assert pid in seen, f"DataLoader worker {pid} not sampled"
        assert seen[pid]["role"] == "child" and max(seen[pid]["rss_bytes"]) > 0


def test_environment_probe() -> None:
    env = probe_environment()
    json.dumps(env)
    _assert_plain_json_types(env, "environment")
    cpu = env["cpu"]
    assert cpu["logical_cores"] == psutil.cpu_count()
    assert 0 < cpu["usable_cores"] <= cpu["logical_cores"] and cpu["usable_cores_int"] >= 1
    assert env["ram"]["total_bytes"] > 0
    assert env["packages"]["torch"] == torch.__version__
    for name in ("torchvision", "pillow", "numpy"):
        assert env["packages"][name], name
    assert env["python"]["version"].startswith("3.")
    assert env["torch"]["cuda_available"] == torch.cuda.is_available()
    if not torch.cuda.is_available():
        assert env["gpu"] is None
    host = os.uname().nodename
    assert "hostname" not in json.dumps(env) and (len(host) < 6 or host not in json.dumps(env))  # privacy


@pytest.mark.skipif(torch.cuda.is_available(), reason="machine has a GPU")
def test_gpu_absent_reasons_without_gpu() -> None:
    gpu = GpuSampler(0)
    assert gpu.open() is False and gpu.absent["gpu"]
    assert gpu.to_dict() is None
    assert gpu_facts(0) is None
    sampler = Sampler(time.perf_counter_ns(), interval_s=0.05, gpu_index=0)
    sampler.start()
    time.sleep(0.2)
    s = sampler.stop()
    assert s["gpu"] is None and s["absent"]["gpu"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_series_with_gpu() -> None:
    from profiler.samplers.gpu import nvml_index_for_cuda_device

    index = nvml_index_for_cuda_device(0)
    facts = gpu_facts(index)
    assert facts is not None and facts["memory_total_bytes"] > 0 and facts["name"]
    sampler = Sampler(time.perf_counter_ns(), interval_s=0.05, gpu_index=index)
    sampler.start()
    x = torch.randn(4096, 4096, device="cuda")
    end = time.perf_counter() + 1.5
    while time.perf_counter() < end:
        x = (x @ x).clamp_(-1, 1)
        torch.cuda.synchronize()
    s = sampler.stop()
    g = s["gpu"]
    assert g is not None, s["absent"]
    assert len(g["t_s"]) == len(g["util_percent"]) == len(g["mem_used_bytes"]) > 0
    assert g["mem_total_bytes"] > 0 and max(v for v in g["mem_used_bytes"] if v is not None) > 0
    assert max(v for v in g["util_percent"] if v is not None) > 0
    if g["pcie_rx_bytes_per_s"] is not None:
        assert len(g["pcie_rx_bytes_per_s"]) == len(g["t_s"])
        assert any(v is not None for v in g["pcie_rx_bytes_per_s"])
    json.dumps(s)


GPU0 = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
GPU1 = "GPU-1a2b3c4d-0000-4106-c12f-20bd9faed9f6"
MIG10 = "MIG-5c6d7e8f-1111-5000-a000-000000000001"
MIG11 = "MIG-5c6d7e8f-2222-5000-a000-000000000002"
TABLE = [NvmlDevice(0, GPU0), NvmlDevice(1, GPU1), NvmlDevice(1, MIG10, mig=True), NvmlDevice(1, MIG11, mig=True)]


@pytest.mark.parametrize("value, tokens", [
    (None, None), ("", []), ("0", ["0"]), ("2,1", ["2", "1"]), (" 1 , 0 ", ["1", "0"]),
    ("0,2,-1,1", ["0", "2"]),  # CUDA stops at the first invalid token
    (f"{GPU1},0", [GPU1, "0"]), ("GPU-8932f937", ["GPU-8932f937"]), (MIG10, [MIG10]), ("foo,0", []),
])
def test_parse_visible_devices(value: str | None, tokens: list[str] | None) -> None:
    assert parse_visible_devices(value) == tokens


def test_map_by_torch_uuid_wins_over_everything() -> None:
    m = map_cuda_device(0, ["0"], TABLE, torch_uuid=GPU1.removeprefix("GPU-"))
    assert (m.index, m.uuid, m.mig, m.how) == (1, GPU1, False, "device UUID")


def test_map_numeric_visible_devices() -> None:
    m = map_cuda_device(0, ["1", "0"], TABLE, pci_bus_order=True)
    assert (m.index, m.uuid, m.note) == (1, GPU1, None)
    m = map_cuda_device(1, ["1", "0"], TABLE)
    assert m.index == 0 and "PCI_BUS_ID" in m.note  # the order assumption is said
    m = map_cuda_device(0, ["7"], TABLE)
    assert m.index is None and "does not list" in m.note
    m = map_cuda_device(2, ["1", "0"], TABLE)
    assert m.index is None and m.how == "not visible"


def test_map_gpu_uuid_and_prefix_in_visible_devices() -> None:
    assert map_cuda_device(0, [GPU1], TABLE).index == 1
    assert map_cuda_device(0, ["GPU-8932f937"], TABLE).index == 0  # a unique prefix, as CUDA allows
    m = map_cuda_device(0, ["GPU-"], TABLE)
    assert m.index is None and "matches 2" in m.note


def test_map_mig_instance_samples_its_parent_and_says_so() -> None:
    m = map_cuda_device(0, [MIG11], TABLE)
    assert (m.index, m.uuid, m.mig) == (1, MIG11, True) and "MIG" in m.note and "parent" in m.note
    # torch reports a MIG instance's own UUID
    m = map_cuda_device(0, None, TABLE, torch_uuid=MIG10.removeprefix("MIG-"))
    assert (m.index, m.mig) == (1, True)
    # the legacy form MIG-GPU-<uuid>/<gi>/<ci> names the parent GPU
    m = map_cuda_device(0, [f"MIG-{GPU1}/1/0"], TABLE)
    assert (m.index, m.mig) == (1, True)
    assert map_cuda_device(0, ["MIG-ffff"], TABLE).index is None


def test_map_without_visible_devices_uses_the_same_index() -> None:
    m = map_cuda_device(1, None, TABLE)
    assert (m.index, m.uuid) == (1, GPU1) and m.note  # two GPUs: the ordering assumption is said
    m = map_cuda_device(0, None, [NvmlDevice(0, GPU0)])
    assert (m.index, m.note) == (0, None)
    assert map_cuda_device(0, None, []).index == 0  # no NVML at all: the sampler finds out it cannot open


def test_pcie_counter_rate() -> None:
    assert pcie_counter_rate(None, (1000, 10)) is None
    assert pcie_counter_rate((1000, 1_000_000), (3_000_000_000, 2_000_000)) == pytest.approx(2_999_999_000.0)
    assert pcie_counter_rate((5000, 10), (4000, 20)) is None  # counter went back: reset
    assert pcie_counter_rate((5000, 10), (6000, 10)) is None  # no time passed


def test_environment_probe_on_the_cpu_has_no_gpu_index_mixup() -> None:
    # the NVML index and torch's index are separate arguments; on a machine without CUDA neither yields a GPU
    env = probe_environment(gpu_index=None, cuda_index=None)
    if not torch.cuda.is_available():
        assert env["gpu"] is None
    else:
        assert env["gpu"]["cuda_index"] == 0


# -- a long run keeps the series bounded ----------------------------------------------------------------------------

def test_halve_pairs_by_meaning():
    from profiler.samplers.thinning import halve, halve_rows

    assert halve([0.1, 0.2, 0.3, 0.4, 0.5], "last") == [0.2, 0.4, 0.5]
    assert halve([10.0, 30.0, 50.0, 50.0], "mean") == [20.0, 50.0]
    assert halve([5, 9, 7, 2], "max") == [9, 7] and halve([5, 9, 7, 2], "min") == [5, 2]
    assert halve([None, 4, None, None, 6], "max") == [4, None, 6]  # a missing reading never wins
    from profiler.samplers.thinning import to_points

    assert to_points([1, 2, 3, 4, 5, 6, 7], 4, "max") == [1, 3, 5, 7]  # groups of 1-2, never more
    assert to_points(list(range(10)), 4, "mean") == [0.5, 3.0, 5.5, 8.0]
    assert to_points([1, 2], 4, "max") == [1, 2]  # fewer points than asked: unchanged
    assert halve_rows([[0.0, 100.0], [50.0, 0.0], [10.0, 10.0]]) == [[25.0, 50.0], [10.0, 10.0]]
    with pytest.raises(ValueError):
        halve([1, 2], "median")


def test_a_long_run_halves_the_series_and_the_rate_keeping_peaks():
    """A sampler allowed 8 points that runs for ~40 ticks ticks less often, writes exactly 4 points per series over
    the whole run, and its RSS series still holds the peak of a memory spike it saw (max, not every other point)."""
    # Waits by the sampler's own ticks, not by sleeps a loaded machine can outlast: the spike is held for ten ticks
    # (the 0.1 s it was held at the nominal rate), and the run goes on until the series were halved twice after it.
    sampler = Sampler(time.perf_counter_ns(), interval_s=0.01, max_ticks=8)
    t0 = time.monotonic()
    sampler.start()
    _until(lambda: sampler.ticks >= 5)
    # 200 MiB of fresh anonymous pages, touched: resident while a few ticks read it. An mmap, not a bytearray, so the
    # pages are new to the process whatever earlier tests in this worker left in malloc's free lists.
    spike = mmap.mmap(-1, 200 * 2**20)
    for i in range(0, len(spike), 4096):
        spike[i] = 1
    seen = sampler.ticks
    _until(lambda: sampler.ticks >= seen + 10)
    spike.close()
    # Two more halvings after the spike: the first may merge a spike tick with a later one (max keeps the spike), but
    # every point written after it holds only later ticks, so the last points show the memory without the spike.
    after = sampler.halvings
    _until(lambda: sampler.halvings >= max(2, after + 2) and time.monotonic() - t0 > 0.65)
    s = sampler.stop()
    assert s["halvings"] >= 2 and s["interval_s"] == pytest.approx(0.01 * 2 ** s["halvings"])
    n = len(s["t_s"])
    assert n == 4 and s["sampler_overhead"]["ticks"] > 8
    assert s["t_s"] == sorted(s["t_s"]) and s["t_s"][-1] > 0.5
    for key in SYSTEM_SERIES:
        assert len(s[key]) == n, key
    main = next(p for p in s["processes"] if p["role"] == "main")
    assert len(main["rss_bytes"]) == len(main["t_s"]) == len(main["cpu_percent"])
    assert max(main["rss_bytes"]) - min(main["rss_bytes"]) > 150 * 2**20  # the spike survived the halvings
    json.dumps(s)


def test_proc_files_read_the_same_with_the_gil_kept_and_fail_once_the_process_is_gone() -> None:
    """The sampler's kept-open /proc reads go through libc's pread without releasing the GIL (proc_readers says why):
    they give what os.pread gives, grow past their first buffer, and fail with OSError for a process that exited."""
    import subprocess
    import sys

    from profiler.samplers import proc_readers
    from profiler.samplers.proc_readers import ProcFile

    assert proc_readers.PREAD_KEEPS_GIL is not None  # Linux with glibc: the path the sampler takes
    for path in ("/proc/meminfo", "/proc/stat", "/proc/self/io"):
        f = ProcFile(path)
        a, b = f.read(), os.pread(os.open(path, os.O_RDONLY), 65536, 0)
        assert a.split(b"\n")[0].split()[0] == b.split(b"\n")[0].split()[0] and abs(len(a) - len(b)) < 64, path
        f.close()
    f = ProcFile("/proc/self/stat")
    f._size = 16  # smaller than the file: the read grows its buffer and reads again
    data = f.read()
    assert data.startswith(f"{os.getpid()} (".encode()) and data.endswith(b"\n") and len(data) > 64
    assert f._size > len(data)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        g = ProcFile(f"/proc/{child.pid}/stat")
        assert g.read().startswith(str(child.pid).encode())
    finally:
        child.kill()
        child.wait()
    with pytest.raises(OSError):
        if not g.read():  # a reaped process's kept-open file: ESRCH (or nothing, which the tracker treats alike)
            raise OSError("empty")


def test_the_main_process_pss_waits_and_a_short_run_gets_it_at_stop() -> None:
    """The main process's first PSS/USS reading (7-12 ms of smaps_rollup with torch imported) waits
    MAIN_FIRST_FULL_AFTER_S, so it does not land in a short run's measured steps; a run that ends sooner gets it when
    the sampler stops, in its last tick's place."""
    from profiler.samplers import process_tracker

    assert process_tracker.MAIN_FIRST_FULL_AFTER_S > 0.5
    sampler = Sampler(time.perf_counter_ns(), interval_s=0.05, full_memory_every=2)
    sampler.start()
    deadline = time.monotonic() + 5
    while sampler.ticks < 6 and time.monotonic() < deadline:  # 0.3 s: six full periods of 0.1 s (none for main)
        time.sleep(0.02)
    main = next(e for e in sampler._tracker.series if e.pid == os.getpid())
    assert len(main.pss_bytes) >= 3 and all(v is None for v in main.pss_bytes), main.pss_bytes
    samples = sampler.stop()
    pss = _proc(samples, os.getpid())["pss_bytes"]
    assert pss[-1] is not None and pss[-1] > 0 and all(v is None for v in pss[:-1]), pss
