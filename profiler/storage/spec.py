"""Throttle specifications: what slow storage to emulate, from ``--throttle 20MB/s,150iops`` or ``--storage hdd``.

Why emulate at all: "would this loader keep up on the cluster's HDD array / NFS share?" is the question people ask
before they buy or move data, and a developer laptop with NVMe cannot answer it unthrottled. A spec is two numbers:
a bandwidth cap and an I/O rate cap. The kernel throttle applies each cap on its own (whichever binds first); the
userspace throttle charges ``bytes/bandwidth + 1/iops`` per read (a seek, then a transfer). See throttle.py.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

from profiler.errors import UserError

#: Largest bandwidth a throttle may set: 1 TB/s. Why: it is ~15x a PCIe 5.0 x16 link (64 GB/s), more than any storage
#: a DataLoader reads from; a larger "limit" limits nothing and risks overflowing the kernel's counters.
MAX_BYTES_PER_S = 10**12
#: Largest IOPS a throttle may set: 10 million. Why: the fastest NVMe drives reach ~2-3 M random-read IOPS at depth.
MAX_IOPS = 10_000_000


@dataclass(frozen=True)
class ThrottleSpec:
    """Read limits of an emulated device. ``None`` means "no limit of this kind"; at least one is set."""

    bytes_per_s: int | None
    iops: int | None
    label: str

    def __post_init__(self) -> None:
        if self.bytes_per_s is None and self.iops is None:
            raise ValueError("ThrottleSpec needs bytes_per_s or iops")
        for name in ("bytes_per_s", "iops"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise ValueError(f"ThrottleSpec.{name} must be a positive int, got {v!r}")
        # Never hand the kernel an absurd number (parse_throttle refuses these with a UserError first).
        if self.bytes_per_s is not None and self.bytes_per_s > MAX_BYTES_PER_S:
            raise ValueError(f"ThrottleSpec.bytes_per_s above {MAX_BYTES_PER_S}: {self.bytes_per_s}")
        if self.iops is not None and self.iops > MAX_IOPS:
            raise ValueError(f"ThrottleSpec.iops above {MAX_IOPS}: {self.iops}")

    def cost_s(self, nbytes: int) -> float:
        """Device time of one read of ``nbytes`` in the additive (seek + transfer) model of the userspace throttle."""
        cost = 0.0
        if self.bytes_per_s:
            cost += max(nbytes, 0) / self.bytes_per_s
        if self.iops:
            cost += 1.0 / self.iops
        return cost

    def describe(self) -> str:
        """One line for people, e.g. ``20 MB/s, 150 IOPS (hdd)``."""
        parts = []
        if self.bytes_per_s is not None:
            parts.append(format_rate(self.bytes_per_s))
        if self.iops is not None:
            parts.append(f"{self.iops:,} IOPS")
        return ", ".join(parts) + f" ({self.label})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def format_rate(bytes_per_s: float) -> str:
    """Decimal units, 3 significant digits: 20000000 -> '20 MB/s'."""
    for unit, scale in (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("KB/s", 1e3)):
        if bytes_per_s >= scale:
            return f"{bytes_per_s / scale:.3g} {unit}"
    return f"{bytes_per_s:.3g} B/s"


#: Presets for ``--storage``. Read-side figures, chosen for a DataLoader reading many files of ~100 KB-1 MB.
STORAGE_PRESETS: dict[str, ThrottleSpec] = {
    # 7200 rpm disk: ~8.5 ms average seek + 4.2 ms half rotation -> ~80-150 random reads/s (150 with NCQ
    # reordering). Sequential reads reach 150-250 MB/s, but an image dataset read in shuffled order is random I/O:
    # 150 IOPS x ~110 KB JPEGs ~= 16 MB/s. 20 MB/s caps the large-file case at what such a disk sustains on a
    # fragmented, shuffled dataset (also what 150 IOPS x 128 KiB readahead requests deliver).
    "hdd": ThrottleSpec(bytes_per_s=20_000_000, iops=150, label="hdd"),
    # SATA III SSD: the 6 Gb/s link caps reads at ~550 MB/s; datasheets claim ~90k random 4K IOPS at queue depth
    # 32, but a DataLoader issues roughly one read per worker at a time (QD1 ~10k IOPS per stream). 20k IOPS models a
    # few concurrent workers and stays inside what sleep-based and 100 ms-slice kernel throttling can meter accurately.
    "sata-ssd": ThrottleSpec(bytes_per_s=500_000_000, iops=20_000, label="sata-ssd"),
    # NVMe on PCIe 3.0 x4: ~3.5 GB/s sequential, 3 GB/s sustained on mixed files; 500k+ IOPS at depth. The IOPS cap is
    # set far above what a DataLoader reaches, only so that tiny-file datasets are not modelled as free.
    "nvme": ThrottleSpec(bytes_per_s=3_000_000_000, iops=200_000, label="nvme"),
    # NFS over 1 GbE: 125 MB/s on the wire, ~110 MB/s payload after TCP/RPC overhead -> 100 MB/s. Small files are
    # latency-bound: each costs >= 2 round trips (OPEN/GETATTR + READ) at ~0.3-0.5 ms LAN RTT -> ~1-2k files/s per
    # client; 1000 IOPS takes the conservative end because the block-level throttle sees only the READs.
    "nfs": ThrottleSpec(bytes_per_s=100_000_000, iops=1_000, label="nfs"),
}

_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}
_BW_RE = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*([kKmMgGtT][iI]?)?([Bb])(?:/s|ps)?$")
_IOPS_RE = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*([kK])?\s*iops$", re.IGNORECASE)
_EXAMPLES = 'e.g. "20MB/s,150iops", "500KiB/s", "1.5GB/s" or "150iops"'


def parse_throttle(text: str) -> ThrottleSpec:
    """Parse a throttle like ``20MB/s,150iops``. Units B, KB, MB, GB, TB (decimal) and KiB, MiB, GiB, TiB.

    A lowercase ``b`` is refused rather than guessed: ``Mb/s`` is megabits in networking and an 8x error would
    silently invalidate the emulation.
    """
    raw = (text or "").strip()
    if len(raw) > 100:
        raise UserError(f"throttle is too long ({len(raw)} characters); expected {_EXAMPLES}")
    if not raw:
        raise UserError(f"empty throttle; expected {_EXAMPLES}")
    bps: int | None = None
    iops: int | None = None
    for item in (p.strip() for p in raw.split(",")):
        if not item:
            raise UserError(f"cannot parse throttle {text!r}: empty item; expected {_EXAMPLES}")
        m_bw = _BW_RE.match(item)
        m_io = _IOPS_RE.match(item)
        if m_bw:
            if m_bw.group(3) == "b":
                raise UserError(f"throttle {item!r}: lowercase 'b' means bits; write bytes with 'B', {_EXAMPLES}")
            if bps is not None:
                raise UserError(f"throttle {text!r} gives the bandwidth twice")
            value = float(m_bw.group(1)) * _UNITS[(m_bw.group(2) or "").upper()]
            if not math.isfinite(value) or value > MAX_BYTES_PER_S:
                raise UserError(f"throttle {item!r}: bandwidth above {format_rate(MAX_BYTES_PER_S)}, faster than "
                                f"any storage; leave --throttle out for no limit")
            bps = round(value)
            if bps <= 0:
                raise UserError(f"throttle {item!r}: bandwidth must be at least 1 B/s")
        elif m_io:
            if iops is not None:
                raise UserError(f"throttle {text!r} gives the IOPS twice")
            value = float(m_io.group(1)) * (1000 if m_io.group(2) else 1)
            if not math.isfinite(value) or value > MAX_IOPS:
                raise UserError(f"throttle {item!r}: IOPS above {MAX_IOPS:,}, faster than any storage; leave "
                                f"--throttle out for no limit")
            iops = round(value)
            if iops <= 0:
                raise UserError(f"throttle {item!r}: IOPS must be at least 1")
        else:
            raise UserError(f"cannot parse throttle item {item!r}; expected {_EXAMPLES}")
    return ThrottleSpec(bytes_per_s=bps, iops=iops, label="custom")


def resolve_storage(throttle: str | None, storage: str | None) -> ThrottleSpec | None:
    """Turn ``--throttle`` / ``--storage`` into a spec; None when neither is given (an empty string is an error)."""
    if throttle is not None and not throttle.strip():
        raise UserError(f"--throttle is empty; expected {_EXAMPLES}, or leave it out for no throttle")
    if storage is not None and not storage.strip():
        raise UserError(f"--storage is empty; choose one of: {', '.join(STORAGE_PRESETS)}")
    if throttle and storage:
        raise UserError("give either --throttle or --storage, not both")
    if throttle:
        return parse_throttle(throttle)
    if storage:
        key = storage.strip().lower()
        if key not in STORAGE_PRESETS:
            raise UserError(f"unknown storage preset {storage!r}; choose one of: {', '.join(STORAGE_PRESETS)}")
        return STORAGE_PRESETS[key]
    return None
