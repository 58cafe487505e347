"""The per-rank table of a torchrun job's merged view, shared by ranks_html (every column) and ranks_terminal (the
80-column subset): one row per rank, then one per missing rank. Reads the merged ``ranks`` view only
(profiler/distributed/merge.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..record.read import view as typed
from ..thresholds import RANKS_TABLE_MAX

HEADERS = ["rank", "host", "samples/s", "steps", "step ms", "input wait ms", "compute ms", "collective ms",
           "collective share", "stall", "bottleneck"]

# The terminal's narrower table (80 columns): the HTML has every column.
TERMINAL_HEADERS = ["rank", "samples/s", "step ms", "input wait ms", "compute ms", "collective ms", "collective share",
                    "bottleneck"]
SHORT = {"samples/s": "smp/s", "step ms": "step", "input wait ms": "input", "compute ms": "compute",
         "collective ms": "collect.", "collective share": "coll %"}

# This table's own "no figure" mark (an en dash, as the ranks views have always shown it; units.ms uses an em dash).
MISSING = "–"


# The merged view's fields as the ranks views read them. The view stays a plain dict where it is built (it is also
# ranks.json, and attach --rank-of builds one of its own with the sampled shares instead of step times): its shape,
# with one default per field, is stated here, where the views read it. None: the figure is not there for that rank.
@dataclass(frozen=True)
class RankRow:
    """One rank's row: its figures (per step, ms) and verdict."""
    rank: int = 0
    hostname: str | None = None
    samples_per_s: float | None = None
    steps: int | None = None
    step_ms: float | None = None
    wait_ms: float | None = None
    compute_ms: float | None = None
    collective_ms: float | None = None
    collective_share: float | None = None  # None: no aligned step (or a zero step time)
    stall_fraction: float | None = None
    input_wait_share: float | None = None  # attach --rank-of: the sampled wait share
    stall_share_by_cause: dict[str, float] = field(default_factory=dict)
    bottleneck: str | None = None
    partial: bool = False


@dataclass(frozen=True)
class Straggler:
    """A rank the others wait for (distributed/straggler.py)."""
    rank: int = 0
    cause: str | None = None
    collective_share: float | None = None


@dataclass(frozen=True)
class Clocks:
    """How the ranks' clocks were put on one axis (distributed/clocks.py)."""
    note: str = ""
    shared: bool = False
    comparable: bool | None = None  # None: a view older than the figure (``shared`` says it then)
    uncertainty_ms: float | None = None
    host_offsets: dict[str, dict[str, Any]] = field(default_factory=dict)  # host -> {offset_ms, uncertainty_ms, ...}
    round_trips: dict[str, dict[str, Any]] = field(default_factory=dict)
    versus_effect: str | None = None


@dataclass(frozen=True)
class RecordPlace:
    """Where a rank's full record is: its node, host and path there."""
    node: int | None = None
    host: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class Collected:
    """How rank 0 had the ranks' summaries (absent: merged from the records in a folder)."""
    via: str | None = None
    reports: int | None = None
    waited_s: float = 0.0
    last_report_to_merged_s: float | None = None


@dataclass(frozen=True)
class RanksView:
    """The merged view of a torchrun job's ranks (profiler/distributed/merge.py) or of attach --rank-of."""
    world_size: int = 0
    present: list[int] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    ranks: list[RankRow] = field(default_factory=list)
    stragglers: list[Straggler] = field(default_factory=list)
    straggler: Straggler | None = None
    summary: str | None = None
    collective_method: str | None = None
    collective_measured: bool = False
    clocks: Clocks = field(default_factory=Clocks)
    collected: Collected | None = None  # None: not collected over the store (report RUN_FOLDER)
    attach_note: str | None = None


def ranks_view(v: dict[str, Any]) -> RanksView:
    """The merged view as :class:`RanksView` (absent or null fields: the defaults above)."""
    return typed(RanksView, v)


def record_places(v: dict[str, Any]) -> dict[Any, RecordPlace]:
    """``records`` (rank -> where its record is), each place typed; ranks as the view keys them (int, or str once
    read back from ranks.json)."""
    recs = v.get("records")
    return {r: typed(RecordPlace, loc) for r, loc in recs.items()} if isinstance(recs, dict) else {}


def figure(v: Any, fmt: str = "{:.1f}", scale: float = 1.0) -> str:
    """One cell: ``fmt`` of ``v * scale``, or :data:`MISSING` for no figure."""
    return MISSING if v is None else fmt.format(v * scale)


def shown_ranks(v: RanksView, limit: int = RANKS_TABLE_MAX) -> tuple[list[RankRow], int]:
    """The rows a table shows: every rank up to ``limit``; beyond it the stragglers, then the ranks that waited least
    and most in collectives (the extremes), in rank order; and how many were left out (ranks.json has them all)."""
    rows = v.ranks
    if len(rows) <= limit:
        return rows, 0
    flagged = {s.rank for s in v.stragglers}
    by_share = sorted(rows, key=lambda r: r.collective_share or 0.0)
    keep = {r.rank for r in rows if r.rank in flagged}
    room = max(0, limit - len(keep))
    keep |= {r.rank for r in by_share[:room // 2]} | {r.rank for r in by_share[len(by_share) - room // 2:]}
    return [r for r in rows if r.rank in keep], len(rows) - len(keep)


def table_rows(view: dict[str, Any], limit: int = RANKS_TABLE_MAX) -> list[list[str]]:
    """The per-rank table (shared by HTML and terminal), in :data:`HEADERS` order; beyond ``limit`` ranks, the
    stragglers and the extremes, a row saying how many are left out, and the missing ranks in one row."""
    f = figure
    rows = []
    v = ranks_view(view)
    flagged = {s.rank for s in v.stragglers}
    shown, left = shown_ranks(v, limit)
    for r in shown:
        rows.append([f"{r.rank}" + ("*" if r.rank in flagged else ""),
                     str(r.hostname or "–"), f(r.samples_per_s), str(r.steps),
                     f(r.step_ms), f(r.wait_ms), f(r.compute_ms),
                     f(r.collective_ms), f(r.collective_share, "{:.0f} %", 100),
                     f(r.stall_fraction, "{:.0f} %", 100), str(r.bottleneck or "–")
                     + (" [partial]" if r.partial else "")])
    if left:
        rows.append([f"({left} more)", "–", "–", "–", "–", "–", "–", "–", "–", "–", "between those shown; ranks.json"])
    if len(v.missing) > limit:
        ms = v.missing
        rows.append([f"{len(ms)} missing", "–", "–", "–", "–", "–", "–", "–", "–", "–",
                     f"ranks {ms[0]}..{ms[-1]}: see ranks.json states"])
        return rows
    for m in v.missing:
        rows.append([f"{m} (missing)", "–", "–", "–", "–", "–", "–", "–", "–", "–",
                     str(view["states"].get(m, view["states"].get(str(m), "no record")))])
    return rows
