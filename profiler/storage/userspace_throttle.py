"""Emulated slow storage without root: a single-queue device shared by every process of a run.

Model (say it in reports, it is a model): one request queue, served first come first served. Each read of ``n``
bytes occupies the device for ``n / bytes_per_s + 1 / iops`` seconds (a seek, then a transfer). The caller sleeps
until its request would have completed. ``charge`` itself charges whatever it is given; the profiler's read stage
(harness.builtin's ImageDataset) passes only the bytes that mincore says were not in the page cache, so cached files
are free as on a real disk, and ``--cache cold`` makes the first read of every file pay. With several DataLoader
workers the queue is shared, so workers wait behind each other as on a real single disk; more workers cannot buy more
bandwidth than the device has.

Shared state: a file holding one int64, the CLOCK_MONOTONIC time (``time.perf_counter_ns``, comparable across
processes on Linux) at which the device becomes free, updated under ``fcntl.flock``. The object pickles to
(spec, path), so it crosses into fork and spawn workers; each process opens the file itself, because flock locks
belong to an *open file description* and one inherited through fork would be shared - i.e. no lock at all.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import struct
import tempfile
import threading
import time
from types import TracebackType
from typing import Any

from profiler.storage.spec import ThrottleSpec

_FMT = "<q"
_SIZE = struct.calcsize(_FMT)


class UserspaceThrottle:
    """Charge reads against an emulated device shared by all processes; see the module docstring for the model."""

    mechanism = "userspace"

    def __init__(self, spec: ThrottleSpec, state_dir: str | None = None) -> None:
        self.spec = spec
        self._dir = tempfile.mkdtemp(prefix="profiler-throttle-", dir=state_dir)
        self.path = os.path.join(self._dir, "next_free_ns")
        with open(self.path, "wb") as f:
            f.write(struct.pack(_FMT, 0))
        self._owner_pid: int | None = os.getpid()
        self._init_process_state()

    def _init_process_state(self) -> None:
        self._fd: int | None = None
        self._fd_pid: int | None = None
        # flock does not exclude threads sharing one descriptor; this lock does. Recreated per process (a lock
        # copied by fork while another thread held it would stay locked forever).
        self._lock = threading.Lock()
        self._lock_pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        return {"spec": self.spec, "path": self.path, "_dir": self._dir}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._owner_pid = None  # copies (pickled into workers) never delete the shared state
        self._init_process_state()

    def _thread_lock(self) -> threading.Lock:
        if self._lock_pid != os.getpid():
            inherited = self._fd
            self._init_process_state()
            if inherited is not None:
                try:
                    os.close(inherited)  # the parent's copy: closing ours does not release the parent's lock
                except OSError:
                    pass
        return self._lock

    def _file(self) -> int:
        """This process's own descriptor for the state file (reopened after fork)."""
        pid = os.getpid()
        if self._fd is None or self._fd_pid != pid:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                raise RuntimeError(f"userspace throttle state {self.path} is gone (closed?)") from None
            self._fd_pid = pid
        return self._fd

    def charge(self, nbytes: int) -> float:
        """Reserve the device for a read of ``nbytes`` and sleep until it completes. Returns the seconds waited
        (queueing behind other processes included)."""
        cost_ns = round(self.spec.cost_s(nbytes) * 1e9)
        if cost_ns <= 0:
            return 0.0
        t0 = time.perf_counter_ns()
        with self._thread_lock():
            fd = self._file()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                raw = os.pread(fd, _SIZE, 0)
                next_free = struct.unpack(_FMT, raw)[0] if len(raw) == _SIZE else 0
                start = max(time.perf_counter_ns(), next_free)
                end = start + cost_ns
                os.pwrite(fd, struct.pack(_FMT, end), 0)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        while (remaining := end - time.perf_counter_ns()) > 0:
            time.sleep(remaining / 1e9)
        return (time.perf_counter_ns() - t0) / 1e9

    def close(self) -> None:
        """Close this process's descriptor; on the original object, in the creating process, also delete the state
        file. Idempotent."""
        if self._fd is not None and self._fd_pid == os.getpid():
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd = None
        if os.getpid() == self._owner_pid:
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> UserspaceThrottle:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"UserspaceThrottle({self.spec.describe()}, path={self.path!r})"
