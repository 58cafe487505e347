"""Every default of a run in one dataclass, with the reason for each number.

The CLI builds a RunConfig from its arguments; the harness reads only this object; run.json stores it whole
(`config`), so a run can be repeated and two runs compared field by field. ``RunConfig.validate()`` is the one place
that checks a run's options, before anything is started: a number out of its bounds is bad input (one line, exit 2),
never a MemoryError, a fork storm or an absurd value written into the kernel later on.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import os
from dataclasses import dataclass
from typing import Any

from .errors import UserError

MODES = ("train", "infer")
AUGMENTS = ("none", "light", "standard", "heavy")
CACHE_MODES = ("as-is", "cold", "warm")
THROTTLE_MECHANISMS = ("auto", "kernel", "userspace")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp")


@dataclass
class RunConfig:
    # None: the built-in sample dataset (synthetic JPEGs, made once and cached) so a first run needs nothing.
    data: str | None = None
    # 2 workers: the smallest count that overlaps loading with compute, and what a 2-core laptop can host.
    workers: int = 2
    # 32: the common default of torchvision reference scripts per GPU for small models; small enough for a CPU run.
    batch_size: int = 32
    # tiny: a small CNN that a laptop CPU runs in ~0.1 s per batch, so the default run finishes in seconds.
    model: str = "tiny"
    mode: str = "train"
    device: str = "auto"
    # 224: the ImageNet training resolution that torchvision's recipe and most published loaders use.
    image_size: int = 224
    augment: str = "standard"
    # None = auto: pinned host memory only helps when there is a CUDA device to copy to.
    pin_memory: bool | None = None
    # 30 measured steps: ~1,000 samples at batch 32, enough for stable p95s and stall fractions in ~20 s on 2 cores.
    steps: int = 30
    # 5 warm-up steps: worker start-up, first-batch prefetch, cuDNN autotune and allocator growth all fall here.
    warmup: int = 5
    out: str = "reports"
    seed: int = 0
    # 2 is torch.utils.data.DataLoader's own default prefetch_factor.
    prefetch_factor: int = 2
    cache: str = "as-is"
    throttle: str | None = None
    storage: str | None = None
    # auto: a real kernel throttle (cgroup blkio / io.max) when root allows it, else the userspace emulation.
    throttle_mechanism: str = "auto"
    amp: bool = False
    # Sampler rate: 10 Hz resolves multi-second stalls while costing well under 1 % of a core.
    sample_interval_s: float = 0.1

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def validate(self) -> None:
        """Reject options no run can use, before anything starts (UserError: one line on stderr, exit 2).

        Checks names against their choices, every number against its bound below, empty strings, and that the
        batches in flight fit in the RAM available now. The throttle spec is parsed here too, so a bad --throttle
        fails before the dataset scan rather than after it.
        """
        _validate(self)


# --- Bounds of run options ------------------------------------------------------------------------------------------
# Each bound is far beyond any useful run and exists to turn a typo or an overflow into one clear line instead of a
# fork storm, a MemoryError traceback or a run that never ends.

# Workers: at most 8 per logical core, and never fewer than 64 allowed. Why: a worker that decodes images wants a core;
# past ~2 per core they only time-slice (MAX_WORKERS_PER_CORE in thresholds.py). I/O-latency-bound loaders (NFS,
# object stores) can use more, so we allow 4x that, with a floor of 64 for small machines reading remote data.
# Each worker is a process of ~100+ MiB, so 100,000 would fork until the machine stops.
WORKERS_PER_CORE_LIMIT = 8
WORKERS_FLOOR_LIMIT = 64
# Batch size: 1,000,000 samples. Why: the largest published data-parallel batches are ~64k per job (spread over
# thousands of GPUs); one loader's batch is far smaller. The RAM check below binds long before this on real images.
MAX_BATCH_SIZE = 1_000_000
# Steps and warm-up: 100 million measured steps is >23 days at 50 steps/s; anything larger is a typo, not a run.
MAX_STEPS = 100_000_000
# 1 million warm-up steps: warm-up covers worker start-up and autotuning, seconds to minutes, never days.
MAX_WARMUP = 1_000_000
# Image size 16..8192 px. Why 16: smaller than any conv net's receptive field (the tiny model pools twice).
# Why 8192: above the largest training resolutions in use (gigapixel slides are cut into 256-1024 px tiles); one
# 8192x8192 float32 image is already 805 MB.
MIN_IMAGE_SIZE = 16
MAX_IMAGE_SIZE = 8192
# prefetch_factor 1..128: batches each worker keeps ready; beyond a few dozen it only holds RAM, never adds speed.
MAX_PREFETCH_FACTOR = 128
# Seeds 0..2**32-1: numpy's legacy seeding (used by torch's worker seeding and many transforms) accepts no more.
MAX_SEED = 2**32 - 1
# Sampler interval 1 ms..60 s: faster than 1 ms the sampler costs a core; slower than 60 s it resolves nothing.
MIN_SAMPLE_INTERVAL_S = 0.001
MAX_SAMPLE_INTERVAL_S = 60.0
# Bytes per pixel of a decoded, transformed sample: 3 channels of float32 (what ToTensor/Normalize produce).
SAMPLE_BYTES_PER_PIXEL = 3 * 4
# One batch may use at most half of the available RAM. Why: the collate copy (stack) holds the samples and the batch
# at once, so a batch of half the RAM already doubles to all of it.
BATCH_SHARE_OF_AVAILABLE_RAM = 0.5
# Scanning a data folder stops beyond 20 million directory entries. Why: ImageNet-21k is ~14 M files; a list of 20 M
# paths takes GBs of RAM and the scan alone minutes. Datasets that large are sharded (tar/WebDataset) in practice.
MAX_SCAN_ENTRIES = 20_000_000
# Reading one sample file stops beyond 1 GiB. Why: PIL refuses images above ~179 Mpx (its decompression-bomb limit,
# ~0.5 GB as raw RGB), so no image it can open comes near a 1 GiB file; a device like /dev/zero would never end.
MAX_FILE_BYTES = 1 << 30


def available_ram_bytes() -> int | None:
    """RAM the kernel says a new allocation can get now (MemAvailable), or None when unknown."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # psutil missing or /proc unreadable: skip the check rather than refuse a run
        return None


def max_workers() -> int:
    """The largest --workers accepted on this machine (see WORKERS_PER_CORE_LIMIT)."""
    return max(WORKERS_FLOOR_LIMIT, WORKERS_PER_CORE_LIMIT * (os.cpu_count() or 1))


def _int_in(flag: str, value: Any, lo: int, hi: int, why: str) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise UserError(f"{flag} must be a whole number (got {value!r})")
    if not lo <= int(value) <= hi:
        shown = str(value) if len(str(value)) <= 24 else str(value)[:20] + "..."
        raise UserError(f"{flag} must be between {lo:,} and {hi:,}{why} (got {shown})")


def _text(flag: str, value: str | None) -> None:
    """None means "not given" (a default applies); an empty or blank string is a mistake, not a default."""
    if value is None:
        return
    if not isinstance(value, str):
        raise UserError(f"{flag} must be text (got {value!r})")
    if not value.strip():
        raise UserError(f"{flag} is empty; leave the option out to use its default")
    if "\0" in value:
        raise UserError(f"{flag} contains a NUL character")


def _choice(flag: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UserError(f"{flag} must be one of {', '.join(choices)} (got {value!r})")


def _fmt_bytes(n: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n / 1e3:.3g} KB"


def _validate(c: RunConfig) -> None:
    _text("--data", c.data)
    _text("--throttle", c.throttle)
    _text("--storage", c.storage)
    _text("--out", c.out)
    _text("--model", c.model)
    _text("--device", c.device)
    if c.out is None:
        raise UserError("--out is empty; leave the option out to use its default")
    _int_in("--workers", c.workers, 0, max_workers(),
            f" ({WORKERS_PER_CORE_LIMIT} per logical core of this machine, at least {WORKERS_FLOOR_LIMIT})")
    _int_in("--batch-size", c.batch_size, 1, MAX_BATCH_SIZE, "")
    _int_in("--steps", c.steps, 1, MAX_STEPS, "")
    _int_in("--warmup", c.warmup, 0, MAX_WARMUP, "")
    _int_in("--image-size", c.image_size, MIN_IMAGE_SIZE, MAX_IMAGE_SIZE, " pixels")
    _int_in("--prefetch-factor", c.prefetch_factor, 1, MAX_PREFETCH_FACTOR, "")
    _int_in("--seed", c.seed, 0, MAX_SEED, " (what numpy and torch accept as a seed)")
    _choice("--mode", c.mode, MODES)
    _choice("--augment", c.augment, AUGMENTS)
    _choice("--cache", c.cache, CACHE_MODES)
    _choice("--throttle-mechanism", c.throttle_mechanism, THROTTLE_MECHANISMS)
    si = c.sample_interval_s
    if isinstance(si, bool) or not isinstance(si, (int, float)) or not math.isfinite(si) \
            or not MIN_SAMPLE_INTERVAL_S <= si <= MAX_SAMPLE_INTERVAL_S:
        raise UserError(f"--sample-interval: must be between {MIN_SAMPLE_INTERVAL_S} and {MAX_SAMPLE_INTERVAL_S} s "
                        f"(got {si!r})")
    from .storage.spec import resolve_storage

    resolve_storage(c.throttle, c.storage)  # UserError for a bad or out-of-bounds spec
    _check_ram(c)


def _check_ram(c: RunConfig) -> None:
    """A batch that cannot fit is refused now, not met as a MemoryError in a worker minutes later."""
    avail = available_ram_bytes()
    if not avail:
        return
    batch_bytes = c.batch_size * c.image_size**2 * SAMPLE_BYTES_PER_PIXEL
    if batch_bytes > avail * BATCH_SHARE_OF_AVAILABLE_RAM:
        raise UserError(f"--batch-size {c.batch_size} at --image-size {c.image_size} needs "
                        f"{_fmt_bytes(batch_bytes)} per batch; {_fmt_bytes(avail)} of RAM is available and a batch "
                        f"may use at most half of it")
    # The loader keeps workers x prefetch_factor batches ready (plus the one the model holds), all alive at once.
    in_flight = (c.workers * c.prefetch_factor if c.workers > 0 else 0) + 1
    if batch_bytes * in_flight > avail:
        raise UserError(f"--workers {c.workers} x --prefetch-factor {c.prefetch_factor} keeps {in_flight} batches of "
                        f"{_fmt_bytes(batch_bytes)} in RAM at once ({_fmt_bytes(batch_bytes * in_flight)}); only "
                        f"{_fmt_bytes(avail)} is available: lower one of them or --batch-size")


@dataclass(frozen=True)
class AttachConfig:
    """Defaults of ``python -m profiler attach``.

    duration_s: 30 s at the default rate is ~600 samples of the main thread: a share's 95 % interval is then at most
    ±4 percentage points (±1.8 at the 5 % band's edge), finer than the 5 % / 20 % bands it is judged by (neighbouring
    samples are correlated, so the true uncertainty is somewhat wider; --duration 120 halves it).
    rate_hz: py-spy samples per second. What attach costs a job is the CPU it spends beside it, on its cores
    (py-spy reads the job's memory without stopping it: the job's own CPU per sample does not change). Measured
    (scripts/bench_attach.py, a 2-process job on 2 loaded cores): py-spy ~1.9 % of one core fixed (it follows the
    job's child processes) + ~0.06 % per Hz, attach's /proc reader ~1.1 %: 20 Hz is ~4 % of one core, 2 % of a
    2-core machine (less on more cores); 50 Hz was 2.9 % of the 2 cores, py-spy's own 100 Hz more again.
    """
    duration_s: float = 30.0
    rate_hz: int = 20


MIN_ATTACH_DURATION_S = 1.0  # py-spy's start-up takes a few hundred ms; under a second little would be sampled
MAX_ATTACH_DURATION_S = 24 * 3600.0  # counts stay bounded whatever the length; a day is a sane upper limit
MIN_ATTACH_RATE_HZ = 1
MAX_ATTACH_RATE_HZ = 1000  # py-spy's own ceiling is about here; beyond it samples are dropped
