"""Change points of a monitored job: when it changed, why, with the windows before and after and the statistic.

Fed one base window at a time (before any folding). Each detector compares the newest windows with a robust
baseline of the current regime (median and MAD of its last MONITOR_BASELINE_WINDOWS windows) and calls a change
only when MONITOR_PERSIST_WINDOWS windows in a row agree (a cause change also when its windows last
MONITOR_PERSIST_S in all: one long window), placing it at the first of them:

- cause: the window's verdict (verdict.decide: compute | io | cpu | transfer) differs from the regime's, and the new
  cause's idle share moved by at least max(MONITOR_MIN_SHARE_MOVE, z·1.4826·MAD) over the baseline's median;
- throughput: samples/s below the baseline's median by more than max(MONITOR_MIN_DROP·median, z·1.4826·MAD);
- memory: the process tree's RSS above the baseline's median by MONITOR_MEM_GROWTH_SHARE and
  MONITOR_MEM_GROWTH_MIN_BYTES;
- periodic stalls: spikes of the wait share (MONITOR_SPIKE_FROM above the job's running median) that *return*: a
  spike after a window that was none starts an episode, and the last three episodes' starts are evenly spaced (in
  steps, within MONITOR_PERIOD_TOLERANCE). Windows that spike one after another are one episode: a phase that waits
  longer for a while (an io-bound stretch of equal windows) is not a stall that comes back.
"""
from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .. import thresholds as th
from .windows import WindowSummary, label


@dataclass
class ChangePoint:
    kind: str  # cause | throughput | memory | periodic
    step: int  # the job's step where the new regime starts (the first window's first step)
    window: int  # base window index of that window
    at_s: float  # since the job started
    epoch: int
    before: str  # the regime before (a cause, a rate, a size)
    after: str
    statistic: str  # the test that called it, with its numbers
    summary: str  # one sentence
    window_before: dict[str, Any] = field(default_factory=dict)
    window_after: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChangePoint:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def _robust(xs: list[float]) -> tuple[float, float]:
    """(median, 1.4826·MAD): the normal-consistent robust scale."""
    med = statistics.median(xs)
    return med, th.MAD_TO_SIGMA * statistics.median(abs(x - med) for x in xs)


def _hms(s: float) -> str:
    s = int(s)
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _mb(b: float) -> str:
    return f"{b / 1e6:,.0f} MB"


def _cause_words(w: WindowSummary) -> str:
    if w.bottleneck == "compute":
        return f"compute-bound (waited {w.wait_share * 100:.0f} % for input)"
    return f"input-bound {w.bottleneck}, {w.idle_share(w.bottleneck) * 100:.0f} % of the time"


class Detector:
    """Consumes base windows in order; ``changes`` grows as changes are found (bounded by MONITOR_MAX_CHANGES)."""

    def __init__(self) -> None:
        self.k = th.MONITOR_PERSIST_WINDOWS
        self.changes: list[ChangePoint] = []
        self.regime: str | None = None
        self.base: deque[WindowSummary] = deque(maxlen=th.MONITOR_BASELINE_WINDOWS)
        self.pending: list[WindowSummary] = []
        self.low: list[WindowSummary] = []
        self.mem_base: deque[int] = deque(maxlen=th.MONITOR_BASELINE_WINDOWS)
        self.high: list[WindowSummary] = []
        self.shares: deque[float] = deque(maxlen=64)
        self.spikes: deque[int] = deque(maxlen=4)  # the last episodes' first steps
        self.in_spike = False  # the last window spiked: a spike now continues its episode
        self.period: int | None = None
        self.last: WindowSummary | None = None

    def feed(self, w: WindowSummary) -> list[ChangePoint]:
        """The changes this window completes (placed at the window where they began)."""
        found: list[ChangePoint] = []
        cause = self._cause(w)
        if cause is not None:
            found.append(cause)
        else:
            drop = self._throughput(w)
            if drop is not None:
                found.append(drop)
        for f in (self._memory, self._periodic):
            c = f(w)
            if c is not None:
                found.append(c)
        self.last = w
        self.changes.extend(found)
        del self.changes[:max(0, len(self.changes) - th.MONITOR_MAX_CHANGES)]
        return found

    def _point(self, kind: str, first: WindowSummary, before: str, after: str, stat: str, summary: str,
               prev: WindowSummary | None) -> ChangePoint:
        return ChangePoint(kind, first.step_first, first.index, first.start_s, first.epoch, before, after, stat,
                           summary, prev.to_dict() if prev is not None else {}, first.to_dict())

    def _cause(self, w: WindowSummary) -> ChangePoint | None:
        lab = label(w)
        if self.regime is None:
            # The first regime: the first label seen in k windows (not necessarily in a row: a start-up window or one
            # odd window between two of the job's first is not a regime of its own). Start-up is not a change.
            self.pending = (self.pending + [w])[-4 * self.k:]
            same = [p for p in self.pending if label(p) == lab]
            if len(same) >= self.k:
                self.regime, self.base = lab, deque(same, maxlen=th.MONITOR_BASELINE_WINDOWS)
                self.pending = []
            return None
        if lab == self.regime:
            self.base.extend(self.pending)  # an odd window or two inside the regime: part of its baseline
            self.pending = []
            self.base.append(w)
            return None
        self.pending = [p for p in self.pending if label(p) == lab] + [w]
        held_s = sum(p.seconds for p in self.pending)
        if len(self.pending) < self.k and held_s < th.MONITOR_PERSIST_S:
            return None
        new = self.pending
        focus = lab if lab != "compute" else (self.regime if self.regime != "compute" else "other")
        before_shares = [p.idle_share(focus) for p in self.base] or [0.0]
        med, scale = _robust(before_shares)
        now = statistics.mean(p.idle_share(focus) for p in new)
        need = max(th.MONITOR_MIN_SHARE_MOVE, th.MONITOR_ROBUST_Z * scale)
        if abs(now - med) < need:
            return None  # the verdict flipped on a share that barely moved: not a change
        prev = self.base[-1] if self.base else self.last
        first = new[0]
        stat = (f"{focus} idle share {med * 100:.1f} % -> {now * 100:.1f} % (median of {len(before_shares)} windows "
                f"before vs mean of {len(new)} after; threshold {need * 100:.1f} points = max(min move, "
                f"{th.MONITOR_ROBUST_Z:g}x1.4826xMAD)); held {len(new)} window{'s' if len(new) > 1 else ''}, "
                f"{held_s:.0f} s")
        words_before = _cause_words(prev) if prev is not None else self.regime
        summary = (f"from step {first.step_first:,} (epoch {first.epoch}, {_hms(first.start_s)} in) "
                   f"{_cause_words(first)}; before: {words_before}")
        if lab == "io" or self.regime == "io":
            summary += (f"; bytes from the device {_mb(prev.read_bytes / prev.seconds if prev and prev.seconds else 0)}"
                        f"/s -> {_mb(first.read_bytes / first.seconds if first.seconds else 0)}/s (read_bytes)")
        point = self._point("cause", first, str(self.regime), lab, stat, summary, prev)
        self.regime = lab
        self.base = deque(new, maxlen=th.MONITOR_BASELINE_WINDOWS)
        self.pending, self.low = [], []
        return point

    def _throughput(self, w: WindowSummary) -> ChangePoint | None:
        xs = [p.samples_per_s for p in self.base if p is not w]
        if len(xs) < 4:
            return None
        med, scale = _robust(xs)
        need = max(th.MONITOR_MIN_DROP * med, th.MONITOR_ROBUST_Z * scale)
        if w.samples_per_s >= med - need:
            self.low = []
            return None
        self.low.append(w)
        if len(self.low) < self.k:
            return None
        first, prev = self.low[0], self.base[-len(self.low) - 1] if len(self.base) > len(self.low) else None
        now = statistics.mean(p.samples_per_s for p in self.low)
        stat = (f"samples/s median {med:.1f} of {len(xs)} windows, now {now:.1f} over {len(self.low)} windows; "
                f"threshold {need:.1f} = max({th.MONITOR_MIN_DROP:.0%} of median, {th.MONITOR_ROBUST_Z:g}x1.4826xMAD)")
        summary = (f"from step {first.step_first:,} ({_hms(first.start_s)} in) throughput fell from {med:.0f} to "
                   f"{now:.0f} samples/s, same cause ({_cause_words(first)})")
        point = self._point("throughput", first, f"{med:.1f} samples/s", f"{now:.1f} samples/s", stat, summary, prev)
        self.base = deque(self.low, maxlen=th.MONITOR_BASELINE_WINDOWS)
        self.low = []
        return point

    def _memory(self, w: WindowSummary) -> ChangePoint | None:
        if len(self.mem_base) < 4:
            self.mem_base.append(w.rss_bytes)
            return None
        med = statistics.median(self.mem_base)
        need = max(th.MONITOR_MEM_GROWTH_SHARE * med, th.MONITOR_MEM_GROWTH_MIN_BYTES)
        if w.rss_bytes - med < need:
            self.high = []
            if len(self.mem_base) < (self.mem_base.maxlen or 0):
                self.mem_base.append(w.rss_bytes)
            return None
        self.high.append(w)
        if len(self.high) < self.k:
            return None
        first = self.high[0]
        stat = (f"process-tree RSS median {_mb(med)} over {len(self.mem_base)} windows, now {_mb(w.rss_bytes)}; "
                f"threshold +{_mb(need)} = max({th.MONITOR_MEM_GROWTH_SHARE:.0%}, "
                f"{_mb(th.MONITOR_MEM_GROWTH_MIN_BYTES)}); held {len(self.high)} windows")
        summary = (f"from step {first.step_first:,} ({_hms(first.start_s)} in) memory grew from {_mb(med)} to "
                   f"{_mb(w.rss_bytes)} (RSS of the job's {w.processes} processes, USS {_mb(w.uss_bytes)})")
        point = self._point("memory", first, _mb(med), _mb(w.rss_bytes), stat, summary, self.last)
        self.mem_base = deque((p.rss_bytes for p in self.high), maxlen=th.MONITOR_BASELINE_WINDOWS)
        self.high = []
        return point

    def _periodic(self, w: WindowSummary) -> ChangePoint | None:
        shares = self.shares
        spike = len(shares) >= 4 and w.wait_share >= statistics.median(shares) + th.MONITOR_SPIKE_FROM
        shares.append(w.wait_share)
        returned, self.in_spike = spike and not self.in_spike, spike
        if not returned:
            return None
        self.spikes.append(w.step_first)
        if len(self.spikes) < 3:
            return None
        s = list(self.spikes)[-3:]
        gaps = [b - a for a, b in zip(s, s[1:])]
        mean = statistics.mean(gaps)
        if mean <= 0 or max(abs(g - mean) for g in gaps) > th.MONITOR_PERIOD_TOLERANCE * mean:
            return None
        if self.period is not None and abs(self.period - mean) <= th.MONITOR_PERIOD_TOLERANCE * mean:
            return None  # the same period, said already
        self.period = int(mean)
        stat = (f"wait-share spikes (>= {th.MONITOR_SPIKE_FROM:.0%} above the running median) at steps "
                f"{', '.join(f'{x:,}' for x in s)}: spacings {gaps} within {th.MONITOR_PERIOD_TOLERANCE:.0%}")
        summary = (f"stalls return every ~{int(mean):,} steps (from step {s[0]:,}): the window waited "
                   f"{w.wait_share * 100:.0f} % for input against a usual {statistics.median(shares) * 100:.0f} %")
        return self._point("periodic", w, "", f"every ~{int(mean)} steps", stat, summary, self.last)
