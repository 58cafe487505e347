"""The CLI's side of a torchrun job: this rank's output folder, its record's ``distributed`` section, and rank 0's
merge at the end. cli.py calls these four functions (and nothing else of this package) when ``detect()`` finds a rank.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .. import signals
from ..thresholds import RANK_WAIT_S
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


def finish(denv: RankEnv, rank_folder: Path, console: Any, plots: bool, timeout_s: float = RANK_WAIT_S) -> None:
    """Rank 0: wait for the other ranks' records (files only; a dead rank is not waited for), merge, report.

    Other ranks: nothing. A failure here is reported and never changes the rank's own exit status.
    """
    if not denv.is_main:
        return
    from ..render.ranks_terminal import print_ranks
    from .layout import wait_for_ranks
    from .report import write_merged

    folder = Path(rank_folder).parent
    try:
        states = wait_for_ranks(folder, denv.world_size, denv.rank, timeout_s)
        with signals.deferred():
            view, files = write_merged(folder, states, plots=plots)
        print_ranks(view, console, [str(f) for f in files])
    except KeyboardInterrupt:
        print(f"profiler: interrupted while merging the ranks; run `python -m profiler report {folder}`",
              file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - each rank's record is safe already; the merge can be redone
        print(f"profiler: could not merge the ranks ({type(e).__name__}: {e}); run `python -m profiler report "
              f"{folder}`", file=sys.stderr)
