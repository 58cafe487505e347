"""Writing a renderer's file: through the one atomic writer (profiler/fsutil.py), text as renderers make it, and
figures drawn into memory first."""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Protocol

from ..fsutil import atomic_write_bytes


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` atomically (no half file, no temporary left on failure, disk full included). Text is UTF-8,
    with anything UTF-8 cannot hold (a lone surrogate from a non-UTF-8 file name) as a backslash escape rather than
    an error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8", errors="backslashreplace") if isinstance(data, str) else data
    return atomic_write_bytes(path, raw)


class Figure(Protocol):
    """What :func:`write_png` needs of a figure (matplotlib's Figure, pyplot's or not)."""

    def savefig(self, fname: Any, **kwargs: Any) -> None: ...


def write_png(fig: Figure, path: str | Path, **kwargs: Any) -> Path:
    """Draw ``fig`` as a PNG into memory, then :func:`write_atomic` it. Why not ``fig.savefig(path)``: it writes as
    it draws, so a full disk or an interrupt midway leaves a truncated PNG under the real name. ``kwargs`` go to
    ``savefig`` (dpi...); the caller closes the figure."""
    buf = io.BytesIO()
    fig.savefig(buf, **{"format": "png", **kwargs})
    return write_atomic(path, buf.getvalue())
