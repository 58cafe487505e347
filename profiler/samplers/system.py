"""Machine-wide readings for one sampler tick: CPU per core, RAM, page cache, disk reads, /dev/shm.

Why our own deltas instead of psutil.cpu_percent / psutil.disk_io_counters: psutil.cpu_percent keeps its previous
reading in module-global state that any other caller in the process would disturb, and disk_io_counters costs
45-105 µs warm per call (it stats /sys/block/<name> for every device and runs wrap detection). /proc/stat,
/proc/meminfo and /proc/diskstats are kept open and re-read with pread (see proc_readers.py); psutil is the fallback
where they cannot be opened.

page_cache_bytes follows psutil (Cached + SReclaimable + Buffers); note that Cached includes tmpfs pages, i.e.
/dev/shm, which DataLoader workers fill with batches: subtract shm_used_bytes for the file page cache.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil

from profiler.samplers.proc_readers import (
    ProcFile,
    memory_from_meminfo,
    parse_cpu_lines,
    parse_diskstats,
    parse_meminfo,
)

DISKSTATS = "/proc/diskstats"
SHM_PATH = "/dev/shm"
SECTOR_BYTES = 512  # /proc/diskstats counts 512-byte sectors whatever the device's own sector size

# Devices left out of the "all disks" sum because they stack on other devices (their reads are counted again on
# the disk below: dm-crypt/LVM, md RAID, loop files) or are memory (ram, zram): summing them would double count.
STACKED_OR_MEMORY_PREFIXES = ("loop", "ram", "zram", "dm-", "md")


@dataclass
class SystemTick:
    """One tick's machine-wide values (percent 0-100, bytes, bytes per second)."""

    cpu_percent_per_core: list[float]
    ram_used_bytes: int
    ram_available_bytes: int
    page_cache_bytes: int
    disk_read_bytes_per_s: float | None
    shm_used_bytes: int | None


def _whole_disks(names: list[str]) -> list[str]:
    """Physical whole disks among `names`: listed in /sys/block (so not partitions), not stacked or memory."""
    try:
        block = set(os.listdir("/sys/block"))
    except OSError:
        block = set(names)
    return [n for n in names if n in block and not n.startswith(STACKED_OR_MEMORY_PREFIXES)]


def _open(path: str) -> ProcFile | None:
    try:
        return ProcFile(path)
    except OSError:
        return None


class SystemReader:
    """Keeps the previous cumulative counters so each `read` returns per-interval rates and percentages.

    Owned by the sampler thread; `close` releases the kept-open /proc files.
    """

    def __init__(self, disk: str | None) -> None:
        self.absent: dict[str, str] = {}
        self.ram_total_bytes = int(psutil.virtual_memory().total)
        self.disk: str | None = None  # the device the disk series is for; None = all whole disks
        self._disk_names: list[str] = []
        self._prev_cpu: list[tuple[float, float]] | None = None
        self._prev_disk: tuple[int, float] | None = None
        self._shm_ok = True
        self._stat = _open("/proc/stat")
        self._meminfo = _open("/proc/meminfo")
        self._diskstats = _open(DISKSTATS)
        sectors = self._sectors()
        if sectors is None:
            self.absent["disk"] = f"{DISKSTATS} unreadable"
            return
        wanted = os.path.basename(disk) if disk else None
        if wanted and wanted in sectors:
            self.disk, self._disk_names = wanted, [wanted]
        else:
            if wanted:
                self.absent["disk"] = f"device {wanted!r} not in {DISKSTATS}; disk series is all disks"
            self._disk_names = _whole_disks(list(sectors))

    def close(self) -> None:
        for f in (self._stat, self._meminfo, self._diskstats):
            if f is not None:
                f.close()

    def _sectors(self) -> dict[str, int] | None:
        try:
            if self._diskstats is not None:
                return parse_diskstats(self._diskstats.read())
            with open(DISKSTATS, "rb") as f:
                return parse_diskstats(f.read())
        except (OSError, ValueError):
            return None

    def _cpu_busy_total(self) -> list[tuple[float, float]]:
        """(busy, total) per logical core; units cancel in the percentage (ticks or seconds)."""
        if self._stat is not None:
            try:
                return parse_cpu_lines(self._stat.read())
            except (OSError, ValueError):
                pass
        out = []
        for t in psutil.cpu_times(percpu=True):  # same definition as parse_cpu_lines
            total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
            out.append((total - t.idle - getattr(t, "iowait", 0.0), total))
        return out

    def _memory(self) -> tuple[int, int, int]:
        """(used, available, page cache) bytes, psutil.virtual_memory's definitions."""
        if self._meminfo is not None:
            try:
                return memory_from_meminfo(parse_meminfo(self._meminfo.read()))
            except (OSError, ValueError):
                pass
        vm = psutil.virtual_memory()
        return int(vm.used), int(vm.available), int(getattr(vm, "cached", 0)) + int(getattr(vm, "buffers", 0))

    def _disk_read_bytes(self) -> int | None:
        if not self._disk_names:
            return None
        sectors = self._sectors()
        if sectors is None:
            return None
        return sum(sectors.get(n, 0) for n in self._disk_names) * SECTOR_BYTES

    def prime(self) -> None:
        """Take the baseline so the first tick's rates cover one interval."""
        self._prev_cpu = self._cpu_busy_total()
        read = self._disk_read_bytes()
        self._prev_disk = (read, time.perf_counter()) if read is not None else None

    def _shm_used(self) -> int | None:
        if not self._shm_ok:
            return None
        try:
            st = os.statvfs(SHM_PATH)
        except OSError as exc:
            self._shm_ok = False
            self.absent["shm"] = f"{SHM_PATH} unavailable: {exc}"
            return None
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def read(self) -> SystemTick:
        cur = self._cpu_busy_total()
        prev = self._prev_cpu if self._prev_cpu is not None and len(self._prev_cpu) == len(cur) else cur
        per_core = []
        for (b1, t1), (b0, t0) in zip(cur, prev):
            dt = t1 - t0
            per_core.append(round(min(100.0, max(0.0, 100.0 * (b1 - b0) / dt)), 1) if dt > 0 else 0.0)
        self._prev_cpu = cur

        used, avail, cache = self._memory()

        rate = None
        now = time.perf_counter()
        read = self._disk_read_bytes()
        if read is not None:
            if self._prev_disk is not None and now > self._prev_disk[1]:
                rate = max(0.0, (read - self._prev_disk[0]) / (now - self._prev_disk[1]))
            self._prev_disk = (read, now)
        return SystemTick(
            cpu_percent_per_core=per_core,
            ram_used_bytes=used,
            ram_available_bytes=avail,
            page_cache_bytes=cache,
            disk_read_bytes_per_s=round(rate, 1) if rate is not None else None,
            shm_used_bytes=self._shm_used(),
        )
