"""One profiling run, end to end: set up, run the timed loop, collect, and hand back a RunRecord.

The runner only *collects*; ``profiler.analysis.analyze`` derives the verdict from the record and the renderers draw
it. Whatever happens in the loop (Ctrl-C, CUDA out of memory, a crash), the record of what was measured is returned
with ``partial=True`` and the reason, so the caller can still write it.
"""
from __future__ import annotations

import datetime as _dt
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

import torch
from torch.utils.data import DataLoader

from ..config import RunConfig
from ..distributed.pipeline import PipelineRanks
from ..errors import UserError
from ..record import RunRecord
from .data import DatasetIndex, ensure_sample_dataset, scan_dataset
from .job import JobSpec, RunResult, build_record, compute_device_facts, run_session, storage_into_environment

if TYPE_CHECKING:
    from ..record.schema import TorchTraces

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
    # This process's part in a torchrun job (profiler/distributed/pipeline.py); inactive for a single process.
    ranks: PipelineRanks = field(default_factory=lambda: PipelineRanks(None))


def prepare(c: RunConfig, on_sample_progress: Callable[[int, int], None] | None = None) -> Prepared:
    c.validate()
    ranks = PipelineRanks.detect()
    c.device = ranks.device(c.device)
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
    ranks.join(device, len(index.files))  # under torchrun: the process group, left again at the end of execute_run
    return Prepared(c, index, sample, device, model, ranks)


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
            ctx = thr.KernelThrottle(spec, info.maj_min or "")
            section["throttle"] = {**spec.to_dict(), "mechanism": ctx.mechanism, "maj_min": info.maj_min}
        else:
            hook = thr.UserspaceThrottle(spec)
            section["throttle"] = {**spec.to_dict(), "mechanism": "userspace", "why_not_kernel": why}
    return section, ctx, hook


def execute(p: Prepared, on_step: Callable | None = None) -> RunRecord:
    """Run the built-in pipeline under the same instrumentation as a user's script; return the raw record."""
    rec = execute_run(p, on_step).record
    assert rec is not None  # the built-in pipeline always iterates its loader
    return rec


def execute_run(p: Prepared, on_step: Callable | None = None, torch_profiler_out: Path | None = None) -> RunResult:
    """Run the built-in pipeline; return the raw record with how the run ended, its clock origin and its DDP facts.
    ``torch_profiler_out``: run torch.profiler around the window, its trace into that folder (run --torch-profiler)."""
    from ..instrument.session import Session
    from ..instrument.torch_profiler_hooks import OwnProfiler, TraceWatch, chain
    from ..samplers.background import Sampler
    from .builtin import ImageDataset, StreamBatchSampler, builtin_loop, collate_skipping, make_step_fn, seed_worker

    c = p.config
    t0 = time.perf_counter_ns()
    storage, throttle_ctx, read_hook = _storage_setup(p)
    env, gpu_index = _environment(p.device, storage)
    from .transforms import build_transform

    dataset = ImageDataset(p.index.files, p.index.labels, build_transform(c.augment, c.image_size), read_hook=read_hook)
    rank, world = p.ranks.share()
    # torch's batch sampler (which samples each batch draws), not the background system sampler below
    batch_sampler = StreamBatchSampler(len(dataset), c.batch_size, c.warmup + c.steps, seed=c.seed, rank=rank,
                                       world_size=world)
    loader = DataLoader(
        dataset, batch_sampler=batch_sampler,
        num_workers=c.workers, collate_fn=collate_skipping, pin_memory=bool(c.pin_memory) and p.device.type == "cuda",
        prefetch_factor=c.prefetch_factor if c.workers > 0 else None, worker_init_fn=seed_worker,
    )
    torch.manual_seed(c.seed)
    model = p.ranks.wrap(p.model, p.device, c.mode)  # under torchrun: DDP and the all-reduce timer
    step_fn = make_step_fn(model, c.mode, p.device, c.amp)
    disk = (storage.get("device") or {}).get("disk")
    # the system sampler: machine, process and GPU time series on its own thread (profiler/samplers/background.py)
    system_sampler = Sampler(t0_ns=t0, interval_s=c.sample_interval_s, gpu_index=gpu_index, disk=disk)
    watch = TraceWatch(t0)
    own = OwnProfiler(c.warmup, c.steps, torch_profiler_out, watch) if torch_profiler_out is not None else None
    session = Session(c.warmup, c.steps, then="exit", t0_ns=t0, on_step=chain(own.on_step if own else None, on_step),
                      on_first_pid=lambda pid, w: system_sampler.label_pid(pid, "worker", w) if w >= 0 else None,
                      on_tail=system_sampler.slow_down)
    watch.install()
    if own is not None:
        own.start()
    try:
        outcome = run_session(lambda: builtin_loop(loader, step_fn, p.device, bool(c.pin_memory)), session,
                              system_sampler, throttle_ctx)
    finally:
        if own is not None:
            own.stop()
        watch.uninstall()
        if read_hook is not None:
            read_hook.close()
            # The ceilings below read samples in this process after the window: not through the throttle's read
            # hook, whose descriptor is closed and shared state file deleted by now.
            dataset.read_hook = None
        p.ranks.leave()  # also on errors
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
    rec.torch_traces = cast("TorchTraces", {**watch.section(), **({"error": own.error} if own and own.error else {})})
    if outcome.status == "window closed":
        _ceilings(rec, p, dataset, step_fn)
    return RunResult(rec, outcome, t0, p.ranks.facts(t0))


def _ceilings(rec: RunRecord, p: Prepared, dataset: Any, step_fn: Callable) -> None:
    """Ceilings, measured once the window has closed (so the measured steps are undisturbed) and kept raw at the
    record's top level: ``main_process_samples`` (samples the window read, loaded again in this process: what a
    sample costs without workers) and ``model_alone`` (the step on a ready batch: the compute ceiling). Each is a
    bonus figure: an error is recorded in its place, never the run lost for it."""
    c = p.config
    if c.workers > 0:
        from .ceiling import measure_main_process_samples

        try:
            rec.main_process_samples = measure_main_process_samples(
                dataset, list(rec.timeline["sample_spans"].get("index") or []))
        except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - a bonus figure: never lose the run for it
            rec.main_process_samples = {"error": f"{type(e).__name__}: {e}"}
    if p.model is None:
        return
    why_not = p.ranks.why_no_model_alone()
    if why_not is not None:
        rec.model_alone = {"error": why_not}
        return
    from .ceiling import measure_model_alone

    try:
        rec.model_alone = measure_model_alone(step_fn, p.device, c.batch_size, c.image_size, len(p.index.classes))
    except Exception as e:  # noqa: BLE001 - a bonus figure: never lose the run for it
        rec.model_alone = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}


def _environment(device: torch.device, storage: dict) -> tuple[dict, int | None]:
    from ..samplers.environment import probe_environment

    gpu_index = None
    if device.type == "cuda":
        from ..samplers.gpu import nvml_index_for_cuda_device
        gpu_index = nvml_index_for_cuda_device(device.index or 0)  # NVML numbering ignores CUDA_VISIBLE_DEVICES
    env = probe_environment(gpu_index=gpu_index, cuda_index=device.index or 0 if device.type == "cuda" else None)
    storage_into_environment(env, storage)
    return env, gpu_index


def _compute_device(dev: torch.device, env: dict) -> dict[str, Any]:
    return compute_device_facts(dev.type, dev.index, env)


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
