"""The sweep document (what sweep.json holds: profiler/commands/sweep.py builds it, analysis/sweep.py ``summarise``
adds the predictions and the summary) as typed views, read by sweep_terminal, sweep_html and sweep_plot.

Why here and not where the document is built: the document stays a plain dict there (it is also sweep.json, and each
point gains its fields as the point runs, fails or is predicted); the three views read the same fields with the same
defaults, stated once below. A point that failed has no measured or predicted figures (None), only ``failed``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..record.read import view


@dataclass(frozen=True)
class SweepPoint:
    """One point of the sweep: its setting's label, what was measured and what the first point predicted for it."""
    index: int = 0
    label: str = ""
    measured_samples_per_s: float | None = None  # None: the point failed or was cut short (``failed`` says why)
    interval: list[float] | None = None  # the measured figure's 95 % interval
    predicted_samples_per_s: float | None = None  # None: not predicted (``predicted_binds`` "unknown": cannot be)
    predicted_interval: list[float] | None = None
    predicted_binds: str | None = None
    error: float | None = None  # (predicted - measured) / measured; None for the baseline or an unpredicted point
    bottleneck: str | None = None  # the point's own verdict
    failed: str | None = None


@dataclass(frozen=True)
class SweepBest:
    """The fastest measured point."""
    index: int | None = None
    label: str | None = None
    samples_per_s: float | None = None


@dataclass(frozen=True)
class SweepView:
    """The sweep: its points and the summary (None where no point was measured or predicted)."""
    points: list[SweepPoint] = field(default_factory=list)
    baseline: int | None = None  # the index of the point the others were predicted from
    best: SweepBest | None = None
    median_abs_error: float | None = None
    coverage: float | None = None  # share of predicted points measured inside their predicted interval
    interrupted: bool = False


def sweep_view(doc: dict[str, Any]) -> SweepView:
    """The sweep document as :class:`SweepView` (absent or null fields: the defaults above)."""
    return view(SweepView, doc)
