"""The merged report of a torchrun job: from the ranks' records to the merged view, and the registry's ``RANKS`` files
(ranks.json, ranks.png, trace.json, report.html; profiler/render) in the run folder. The terminal summary (rank 0
only) is profiler/render/ranks_terminal.py.

Used by rank 0 at the end of a run (after waiting for the others' records, files only, no barrier) and by
``python -m profiler report <run folder>`` (from the records alone).
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
    recs, why = load_ranks(folder)
    st = dict(states or {})
    for r, w in why.items():
        st[r] = f"{st[r]}; {w}" if r in st and st[r] not in ("record",) else w
    dicts = {r: (rec.to_dict() if rec is not None else None)
             for r, rec in recs.items()}
    view = merge(dicts, states={r: s for r, s in st.items() if s != "record"})
    return view, recs


def write_merged(folder: Path, states: dict[int, str] | None = None, plots: bool = True) -> tuple[dict, list[Path]]:
    """Write the merged files into ``folder``; returns (view, files written). A renderer failing costs only itself
    (ranks.json and the page excepted: they propagate)."""
    from ..render import write_ranks

    folder = Path(folder)
    view, recs = merged_view(folder, states)
    return view, write_ranks(view, recs, folder, plots=plots)
