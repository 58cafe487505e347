"""The timeline's sample spans as the renderers draw them (run.json v2), from a v2 or a v1 record.

A v2 span is one dataset call [start, end] with the self seconds of its named sub-stages (``stages``: read, decode,
augment, user names); the rest of the span is ``getitem``. Spans only say how long each sub-stage took, not when, so
the drawings lay the sub-stages out one after the other from the span's start, in registry order, and the rest last:
the proportions are exact, the order inside a span is a convention (docs/reports.md).

A v1 record (read_start / read_end / decode_end / augment_end) is read through the v2 migration itself
(record/migrate.py ``v2_timeline``), so renderers draw records saved before v2 and records the loader has not migrated
alike. Nothing here measures anything.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..record.migrate import v2_timeline
from .units import stage_order

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord
    from ..record.schema import Timeline

# Timeline plot: warm-up plus this many measured steps. 30 shows the steady-state pattern (which worker, how regular)
# while each batch stays wide enough to see its sub-stage spans. Here, not in plots.py, so the HTML can say which
# steps the plot shows without importing matplotlib.
TIMELINE_MEASURED_STEPS = 30


def timeline_steps(rec: RunRecord) -> tuple[int, int]:
    """Rows [0, n) of timeline.steps the Gantt shows: warm-up plus the first TIMELINE_MEASURED_STEPS measured."""
    measured = np.asarray(rec.timeline["steps"]["measured"], dtype=bool)  # a required column (schema StepsTable)
    total = measured.size
    idx = np.flatnonzero(measured)
    if idx.size > TIMELINE_MEASURED_STEPS:
        return 0, int(idx[TIMELINE_MEASURED_STEPS - 1]) + 1
    return 0, total


@dataclass
class Spans:
    """Columns of timeline.sample_spans as numpy arrays (``start``, ``end``, ``worker``, ``batch``, ``index``,
    ``items``, ``cpu``, ``runq``, ``rchar``, ``read_bytes``, and any other column the record has) and the named
    sub-stage seconds per row."""
    cols: dict[str, np.ndarray] = field(default_factory=dict)
    stages: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.cols["start"].size) if "start" in self.cols else 0

    def select(self, mask: np.ndarray) -> Spans:
        return Spans({k: v[mask] for k, v in self.cols.items()}, {k: v[mask] for k, v in self.stages.items()})

    def stage_names(self) -> list[str]:
        return stage_order(k for k in self.stages if k != "getitem")

    def getitem(self) -> np.ndarray:
        """Seconds of each span outside its named sub-stages (never negative)."""
        if not self.n:
            return np.zeros(0)
        named = sum((self.stages[k] for k in self.stage_names()), np.zeros(self.n))
        return np.maximum(0.0, self.cols["end"] - self.cols["start"] - named)

    def layout(self) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """(stage, starts, ends) per sub-stage, laid out back to back from each span's start, ``getitem`` (the rest)
        last. Named seconds that add up to more than the span (clock granularity) are scaled to fit it."""
        if not self.n:
            return []
        start, end = self.cols["start"].astype(float), self.cols["end"].astype(float)
        dur = np.maximum(0.0, end - start)
        names = self.stage_names()
        named = sum((np.maximum(0.0, self.stages[k]) for k in names), np.zeros(self.n))
        scale = np.where(named > dur, dur / np.where(named > 0, named, 1.0), 1.0)
        out = []
        t = start.copy()
        for k in names:
            d = np.maximum(0.0, self.stages[k]) * scale
            out.append((k, t.copy(), t + d))
            t = t + d
        out.append(("getitem", t, np.maximum(t, end)))
        return out


def sample_spans(timeline: Timeline) -> Spans:
    """The record's sample spans in the v2 shape (empty when the record has none); v1 columns are converted by the
    record's own migration (record/migrate.py), the one definition of what they mean in v2."""
    sp: Any = v2_timeline(timeline)["sample_spans"]
    if "start" not in sp:
        return Spans()
    cols = {k: np.asarray(v) for k, v in sp.items() if k != "stages"}
    n = cols["start"].size
    stages = {str(k): np.asarray(v, dtype=float) for k, v in (sp.get("stages") or {}).items()}
    stages = {k: v for k, v in stages.items() if v.size == n}
    cols.setdefault("index", np.full(n, -1))
    cols.setdefault("items", np.ones(n, dtype=int))
    for k in ("worker", "batch"):
        cols.setdefault(k, np.full(n, -1))
    cols["start"] = cols["start"].astype(float)
    cols["end"] = cols["end"].astype(float)
    return Spans(cols, stages)
