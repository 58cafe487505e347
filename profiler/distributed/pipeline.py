"""The built-in pipeline's distributed steps behind one object: under torchrun, one device per rank, the process
group, this rank's share of the batches, DDP with the all-reduce timer, leaving the group, and the facts the record
keeps; outside torchrun every method does nothing (or hands back what it was given).

Why one object: the harness (profiler/harness/runner.py) used to test ``if denv is not None`` at each of these
steps. With the steps here, the runner reads as the single-process pipeline, and what torchrun changes is in one
place next to the process-group code (ddp.py). The ``run`` command's own distributed steps (this rank's folder, the
record's ``distributed`` section, rank 0's merge) are the same idea for a whole run: profiler/commands/ranks.py
``RankHook``.
"""
from __future__ import annotations

from typing import Any

import torch

from ..errors import UserError
from . import ddp
from .env import RankEnv, RankSeam

# What the record says instead of a "model alone" figure under torchrun: the step's backward all-reduces with the
# other ranks, and the group is gone by the time the ceilings are measured, so the figure would time the collective.
MODEL_ALONE_UNDER_TORCHRUN = "not measured under torchrun (the step includes the all-reduce)"


class PipelineRanks(RankSeam):
    """This process's part in a torchrun job of the built-in pipeline (``denv`` None: a single process)."""

    def __init__(self, denv: RankEnv | None) -> None:
        super().__init__(denv)
        self.backend: str | None = None  # the process group's, once joined
        self._timer: ddp.AllreduceTimer | None = None

    def device(self, spec: str) -> str:
        """The ``--device`` this rank uses: one device per rank (``auto``/``cuda`` become ``cuda:LOCAL_RANK``)."""
        return ddp.rank_device(spec, self.denv) if self.denv is not None else spec

    def join(self, device: torch.device, n_files: int) -> None:
        """Join the process group (left again by :meth:`leave`); fewer images than ranks is bad input, said first."""
        if self.denv is None:
            return
        if n_files < self.denv.world_size:
            raise UserError(f"{n_files} images cannot be shared among {self.denv.world_size} ranks")
        self.backend = ddp.init_group(device)

    def share(self) -> tuple[int, int]:
        """(this rank, how many ranks) for the batch sampler's split of the dataset; (0, 1) for a single process."""
        return (self.denv.rank, self.denv.world_size) if self.denv is not None else (0, 1)

    def wrap(self, model: torch.nn.Module | None, device: torch.device, mode: str) -> torch.nn.Module | None:
        """The model the step trains: under torchrun and in train mode, DDP around it with the all-reduce timer
        (profiler/distributed/ddp.py); otherwise ``model`` itself."""
        if self.denv is None or model is None or mode != "train":
            return model
        wrapped, self._timer = ddp.wrap_model(model, device, self.backend or "gloo")
        return wrapped

    def leave(self) -> None:
        """Leave the process group (the caller does this in a ``finally``: also on errors)."""
        if self.denv is not None:
            ddp.destroy_group()

    def facts(self, t0_ns: int) -> dict[str, Any] | None:
        """The run's DDP facts (``RunResult.ddp``): the backend and, on gloo, the timed all-reduces relative to
        ``t0_ns``; None for a single process."""
        if self.denv is None:
            return None
        return {"backend": self.backend, "collectives": self._timer.section(t0_ns) if self._timer else None}

    def why_no_model_alone(self) -> str | None:
        """Why the "model alone" ceiling is not measured (under torchrun); None: measure it."""
        return MODEL_ALONE_UNDER_TORCHRUN if self.denv is not None else None
