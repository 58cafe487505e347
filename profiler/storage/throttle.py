"""Slow-storage emulation, public entry point: specs, presets, and the two throttles.

Which throttle: ``KernelThrottle`` when ``KernelThrottle.available(spec, maj_min)`` says yes (root, a local block
device, cgroup blkio/io) - it slows only real disk reads, so page-cache hits stay free and a cold run is honestly cold.
Otherwise ``UserspaceThrottle`` - no privileges, but a model: every read pays the device cost (cold cache assumed),
one queue shared by all workers. Record ``mechanism`` in run.json so a reader knows which one produced the numbers.

Implementation lives in spec.py, kernel_throttle.py and userspace_throttle.py (each a few hundred lines at most);
import from here.
"""
from __future__ import annotations

from profiler.storage.kernel_throttle import KernelThrottle, KernelThrottleError, cleanup_stale
from profiler.storage.spec import STORAGE_PRESETS, ThrottleSpec, format_rate, parse_throttle, resolve_storage
from profiler.storage.userspace_throttle import UserspaceThrottle

__all__ = [
    "STORAGE_PRESETS", "KernelThrottle", "KernelThrottleError", "ThrottleSpec", "UserspaceThrottle",
    "cleanup_stale", "format_rate", "parse_throttle", "resolve_storage",
]
