"""The bounded list of windows: the newest at full resolution, older ones folded pairwise as the job ages.

Why pairwise by smallest span first: the record then keeps a logarithmic history (the last hour in minutes, the
last day in tens of minutes...) in a fixed number of windows, MONITOR_MAX_WINDOWS, whatever the job's length.
Windows marked ``keep`` (next to a change point) are never folded while any other pair can be, so the detail
around a change survives; the change points themselves carry copies of their before/after windows.
"""
from __future__ import annotations

from .. import thresholds as th
from .windows import WindowSummary


def merge(a: WindowSummary, b: WindowSummary) -> WindowSummary:
    """Two adjacent windows as one: sums of counts and seconds, the later one's memory (the state at the end), the
    bottleneck of the one that held more of the idle time (or the longer one, when neither waited)."""
    lead = a if (a.idle_s, a.seconds) >= (b.idle_s, b.seconds) else b

    def add(x: dict[str, float], y: dict[str, float]) -> dict[str, float]:
        return {k: round(x.get(k, 0.0) + y.get(k, 0.0), 6) for k in dict.fromkeys([*x, *y])}

    return WindowSummary(
        index=a.index, span=a.span + b.span, step_first=a.step_first, step_last=b.step_last, epoch=b.epoch,
        start_s=a.start_s, end_s=b.end_s, steps=a.steps + b.steps, samples=a.samples + b.samples,
        detail_steps=a.detail_steps + b.detail_steps, idle_s=round(a.idle_s + b.idle_s, 6),
        idle_by_cause_s=add(a.idle_by_cause_s, b.idle_by_cause_s), stage_s=add(a.stage_s, b.stage_s),
        stage_per={**a.stage_per, **b.stage_per},
        stage_obs={k: a.stage_obs.get(k, 0) + b.stage_obs.get(k, 0) for k in dict.fromkeys([*a.stage_obs,
                                                                                          *b.stage_obs])},
        outside_s=round(a.outside_s + b.outside_s, 6), other_loader_s=round(a.other_loader_s + b.other_loader_s, 6),
        workers=b.workers, processes=b.processes, rss_bytes=max(a.rss_bytes, b.rss_bytes),
        uss_bytes=max(a.uss_bytes, b.uss_bytes), rchar=a.rchar + b.rchar, read_bytes=a.read_bytes + b.read_bytes,
        bottleneck=lead.bottleneck, severity=lead.severity, summary=lead.summary, keep=a.keep or b.keep,
        estimated_steps=a.estimated_steps + b.estimated_steps, probe_steps=a.probe_steps + b.probe_steps,
        **_probe_share(a, b))


def _probe_share(a: WindowSummary, b: WindowSummary) -> dict[str, float | None]:
    """The probes' wait share of two windows as one: weighted by their probes (independent estimates: their
    half-widths add in quadrature, weighted alike)."""
    parts = [(w.probe_wait_share, w.probe_wait_share_pm or 0.0, w.probe_steps) for w in (a, b)
             if w.probe_wait_share is not None and w.probe_steps]
    n = sum(p[2] for p in parts)
    if not n:
        return {"probe_wait_share": None, "probe_wait_share_pm": None}
    share = sum(p[0] * p[2] for p in parts) / n
    pm = sum((p[1] * p[2]) ** 2 for p in parts) ** 0.5 / n
    return {"probe_wait_share": round(share, 6), "probe_wait_share_pm": round(pm, 6)}


class WindowLog:
    """The record's windows, bounded: ``add`` folds until at most ``max_windows`` remain."""

    def __init__(self, max_windows: int = th.MONITOR_MAX_WINDOWS, full: int = th.MONITOR_FULL_WINDOWS):
        if max_windows < full + 2:
            raise ValueError("max_windows must leave room for folding beyond the full-resolution ones")
        self.max_windows, self.full = max_windows, full
        self.windows: list[WindowSummary] = []
        self.folds = 0

    def add(self, w: WindowSummary) -> None:
        self.windows.append(w)
        while len(self.windows) > self.max_windows:
            self._fold_one()

    def mark_keep(self, base_index: int) -> None:
        """Keep the window holding base window ``base_index`` and its neighbours out of folding."""
        ws = self.windows
        for i, w in enumerate(ws):
            if w.index <= base_index < w.index + w.span:
                for j in (i - 1, i, i + 1):
                    if 0 <= j < len(ws):
                        ws[j].keep = True
                return

    def _fold_one(self) -> None:
        ws = self.windows
        old = len(ws) - self.full  # pairs (i, i+1) with i + 1 < old
        best: tuple[bool, int, int] | None = None
        for i in range(max(0, old - 1)):
            a, b = ws[i], ws[i + 1]
            key = (a.keep or b.keep, a.span + b.span, i)
            if best is None or key < best:
                best = key
        i = best[2] if best is not None else 0
        ws[i:i + 2] = [merge(ws[i], ws[i + 1])]
        self.folds += 1
