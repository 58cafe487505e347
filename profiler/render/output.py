"""Writing a renderer's file: through the one atomic writer (profiler/fsutil.py), text as renderers make it."""
from __future__ import annotations

from pathlib import Path

from ..fsutil import atomic_write_bytes


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` atomically (no half file, no temporary left on failure, disk full included). Text is UTF-8,
    with anything UTF-8 cannot hold (a lone surrogate from a non-UTF-8 file name) as a backslash escape rather than
    an error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8", errors="backslashreplace") if isinstance(data, str) else data
    return atomic_write_bytes(path, raw)
