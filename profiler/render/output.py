"""Writing a renderer's file: atomically, and without leaving a ``.tmp`` behind when the disk is full."""
from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` through a temporary file renamed into place, so an interrupted or failed write never
    leaves a half file under the real name; on failure (ENOSPC) the temporary file is removed and the error raised.
    Text is UTF-8, with anything UTF-8 cannot hold (a lone surrogate from a non-UTF-8 file name) as a backslash
    escape rather than an error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    raw = data.encode("utf-8", errors="backslashreplace") if isinstance(data, str) else data
    try:
        with open(tmp, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
