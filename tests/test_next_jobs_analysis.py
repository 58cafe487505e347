"""Issue 31, items 4-7, 9, 10: what the analysis says about the next jobs people run, against the real libraries.

- Token files read through np.memmap (nanoGPT / Megatron style): the device bytes the kernel counted (read_bytes, page
  faults included) are "from the device", cold or all cached, the same in the terminal, report.html and run.json;
  no sentence quotes a read stage a script never has.
- OpenCV, albumentations and MONAI calls are named sub-stages (decode / augment), not "your __getitem__ (rest)".
- The RAM line counts workers at once, with the processes over the run beside them.
- Copy-on-read is shared pages turning private (USS up, RSS not), not heap growth.
- Transfer advice tells a batch's bytes from a wait for a core.

Real DataLoaders, worker processes and files in tmp dirs; small jobs, few steps.
"""
from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from profiler.analysis.context import Context
from profiler.analysis.ram import detect_copy_on_read
from profiler.analysis.recommend import _transfer_rules
from profiler.thresholds import COPY_ON_READ_MIN_GROWTH_BYTES, MIB

JOBS = Path(__file__).parent / "jobs"


def profile(cwd: Path, *args: str, steps: int, warmup: int = 2, plots: bool = False, timeout: int = 240
            ) -> tuple[subprocess.CompletedProcess, dict, Path]:
    """``run --details`` of a job; ``plots``: also the plots and report.html (seconds more)."""
    out = cwd / "out"
    cmd = [sys.executable, "-m", "profiler", "run", "--no-progress", "--details", "--steps", str(steps),
           "--warmup", str(warmup), "--out", str(out), *([] if plots else ["--no-plots"]), *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p, json.loads((out / "run.json").read_text()), out


def flat(text: str) -> str:
    """Text with rich's wrapping and panel borders taken out, for comparing a sentence across renderers."""
    return re.sub(r"\s+", " ", re.sub(r"[│╭╮╰╯─]", " ", text))


@pytest.fixture(scope="module")
def token_files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tokens")
    for i in range(4):  # 4 x 16 MB of uint16 tokens
        np.random.default_rng(i).integers(0, 50_000, 8_000_000, dtype=np.uint16).tofile(d / f"t{i}.bin")
    return d


def _no_untimed_stage(rec: dict) -> None:
    """No sentence quotes the read stage of a record that has none (item 4)."""
    said = [rec["verdict"]["summary"]] + [r["reason"] for r in rec["verdict"].get("recommendations") or []]
    assert "read" not in rec["stages"]
    for s in said:
        assert "ms per file" not in s and "ms per read" not in s, s


def test_memmap_cold_reads_are_device_bytes_everywhere(tmp_path, token_files):
    """Evicted token files read through np.memmap: the page faults fetch the bytes (rchar ~0): the record, the
    verdict, the terminal and report.html all say how many came from the device, by the kernel's read_bytes."""
    from profiler.storage import device as sdev
    from profiler.storage import throttle as thr

    args = ["--data", str(token_files), "--cache", "cold"]
    spec = thr.parse_throttle("20MB/s")
    if thr.KernelThrottle.available(spec, sdev.describe_storage(str(token_files)).maj_min)[0]:
        args += ["--throttle", "20MB/s"]  # slow enough that the reads bind: an io verdict to read
    p, rec, out = profile(tmp_path, *args, str(JOBS / "nja_memmap.py"), str(token_files), "2", "random", steps=10,
                          plots=True)
    st = rec["storage"]
    calls = st["dataset_calls"]
    samples = calls["samples"]
    assert samples == 40
    # Each sample copies 128 KiB out of the map, page by page (MADV_RANDOM): about that much came from the device
    # (less where two samples' windows shared a page), and next to nothing through read().
    assert st["residency_start"]["fraction"] < 0.05, st["residency_start"]
    assert calls["bytes_from_device"] >= samples * 128 * 1024 * 0.75, calls
    assert calls["bytes_requested"] < calls["bytes_from_device"] / 10, calls
    summary = st["summary"]
    assert "came from the storage device" in summary and "read_bytes" in summary and "rchar" in summary
    assert "page faults on memory-mapped files" in summary
    # The whole run's hit rate cannot be told from rchar: none is claimed (was "0 %", of "96.5 MB of 741.8 kB").
    assert st["page_cache_hit_fraction"] is None
    v = rec["verdict"]["summary"]
    assert "no byte came from the device" not in v
    if rec["verdict"]["bottleneck"] == "io":
        assert "per sample from the device (kernel's read_bytes)" in v and "ms blocked per sample" in v, v
    _no_untimed_stage(rec)
    # One sentence in the terminal, report.html and run.json.
    assert flat(summary) in flat(p.stdout), p.stdout
    page = flat(html.unescape((out / "report.html").read_text()))
    assert flat(summary) in page
    assert flat(v) in flat(p.stdout) and flat(v) in page


def test_memmap_all_cached_says_no_device_bytes(tmp_path, token_files):
    """The same job with its files warmed into the page cache, workers = 0: no byte from the device, and it says so."""
    p, rec, _ = profile(tmp_path, "--data", str(token_files), "--cache", "warm", str(JOBS / "nja_memmap.py"),
                        str(token_files), "0", steps=10)
    calls = rec["storage"]["dataset_calls"]
    assert calls["bytes_from_device"] < 4096 * calls["samples"], calls
    summary = rec["storage"]["summary"]
    assert "no byte came from the storage device" in summary, summary
    assert flat(summary) in flat(p.stdout)
    v = rec["verdict"]["summary"]
    assert "from the device (kernel's read_bytes)" not in v or "0 B per sample" in v, v
    _no_untimed_stage(rec)


def _png_folder(tmp_path: Path, n: int) -> Path:
    from _util import write_png

    d = tmp_path / "png"
    d.mkdir()
    for i in range(n):
        write_png(d / f"i{i:03d}.png", size=(96, 96), seed=i)
    return d


def test_cv2_albumentations_monai_are_named_and_ram_counts_workers_at_once(tmp_path):
    """Every measured sample has a decode and an augment stage: cv2.imread / cv2.imdecode + albumentations for even
    samples, MONAI LoadImage + a monai Compose for odd ones (item 6; one library left unnamed leaves half the samples
    without them). Three epochs of a 2-worker loader without persistent workers are 2 workers at once (item 7)."""
    d = _png_folder(tmp_path, 24)  # 6 batches per epoch: 16 batches span 3 epochs
    p, rec, _ = profile(tmp_path, str(JOBS / "nja_images.py"), str(d), "2", steps=14)
    samples = 14 * 4
    assert rec["stages"]["decode"]["count"] == samples, rec["stages"]
    assert rec["stages"]["augment"]["count"] == samples, rec["stages"]
    assert rec["stages"]["decode"]["mean_ms"] > 0 and rec["stages"]["augment"]["mean_ms"] > 0
    ram = rec["ram"]
    assert ram["workers_at_once"] == 2
    assert "2 workers at once" in ram["summary"], ram["summary"]
    n = ram["worker_processes"]
    if n > 2:  # the sampler saw the later epochs' workers too
        assert f"({n} worker processes over the run" in ram["summary"] and f" {n} workers" not in ram["summary"]
    assert flat(ram["summary"]) in flat(p.stdout)


# --- copy-on-read (item 9) -----------------------------------------------------------------------------------------
def _cow_job(kind: str) -> dict:
    """tests/jobs/nja_cow.py's memory readings (a fresh process: see its docstring for why)."""
    p = subprocess.run([sys.executable, str(JOBS / "nja_cow.py"), kind], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def _series(samples: dict) -> list[str]:
    """Each worker's USS and RSS readings in MiB: what a failure needs to be understood."""
    return [f"{p['pid']}: uss {[round(v / MIB, 1) for v in p['uss_bytes']]} rss "
            f"{[round(v / MIB, 1) for v in p['rss_bytes']]} at {[round(t, 2) for t in p['t_s']]}"
            for p in samples["processes"] if p["role"] == "worker"]


def test_copy_on_read_is_shared_pages_turning_private_not_heap_growth():
    """Fires on 100k dicts read by 4 workers (USS +~100 MiB each while RSS stays); silent on a worker heap that grows
    as fast (RSS grows with USS), and silent when bounded by what the dataset's objects could hold (the built-in
    dataset's 1,000 paths)."""
    cow = _cow_job("rows")
    found = detect_copy_on_read(cow)
    assert found is not None, _series(cow)
    assert found["growth_bytes_per_worker"] >= COPY_ON_READ_MIN_GROWTH_BYTES
    assert found["rss_growth_bytes_per_worker"] < found["growth_bytes_per_worker"] / 4
    assert "13246" in found["message"] and "copied per worker" in found["message"]
    assert detect_copy_on_read(cow, object_bound=1000 * 1024.0) is None

    heap = _cow_job("hoarder")
    workers = [p for p in heap["processes"] if p["role"] == "worker"]
    grew = [(p["uss_bytes"][-1] - p["uss_bytes"][0], p["rss_bytes"][-1] - p["rss_bytes"][0]) for p in workers]
    assert all(u >= COPY_ON_READ_MIN_GROWTH_BYTES for u, _ in grew), [(u / MIB, r / MIB) for u, r in grew]
    assert detect_copy_on_read(heap) is None, _series(heap)


# --- transfer advice (item 10) ---------------------------------------------------------------------------------------
def _ctx(**kw) -> Context:
    base = dict(device_type="cpu", device_name="CPU", window_s=10.0, steps=100, samples=800, samples_per_s=80.0,
                batch_size=8, workers=2, usable_cores=2.0, cpu_util=1.0, compute_ms=50.0, h2d_ms=0.0,
                sample_cpu_ms=1.5, sample_read_ms=0.0, collate_ms=0.2, transfer_ms=20.7, ready_ahead_ms=0.0,
                mean_file_bytes=0.0, mean_pixels=0.0, read_mb_s_per_worker=0.0, dataset_bytes=0,
                ram_available_bytes=None, pin_memory=False, amp=False, augment="", image_size=224, job_kind="script")
    base.update(kw)
    return Context(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("batch_bytes, runq_ms, side", [
    (2048.0, 0.1, "workers"),  # 2 KB cannot take 20 ms, and the main thread had its core: the workers' threads waited
    (2048.0, 9.0, "main"),  # 2 KB, and the main thread waited 9 of 20.7 ms for a core
    (None, 9.0, "main"),  # bytes not recorded; the main thread waited 9 of 20.7 ms for a core
    (64e6, 0.1, None),  # 64 MB in 20.7 ms with no wait for a core: the bytes
    (None, 0.5, None),
])
def test_transfer_advice_tells_bytes_from_scheduling(batch_bytes, runq_ms, side):
    recs = _transfer_rules(_ctx(batch_bytes=batch_bytes, main_runq_ms=runq_ms), {"by_cause": {"transfer": 1.0}})
    actions = " ".join(r["action"] for r in recs)
    assert ("Give the main process a core" in actions) is (side == "main"), recs
    assert ("Give the workers' own threads a core and the GIL" in actions) is (side == "workers"), recs
    assert ("Send compact batches" in actions) is (side is None), recs


def test_tiny_batches_on_busy_cores_are_not_told_to_shrink(tmp_path):
    """2 KB batches, 2 busy workers, a model step and a busy loop on 2 cores: advice follows the measured run queue."""
    _, rec, _ = profile(tmp_path, str(JOBS / "nja_tiny.py"), "1", steps=16, warmup=3)
    steps = rec["timeline"]["steps"]
    runq = float(np.mean([r for r, m in zip(steps["main_runq"], steps["measured"]) if m])) * 1e3
    transfer = rec["stages"]["transfer"]["mean_ms"]
    advice = " ".join(r["action"] + r["reason"] for r in rec["verdict"].get("recommendations") or [])
    # The batch's bytes are measured (its 8 x 64 float32 tensor, 2 KB, and whatever else it holds), not assumed
    assert 2048 <= rec["job"]["loader"]["batch_bytes"] < 4096, rec["job"]["loader"]
    if runq >= 0.25 * transfer:
        assert "Send compact batches" not in advice, (runq, transfer, advice)
    if "Give the main process a core" in advice:
        assert "waited" in advice and "for a core" in advice
