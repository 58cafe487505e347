"""A rank's side of a torchrun job: its output folder and its record's ``distributed`` section. The ``run`` command
(profiler/commands/run.py) calls these two when ``detect()`` finds a rank; rank 0's merge at the end is
profiler/commands/ranks.py ``finish``.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .env import RankEnv, rank_section
from .layout import agree_run_folder, write_marker


def rank_out(denv: RankEnv, out: str | None, base: str, name: str) -> Path:
    """This rank's output folder ``<run folder>/rank<k>`` (created, with its rank.json marker)."""
    folder = agree_run_folder(denv, out, base, name)
    d = write_marker(folder, denv.rank)
    _announce(denv)
    return d


def _announce(denv: RankEnv) -> None:
    """This rank exists (and rank 0's clock), in torchrun's store: rank 0 tells a rank that never started from one
    that went silent, and other hosts learn whether they share rank 0's clock (profiler/distributed/store.py)."""
    from .store import announce, connect

    try:
        store = connect(denv)
        if store is not None:
            announce(store, denv)
    except Exception as e:  # noqa: BLE001 - the store is for the merge only; the run goes on without it
        print(f"profiler: rank {denv.rank}: torchrun's store not reachable ({type(e).__name__}: {e}); the merge "
              "will rely on files", file=sys.stderr)


def attach(rec: Any, denv: RankEnv, rank_folder: Path, t0_ns: int, ddp: dict[str, Any] | None = None) -> None:
    """Fill this rank's record's raw ``distributed`` section (schema.Distributed). ``t0_ns``: the record's clock
    origin; ``ddp``: the built-in pipeline's backend and collective timings (profiler/distributed/pipeline.py
    ``facts``), None for a user's script."""
    ddp = ddp or {}
    backend = ddp.get("backend")
    if backend is None:  # a user's script: its own process group, if still there
        try:
            import torch.distributed as dist

            backend = dist.get_backend() if dist.is_available() and dist.is_initialized() else None
        except Exception:  # noqa: BLE001 - the backend is a label; never lose the record for it
            backend = None
    sec = rank_section(denv, t0_ns, backend, str(Path(rank_folder).parent.resolve()))
    sec["collectives"] = ddp.get("collectives")
    rec.distributed = sec
    _closing(denv)


def _closing(denv: RankEnv) -> None:
    """Tell rank 0 this rank's window closed and its summary follows once its record and reports are written (which
    can take seconds): rank 0 then waits for it up to RANK_WAIT_S, not the shorter wait scaled by the others."""
    from .store import closing, connect

    try:
        store = connect(denv, 10.0)
        if store is not None:
            closing(store, denv)
    except Exception:  # noqa: BLE001 - only shortens what rank 0 may wait; never costs the record
        pass
