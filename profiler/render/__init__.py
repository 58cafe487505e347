"""Renderers: terminal, PNG plots, self-contained HTML, Chrome/Perfetto trace. They read a RunRecord only."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def write_reports(rec: Any, out_dir: str | Path) -> list[Path]:
    """Write every file renderer's output for ``rec`` into ``out_dir``; returns the paths written."""
    out = Path(out_dir)
    written: list[Path] = []
    return written
