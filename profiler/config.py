"""Every default of a run in one dataclass, with the reason for each number.

The CLI builds a RunConfig from its arguments; the harness reads only this object; run.json stores it whole
(`config`), so a run can be repeated and two runs compared field by field.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

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
    # 30 measured steps: ~1,000 samples at batch 32, enough for stable p95s and stall fractions in ~20 s on a 2-core CPU.
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
    # Extra names/values the CLI does not know about (e.g. from a future version) survive a round trip.
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})
