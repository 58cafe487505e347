"""Pure: which ranks held the others up, and why; the sentences that say so. No I/O.

The rule (thresholds in profiler/thresholds.py, each with its reason). A rank that holds the others up waits least in
the collectives (they wait for it in every all-reduce). With many ranks "the rank that waited least" is always
someone, so a rank is a straggler only when:

1. its collective-wait share (of its step) is below the others' median by at least STRAGGLER_WAIT_SHARE, AND by more
   than STRAGGLER_SPREAD_K robust standard deviations of the others (1.4826 x their median absolute deviation);
2. consistently: at STRAGGLER_CONSISTENT_FROM of the aligned steps at least, its wait at that step is below the
   others' median at that step by STRAGGLER_WAIT_SHARE of its step;
3. and it has a cause of its own: its input wait beyond the others' (input-bound: its stall's leading cause), or
   its compute net of collective waits beyond theirs by STRAGGLER_WAIT_SHARE of its step (compute-bound). One that
   merely waited less is no straggler.

"The others" are the ranks not flagged by a first pass (each rank against the median of all the others, threshold
only), so that several stragglers do not hide each other in the spread. Stragglers that are every rank of one host
(SLOW_HOST_MIN_RANKS at least) are reported as a slow host: a slow node is a different fix from a slow rank.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import vocab
from ..thresholds import (
    MAD_TO_SIGMA,
    SLOW_HOST_MIN_RANKS,
    STRAGGLER_CONSISTENT_FROM,
    STRAGGLER_SPREAD_K,
    STRAGGLER_WAIT_SHARE,
)

NAMED_MAX = 8  # rank lists longer than this are said as a count (a sentence naming 1,023 ranks is unreadable)


def pct(x: float) -> str:
    return f"{x * 100:.0f} %"


def ranks_words(ranks: list[int]) -> str:
    if not ranks:
        return "no rank"
    if len(ranks) > NAMED_MAX:
        return f"{len(ranks)} ranks"
    nums = ", ".join(str(r) for r in ranks)
    return f"rank {nums}" if len(ranks) == 1 else f"ranks {nums}"


def _leave_one_out_median(x: np.ndarray) -> np.ndarray:
    """For each element, the median of all the others, from the sorted array: removing one element shifts each
    order statistic by at most one place (O(n log n), not n medians)."""
    n = len(x)
    order = np.argsort(x, kind="stable")
    srt = x[order]
    m = n - 1
    lo, hi = (m - 1) // 2, m // 2
    pos = np.empty(n, dtype=int)
    pos[order] = np.arange(n)
    a = np.where(lo >= pos, srt[np.minimum(lo + 1, n - 1)], srt[lo])
    b = np.where(hi >= pos, srt[np.minimum(hi + 1, n - 1)], srt[hi])
    return (a + b) / 2


def find(ranks: list[int], shares: np.ndarray, coll: np.ndarray, step: np.ndarray,
         rows: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """The stragglers, worst first. ``shares``: each rank's collective-wait share over the aligned steps; ``coll``,
    ``step``: rank x aligned step, seconds; ``rows``: rank -> its table row (input wait, stall, compute)."""
    n_ranks, n_steps = coll.shape if coll.ndim == 2 else (0, 0)
    if n_ranks < 2 or n_steps == 0:
        return []
    first = (_leave_one_out_median(shares) - shares) >= STRAGGLER_WAIT_SHARE
    others_mask = ~first if (~first).any() else np.ones(n_ranks, dtype=bool)
    ref = shares[others_mask]
    m = float(np.median(ref))
    sigma = MAD_TO_SIGMA * float(np.median(np.abs(ref - m)))
    bar = max(STRAGGLER_WAIT_SHARE, STRAGGLER_SPREAD_K * sigma)
    step_median = np.median(coll[others_mask], axis=0)
    found: list[dict[str, Any]] = []
    for i in np.nonzero(m - shares >= bar)[0]:
        below = (step_median - coll[i]) >= STRAGGLER_WAIT_SHARE * step[i]
        consistent = int(below.sum())
        if consistent < STRAGGLER_CONSISTENT_FROM * n_steps:
            continue
        found.append({"rank": ranks[i], "collective_share": round(float(shares[i]), 4),
                      "others_median_share": round(m, 4), "others_spread_share": round(sigma, 4),
                      "consistent_steps": f"{consistent} of {n_steps}"})
    found.sort(key=lambda s: s["collective_share"])
    flagged = {s["rank"] for s in found}
    others = [rows[r] for r in ranks if r not in flagged]
    waiting = [r["rank"] for r in others if (r.get("collective_share") or 0.0) >= STRAGGLER_WAIT_SHARE]
    waiting_share = (sum(rows[r]["collective_share"] or 0.0 for r in waiting) / len(waiting)) if waiting else 0.0
    out = []
    for s in found:
        cause = _cause(rows[s["rank"]], others)
        if cause is None or not waiting:
            continue
        s.update(cause, waiting_ranks=waiting, waiting_share=round(waiting_share, 4))
        s["sentence"] = sentence(s)
        out.append(s)
    return out


def _cause(row: dict[str, Any], others: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Input-bound (its stall's leading cause) or compute-bound (compute net of collective waits), else None."""
    if not others:
        return None
    mean_other_wait = sum(r.get("input_wait_share") or 0.0 for r in others) / len(others)
    input_excess = (row.get("input_wait_share") or 0.0) - mean_other_wait
    by = {k: float(v) for k, v in (row.get("stall_by_cause") or {}).items() if k != "other"}
    total = float(row.get("stall_s") or 0.0)
    if input_excess >= STRAGGLER_WAIT_SHARE and total > 0 and by and max(by.values()) > 0:
        cause = max(by, key=lambda k: by[k])
        return {"kind": "input", "cause": cause, "cause_share": round(by[cause] / total, 4),
                "input_wait_share": row.get("input_wait_share")}
    # compute_ms holds the all-reduce waits too (the waiting ranks' are longer by exactly what they waited), so
    # compare compute net of them: a rank that waited least but did not compute longer is no straggler.
    own_net = net_compute(row)
    others_net = sum(net_compute(r) for r in others) / len(others)
    if own_net - others_net < STRAGGLER_WAIT_SHARE * (row.get("step_ms") or 0.0):
        return None  # not materially longer (the same bar as the wait): contention noise, not a cause
    return {"kind": "compute", "cause": "compute", "compute_ms": round(own_net, 3),
            "others_compute_ms": round(others_net, 3)}


def net_compute(row: dict[str, Any]) -> float:
    """A rank's compute per step without its waits in collectives (ms)."""
    return (row.get("compute_ms") or 0.0) - (row.get("collective_share") or 0.0) * (row.get("step_ms") or 0.0)


def slow_hosts(stragglers: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hosts every one of whose ranks (SLOW_HOST_MIN_RANKS at least) is a straggler."""
    by_host: dict[str, list[int]] = {}
    node: dict[str, Any] = {}
    for r in rows:
        h = str(r.get("hostname"))
        by_host.setdefault(h, []).append(r["rank"])
        node[h] = r.get("group_rank")
    flagged = {s["rank"] for s in stragglers}
    causes = {s["rank"]: s["cause"] for s in stragglers}
    out = []
    for h, rs in sorted(by_host.items()):
        if len(rs) >= SLOW_HOST_MIN_RANKS and all(r in flagged for r in rs):
            cs = sorted({causes[r] for r in rs})
            out.append({"hostname": h, "node": node[h], "ranks": sorted(rs), "causes": cs,
                        "sentence": (f"host {h} (node {node[h]}; {ranks_words(sorted(rs))}) is slow as a whole "
                                     f"({', '.join(cs)}): every rank on it held the others up, so look at that "
                                     "node (its storage, CPU, network or thermal state) before at one rank's data")})
    return out


def sentence(st: dict[str, Any]) -> str:
    waiting = ranks_words(st["waiting_ranks"])
    their = "its" if len(st["waiting_ranks"]) == 1 else "their"
    tail = f"{waiting} waited {pct(st['waiting_share'])} of {their} step in the all-reduce for it"
    if st["kind"] == "input":
        cause = st["cause"]
        words = vocab.CAUSE[cause].words if cause in vocab.CAUSE else cause
        return (f"rank {st['rank']} is {cause}-bound: {pct(st['cause_share'])} of its input stall was {words} "
                f"(it waited for input {pct(st.get('input_wait_share') or 0.0)} of its step); {tail}.")
    return (f"rank {st['rank']} is the slowest to compute: its step's own compute (waits in collectives excluded) "
            f"took {st['compute_ms']:.0f} ms against {st['others_compute_ms']:.0f} ms on the others; {tail}.")
