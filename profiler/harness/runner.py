"""One profiling run, end to end: set up, run the timed loop, collect, and hand back a RunRecord.

The runner only *collects*; ``profiler.analysis.analyze`` derives the verdict from the record and the renderers draw
it. Whatever happens in the loop (Ctrl-C, CUDA out of memory, a crash), the record of what was measured is returned
with ``partial=True`` and the reason, so the caller can still write it.
"""
from __future__ import annotations

import datetime as _dt
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch.utils.data import DataLoader

from ..config import AUGMENTS, CACHE_MODES, MODES, THROTTLE_MECHANISMS, RunConfig
from ..errors import UserError
from ..record import RunRecord
from .data import DatasetIndex, ensure_sample_dataset, scan_dataset
from .loop import LoopResult, OutOfDeviceMemory, make_step_fn, metas_to_columns, run_loop, steps_to_columns
from .models import build_model, normalize_model_name
from .timed import StreamBatchSampler, TimedCollate, TimedImageDataset, seed_worker
from .transforms import build_transform

# Residency is checked on at most this many files (a seeded sample beyond): mincore on 100k files would take seconds.
RESIDENCY_MAX_FILES = 2000


def validate_config(c: RunConfig) -> None:
    """Reject bad options before anything is started (UserError → exit 2)."""
    if c.workers < 0:
        raise UserError(f"--workers must be >= 0 (got {c.workers})")
    if c.batch_size <= 0:
        raise UserError(f"--batch-size must be > 0 (got {c.batch_size})")
    if c.steps <= 0:
        raise UserError(f"--steps must be > 0 (got {c.steps})")
    if c.warmup < 0:
        raise UserError(f"--warmup must be >= 0 (got {c.warmup})")
    if c.image_size < 16:
        raise UserError(f"--image-size must be >= 16 pixels (got {c.image_size})")
    if c.prefetch_factor < 1:
        raise UserError(f"--prefetch-factor must be >= 1 (got {c.prefetch_factor})")
    if c.mode not in MODES:
        raise UserError(f"--mode must be one of {', '.join(MODES)} (got {c.mode!r})")
    if c.augment not in AUGMENTS:
        raise UserError(f"--augment must be one of {', '.join(AUGMENTS)} (got {c.augment!r})")
    if c.cache not in CACHE_MODES:
        raise UserError(f"--cache must be one of {', '.join(CACHE_MODES)} (got {c.cache!r})")
    if c.throttle_mechanism not in THROTTLE_MECHANISMS:
        raise UserError(f"--throttle-mechanism must be one of {', '.join(THROTTLE_MECHANISMS)}")


def resolve_device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    try:
        dev = torch.device(spec)
    except RuntimeError:
        raise UserError(f"--device {spec!r}: use auto, cpu or cuda[:index]") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"--device {spec}: CUDA is not available on this machine (use --device cpu or auto)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UserError(f"--device {spec}: only {torch.cuda.device_count()} CUDA device(s) present")
    elif dev.type != "cpu":
        raise UserError(f"--device {spec!r}: use auto, cpu or cuda[:index]")
    return dev


def default_out_dir(c: RunConfig) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(c.out) / f"{stamp}_{c.model}_w{c.workers}_b{c.batch_size}"


def prepare_out(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UserError(f"--out {path}: cannot create or write there ({e.strerror or e})") from None
    return path


def check_input_size(model: torch.nn.Module, name: str, image_size: int) -> None:
    """One tiny forward on the CPU before anything starts: a model that cannot take ``image_size`` (vit_b_16 wants
    224, inception_v3 at least 75) is bad input, said in one line, not a crash in the middle of the run."""
    was_training = model.training
    try:
        with torch.inference_mode():
            model.eval()(torch.zeros(1, 3, image_size, image_size))
    except (RuntimeError, ValueError, AssertionError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"--model {name} cannot take --image-size {image_size}: {first}") from None
    finally:
        model.train(was_training)


@dataclass
class Prepared:
    """Everything set up before the clock starts."""
    config: RunConfig
    index: DatasetIndex
    sample_data: bool
    device: torch.device
    model: torch.nn.Module | None


def prepare(c: RunConfig, on_sample_progress: Callable[[int, int], None] | None = None) -> Prepared:
    validate_config(c)
    device = resolve_device(c.device)
    normalize_model_name(c.model)  # an unknown name fails here, before any data work
    if c.data:
        index, sample = scan_dataset(c.data), False
    else:
        index, sample = scan_dataset(ensure_sample_dataset(progress=on_sample_progress)), True
    # Match the classifier to the dataset: a user's own 10-class data trains a 10-way head.
    model = build_model(c.model, num_classes=max(2, len(index.classes)))
    if model is not None:
        check_input_size(model, c.model, c.image_size)
        model = model.to(device)
    if c.pin_memory is None:
        c.pin_memory = device.type == "cuda"
    return Prepared(c, index, sample, device, model)


def _storage_setup(p: Prepared) -> tuple[dict[str, Any], Any, Any]:
    """Storage facts, cache control and throttling; returns (storage section, context manager, read hook)."""
    from ..storage import cache, device as sdev, residency, throttle as thr

    c = p.config
    info = sdev.describe_storage(p.index.root)
    section: dict[str, Any] = {"device": info.to_dict(), "cache_mode": c.cache}
    files = p.index.files
    if c.cache == "cold":
        section["evicted_files"] = cache.evict(files)
    elif c.cache == "warm":
        section["warmed_bytes"] = cache.warm(files)
    section["residency_start"] = residency.measure_residency(files, max_files=RESIDENCY_MAX_FILES, seed=c.seed).to_dict()
    spec = thr.resolve_storage(c.throttle, c.storage)
    ctx, hook = None, None
    if spec is not None:
        ok, why = thr.KernelThrottle.available(spec, info.maj_min)
        if c.throttle_mechanism == "kernel" and not ok:
            raise UserError(f"--throttle-mechanism kernel: not available here ({why})")
        if c.throttle_mechanism == "userspace":
            ok, why = False, "userspace emulation requested"
        if ok:
            ctx = thr.KernelThrottle(spec, info.maj_min)
            section["throttle"] = {**spec.to_dict(), "mechanism": ctx.mechanism, "maj_min": info.maj_min}
        else:
            hook = thr.UserspaceThrottle(spec)
            section["throttle"] = {**spec.to_dict(), "mechanism": "userspace", "why_not_kernel": why}
    return section, ctx, hook


def execute(p: Prepared, on_step: Callable | None = None) -> RunRecord:
    """Run the timed loop and collect the record (analysis not yet applied)."""
    from ..samplers.background import Sampler
    from ..samplers.environment import probe_environment

    c = p.config
    t0 = time.perf_counter_ns()
    storage, throttle_ctx, read_hook = _storage_setup(p)
    gpu_index = None
    if p.device.type == "cuda":
        from ..samplers.gpu import nvml_index_for_cuda_device
        gpu_index = nvml_index_for_cuda_device(p.device.index or 0)  # NVML numbering ignores CUDA_VISIBLE_DEVICES
    env = probe_environment(gpu_index=gpu_index)
    env["storage"] = storage.get("device")
    env["residency_start"] = storage.get("residency_start")
    dataset = TimedImageDataset(p.index.files, p.index.labels, build_transform(c.augment, c.image_size),
                                read_hook=read_hook)
    total = c.warmup + c.steps
    loader = DataLoader(
        dataset, batch_sampler=StreamBatchSampler(len(dataset), c.batch_size, total, seed=c.seed),
        num_workers=c.workers, collate_fn=TimedCollate(), pin_memory=bool(c.pin_memory) and p.device.type == "cuda",
        prefetch_factor=c.prefetch_factor if c.workers > 0 else None, worker_init_fn=seed_worker,
        persistent_workers=False,
    )
    torch.manual_seed(c.seed)
    step_fn = make_step_fn(p.model, c.mode, p.device, c.amp)
    disk = (storage.get("device") or {}).get("disk")
    sampler = Sampler(t0_ns=t0, interval_s=c.sample_interval_s, gpu_index=gpu_index, disk=disk)
    seen_pids: set[int] = set()

    def on_meta(meta) -> None:
        if meta.pid not in seen_pids:
            seen_pids.add(meta.pid)
            if meta.worker_id >= 0:
                sampler.label_pid(meta.pid, "worker", meta.worker_id)

    sampler.start()
    res: LoopResult
    try:
        if throttle_ctx is not None:
            with throttle_ctx:
                res = run_loop(loader, step_fn, p.device, total, c.warmup, bool(c.pin_memory), on_step, on_meta)
        else:
            res = run_loop(loader, step_fn, p.device, total, c.warmup, bool(c.pin_memory), on_step, on_meta)
    finally:
        samples = sampler.stop()
        if read_hook is not None:
            read_hook.close()
    return _collect(p, t0, res, samples, env, storage)


def _collect(p: Prepared, t0: int, res: LoopResult, samples: dict, env: dict, storage: dict) -> RunRecord:
    from ..storage import residency

    c = p.config
    storage["residency_end"] = residency.measure_residency(p.index.files, max_files=RESIDENCY_MAX_FILES,
                                                           seed=c.seed).to_dict()
    measured = [r for r in res.steps if r.measured]
    batches, spans = metas_to_columns(res.metas, [r.wait_end_ns for r in res.steps], t0)
    storage.update(io_totals(samples, batches))
    skipped: dict[str, str] = {}
    for m in res.metas:
        for _, path, reason in m.skipped:
            skipped.setdefault(path, reason)
    partial, reason, oom = False, None, None
    if isinstance(res.error, KeyboardInterrupt):
        partial, reason = True, f"interrupted (Ctrl-C) after {len(measured)} of {c.steps} measured steps"
    elif isinstance(res.error, OutOfDeviceMemory):
        partial, reason = True, f"CUDA out of memory at step {res.error.step}"
        oom = {"step": res.error.step, "message": str(res.error)}
    elif res.error is not None:
        partial, reason = True, f"failed: {type(res.error).__name__}: {res.error}"
    elif len(measured) < c.steps:
        partial, reason = True, f"the loader ended after {len(measured)} of {c.steps} measured steps"
    dev = p.device
    compute_device = {"type": dev.type, "index": dev.index,
                      "name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else ((env.get("cpu") or {}).get("model") or "CPU"),
                      "timing": res.device_timing}
    memory = _memory_section(p, res, oom)
    window = {"start_s": round((res.window_start_ns - t0) / 1e9, 6), "end_s": round((res.window_end_ns - t0) / 1e9, 6),
              "seconds": round((res.window_end_ns - res.window_start_ns) / 1e9, 6),
              "steps": len(measured), "samples": sum(r.n_samples for r in measured), "warmup_steps": c.warmup}
    return RunRecord(
        config=c.to_dict(), environment=env, compute_device=compute_device, window=window,
        timeline={"steps": steps_to_columns(res.steps, t0), "batches": batches, "sample_spans": spans,
                  "time_unit": "s since run start"},
        samples=samples, dataset={**p.index.to_dict(), "sample": p.sample_data},
        skipped={"count": len(skipped), "files": [{"path": k, "reason": v} for k, v in sorted(skipped.items())]},
        storage=storage, memory=memory, partial=partial, partial_reason=reason,
    )


def io_totals(samples: dict, batches: dict | None = None) -> dict[str, Any]:
    """Bytes the workers asked for (rchar) vs bytes that came from the block device (read_bytes).

    Preferred source: the /proc/self/io readings each worker attached to its batches (exact up to its last batch, and
    also for the measured window alone). Fallback: the sampler's last readings of each worker process.
    """
    out: dict[str, Any] = {}
    per_pid: dict[int, tuple[int, int]] = {}
    win: dict[int, list[tuple[int, int]]] = {}
    if batches and batches.get("rchar"):
        for pid, w, rc, rb in zip(batches["pid"], batches["worker"], batches["rchar"], batches["read_bytes"]):
            if w < 0 or rc < 0:
                continue  # the main process (workers = 0) also reads libraries, /proc, ...: not comparable
            prev = per_pid.get(pid, (0, 0))
            per_pid[pid] = (max(prev[0], rc), max(prev[1], rb))
            win.setdefault(pid, []).append((rc, rb))
        source = "workers' /proc/self/io at each batch"
    if not per_pid:
        for proc in samples.get("processes", []):
            io = proc.get("io")
            if proc.get("role") == "worker" and io:
                per_pid[int(proc["pid"])] = (int(io.get("rchar", 0)), int(io.get("read_bytes", 0)))
        source = "sampler's last /proc/<pid>/io of each worker"
    rchar = sum(v[0] for v in per_pid.values())
    read_bytes = sum(v[1] for v in per_pid.values())
    out.update({"io_source": source if per_pid else None, "worker_processes_with_io": len(per_pid),
                "bytes_requested": rchar, "bytes_from_device": read_bytes})
    if rchar > 0:
        out["page_cache_hit_fraction"] = round(max(0.0, 1.0 - read_bytes / rchar), 4)
    return out


def _memory_section(p: Prepared, res: LoopResult, oom: dict | None) -> dict[str, Any]:
    c = p.config
    out: dict[str, Any] = {"device_peak_bytes": res.peak_device_memory_bytes, "oom": oom}
    if p.device.type == "cuda":
        out["device_total_bytes"] = int(torch.cuda.get_device_properties(p.device).total_memory)
    if p.model is None:
        return out
    try:
        from ..fit import estimate_memory, oom_recommendations
        # On a GPU that did not run out of memory, measure activations there (fast, and what the card really does);
        # after an OOM the device may be too full to measure, so the CPU's saved-tensor count is used.
        where = str(p.device) if p.device.type == "cuda" and not oom else "cpu"
        bd = estimate_memory(c.model, c.batch_size, mode=c.mode, precision="fp32", amp=c.amp, optimizer="momentum",
                             image_size=c.image_size, num_classes=max(2, len(p.index.classes)), device=where)
        out["breakdown"] = bd.to_dict()
        if oom and out.get("device_total_bytes"):
            out["oom_recommendations"] = oom_recommendations(bd, out["device_total_bytes"])
    except Exception as e:  # the estimate is a bonus; never lose the run for it
        out["breakdown_error"] = f"{type(e).__name__}: {e}"
    return out
