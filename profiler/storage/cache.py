"""Control the page cache for a dataset: drop it (cold run) or fill it (warm run).

Why: the same loader is io-bound when the data comes from disk and cpu-bound when it comes from RAM. Comparing a cold
and a warm run of the same data (DS-Analyzer's differential) is the cleanest way to show how much of a stall is
storage. ``echo 3 > /proc/sys/vm/drop_caches`` needs root and throws away the whole machine's cache; per-file
``posix_fadvise(POSIX_FADV_DONTNEED)`` needs neither.

Limits of ``evict`` (the kernel's, not ours): dirty pages cannot be dropped (hence one sync of each filesystem
first); pages that some process has mapped stay; on tmpfs/ramfs the page cache *is* the storage, so nothing is
dropped. Use ``measure_residency`` afterwards when you need to know what actually happened.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import stat
from collections.abc import Iterable, Iterator
from typing import Any

from profiler.storage._paths import PathArg, expand_paths

#: Read size for ``warm``. Why: 1 MiB is large enough that syscall overhead is negligible and small enough that the
#: buffer does not matter for memory; readahead does the rest.
WARM_CHUNK_BYTES = 1 << 20


def _regular_fds(paths: PathArg | Iterable[PathArg]) -> Iterator[tuple[int, os.stat_result]]:
    """(open fd, its fstat) of every regular file in ``paths``; directories are walked. The caller closes each fd.

    One open + one fstat per file, no separate isdir/stat: at a million files every extra syscall is seconds.
    O_NONBLOCK so a FIFO never blocks the open; it is then skipped, like devices and sockets.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    for p in paths:
        path = os.fspath(p)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            continue
        if stat.S_ISREG(st.st_mode):
            yield fd, st
        elif stat.S_ISDIR(st.st_mode):
            os.close(fd)
            yield from _regular_fds(expand_paths(path))
        else:
            os.close(fd)


# syncfs(2) from libc, looked up once: None = not looked up yet, False = unavailable (fall back to sync(2)).
_syncfs: Any = None


def _sync_filesystem(fd: int) -> None:
    """Write back the dirty pages of the filesystem holding ``fd`` (syncfs(2)); the whole machine's if unavailable."""
    global _syncfs
    if _syncfs is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            _syncfs = libc.syncfs
            _syncfs.argtypes = [ctypes.c_int]
            _syncfs.restype = ctypes.c_int
        except (OSError, AttributeError):
            _syncfs = False
    if not _syncfs or _syncfs(fd) != 0:
        os.sync()


def evict(paths: PathArg | Iterable[PathArg]) -> int:
    """Drop the page-cache pages of ``paths`` (files; directories are walked). Returns the number of files advised.

    One ``syncfs`` per filesystem met (the first time a file of it is seen), so freshly written datasets have no dirty
    pages left, then ``POSIX_FADV_DONTNEED`` per file over the whole file. A per-file ``fdatasync`` used to cost
    ~50 us per file (75 s at 1.28 M files) for nothing: after the sync the pages are clean. syncfs rather than
    ``sync``: it does not wait for other filesystems' dirty data (a busy NFS mount, a scratch disk being written).
    """
    synced: set[int] = set()
    count = 0
    for fd, st in _regular_fds(paths):
        try:
            if st.st_dev not in synced:
                synced.add(st.st_dev)
                _sync_filesystem(fd)
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
    buf = bytearray(WARM_CHUNK_BYTES)
    view = memoryview(buf)
    total = 0
    for fd, _ in _regular_fds(paths):
        owned: int | None = fd  # closed here unless the file object took it
        try:
            with os.fdopen(fd, "rb", buffering=0, closefd=True) as f:
                owned = None
                while True:
                    n = f.readinto(view)
                    if not n:
                        break
                    total += n
        except OSError:
            continue
        finally:
            if owned is not None:
                os.close(owned)
    return total
