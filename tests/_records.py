"""Hand-built, realistic run records (schema 2 and 1) for tests that need a record but not a run.

The timeline is a small simulation of what the harness measures: 3 workers each building batches of 4 samples
(read 1 ms, decode 8 ms, augment 4 ms per sample, collate 0.5 ms), a main loop that waits for batch i, copies it and
computes for 20 ms. Every instant is consistent (spans nest in their batch, waits end when the batch arrives), so the
record analyzes to a real verdict; tests then damage it.
"""
from __future__ import annotations

import copy
from typing import Any

WORKERS, BATCH, STEPS, WARMUP = 3, 4, 10, 2
READ, DECODE, AUGMENT, COLLATE, COMPUTE, QUEUE = 0.001, 0.008, 0.004, 0.0005, 0.005, 0.002


def _r(x: float) -> float:
    return round(x, 6)


def _timeline() -> dict[str, Any]:
    steps: dict[str, list] = {k: [] for k in ("step", "epoch", "batch", "worker", "samples", "wait_start", "wait_end",
                                              "h2d_start", "h2d_end", "compute_end", "idle", "measured", "main_cpu",
                                              "main_runq")}
    batches: dict[str, list] = {k: [] for k in ("batch", "worker", "pid", "collate_start", "collate_end", "sent",
                                                "received", "samples", "rchar", "read_bytes", "collate_cpu",
                                                "collate_runq")}
    spans: dict[str, Any] = {k: [] for k in ("batch", "worker", "index", "items", "start", "end", "cpu", "runq",
                                             "rchar", "read_bytes", "read_start", "read_end", "decode_end",
                                             "augment_end", "bytes", "pixels")}
    spans["stages"] = {"read": [], "decode": [], "augment": []}
    free = [0.5] * WORKERS  # when each worker is next free
    ready = []
    rchar = [0] * WORKERS
    for b in range(STEPS):
        w = b % WORKERS
        t = free[w]
        for k in range(BATCH):
            idx = (b * BATCH + k) * 7 % 1000
            t1, t2, t3 = t + READ, t + READ + DECODE, t + READ + DECODE + AUGMENT
            for col, v in (("batch", b), ("worker", w), ("index", idx), ("items", 1), ("start", _r(t)),
                           ("end", _r(t3)), ("cpu", _r(DECODE + AUGMENT)), ("runq", 0.0), ("rchar", 60000 + idx),
                           ("read_bytes", 4096 * (b == 0)), ("read_start", _r(t)), ("read_end", _r(t1)),
                           ("decode_end", _r(t2)), ("augment_end", _r(t3)), ("bytes", 60000 + idx),
                           ("pixels", 500 * 375)):
                spans[col].append(v)
            spans["stages"]["read"].append(_r(t1 - t))
            spans["stages"]["decode"].append(_r(t2 - t1))
            spans["stages"]["augment"].append(_r(t3 - t2))
            rchar[w] += 60000 + idx
            t = t3
        ce = t + COLLATE
        free[w] = ce
        ready.append(ce + QUEUE)
        for col, v in (("batch", b), ("worker", w), ("pid", 4100 + w), ("collate_start", _r(t)),
                       ("collate_end", _r(ce)), ("sent", _r(ce)), ("samples", BATCH), ("rchar", rchar[w]),
                       ("read_bytes", 4096), ("collate_cpu", _r(COLLATE)), ("collate_runq", 0.0)):
            batches[col].append(v)
    t = 0.45
    for i in range(STEPS):
        we = max(t, ready[i])
        batches.setdefault("received", [])
        for col, v in (("step", i), ("epoch", 0), ("batch", i), ("worker", i % WORKERS), ("samples", BATCH),
                       ("wait_start", _r(t)), ("wait_end", _r(we)), ("h2d_start", _r(we)), ("h2d_end", _r(we)),
                       ("compute_end", _r(we + COMPUTE)), ("idle", _r(we - t)), ("measured", i >= WARMUP),
                       ("main_cpu", _r((we - t) * 0.1)), ("main_runq", 0.0)):
            steps[col].append(v)
        t = we + COMPUTE
    batches["received"] = [steps["wait_end"][i] for i in range(STEPS)]
    epochs = {"epoch": [0], "iter_start": [0.4], "iter_end": [0.41], "first_batch": [steps["wait_end"][0]]}
    accounting = {"cpu_clock": "thread_time", "runqueue": True, "thread_io": True, "absent": {}}
    return {"steps": steps, "batches": batches, "sample_spans": spans, "epochs": epochs, "accounting": accounting,
            "time_unit": "s since run start"}


def _samples(end: float) -> dict[str, Any]:
    n = int(end / 0.1) - 3
    t = [_r(0.4 + 0.1 * i) for i in range(n)]

    def proc(pid: int, role: str, wid: int | None) -> dict[str, Any]:
        return {"pid": pid, "role": role, "worker_id": wid, "t_s": t, "cpu_percent": [60.0 + i for i in range(n)],
                "rss_bytes": [400_000_000 + 1000 * i for i in range(n)],
                "pss_bytes": [300_000_000] + [None] * (n - 1), "uss_bytes": [200_000_000] + [None] * (n - 1),
                "io": {"rchar": 900_000, "read_bytes": 40960}, "cpu_times": {"user_s": 1.5, "system_s": 0.2},
                "alive_at_end": role == "main"}

    return {"interval_s": 0.1, "t_s": t, "cpu_percent_per_core": [[90.0, 85.5] for _ in t],
            "ram_total_bytes": 25_000_000_000, "ram_used_bytes": [1_000_000_000 + i for i in range(n)],
            "ram_available_bytes": [24_000_000_000 - i for i in range(n)],
            "page_cache_bytes": [3_500_000_000] * n, "disk_read_bytes_per_s": [1000.0] * n, "disk": "vda",
            "shm_used_bytes": [69632] * n,
            "processes": [proc(4000, "main", None)] + [proc(4100 + w, "worker", w) for w in range(WORKERS)],
            "gpu": None, "absent": {"gpu": "no GPU index given (CPU run)"},
            "sampler_overhead": {"ticks": n, "thread_cpu_s": 0.03, "mean_tick_us": 7574.2, "worst_tick_us": 27155.4}}


def record_v2() -> dict[str, Any]:
    """A complete, consistent schema-2 record (raw sections only; analysis fills the rest)."""
    tl = _timeline()
    st = tl["steps"]
    start, end = st["wait_start"][WARMUP], st["compute_end"][-1]
    residency = {"files_total": 1000, "files_checked": 1000, "bytes_total": 63755906, "bytes_checked": 63755906,
                 "bytes_resident": 63755906, "fraction": 1.0, "sampled": False}
    device = {"path": "/data/imgs", "mount_point": "/", "filesystem": "ext4", "device": "/dev/vda", "disk": "vda",
              "maj_min": "254:0", "rotational": True, "model": "virtio_blk", "network": False, "tmpfs": False}
    return {
        "schema_version": 2, "tool": {"name": "profiler", "version": "0.1.0"},
        "created_utc": "2026-11-30T10:51:42+00:00", "partial": False, "partial_reason": None,
        "job": {"kind": "builtin", "target": None, "argv": [], "then": "exit", "ended": "window closed",
                "loader": {"dataset_class": "ImageFolder", "created_at": "profiler/harness/data.py:120",
                           "num_workers": WORKERS, "batch_size": BATCH, "pin_memory": False,
                           "persistent_workers": False, "prefetch_factor": 2, "multiprocessing_context": None,
                           "collate_fn": "default_collate", "sampler": "RandomSampler"},
                "other_loaders": 0},
        "config": {"data": "/data/imgs", "workers": WORKERS, "batch_size": BATCH, "model": "tiny", "mode": "train",
                   "device": "auto", "image_size": 64, "augment": "standard", "pin_memory": False,
                   "steps": STEPS - WARMUP, "warmup": WARMUP, "out": "/tmp/out", "seed": 0, "prefetch_factor": 2,
                   "cache": "as-is", "throttle": None, "storage": None, "throttle_mechanism": "auto", "amp": False,
                   "sample_interval_s": 0.1, "extra": {}},
        "environment": {
            "cpu": {"model": "AMD EPYC", "logical_cores": 2, "physical_cores": 2, "affinity_cores": 2,
                    "cgroup_cpu_quota": None, "usable_cores": 2.0, "usable_cores_int": 2},
            "ram": {"total_bytes": 25_000_000_000, "available_bytes": 24_000_000_000, "cgroup_limit_bytes": None},
            "os": {"system": "Linux", "release": "6.1", "machine": "x86_64"},
            "python": {"version": "3.11.7", "implementation": "CPython", "executable_bits": 64},
            "packages": {"torch": "2.14.1", "torchvision": "0.29.1", "pillow": "13.0.0", "numpy": "2.4.6",
                         "psutil": "7.2.2", "nvidia-ml-py": None},
            "pillow_libjpeg_turbo": True,
            "torch": {"version": "2.14.1", "cuda_available": False, "cuda_version": None, "cudnn_version": None,
                      "gpu_count": 0, "num_threads": 2},
            "gpu": None, "storage": dict(device), "residency_start": dict(residency)},
        "compute_device": {"type": "cpu", "index": None, "name": "AMD EPYC", "timing": "host clocks"},
        "window": {"start_s": start, "end_s": end, "seconds": _r(end - start), "steps": STEPS - WARMUP,
                   "samples": (STEPS - WARMUP) * BATCH, "warmup_steps": WARMUP},
        "timeline": tl,
        "samples": _samples(end),
        "dataset": {"root": "/data/imgs", "files": 1000, "classes": 10, "layout": "imagefolder",
                    "total_bytes": 63755906, "sample": False},
        "skipped": {"count": 1, "files": [{"path": "/data/imgs/cat/bad.jpg", "reason": "cannot identify image"}]},
        "storage": {"device": device, "cache_mode": "as-is", "residency_start": dict(residency),
                    "residency_end": dict(residency), "io_source": "workers' /proc/self/io at each batch",
                    "worker_processes_with_io": WORKERS, "bytes_requested": 2813760, "bytes_from_device": 28672,
                    "page_cache_hit_fraction": 0.9898, "throttle": None},
        "memory": {"device_peak_bytes": None, "oom": None},
    }


def record_v1() -> dict[str, Any]:
    """The same run as a schema-1 writer stored it (no job, epochs, accounting or v2 columns)."""
    d = copy.deepcopy(record_v2())
    d["schema_version"] = 1
    del d["job"]
    tl = d["timeline"]
    for k in ("epochs", "accounting"):
        del tl[k]
    for k in ("epoch", "main_cpu", "main_runq"):
        del tl["steps"][k]
    for k in ("sent", "collate_cpu", "collate_runq"):
        del tl["batches"][k]
    for k in ("items", "start", "end", "cpu", "runq", "rchar", "read_bytes", "stages"):
        del tl["sample_spans"][k]
    d["extra"] = {}
    return d
