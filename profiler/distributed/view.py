"""A torchrun job's run folder (+ what rank 0 got through the store) → the merged ``ranks`` view.

Inputs, in order of preference per rank: the summary the rank sent through torchrun's store (profiler/distributed/
store.py), else its full record in this folder (a shared ``--out``, or a rank on rank 0's node), summarised. Rank 0
saves what the store carried next to the rank folders (``rank_summaries.json``) so that ``report RUN_FOLDER`` can
merge again later from this folder alone. Full records found here are also loaded (analyzed) for the merged trace.

The files and the terminal view are renderers (profiler/render: ``RANKS``, ranks_terminal); writing them, and
rank_summaries.json, is the one save path's (profiler/saving.py ``save_ranks``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .. import record
from ..errors import UserError
from .layout import find_ranks
from .merge import merge_summaries
from .summary import RankSummary, is_summary, summarize

SUMMARIES_FILE = "rank_summaries.json"


def load_ranks(folder: Path) -> tuple[dict[int, Any], dict[int, str]]:
    """rank → analyzed RunRecord (None where its run.json is missing or unreadable), and why it is missing."""
    from ..analysis import analyze

    recs: dict[int, Any] = {}
    why: dict[int, str] = {}
    for r, d in find_ranks(folder).items():
        if not (d / "run.json").exists():
            recs[r], why[r] = None, "no run.json here (the rank died before writing it, or wrote it on its own node)"
            continue
        try:
            recs[r] = analyze(record.load(d / "run.json"))
        except UserError as e:
            recs[r], why[r] = None, f"unreadable run.json ({e})"
    return recs, why


def collected_doc(summaries: dict[int, RankSummary], states: dict[int, str], clock_sync: dict[str, dict[str, Any]],
                  world_size: int) -> bytes:
    """What the store carried, as rank_summaries.json holds it (compact JSON: ~20 KB a rank; written by
    profiler/saving.py ``save_ranks``, read back by :func:`read_collected`)."""
    doc = {"world_size": world_size, "summaries": {str(r): s for r, s in summaries.items()},
           "states": {str(r): s for r, s in states.items()}, "clock_sync": clock_sync}
    return json.dumps(doc, separators=(",", ":")).encode()


def read_collected(folder: Path) -> dict[str, Any]:
    try:
        doc = json.loads((Path(folder) / SUMMARIES_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def merged_view(folder: Path, states: dict[int, str] | None = None,
                summaries: dict[int, RankSummary] | None = None,
                clock_sync: dict[str, dict[str, Any]] | None = None,
                world_size: int | None = None) -> tuple[dict[str, Any], dict[int, Any]]:
    """(the merged view, rank → analyzed local record) of the run folder ``folder``; ``states``: what rank 0's wait
    saw of each rank; ``summaries``/``clock_sync``: what the store carried (else read from rank_summaries.json)."""
    folder = Path(folder)
    recs, why = load_ranks(folder)
    if summaries is None:
        saved = read_collected(folder)
        summaries = {int(r): s for r, s in (saved.get("summaries") or {}).items() if is_summary(s)}
        clock_sync = clock_sync if clock_sync is not None else (saved.get("clock_sync") or {})
        states = states if states is not None else {int(r): s for r, s in (saved.get("states") or {}).items()}
        world_size = world_size or saved.get("world_size")
    combined: dict[int, RankSummary] = dict(summaries)
    for r, rec in recs.items():
        if rec is not None and r not in combined:
            combined[r] = summarize(rec.to_dict(), str((folder / f"rank{r}" / "run.json").resolve()))
    st = {int(k): v for k, v in (states or {}).items() if int(k) not in combined}
    for r, w in why.items():
        if r not in combined:
            st[r] = f"{st[r]}; {w}" if r in st else w
    view = merge_summaries(combined, world_size, st, clock_sync or {})
    return view, recs
