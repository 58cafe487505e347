"""The handful of derived numbers that verdicts and recommendations reason with, computed once per record."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import thresholds as th
from .. import vocab
from ..record.read import SamplesView, StageView, read, view
from .stats import Tables

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from collections.abc import Mapping

    from ..record import RunRecord
    from ..record.schema import StageStats


@dataclass
class Context:
    device_type: str  # "cpu" | "cuda"
    device_name: str
    window_s: float
    steps: int
    samples: int
    samples_per_s: float
    batch_size: int
    workers: int
    usable_cores: float
    cpu_util: float | None  # mean share of all cores busy in the window, 0-1
    compute_ms: float  # per step
    h2d_ms: float
    sample_cpu_ms: float  # per sample: the CPU stages (decode, augment, the rest of __getitem__, user stages)
    sample_read_ms: float
    collate_ms: float  # per batch
    transfer_ms: float  # per batch
    ready_ahead_ms: float  # per batch: how long finished batches waited in the queue (prefetch slack)
    mean_file_bytes: float
    mean_pixels: float
    read_mb_s_per_worker: float
    dataset_bytes: int
    ram_available_bytes: int | None
    pin_memory: bool
    amp: bool
    augment: str
    image_size: int
    page_cache_hit: float | None = None  # share of worker reads served from the page cache, when measured
    bytes_measured: bool = True  # the spans carry bytes read per sample (a record without them says nothing either way)
    timed_reads: bool = False  # a timed read stage (the built-in pipeline's file reads): those waits are storage reads
    # Measured per sample in the window, from the dataset calls' own kernel accounting (None: not in the record).
    # Why these and not the read stage: a user's script has no timed read stage; what was measured is how long its
    # dataset calls were blocked and how many bytes the kernel fetched from the device for them (read_bytes, which
    # counts page faults on memory-mapped files, unlike rchar).
    sample_blocked_ms: float | None = None  # off a core and not waiting for one: I/O, page faults, sleeps, locks
    sample_device_bytes: float | None = None  # bytes from the block device (the kernel's read_bytes)
    sample_rchar: float | None = None  # bytes asked of read() (rchar; page faults never count here)
    device_blocked_ms: float = 0.0  # per sample: blocked time of the calls that read from the device
    calls_items: int = 0  # samples in the window's dataset calls (the totals below are over these)
    calls_device_bytes: int | None = None  # Σ read_bytes of the window's dataset calls
    calls_rchar: int | None = None  # Σ rchar of the window's dataset calls
    main_runq_ms: float | None = None  # per step: the main thread's run-queue wait inside next() (schedstat)
    batch_bytes: float | None = None  # per batch: bytes of the batch's tensors, where the record has them

    @property
    def reads_off_device(self) -> bool:
        """The workers read no byte from the storage device in the window (nothing asked, or every byte from the page
        cache): time they spent blocked was then a sleep, a lock or the network, not storage.

        The kernel's device count (read_bytes) decides when the record has it: a dataset reading through np.memmap
        asks read() for nothing (rchar ~0) while its page faults fetch megabytes from the device."""
        if self.timed_reads:
            return False
        if self.sample_device_bytes is not None:
            return self.sample_device_bytes < th.READS_FILES_FROM_BYTES
        return ((self.bytes_measured and self.mean_file_bytes < th.READS_FILES_FROM_BYTES)
                or (self.page_cache_hit is not None and self.page_cache_hit >= 1.0))

    @property
    def device_mb_s_per_worker(self) -> float:
        """The device's rate as one reader saw it: bytes from the device over the time blocked in the calls that
        read them (0 when nothing came from the device)."""
        if not self.sample_device_bytes or self.device_blocked_ms <= 0:
            return 0.0
        return self.sample_device_bytes / 1e3 / self.device_blocked_ms
    # "builtin" (our options are the knobs: --workers ...) or the user's own job (the knobs are DataLoader arguments)
    job_kind: str = "builtin"

    def knob(self, name: str) -> str:
        """How to say a setting to this user: a CLI flag for the built-in pipeline, a DataLoader argument else."""
        builtin = self.job_kind == "builtin"
        words = {"workers": ("--workers", "num_workers"), "pin_memory": ("--pin-memory", "pin_memory=True"),
                 "batch_size": ("--batch-size", "batch_size"), "amp": ("--amp", "torch.autocast")}
        return words[name][0 if builtin else 1]

    @property
    def batch_build_ms(self) -> float:
        """Time one worker needs to make one batch, from its own spans: the timed read stage where there is one,
        else the dataset calls' blocked time (a script's reads are not a stage)."""
        reads = self.sample_read_ms if self.timed_reads else (self.sample_blocked_ms or 0.0)
        return self.batch_size * (reads + self.sample_cpu_ms) + self.collate_ms

    @property
    def model_batches_per_s(self) -> float:
        """What the compute device could consume if input were free."""
        ms = self.compute_ms + self.h2d_ms
        return 1e3 / ms if ms > 0 else math.inf

    @property
    def idle_cores(self) -> float | None:
        if self.cpu_util is None:
            return None
        return self.usable_cores * (1.0 - self.cpu_util)


def cpu_util_in_window(samples: SamplesView, start_s: float, end_s: float) -> float | None:
    t = np.asarray(samples.t_s, dtype=float)
    per_core = samples.cpu_percent_per_core
    if t.size == 0 or not per_core:
        return None
    m = (t >= start_s) & (t <= end_s)
    rows = [np.mean(r) for r, keep in zip(per_core, m) if keep and r]
    if not rows:
        return None
    return float(np.mean(rows)) / 100.0


def loader_settings(rec: RunRecord, samples: int, steps: int) -> dict[str, Any]:
    """workers, batch_size and pin_memory of the profiled loader.

    A user's own job (a record with a ``job`` section) says them in ``job.loader``; config then describes only the
    profiler's defaults. A loader built with ``batch_size=None`` or a batch sampler has no fixed batch size: the mean
    samples per measured step stands in for it. Built-in runs (and v1 records) take them from config.
    """
    r = read(rec)
    if not rec.loader:  # no job.loader (or an empty one): the built-in's options
        return {"workers": int(r.config.workers or 0), "batch_size": int(r.config.batch_size or 1),
                "pin_memory": bool(r.config.pin_memory)}
    loader = r.job.loader
    batch = loader.batch_size
    if batch is None:
        batch = round(samples / steps) if steps else 1
    return {"workers": int(loader.num_workers or 0), "batch_size": max(1, int(batch)),
            "pin_memory": bool(loader.pin_memory)}


def _sample_cpu_ms(stages: Mapping[str, StageView]) -> float:
    """Mean CPU stage time per sample: every per-sample stage whose cause is cpu (registry or user-named)."""
    total = 0.0
    for name, st in stages.items():
        s = vocab.stage(name)
        if s.per == "sample" and s.cause == "cpu" and st.per in (None, "sample"):
            total += float(st.mean_ms or 0.0)
    return total


def _mean_ms(st: StageView) -> float:
    """A stage's mean in ms; 0 where the window had no such stage."""
    return st.mean_ms if st.mean_ms is not None else 0.0


def build_context(rec: RunRecord, t: Tables, stages_: dict[str, StageStats]) -> Context:
    r = read(rec)
    cfg, win = r.config, rec.window
    stages = {k: view(StageView, v) for k, v in stages_.items()}
    no_stage = StageView()

    def stage(name: str) -> StageView:
        return stages[name] if name in stages else no_stage

    job_kind = rec.job_kind
    window_s = float(win["seconds"])
    samples = int(np.sum(t.steps["samples"])) if "samples" in t.steps else 0
    steps = int(t.steps["wait_start"].size) if "wait_start" in t.steps else 0
    if t.tail is not None:  # measured steps beyond the detail: exact counts (timeline.tail)
        samples += int(t.tail.samples)
        steps += int(t.tail.steps)
    loader = loader_settings(rec, samples, steps)
    sp = t.spans
    sel = np.isin(sp["batch"], t.measured_batches) if sp["batch"].size else None
    nbytes = sp["rchar"]
    mean_bytes = float(nbytes[sel].mean()) if sel is not None and sel.any() else 0.0
    mean_px = float(sp["pixels"][sel].mean()) if sel is not None and sel.any() and "pixels" in sp else 0.0
    per_sample = _per_sample_io(sp, sel)
    read_total = stage("read").total_s
    read_bytes = stage("read").bytes or 0
    cpu = r.environment.cpu
    sv = view(SamplesView, rec.samples)
    # The record's machine, never the analyzing one: a record read elsewhere must give the same verdict.
    usable = cpu.usable_cores or cpu.logical_cores or 1
    ram = r.environment.ram.available_bytes or (sv.ram_available_bytes or [None])[0]
    return Context(
        device_type=rec.compute_device["type"],
        device_name=rec.device_name,
        window_s=window_s, steps=steps,
        samples=samples, samples_per_s=samples / window_s if window_s > 0 else 0.0,
        batch_size=loader["batch_size"], workers=loader["workers"],
        usable_cores=float(usable),
        cpu_util=cpu_util_in_window(sv, float(win["start_s"]), float(win["end_s"])),
        compute_ms=_mean_ms(stage("compute")), h2d_ms=_mean_ms(stage("h2d")),
        sample_cpu_ms=_sample_cpu_ms(stages),
        sample_read_ms=_mean_ms(stage("read")),
        collate_ms=_mean_ms(stage("collate")),
        transfer_ms=_mean_ms(stage("transfer")),
        ready_ahead_ms=_mean_ms(stage("ready_ahead")),
        mean_file_bytes=mean_bytes, mean_pixels=mean_px,
        timed_reads=read_total > 0,
        bytes_measured=bool(nbytes is not None and sel is not None and sel.any() and float(nbytes[sel].max()) >= 0),
        read_mb_s_per_worker=(read_bytes / 1e6 / read_total) if read_total > 0 else 0.0,
        dataset_bytes=int(r.dataset.total_bytes or 0),
        ram_available_bytes=int(ram) if ram else None,
        pin_memory=loader["pin_memory"], amp=bool(cfg.amp),
        augment=str(cfg.augment or "") if job_kind == "builtin" else "",
        image_size=int(cfg.image_size or 224), job_kind=job_kind,
        page_cache_hit=r.storage.page_cache_hit_fraction,
        main_runq_ms=(float(np.mean(t.steps["main_runq"])) * 1e3
                      if t.steps["main_runq"].size else None),
        batch_bytes=_batch_bytes(rec),
        **per_sample,
    )


def _batch_bytes(rec: RunRecord) -> float | None:
    """Mean bytes of a batch's tensors (``job.loader.batch_bytes``), when the record has them."""
    v = read(rec).job.loader.batch_bytes
    return float(v) if isinstance(v, (int, float)) and v >= 0 else None


def _per_sample_io(sp: dict[str, np.ndarray], sel: np.ndarray | None) -> dict[str, Any]:
    """Blocked time and bytes per sample over the window's dataset calls (Context's sample_* fields); a figure the
    record does not hold stays None, so no sentence quotes it."""
    out: dict[str, Any] = {}
    if sel is None or not sel.any() or "start" not in sp or "end" not in sp:
        return out
    items = float(np.maximum(sp["items"][sel], 1).sum()) if "items" in sp else float(sel.sum())
    out["calls_items"] = int(items)
    wall = sp["end"][sel].astype(float) - sp["start"][sel].astype(float)
    if "cpu" in sp and float(sp["cpu"][sel].max()) >= 0:
        runq = sp["runq"][sel].astype(float) if "runq" in sp else np.zeros_like(wall)
        blocked = np.clip(wall - sp["cpu"][sel].astype(float) - np.clip(runq, 0, None), 0, None)
        out["sample_blocked_ms"] = float(blocked.sum()) / items * 1e3
    else:
        blocked = None
    rb = sp["read_bytes"]
    if float(rb[sel].min()) >= 0:
        out["sample_device_bytes"] = float(rb[sel].sum()) / items
        out["calls_device_bytes"] = int(rb[sel].sum())
        if blocked is not None:
            out["device_blocked_ms"] = float(blocked[rb[sel] > 0].sum()) / items * 1e3
    rc = sp["rchar"]
    if float(rc[sel].min()) >= 0:
        out["sample_rchar"] = float(rc[sel].sum()) / items
        out["calls_rchar"] = int(rc[sel].sum())
    return out
