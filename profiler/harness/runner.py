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

from ..config import RunConfig
from ..errors import UserError
from ..record import RunRecord
from .data import DatasetIndex, ensure_sample_dataset, scan_dataset
from .job import JobSpec, build_record, run_session

# Residency is checked on at most this many files (a seeded sample beyond): mincore on 100k files would take seconds.
RESIDENCY_MAX_FILES = 2000


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


def default_run_name(c: RunConfig, script: str | None = None) -> str:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    if script:
        return f"{stamp}_{Path(script).stem}"
    return f"{stamp}_{c.model}_w{c.workers}_b{c.batch_size}"


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
    denv: Any = None  # distributed (profiler/distributed): this rank under torchrun, else None
    backend: str | None = None  # distributed: the process group's backend


def prepare(c: RunConfig, on_sample_progress: Callable[[int, int], None] | None = None) -> Prepared:
    c.validate()
    # --- distributed (profiler/distributed): under torchrun, one device per rank -------------------------------
    from ..distributed import ddp as _ddp
    from ..distributed import detect

    denv = detect()
    if denv is not None:
        c.device = _ddp.rank_device(c.device, denv)
    # --- end distributed ---------------------------------------------------------------------------------------
    device = resolve_device(c.device)
    # torchvision is imported here, not at module level: a user's script needs only storage_setup from this module
    from .models import build_model, normalize_model_name

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
    if device.type == "cuda":
        # Events, synchronize and peak-memory calls act on the *current* device: make it the one asked for.
        torch.cuda.set_device(device)
    backend = None
    if denv is not None:  # distributed: join the process group (left again at the end of execute, or by the CLI)
        if len(index.files) < denv.world_size:
            raise UserError(f"{len(index.files)} images cannot be shared among {denv.world_size} ranks")
        backend = _ddp.init_group(device)
    return Prepared(c, index, sample, device, model, denv, backend)


def _storage_setup(p: Prepared) -> tuple[dict[str, Any], Any, Any]:
    return storage_setup(p.index.root, p.index.files, p.config, userspace_ok=True)


def storage_setup(root: str, files: list[str], c: RunConfig, userspace_ok: bool) -> tuple[dict[str, Any], Any, Any]:
    """Storage facts, cache control and throttling of the files under ``root``; returns (storage section, context
    manager, read hook). ``userspace_ok``: whether the job reads through our read hook (only the built-in dataset
    does; a user's script can be slowed by the kernel throttle alone)."""
    from ..storage import cache
    from ..storage import device as sdev
    from ..storage import throttle as thr

    info = sdev.describe_storage(root)
    section: dict[str, Any] = {"device": info.to_dict(), "cache_mode": c.cache}
    if c.cache == "cold":
        section["evicted_files"] = cache.evict(files)
    elif c.cache == "warm":
        section["warmed_bytes"] = cache.warm(files)
    section["residency_start"] = _residency(files, c.seed)
    spec = thr.resolve_storage(c.throttle, c.storage)
    ctx, hook = None, None
    if spec is not None:
        ok, why = thr.KernelThrottle.available(spec, info.maj_min)
        if c.throttle_mechanism == "kernel" and not ok:
            raise UserError(f"--throttle-mechanism kernel: not available here ({why})")
        if c.throttle_mechanism == "userspace":
            ok, why = False, "userspace emulation requested"
        if not ok and not userspace_ok:
            raise UserError(f"--storage/--throttle on a script needs the kernel throttle, which is not available here "
                            f"({why}); the userspace emulation works only for the built-in pipeline's reads")
        if ok:
            ctx = thr.KernelThrottle(spec, info.maj_min)
            section["throttle"] = {**spec.to_dict(), "mechanism": ctx.mechanism, "maj_min": info.maj_min}
        else:
            hook = thr.UserspaceThrottle(spec)
            section["throttle"] = {**spec.to_dict(), "mechanism": "userspace", "why_not_kernel": why}
    return section, ctx, hook


def execute(p: Prepared, on_step: Callable | None = None) -> RunRecord:
    """Run the built-in pipeline under the same instrumentation as a user's script; return the raw record."""
    from ..instrument.session import Session
    from ..samplers.background import Sampler
    from .builtin import ImageDataset, StreamBatchSampler, builtin_loop, collate_skipping, make_step_fn, seed_worker

    c = p.config
    t0 = time.perf_counter_ns()
    storage, throttle_ctx, read_hook = _storage_setup(p)
    env, gpu_index = _environment(p.device, storage)
    from .transforms import build_transform

    dataset = ImageDataset(p.index.files, p.index.labels, build_transform(c.augment, c.image_size), read_hook=read_hook)
    rank, world = (p.denv.rank, p.denv.world_size) if p.denv is not None else (0, 1)  # distributed: this share
    loader = DataLoader(
        dataset, batch_sampler=StreamBatchSampler(len(dataset), c.batch_size, c.warmup + c.steps, seed=c.seed,
                                                  rank=rank, world_size=world),
        num_workers=c.workers, collate_fn=collate_skipping, pin_memory=bool(c.pin_memory) and p.device.type == "cuda",
        prefetch_factor=c.prefetch_factor if c.workers > 0 else None, worker_init_fn=seed_worker,
    )
    torch.manual_seed(c.seed)
    model, timer = p.model, None
    if p.denv is not None and model is not None and c.mode == "train":  # distributed: DDP + the all-reduce timer
        from ..distributed.ddp import wrap_model
        model, timer = wrap_model(model, p.device, p.backend or "gloo")
    step_fn = make_step_fn(model, c.mode, p.device, c.amp)
    disk = (storage.get("device") or {}).get("disk")
    sampler = Sampler(t0_ns=t0, interval_s=c.sample_interval_s, gpu_index=gpu_index, disk=disk)
    session = Session(c.warmup, c.steps, then="exit", t0_ns=t0, on_step=on_step,
                      on_first_pid=lambda pid, w: sampler.label_pid(pid, "worker", w) if w >= 0 else None)
    try:
        outcome = run_session(lambda: builtin_loop(loader, step_fn, p.device, bool(c.pin_memory)), session, sampler,
                              throttle_ctx)
    finally:
        if read_hook is not None:
            read_hook.close()
            dataset.read_hook = None  # issue 10: the main-process sample timing below must not touch a closed hook
        if p.denv is not None:  # distributed: leave the group, also on errors
            from ..distributed.ddp import destroy_group
            destroy_group()
    try:  # a fact for the report: an interrupted run must still write its record without it
        storage["residency_end"] = _residency(p.index.files, c.seed) if outcome.status != "interrupted" else None
    except Exception as e:  # noqa: BLE001
        storage["residency_end"] = None
        storage["residency_end_error"] = f"{type(e).__name__}: {e}"
    memory = _memory_section(p, outcome.oom, session.peak_device_memory_bytes)
    rec = build_record(session, outcome, JobSpec("builtin", then="exit"), config=c.to_dict(), environment=env,
                       compute_device=_compute_device(p.device, env), dataset={**p.index.to_dict(),
                                                                                 "sample": p.sample_data},
                       storage=storage, memory=memory, extra_skipped=list(p.index.skipped))
    rec.outcome = outcome  # type: ignore[attr-defined]  # not serialised: the CLI's exit status
    rec.t0_ns = t0  # type: ignore[attr-defined]  # not serialised: distributed's CLOCK_MONOTONIC anchor
    rec.ddp = {"backend": p.backend, "collectives": timer.section(t0) if timer else None}  # type: ignore[attr-defined]
    # --- issue 10: ceilings measured after the window (raw, top level: `model_alone`, `main_process_samples`) -----
    if outcome.status == "window closed" and c.workers > 0:
        from .ceiling import measure_main_process_samples

        try:
            rec.main_process_samples = measure_main_process_samples(
                dataset, list(rec.timeline["sample_spans"].get("index") or []))
        except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - a bonus figure: never lose the run for it
            rec.main_process_samples = {"error": f"{type(e).__name__}: {e}"}
    if p.model is not None and outcome.status == "window closed" and p.denv is not None:
        # Under torchrun the step's backward all-reduces with the other ranks, and the group is gone by now: a
        # "model alone" figure would measure the collective, not the model.
        rec.model_alone = {"error": "not measured under torchrun (the step includes the all-reduce)"}
    elif p.model is not None and outcome.status == "window closed":
        from .ceiling import measure_model_alone

        try:
            rec.model_alone = measure_model_alone(step_fn, p.device, c.batch_size, c.image_size,
                                                           len(p.index.classes))
        except Exception as e:  # noqa: BLE001 - a bonus figure: never lose the run for it
            rec.model_alone = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    # --- end issue 10 ---------------------------------------------------------------------------------------------
    return rec


def _environment(device: torch.device, storage: dict) -> tuple[dict, int | None]:
    from ..samplers.environment import probe_environment

    gpu_index = None
    if device.type == "cuda":
        from ..samplers.gpu import nvml_index_for_cuda_device
        gpu_index = nvml_index_for_cuda_device(device.index or 0)  # NVML numbering ignores CUDA_VISIBLE_DEVICES
    env = probe_environment(gpu_index=gpu_index, cuda_index=device.index or 0 if device.type == "cuda" else None)
    env["storage"] = storage.get("device")
    env["residency_start"] = storage.get("residency_start")
    return env, gpu_index


def _compute_device(dev: torch.device, env: dict) -> dict[str, Any]:
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else ((env.get("cpu") or {}).get("model") or "CPU")
    return {"type": dev.type, "index": dev.index, "name": name}


def _residency(files: list[str], seed: int) -> dict:
    from ..storage import residency

    return residency.measure_residency(files, max_files=RESIDENCY_MAX_FILES, seed=seed).to_dict()


def _memory_section(p: Prepared, oom: dict | None, peak: int | None) -> dict[str, Any]:
    """Raw memory facts: the device's peak and size, and the fit estimate of this model (analysis advises)."""
    c = p.config
    out: dict[str, Any] = {"device_peak_bytes": peak, "oom": oom}
    if p.device.type == "cuda":
        out["device_total_bytes"] = int(torch.cuda.get_device_properties(p.device).total_memory)
    if p.model is None:
        return out
    try:
        from ..fit import estimate_memory
        # On a GPU that did not run out of memory, measure activations there (fast, and what the card really does);
        # after an OOM the device may be too full to measure, so the CPU's saved-tensor count is used.
        where = str(p.device) if p.device.type == "cuda" and not oom else "cpu"
        bd = estimate_memory(c.model, c.batch_size, mode=c.mode, precision="fp32", amp=c.amp, optimizer="momentum",
                             image_size=c.image_size, num_classes=max(2, len(p.index.classes)), device=where)
        out["breakdown"] = bd.to_dict()  # analysis derives the out-of-memory advice from it
    except Exception as e:  # the estimate is a bonus; never lose the run for it
        out["breakdown_error"] = f"{type(e).__name__}: {e}"
    return out
