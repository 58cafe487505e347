"""Several processes, one job: torchrun / DistributedDataParallel runs, every rank profiled, merged.

- ``env``: is this process one rank of a torchrun job (and which)? A plain process is unchanged.
- ``layout``: the one run folder every rank writes into (``<folder>/rank<k>/run.json``), agreed without a side
  channel beyond what torchrun gives, and rank 0's wait for the others' records.
- ``ddp``: the built-in pipeline under DDP (process group, sharded sampler, all-reduce timing hook).
- ``merge``: pure; rank records -> the merged ``ranks`` view (per-rank figures, skew, collective wait, straggler).
- ``report``: the merged view of a run folder, and writing its files (profiler/render ``RANKS``: ranks.json,
  ranks.png, trace.json, report.html); the terminal summary is profiler/render/ranks_terminal.py.
"""
from __future__ import annotations

from .env import RankEnv, detect

__all__ = ["RankEnv", "detect"]
