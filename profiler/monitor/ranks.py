"""Across a torchrun job's ranks, each monitored into ``<folder>/rank<k>``: which rank's input lagged, when, and why.

Pure: monitor records in, a :class:`RanksView` out (the terminal lines, monitor_ranks.png and monitor_ranks.html are
drawn from it by render/monitor_ranks.py). Why this exists: one rank's node degrading (its disk, a neighbour on its
cores, its page cache) is one of the stalls a long job meets, and each rank's own record cannot show it: every rank's
windows look like a regime of their own. Side by side they do: in a job whose ranks synchronise (DDP), the rank whose
input is slow waits in ``next()`` while the others wait for it in the all-reduce, which their records count as compute.

Alignment. Each rank cuts its windows where its own steps and clock say (default windows: at least 10 s and 100
steps), so the ranks' windows do not line up. The job's step is the common axis: the bins are the union of all ranks'
window boundaries, and within a bin each rank's figures are its covering window's, spread evenly over that window's
steps (the window is the finest thing the record holds). A bin holds the ranks that covered it; a rank that ended
early or crashed drops out of the later bins.

The rule (thresholds in profiler/thresholds.py, each with its reason): in a bin, a rank *lags* when its wait share is
above the others' median by at least MONITOR_RANK_LAG_SHARE of its time and, with three or more others, by more than
STRAGGLER_SPREAD_K robust standard deviations of theirs (1.4826 x their median absolute deviation): with many ranks
someone always waits most. Lagging bins of one rank in a row make an episode, kept when it spans at least
MONITOR_PERSIST_WINDOWS of that rank's own windows (one window is a burst, as for a change point). Its cause is the
rank's leading idle cause over the episode; its bytes from the storage device per second beside the others' median
say whether its node read from disk where they read from cache.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from statistics import median
from typing import TYPE_CHECKING

from .. import vocab
from ..thresholds import MAD_TO_SIGMA, MONITOR_PERSIST_WINDOWS, MONITOR_RANK_LAG_SHARE, STRAGGLER_SPREAD_K

if TYPE_CHECKING:
    from .record import MonitorRecord
    from .windows import WindowSummary

CAUSES = ("io", "cpu", "transfer", "other")
# The aligned grid's bins at most: the union of every rank's window boundaries grows with ranks x windows (64 ranks of
# 512 windows: 32,768); a plot and a lag rule need no finer grid than the windows of one rank (MONITOR_MAX_WINDOWS).
MAX_BINS = 1024
READ_SAID_FROM_MB_S = 0.1  # device reads below this on every side say nothing (a log file's writes, metadata)


@dataclass
class RankRow:
    """One rank over the whole job."""
    rank: int
    status: str
    steps: int
    windows: int
    seconds: float
    wait_share: float
    samples_per_s: float
    cause: str  # its leading idle cause over the job ("" when it never waited)
    read_mb_s: float  # bytes from the storage device per second, its whole process tree
    rss_peak_bytes: int


@dataclass
class RankLag:
    """An episode: one rank's input wait above the others' over consecutive bins."""
    rank: int
    step_first: int
    step_last: int
    start_s: float  # on that rank's clock (since its job started)
    end_s: float
    windows: int  # its own windows the episode touches
    wait_share: float  # its wait share over the episode
    others_share: float  # the others' median wait share over the same steps
    cause: str  # its leading idle cause over the episode
    read_mb_s: float  # its bytes from the device per second over the episode
    others_read_mb_s: float  # the others' median over the same steps
    to_end: bool  # still lagging at the last bin it covered
    others: int = 1  # the other ranks compared with it
    summary: str = ""


@dataclass
class Bin:
    """The job's steps [step_first, step_last] and each covering rank's wait share there."""
    step_first: int
    step_last: int
    share: dict[int, float] = field(default_factory=dict)
    lagging: list[int] = field(default_factory=list)


@dataclass
class RanksView:
    rows: list[RankRow]
    bins: list[Bin]
    lags: list[RankLag]
    headline: str  # the answer in a sentence or two (the terminal's first line)
    title: str = ""  # ... in ~15 words (the page's h1)


@dataclass
class _Acc:
    """A rank's figures summed over some steps (each window's spread evenly over its steps)."""
    seconds: float = 0.0
    idle: float = 0.0
    by_cause: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))
    read: float = 0.0
    windows: set[int] = field(default_factory=set)
    start_s: float = float("inf")
    end_s: float = 0.0

    def add(self, w: WindowSummary, steps: int) -> None:
        f = steps / max(1, w.step_last - w.step_first + 1)
        self.seconds += w.seconds * f
        self.idle += w.idle_s * f
        for c in CAUSES:
            self.by_cause[c] += w.idle_by_cause_s.get(c, 0.0) * f
        self.read += w.read_bytes * f
        self.windows.add(w.index)
        self.start_s = min(self.start_s, w.start_s)
        self.end_s = max(self.end_s, w.end_s)

    @property
    def share(self) -> float:
        return self.idle / self.seconds if self.seconds > 0 else 0.0

    @property
    def cause(self) -> str:
        c = max(CAUSES, key=lambda k: self.by_cause[k])
        return c if self.by_cause[c] > 0 else ""

    @property
    def read_mb_s(self) -> float:
        return self.read / self.seconds / 1e6 if self.seconds > 0 else 0.0


def _covering(ws: list[WindowSummary], a: int, b: int) -> list[tuple[WindowSummary, int]]:
    """The windows of ``ws`` (in step order, not overlapping) that overlap the steps [a, b], with the steps of each
    inside them (a bisection: a week-long job's ranks hold hundreds of windows each)."""
    i = max(0, bisect_right(ws, a, key=lambda w: w.step_first) - 1)
    out = []
    while i < len(ws) and ws[i].step_first <= b:
        w = ws[i]
        if w.step_last >= a:
            out.append((w, min(b, w.step_last) - max(a, w.step_first) + 1))
        i += 1
    return out


def _lags(share: float, others: list[float]) -> bool:
    if not others:
        return False
    m = median(others)
    if share - m < MONITOR_RANK_LAG_SHARE:
        return False
    if len(others) < 3:
        return True
    mad = median(abs(x - m) for x in others)
    return share - m > STRAGGLER_SPREAD_K * MAD_TO_SIGMA * mad


def analyze(recs: dict[int, MonitorRecord]) -> RanksView:
    """The ranks side by side (``recs``: rank -> its monitor record)."""
    windows = {r: sorted((w for w in rec.windows if w.steps > 0), key=lambda w: w.step_first)
               for r, rec in sorted(recs.items())}
    rows = [_row(r, recs[r], ws) for r, ws in windows.items()]
    edges = sorted({w.step_first for ws in windows.values() for w in ws}
                   | {w.step_last + 1 for ws in windows.values() for w in ws})
    if len(edges) > MAX_BINS + 1:  # many ranks, each cut elsewhere: a coarser grid (every k-th boundary, both ends)
        k = -(-(len(edges) - 1) // MAX_BINS)
        edges = edges[:-1:k] + [edges[-1]]
    bins: list[Bin] = []
    for a, b1 in zip(edges, edges[1:]):
        b = Bin(a, b1 - 1)
        for r, ws in windows.items():
            acc = _Acc()
            for w, n in _covering(ws, a, b1 - 1):
                acc.add(w, n)
            if acc.seconds > 0:
                b.share[r] = acc.share
        if len(b.share) >= 2:
            b.lagging = [r for r, s in b.share.items() if _lags(s, [x for k, x in b.share.items() if k != r])]
            bins.append(b)
    lags = _episodes(bins, windows)
    return RanksView(rows, bins, lags, _headline(rows, lags), _title(rows, lags))


def _row(rank: int, rec: MonitorRecord, ws: list[WindowSummary]) -> RankRow:
    acc = _Acc()
    for w in ws:
        acc.add(w, w.step_last - w.step_first + 1)
    samples = sum(w.samples for w in ws)
    return RankRow(rank, rec.status, rec.steps_total, rec.windows_total, acc.seconds, acc.share,
                   samples / acc.seconds if acc.seconds > 0 else 0.0, acc.cause, acc.read_mb_s,
                   max((w.rss_bytes for w in ws), default=0))


def _episodes(bins: list[Bin], windows: dict[int, list[WindowSummary]]) -> list[RankLag]:
    out: list[RankLag] = []
    for r in windows:
        run: list[Bin] = []
        covered = [b for b in bins if r in b.share]
        for i, b in enumerate(covered):
            if r in b.lagging:
                run.append(b)
            if run and (r not in b.lagging or i == len(covered) - 1):
                lag = _episode(r, run, windows, to_end=r in b.lagging)
                if lag.windows >= MONITOR_PERSIST_WINDOWS:  # (one window is a burst)
                    out.append(lag)
                run = []
    out.sort(key=lambda x: (x.step_first, x.rank))
    return out


def _episode(r: int, run: list[Bin], windows: dict[int, list[WindowSummary]], to_end: bool) -> RankLag:
    """Rank ``r``'s lagging bins in a row (``run``) as one episode: its figures and the others' over those steps."""
    a, b = run[0].step_first, run[-1].step_last
    own = _Acc()
    for w, n in _covering(windows[r], a, b):
        own.add(w, n)
    others = []
    for k, ws in windows.items():
        if k == r:
            continue
        acc = _Acc()
        for w, n in _covering(ws, a, b):
            acc.add(w, n)
        if acc.seconds > 0:
            others.append(acc)
    lag = RankLag(r, a, b, own.start_s, own.end_s, len(own.windows), own.share,
                  median(o.share for o in others) if others else 0.0, own.cause, own.read_mb_s,
                  median(o.read_mb_s for o in others) if others else 0.0, to_end, len(others))
    lag.summary = _sentence(lag)
    return lag


def _clock(s: float) -> str:
    m, sec = divmod(int(s), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def _sentence(g: RankLag) -> str:
    span = f"from step {g.step_first:,} ({_clock(g.start_s)} in) " + \
        ("to the end" if g.to_end else f"to step {g.step_last:,} ({_clock(g.end_s)} in)")
    cause = f", mostly {g.cause} ({vocab.CAUSE[g.cause].words})," if g.cause in vocab.CAUSE else ""
    them = "the other rank" if g.others == 1 else f"the other {g.others} ranks (median)"
    text = f"rank {g.rank} waited {g.wait_share * 100:.0f} % of its time for input{cause} {span}; {them} " \
        f"{g.others_share * 100:.0f} %"
    if max(g.read_mb_s, g.others_read_mb_s) >= READ_SAID_FROM_MB_S:
        text += f"; bytes from its storage device {g.read_mb_s:,.1f} MB/s, {them} {g.others_read_mb_s:,.1f} MB/s"
    return text + ". Where the ranks synchronise (DDP), every rank waits for it: fix its input first."


def _headline(rows: list[RankRow], lags: list[RankLag]) -> str:
    if len(rows) < 2:
        return "One rank monitored: nothing to compare."
    if not lags:
        shares = [r.wait_share for r in rows]
        return (f"No rank's input lagged the others' (whole-job wait shares {min(shares) * 100:.0f}-"
                f"{max(shares) * 100:.0f} %).")
    last = max(lags, key=lambda g: g.step_last)
    more = f" ({len(lags)} episodes in all, listed below)" if len(lags) > 1 else ""
    return last.summary[0].upper() + last.summary[1:] + more


def _title(rows: list[RankRow], lags: list[RankLag]) -> str:
    if len(rows) < 2 or not lags:
        return f"No rank's input lagged the others' ({len(rows)} rank{'s' if len(rows) != 1 else ''})"
    g = max(lags, key=lambda x: x.step_last)
    end = "the end" if g.to_end else f"{g.step_last:,}"
    return (f"Rank {g.rank}'s input lagged from step {g.step_first:,} to {end}: {g.cause or 'input'}, "
            f"{g.wait_share * 100:.0f} % waiting vs {g.others_share * 100:.0f} %")
