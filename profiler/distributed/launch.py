"""A rank's side of a torchrun job: its output folder and its record's ``distributed`` section. The ``run`` command
(profiler/commands/run.py) calls these two when ``detect()`` finds a rank; rank 0's merge at the end is
profiler/commands/ranks.py ``finish``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .env import RankEnv, rank_section
from .layout import agree_run_folder, write_marker


def rank_out(denv: RankEnv, out: str | None, base: str, name: str) -> Path:
    """This rank's output folder ``<run folder>/rank<k>`` (created, with its rank.json marker)."""
    folder = agree_run_folder(denv, out, base, name)
    return write_marker(folder, denv.rank)


def attach(rec: Any, denv: RankEnv, rank_folder: Path, t0_ns: int | None = None) -> None:
    """Add the raw ``distributed`` section to this rank's record (a top-level key: RunRecord keeps unknown keys)."""
    ddp = getattr(rec, "ddp", None) or {}
    backend = ddp.get("backend")
    if backend is None:  # a user's script: its own process group, if still there
        try:
            import torch.distributed as dist

            backend = dist.get_backend() if dist.is_available() and dist.is_initialized() else None
        except Exception:  # noqa: BLE001 - the backend is a label; never lose the record for it
            backend = None
    t0 = t0_ns if t0_ns is not None else getattr(rec, "t0_ns", 0)
    sec = rank_section(denv, t0, backend, str(Path(rank_folder).parent.resolve()))
    sec["collectives"] = ddp.get("collectives")
    rec.distributed = sec
