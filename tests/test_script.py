"""`run SCRIPT` / `run -m MODULE` / profiler.profile() on user-style jobs (tests/jobs/), end to end.

Real scripts, real DataLoaders and worker processes (fork and spawn), real files in tmp dirs.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

JOBS = Path(__file__).parent / "jobs"


def profile(tmp_path: Path, *args: str, steps: int = 10, warmup: int = 2, name: str = "out",
            timeout: int = 240) -> tuple[subprocess.CompletedProcess, dict | None]:
    out = tmp_path / name
    cmd = [sys.executable, "-m", "profiler", "run", "--no-progress", "--no-plots", "--steps", str(steps),
           "--warmup", str(warmup), "--out", str(out), *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    rec = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else None
    return p, rec


@pytest.fixture(scope="module")
def raw_files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("raw")
    rng = np.random.default_rng(0)
    for i in range(96):
        (d / f"s{i:03d}.bin").write_bytes(rng.integers(0, 255, 48_000, dtype=np.uint8).tobytes())
    return d


def test_map_dataset_script_is_profiled_and_unchanged(tmp_path, raw_files):
    plain = subprocess.run([sys.executable, str(JOBS / "raw_map.py"), str(raw_files), "2"], capture_output=True,
                           text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    p, rec = profile(tmp_path, "--then", "continue", str(JOBS / "raw_map.py"), str(raw_files), "2", steps=8)
    assert p.returncode == 0, p.stderr
    # The script saw exactly what it sees without the profiler: same order of samples, same types (it asserts them).
    order = [line for line in p.stdout.splitlines() if line.startswith("ORDER")]
    assert order == [line for line in plain.stdout.splitlines() if line.startswith("ORDER")]
    job = rec["job"]
    assert job["kind"] == "script" and job["then"] == "continue" and job["argv"] == [str(raw_files), "2"]
    assert job["loader"]["dataset_class"].endswith("RawFiles") and job["loader"]["num_workers"] == 2
    assert job["loader"]["created_at"].endswith("raw_map.py:28")
    assert rec["window"]["steps"] == 8 and not rec["partial"]
    sp = rec["timeline"]["sample_spans"]
    # Each call read its file, exactly: the profiler's own /proc reads and the worker's index queue are not counted.
    assert len(sp["start"]) >= 8 * 8 and all(r == 48_000 for r in sp["rchar"]), set(sp["rchar"])
    assert set(rec["timeline"]["steps"]["worker"]) <= {0, 1}
    assert rec["stages"]["getitem"]["count"] == 64
    assert abs(sum(rec["stall"]["by_cause"].values()) - rec["stall"]["seconds"]) < 1e-5
    assert abs(sum(rec["stall"]["by_kind"].values()) - rec["stall"]["seconds"]) < 1e-5


def test_iterable_dataset_over_tar_shards(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    for s in range(4):
        with tarfile.open(shards / f"shard{s}.tar", "w") as tf:
            for i in range(12):
                data = os.urandom(4096)
                info = tarfile.TarInfo(f"s{s}_{i}.bin")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    p, rec = profile(tmp_path, str(JOBS / "tar_iterable.py"), str(shards), steps=6)
    assert p.returncode == 0, p.stderr
    assert rec["job"]["loader"]["dataset_class"].endswith("Shards")
    sp = rec["timeline"]["sample_spans"]
    assert set(sp["index"]) == {-1}  # iterator items have no index
    assert rec["window"]["steps"] == 6 and rec["window"]["samples"] == 24


def test_spawn_persistent_workers_custom_batches(tmp_path):
    p, rec = profile(tmp_path, "--then", "continue", str(JOBS / "spawn_persistent.py"), "3", steps=12, warmup=2)
    assert p.returncode == 0, p.stderr
    expected = sum(16.0 * i * i for i in range(48)) * 3
    assert f"TOTAL {expected}" in p.stdout
    loader = rec["job"]["loader"]
    assert loader["multiprocessing_context"] == "spawn" and loader["persistent_workers"]
    ep = rec["timeline"]["epochs"]
    assert len(ep["epoch"]) >= 2  # 8 batches per epoch: the window spans epochs
    assert "epoch_start" in rec["stages"]
    assert len(rec["timeline"]["batches"]["pid"]) >= 14 and len(set(rec["timeline"]["batches"]["pid"])) == 2


def test_workers0_getitems_user_stage_and_other_loaders(tmp_path):
    p, rec = profile(tmp_path, "--then", "continue", str(JOBS / "workers0.py"), steps=30, warmup=2)
    assert p.returncode == 0, p.stderr
    assert set(rec["timeline"]["steps"]["worker"]) == {-1}
    sp = rec["timeline"]["sample_spans"]
    assert set(sp["items"]) == {8}  # one row per __getitems__ call
    # per sample: each __getitems__ call's time is shared over the 8 samples it returned (30 steps x 8)
    assert "tokenize" in rec["stages"] and rec["stages"]["tokenize"]["count"] == 240
    assert rec["job"]["other_loaders"] == 1
    # the stage covered nearly the whole call: the dataset's own remainder is small but shown
    assert rec["stages"]["tokenize"]["total_s"] > 5 * rec["stages"].get("getitem", {"total_s": 0})["total_s"]


def test_script_that_raises_keeps_its_traceback_and_a_partial_record(tmp_path):
    p, rec = profile(tmp_path, str(JOBS / "raises.py"), steps=10, warmup=1)
    assert p.returncode == 1
    assert "ValueError: bad batch in the user's own code" in p.stderr
    assert 'raises.py", line' in p.stderr and "profiler/cli.py" not in p.stderr
    assert rec["partial"] and "ValueError" in rec["partial_reason"]
    assert rec["window"]["steps"] == 3  # batches 1-3 measured; the third step ended when the script raised


def test_script_sys_exit_status_is_kept(tmp_path):
    p, rec = profile(tmp_path, str(JOBS / "exits3.py"), steps=10, warmup=0)
    assert p.returncode == 3, p.stderr
    assert rec["partial"] and rec["job"]["ended"] == "sys.exit(3)"


def test_script_without_dataloader_is_one_line_and_its_own_status(tmp_path):
    p, rec = profile(tmp_path, str(JOBS / "no_loader.py"))
    assert p.returncode == 0 and rec is None  # as `python no_loader.py` ends: nothing failed, nothing to profile
    assert p.stderr.strip().count("\n") == 0 and "iterated no DataLoader" in p.stderr
    assert not (tmp_path / "out").exists()  # no empty output folder left behind


@pytest.mark.parametrize("args, needle", [
    (["--workers", "4", "x.py"], "--workers applies to the built-in pipeline only"),
    (["missing_script.py"], "no such script"),
    (["-m", "no_such_module_xyz"], "no module of that name"),
    (["--storage", "hdd", "x.py"], "need --data"),
])
def test_bad_script_invocations_exit_2(tmp_path, args, needle):
    (tmp_path / "x.py").write_text("print('never')\n")
    p, _ = profile(tmp_path, *args)
    assert p.returncode == 2 and needle in p.stderr and "Traceback" not in p.stderr


def test_module_form(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text((JOBS / "exits3.py").read_text().replace("sys.exit(3)", "break"))
    p, rec = profile(tmp_path, "-m", "mypkg.train", steps=1, warmup=0)
    assert p.returncode == 0, p.stderr
    assert rec["job"]["kind"] == "module" and rec["job"]["target"] == "mypkg.train"


@pytest.mark.parametrize("kind, verdict", [("cpu", "cpu"), ("model", "compute")])
def test_planted_causes(tmp_path, kind, verdict):
    p, rec = profile(tmp_path, str(JOBS / "planted.py"), kind, steps=15, warmup=3)
    assert p.returncode == 0, p.stderr
    assert rec["verdict"]["bottleneck"] == verdict, rec["verdict"]["summary"]


def test_planted_storage_cause(tmp_path):
    """Cold cache + a 1 MB/s throttle on the script's data → io. Needs the kernel throttle (root + cgroup)."""
    from profiler.storage import device as sdev
    from profiler.storage import throttle as thr

    d = tmp_path / "files"
    d.mkdir()
    for i in range(64):
        (d / f"f{i:03d}.bin").write_bytes(os.urandom(256 * 1024))
    spec = thr.parse_throttle("1MB/s,30iops")
    ok, why = thr.KernelThrottle.available(spec, sdev.describe_storage(str(d)).maj_min)
    if not ok:
        p, _ = profile(tmp_path, "--data", str(d), "--throttle", "1MB/s,30iops", str(JOBS / "planted.py"), "io",
                       str(d))
        assert p.returncode == 2 and "kernel throttle" in p.stderr  # says clearly why not
        return
    p, rec = profile(tmp_path, "--data", str(d), "--cache", "cold", "--throttle", "1MB/s,30iops",
                     str(JOBS / "planted.py"), "io", str(d), steps=4, warmup=1)
    assert p.returncode == 0, p.stderr
    assert rec["verdict"]["bottleneck"] == "io", rec["verdict"]["summary"]
    assert rec["stall"]["by_kind"]["blocked_device"] > 0.5 * rec["stall"]["seconds"]


def test_python_api(tmp_path):
    code = f"""
import torch, profiler
from torch.utils.data import DataLoader
dl = DataLoader([torch.ones(4) * i for i in range(64)], batch_size=4, num_workers=1)
with profiler.profile(out={str(tmp_path / 'api')!r}, warmup=1, steps=6, plots=False, quiet=True) as run:
    seen = [b for epoch in range(2) for b in dl]
assert len(seen) == 32 and all(isinstance(b, torch.Tensor) for b in seen)
print("VERDICT", run.verdict["bottleneck"], run.record.window["steps"], len(run.files))
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "VERDICT" in p.stdout and p.stdout.split()[2] == "6"
    assert (tmp_path / "api" / "run.json").exists()


def test_a_trivial_main_process_loader_is_judged_within_its_window(tmp_path):
    """workers = 0 over a list of ints (steps of ~0.3 ms): the steps' idle time can never exceed the window (the
    window opens at the first measured step's wait, not after it: once 109 %), and with no worker nothing is called
    a worker→main transfer."""
    code = f"""
import json, profiler
from torch.utils.data import DataLoader
with profiler.profile(out={str(tmp_path / 'api')!r}, warmup=1, steps=5, plots=False, quiet=True) as run:
    for _ in DataLoader(list(range(64)), batch_size=4):
        pass
print(json.dumps({{"stall": run.record.stall, "window": run.record.window,
                  "first": run.record.timeline["steps"]["wait_start"][1]}}))
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(JOBS.parent.parent)})
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["window"]["start_s"] <= out["first"]
    assert 0 < out["stall"]["fraction"] <= 1.0
    assert out["stall"]["by_stage"].get("transfer", 0.0) == 0.0 and out["stall"]["by_cause"]["transfer"] == 0.0


@pytest.mark.parametrize("workers", ["0", "2"])
def test_libraries_are_not_imported_for_the_job_and_named_once_it_imports_them(tmp_path, workers):
    """The library sub-stages (PIL decode, torchvision transforms) are wrapped only in libraries the job imported:
    a job that never imports torchvision still has none once profiled, and PIL, imported inside its first
    ``__getitem__``, has its decode named from the next batch on (here every measured one)."""
    p, rec = profile(tmp_path, "--then", "continue", str(JOBS / "lazy_import.py"), workers, steps=12, warmup=2)
    assert p.returncode == 0, p.stderr
    assert "TORCHVISION False" in p.stdout
    assert rec is not None and rec["stages"]["decode"]["count"] == 12 * 8, rec["stages"]
