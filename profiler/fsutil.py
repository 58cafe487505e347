"""Atomic file writes: the one helper every output (run.json, reports, compare.json) goes through.

Why: a run ends when something is already wrong — Ctrl-C, a full disk, a killed process. A reader must then find
either the old file or the complete new one under the real name, never half a file, and the folder must not fill up
with temporaries. So: write a temporary in the same directory (``os.replace`` is only atomic within a filesystem),
optionally fsync it, rename it over the target, and on any failure remove the temporary and raise one clear OSError.
"""
from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, fsync: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically; returns ``path``. On failure (ENOSPC, EACCES, an interrupt...) the
    temporary is removed; an OSError is re-raised with the errno kept and the target named in its message.

    fsync: also flush the data to the device before the rename, for files that must survive a power cut (costs a
    device round trip; off by default, since a crashed *process* loses nothing once the write returned)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        # O_EXCL: never follow or reuse a file someone else put there; 0o666 so the umask decides, as for open().
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as e:
        raise _clear(e, path) from e
    try:
        with os.fdopen(fd, "wb") as f:
            view = memoryview(data)
            while view:  # a short write on a filling disk: keep going until it either fits or raises ENOSPC
                view = view[f.write(view):]
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise _clear(e, path) from e
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str, *, encoding: str = "utf-8", fsync: bool = False) -> Path:
    """``atomic_write_bytes`` of ``text`` encoded (UTF-8 by default)."""
    return atomic_write_bytes(path, text.encode(encoding), fsync=fsync)


def _clear(e: OSError, path: Path) -> OSError:
    """The same error kind (errno, and so its subclass) with a message that says what could not be written."""
    why = e.strerror or str(e) or type(e).__name__
    return OSError(e.errno, f"could not write {path}: {why} (no partial file left behind)")
