"""Control the page cache for a dataset: drop it (cold run) or fill it (warm run).

Why: the same loader is io-bound when the data comes from disk and cpu-bound when it comes from RAM. Comparing a cold
and a warm run of the same data (DS-Analyzer's differential) is the cleanest way to show how much of a stall is
storage. ``echo 3 > /proc/sys/vm/drop_caches`` needs root and throws away the whole machine's cache; per-file
``posix_fadvise(POSIX_FADV_DONTNEED)`` needs neither.

Limits of ``evict`` (the kernel's, not ours): dirty pages cannot be dropped (hence the sync first); pages that some
process has mapped stay; on tmpfs/ramfs the page cache *is* the storage, so nothing is dropped. Use
``measure_residency`` afterwards when you need to know what actually happened.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Iterable

from profiler.storage._paths import PathArg, expand_paths

#: Read size for ``warm``. Why: 1 MiB is large enough that syscall overhead is negligible and small enough that the
#: buffer does not matter for memory; readahead does the rest.
WARM_CHUNK_BYTES = 1 << 20


def _open_regular(path: str) -> int | None:
    """Open ``path`` read-only if it is a regular file; None otherwise (missing, FIFO, device, no permission)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def evict(paths: PathArg | Iterable[PathArg]) -> int:
    """Drop the page-cache pages of ``paths`` (files; directories are walked). Returns the number of files advised.

    ``os.sync()`` once first (so freshly written datasets have no dirty pages left), then per file ``fdatasync`` (cheap
    when already clean; catches writes that raced with the sync) and ``POSIX_FADV_DONTNEED`` over the whole file.
    """
    files = expand_paths(paths)
    os.sync()
    count = 0
    for path in files:
        fd = _open_regular(path)
        if fd is None:
            continue
        try:
            try:
                os.fdatasync(fd)
            except OSError:
                pass  # e.g. EINVAL on filesystems without sync support; the advice below is still worth giving
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            count += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return count


def warm(paths: PathArg | Iterable[PathArg]) -> int:
    """Read every file of ``paths`` fully so its pages are in the page cache. Returns the bytes read.

    Reading (rather than ``POSIX_FADV_WILLNEED``) is deliberate: the advice is asynchronous and may be ignored under
    memory pressure, while a read returns only once the data is in RAM.
    """
    files = expand_paths(paths)
    buf = bytearray(WARM_CHUNK_BYTES)
    view = memoryview(buf)
    total = 0
    for path in files:
        fd = _open_regular(path)
        if fd is None:
            continue
        try:
            with os.fdopen(fd, "rb", buffering=0, closefd=True) as f:
                fd = None
                while True:
                    n = f.readinto(view)
                    if not n:
                        break
                    total += n
        except OSError:
            continue
        finally:
            if fd is not None:
                os.close(fd)
    return total
