"""Several processes, one job: torchrun / DistributedDataParallel runs, every rank profiled, merged.

- ``env``: is this process one rank of a torchrun job (and which)? A plain process is unchanged.
- ``layout``: the one run folder every rank writes into (``<folder>/rank<k>/run.json``), agreed without a side
  channel beyond what torchrun gives, and rank 0's wait for the others' records.
- ``ddp``: the built-in pipeline under DDP (process group, one device per rank, all-reduce timing hook).
- ``pipeline``: those steps behind one object the harness calls (each a no-op outside torchrun).
- ``merge``: pure; rank records -> the merged ``ranks`` view (per-rank figures, skew, collective wait, straggler).
- ``view``: a run folder's records loaded, analyzed and merged (a missing rank named, not fatal).
- ``launch``: a rank's own side: its output folder and its record's ``distributed`` section.

The merged report's files (ranks.json, ranks.png, report.html, trace.json) and terminal summary are renderers
(profiler/render: ``RANKS``, ranks_*); rank 0's wait-merge-write at the end of a run is profiler/commands/ranks.py.
"""
from __future__ import annotations

from .env import RankEnv, detect

__all__ = ["RankEnv", "detect"]
