"""A torchrun job's run folder → the merged ``ranks`` view: each rank's record loaded and analysed (a missing or
unreadable one named, not fatal), then merged (``merge``, pure). The files and the terminal view of that view are
renderers (profiler/render: ``RANKS``, ranks_terminal); writing them is the commands' (profiler/commands/ranks.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import record
from ..errors import UserError
from .layout import find_ranks
from .merge import merge


def load_ranks(folder: Path) -> tuple[dict[int, Any], dict[int, str]]:
    """rank → analysed RunRecord (None where its run.json is missing or unreadable), and why it is missing."""
    from ..analysis import analyze

    recs: dict[int, Any] = {}
    why: dict[int, str] = {}
    for r, d in find_ranks(folder).items():
        if not (d / "run.json").exists():
            recs[r], why[r] = None, "no run.json (the rank died or was killed before writing it)"
            continue
        try:
            recs[r] = analyze(record.load(d / "run.json"))
        except UserError as e:
            recs[r], why[r] = None, f"unreadable run.json ({e})"
    return recs, why


def merged_view(folder: Path, states: dict[int, str] | None = None) -> tuple[dict[str, Any], dict[int, Any]]:
    """(the merged view, rank → analysed record) of the run folder ``folder``; ``states``: what rank 0's wait saw of
    each rank (profiler/distributed/layout.py ``wait_for_ranks``)."""
    recs, why = load_ranks(folder)
    st = dict(states or {})
    for r, w in why.items():
        st[r] = f"{st[r]}; {w}" if r in st and st[r] not in ("record",) else w
    dicts = {r: (rec.to_dict() if rec is not None else None)
             for r, rec in recs.items()}
    view = merge(dicts, states={r: s for r, s in st.items() if s != "record"})
    return view, recs
