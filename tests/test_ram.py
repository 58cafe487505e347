"""Host-RAM analysis: copy-on-read detection on real forked DataLoader workers, and the RAM projection."""
from __future__ import annotations

import multiprocessing
import time

import numpy as np
import psutil
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from profiler.analysis.ram import (
    ASSUMED_WORKER_PRIVATE_BYTES,
    COPY_ON_READ_MIN_GROWTH_BYTES,
    detect_copy_on_read,
    project_ram,
)

MIB = 1024**2
N_ITEMS = 2_500_000  # ~2.5 M short strings, ~200 MB of Python objects: the pytorch#13246 shape
N_SAMPLES = 400  # each sample touches a contiguous slice of N_ITEMS / N_SAMPLES items
BATCH = 10


def _strings() -> list[str]:
    return [f"img/{i:010d}/xxxxxxxxxxxxx.jpg" for i in range(N_ITEMS)]  # 32 chars, a file-name-like key


class ListDataset(Dataset):
    """Metadata as a Python list of str: reading an item increments its refcount, writing to its page."""

    def __init__(self, items: list[str]) -> None:
        self.items = items
        self.chunk = len(items) // N_SAMPLES

    def __len__(self) -> int:
        return N_SAMPLES

    def __getitem__(self, i: int) -> torch.Tensor:
        total = 0
        for s in self.items[i * self.chunk:(i + 1) * self.chunk]:
            total += len(s)
        time.sleep(0.002)
        return torch.tensor(total)


class ArrayDataset(Dataset):
    """The same metadata as the fix advises (ram.COPY_ON_READ_FIX): one uint8 byte buffer of every string concatenated
    plus an int64 array of offsets. Reads never write to the shared pages."""

    def __init__(self, items: list[str]) -> None:
        encoded = [s.encode() for s in items]
        self.buf = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        self.off = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=self.off[1:])
        self.chunk = len(items) // N_SAMPLES

    def __len__(self) -> int:
        return N_SAMPLES

    def __getitem__(self, i: int) -> torch.Tensor:
        total = 0
        for j in range(i * self.chunk, (i + 1) * self.chunk):
            total += len(self.buf[self.off[j]:self.off[j + 1]].tobytes().decode())
        time.sleep(0.002)
        return torch.tensor(total)


def _run_and_sample(dataset: Dataset) -> dict:
    """Iterate a 2-worker fork DataLoader, reading every process's USS/PSS/RSS with psutil after each batch, and
    return a `samples` dict shaped like run.json's."""
    ctx = multiprocessing.get_context("fork")  # copy-on-write sharing only exists with fork
    loader = DataLoader(dataset, batch_size=BATCH, num_workers=2, multiprocessing_context=ctx)
    me = psutil.Process()
    others = {c.pid for c in me.children()}  # children that are not this loader's workers (none, normally)
    t0 = time.perf_counter()
    series: dict[int, dict] = {}
    ticks, avail = [], []

    def tick() -> None:
        t = time.perf_counter() - t0
        ticks.append(t)
        avail.append(psutil.virtual_memory().available)
        for proc in [me, *(c for c in me.children() if c.pid not in others)]:
            try:
                mem = proc.memory_full_info()
            except psutil.NoSuchProcess:
                continue
            e = series.setdefault(proc.pid, {
                "pid": proc.pid, "role": "main" if proc.pid == me.pid else "worker", "worker_id": None,
                "t_s": [], "cpu_percent": [], "rss_bytes": [], "pss_bytes": [], "uss_bytes": [], "io": None})
            e["t_s"].append(t)
            e["cpu_percent"].append(0.0)
            e["rss_bytes"].append(mem.rss)
            e["pss_bytes"].append(getattr(mem, "pss", None))
            e["uss_bytes"].append(mem.uss)

    it = iter(loader)
    for _ in it:
        tick()
    del it
    workers = [e for e in series.values() if e["role"] == "worker"]
    for wid, e in enumerate(sorted(workers, key=lambda e: e["pid"])):
        e["worker_id"] = wid
    vm = psutil.virtual_memory()
    n = len(ticks)
    return {
        "interval_s": ticks[-1] / max(1, n - 1), "t_s": ticks, "cpu_percent_per_core": [[0.0]] * n,
        "ram_total_bytes": vm.total, "ram_used_bytes": [vm.used] * n, "ram_available_bytes": avail,
        "page_cache_bytes": [0] * n, "disk_read_bytes_per_s": [0.0] * n, "disk": None, "shm_used_bytes": [0] * n,
        "processes": list(series.values()), "gpu": None, "absent": {"gpu": "not needed by this test"},
    }


@pytest.fixture(scope="module")
def list_samples() -> dict:
    items = _strings()
    return _run_and_sample(ListDataset(items))


@pytest.fixture(scope="module")
def array_samples() -> dict:
    return _run_and_sample(ArrayDataset(_strings()))


def _growth_tests(samples: dict) -> list[dict]:
    """Each worker's figures in the copy-on-read test (profiler/analysis/ram.py), for a failure's message."""
    from profiler.analysis import ram

    out = []
    for p in ram._workers(samples):
        s = ram._private_series(p)
        if s is None:
            out.append({"pid": p.pid, "series": None})
            continue
        growth = s.v[-1] - s.v[0]
        rises = sum(max(0.0, b - a) for a, b in zip(s.v, s.v[1:]))
        late = s.v[-1] - ram._value_at(s, (s.t[0] + s.t[-1]) / 2)
        out.append({"pid": p.pid, "readings": len(s.v), "growth_mib": growth / MIB,
                    "monotone": growth / rises if rises else None, "late": late / growth if growth else None,
                    "slope": ram._slope(s.t, s.v), "span_s": (s.t[0], s.t[-1]), "values_mib": [v / MIB for v in s.v]})
    return out


def test_copy_on_read_fires_for_python_list(list_samples: dict) -> None:
    finding = detect_copy_on_read(list_samples)
    assert finding is not None, _growth_tests(list_samples)
    assert len(finding["workers"]) == 2
    assert finding["growth_bytes_per_worker"] >= COPY_ON_READ_MIN_GROWTH_BYTES
    assert finding["slope_bytes_per_s"] > 0
    assert "numpy" in finding["fix"] and "offsets" in finding["fix"] and "13246" in finding["message"]


def test_copy_on_read_silent_for_numpy_array(array_samples: dict) -> None:
    workers = [p for p in array_samples["processes"] if p["role"] == "worker"]
    assert len(workers) == 2 and all(len(p["uss_bytes"]) >= 10 for p in workers)
    assert detect_copy_on_read(array_samples) is None


def test_projection_from_real_run(list_samples: dict, array_samples: dict) -> None:
    rows = project_ram(array_samples, workers_now=2, workers_target=[0, 2, 8])
    assert [r["workers"] for r in rows] == [0, 2, 8]
    assert rows[0]["projected_bytes"] < rows[1]["projected_bytes"] < rows[2]["projected_bytes"]
    assert rows[1]["basis"] == "uss" and rows[1]["available_bytes"] > 0 and rows[1]["fits"] is True
    assert rows[2]["warning"] is None or "available" in rows[2]["warning"] or "free" in rows[2]["warning"]
    grown = project_ram(list_samples, workers_now=2, workers_target=[8])[0]
    assert grown["per_worker_bytes"] > rows[2]["per_worker_bytes"]  # the copied list is in each worker
    assert "lower bound" in grown["warning"]


# --- synthetic series: the shapes the detector must tell apart --------------------------------------------------


def _samples(worker_series: list[list[float | None]], key: str = "uss_bytes", available: float = 8e9,
             main_uss: float = 400 * MIB, main_rss: float = 600 * MIB) -> dict:
    n = len(worker_series[0])
    t = [float(i) for i in range(n)]
    procs = [{"pid": 1, "role": "main", "worker_id": None, "t_s": t, "cpu_percent": [0.0] * n,
              "rss_bytes": [main_rss] * n, "pss_bytes": None, "uss_bytes": [main_uss] * n, "io": None}]
    for i, values in enumerate(worker_series):
        proc = {"pid": 10 + i, "role": "worker", "worker_id": i, "t_s": t, "cpu_percent": [0.0] * n,
                "rss_bytes": [500 * MIB] * n, "pss_bytes": None, "uss_bytes": None, "io": None}
        proc[key] = values
        procs.append(proc)
    return {"interval_s": 1.0, "t_s": t, "ram_total_bytes": 16 * 1024 * MIB,
            "ram_available_bytes": [available] * n, "processes": procs}


def _mib(values: list[float]) -> list[float]:
    return [v * MIB for v in values]


def test_steady_growth_fires() -> None:
    finding = detect_copy_on_read(_samples([_mib([20 + 10 * i for i in range(12)])] * 2))
    assert finding is not None and finding["growth_bytes_per_worker"] == 110 * MIB
    assert finding["slope_bytes_per_s"] == pytest.approx(10 * MIB)


def test_pss_is_used_when_uss_absent_with_gaps() -> None:
    values: list[float | None] = _mib([20 + 10 * i for i in range(12)])
    values[1::2] = [None] * 6  # smaps read at a lower rate than the other series
    finding = detect_copy_on_read(_samples([values], key="pss_bytes"))
    assert finding is not None and finding["workers"][0]["basis"] == "pss"


@pytest.mark.parametrize("shape", [
    [20, 120, 125, 126, 126, 127, 127, 127, 128, 128, 128, 128],  # start-up ramp that levels off
    [20, 25, 28, 30, 31, 32, 33, 34, 35, 36, 37, 38],  # growth under the threshold
    [20, 200, 30, 220, 40, 210, 50, 230, 60, 240, 70, 215],  # allocator churn: big rises and falls
    [200, 190, 180, 170, 160, 150, 140, 130, 120, 110, 100, 90],  # shrinking
    [20, 200],  # too few readings to call a trend
])
def test_other_shapes_do_not_fire(shape: list[float]) -> None:
    assert detect_copy_on_read(_samples([_mib(shape)])) is None


def test_no_workers_or_no_memory_series() -> None:
    assert detect_copy_on_read({"processes": []}) is None
    assert detect_copy_on_read(_samples([[None] * 12])) is None


def test_projection_arithmetic_and_warning() -> None:
    s = _samples([_mib([100] * 12), _mib([140] * 12)], available=1000 * MIB)
    rows = project_ram(s, workers_now=2, workers_target=[2, 4, 16])
    r2, r4, r16 = rows
    assert r2["per_worker_bytes"] == 120 * MIB and r2["main_bytes"] == 400 * MIB and r2["shared_bytes"] == 200 * MIB
    assert r4["projected_bytes"] == (400 + 4 * 120 + 200) * MIB
    assert r4["projected_worst_bytes"] == r4["projected_bytes"] + 4 * 200 * MIB
    # the job could hold the available RAM plus its own private memory: 1000 + 400 + 240 MiB
    assert r2["available_bytes"] == (1000 + 400 + 240) * MIB
    assert r4["fits"] is True and r4["warning"] is None
    assert r16["fits"] is False and "OOM" in r16["warning"]


def test_projection_without_measured_workers_assumes_and_says_so() -> None:
    s = _samples([[None] * 5])
    s["processes"] = s["processes"][:1]
    row = project_ram(s, workers_now=0, workers_target=[4])[0]
    assert row["basis"] == "assumed" and row["per_worker_bytes"] == ASSUMED_WORKER_PRIVATE_BYTES


def test_projection_uses_the_callers_detection() -> None:
    """analyze() detects copy-on-read once and hands the result to the projection, which then does not look again."""
    growing = _samples([_mib([20 + 10 * i for i in range(12)])] * 2)
    found = detect_copy_on_read(growing)
    assert found is not None
    said = project_ram(growing, workers_now=2, workers_target=[2], copy_on_read=found)[0]
    assert "copy-on-read" in said["warning"]
    assert project_ram(growing, workers_now=2, workers_target=[2])[0]["warning"] == said["warning"]  # detected here
    told_none = project_ram(growing, workers_now=2, workers_target=[2], copy_on_read=None)[0]
    assert told_none["warning"] is None or "copy-on-read" not in told_none["warning"]
