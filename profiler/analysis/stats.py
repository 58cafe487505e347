"""Per-stage statistics from the record's timeline, measured window only (warm-up excluded)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import vocab
from ..record.read import TailView, view

if TYPE_CHECKING:  # annotations only
    from ..record.schema import StageHistogram, StageStats, Timeline


def describe(values_s: np.ndarray, per: str) -> StageStats:
    """total_s, mean/p50/p95/p99/max in ms, count; NaN-free (empty → zeros)."""
    v = np.asarray(values_s, dtype=np.float64)
    if v.size == 0:
        return {"per": per, "count": 0, "total_s": 0.0, "mean_ms": 0.0, "p50_ms": 0.0, "p95_ms": 0.0,
                "p99_ms": 0.0, "max_ms": 0.0}
    p50, p95, p99 = np.percentile(v, [50, 95, 99])
    return {"per": per, "count": int(v.size), "total_s": round(float(v.sum()), 6),
            "mean_ms": round(float(v.mean()) * 1e3, 4), "p50_ms": round(float(p50) * 1e3, 4),
            "p95_ms": round(float(p95) * 1e3, 4), "p99_ms": round(float(p99) * 1e3, 4),
            "max_ms": round(float(v.max()) * 1e3, 4)}


# latency.png's bins: 39 log-spaced bins show the shape of a distribution (one mode or two, a long tail) at the size
# one panel of the figure has, and keep a record's 10-odd stage histograms to a few kB.
HISTOGRAM_BINS = 39


def histogram(values_s: np.ndarray) -> StageHistogram:
    """The observations on log-spaced bins (ms), at least one decade wide so a log axis has labelled ticks; values
    under 1 µs share the lowest bin; 0 ms ones are counted apart."""
    v = np.asarray(values_s, dtype=np.float64) * 1e3
    pos = v[v > 0]
    zeros = int(v.size - pos.size)
    if pos.size == 0:
        return {"edges_ms": [], "counts": [], "zeros": zeros}
    lo, hi = max(float(pos.min()), 1e-3), max(float(pos.max()), 1e-3)
    if hi < lo * 10:
        mid = math.sqrt(lo * hi)
        lo, hi = mid / math.sqrt(10), mid * math.sqrt(10)
    edges = np.geomspace(lo, hi, HISTOGRAM_BINS + 1)
    counts, _ = np.histogram(np.clip(pos, lo, hi), bins=edges)
    return {"edges_ms": [float(f"{e:.6g}") for e in edges], "counts": [int(c) for c in counts], "zeros": zeros}


@dataclass
class Tables:
    """The timeline as numpy columns, restricted to what the measured window used."""
    steps: dict[str, np.ndarray]  # measured steps only
    batches: dict[str, np.ndarray]  # all batches (warm-up too: attribution needs the workers' whole activity)
    spans: dict[str, np.ndarray]  # all dataset calls
    span_stages: dict[str, np.ndarray]  # named sub-stage self seconds per dataset call
    epochs: dict[str, np.ndarray]
    measured_batches: np.ndarray  # batch numbers received in measured steps
    tail: TailView | None = None  # exact totals of the measured steps beyond the detail (timeline.tail)


def tables(timeline: Timeline) -> Tables:
    st = {k: np.asarray(v) for k, v in timeline["steps"].items()}
    m = st["measured"]
    if m is not None and m.size:
        keep = m.astype(bool)
        st = {k: v[keep] for k, v in st.items()}
    bt = {k: np.asarray(v) for k, v in timeline["batches"].items()}
    raw_spans = timeline["sample_spans"]
    sp = {k: np.asarray(v) for k, v in raw_spans.items() if k != "stages"}
    ss = {k: np.asarray(v, dtype=float) for k, v in raw_spans["stages"].items()}
    ep = {k: np.asarray(v) for k, v in timeline["epochs"].items()}
    tail = timeline["tail"] if "tail" in timeline else None
    return Tables(st, bt, sp, ss, ep, st["batch"],
                  view(TailView, tail) if tail else None)


def _asked_at(t: Tables, bt: dict[str, np.ndarray]) -> np.ndarray:
    """For each batch, when the main loop started waiting for it (its step's wait_start); received if unknown."""
    asked = bt["received"].astype(float).copy()
    pos = {int(b): i for i, b in enumerate(t.steps["batch"])}
    for j, b in enumerate(bt["batch"]):
        i = pos.get(int(b))
        if i is not None:
            asked[j] = float(t.steps["wait_start"][i])
    return asked


def sample_stage_seconds(t: Tables) -> dict[str, np.ndarray]:
    """Self seconds per dataset call of each named sub-stage, plus ``getitem`` (the rest of the call), all rows."""
    sp = t.spans
    if not sp["start"].size:
        return {}
    wall = np.maximum(sp["end"].astype(float) - sp["start"].astype(float), 0.0)
    out = {k: np.minimum(np.maximum(v, 0.0), wall) for k, v in t.span_stages.items() if v.size == wall.size}
    named = sum(out.values()) if out else np.zeros_like(wall)
    out["getitem"] = np.maximum(wall - named, 0.0)
    return out


def ordered(names: Any) -> list[str]:
    """Stage names in the registry's pipeline order; names beyond the registry after the sample stages."""
    names = list(dict.fromkeys(names))
    known = [s.name for s in vocab.STAGES if s.name in names]
    extra = sorted(n for n in names if n not in vocab.STAGE)
    pos = len([k for k in known if vocab.STAGE[k].per == "sample"])
    return known[:pos] + extra + known[pos:]


def stage_durations(t: Tables) -> dict[str, np.ndarray]:
    """Seconds per observation of every stage, measured window only: the one definition that the statistics, the
    latency plots and the comparison all use."""
    out: dict[str, np.ndarray] = {}
    sp, bt, st = t.spans, t.batches, t.steps
    if sp["batch"].size:
        sel = np.isin(sp["batch"], t.measured_batches)
        # One observation per sample: a call that returned k samples (``__getitems__``, a batching iterable) gives
        # k observations of its time / k, so a per-sample stage is per sample and its total stays the calls' total.
        items = sp["items"]
        k = np.maximum(np.asarray(items)[sel], 1).astype(np.int64) if items is not None and items.size == sel.size \
            else None
        for name, secs in sample_stage_seconds(t).items():
            v = secs[sel]
            if k is not None and (k > 1).any():
                v = np.repeat(v / k, k)
            # A named stage is observed in the calls where it occurred; getitem in every call.
            out[name] = v if name == "getitem" else v[v > 0]
        if "getitem" in out and not out["getitem"].any() and len(out) > 1:
            out.pop("getitem")
    if bt["batch"].size:
        sel = np.isin(bt["batch"], t.measured_batches)
        out["collate"] = (bt["collate_end"] - bt["collate_start"])[sel]
        # transfer: from the moment the batch was both finished and asked for, until the main process held it.
        # A batch finished before the main loop asked for it sat in the queue meanwhile: that is prefetch slack
        # (ready_ahead), not transfer cost, and counting it as transfer would blame IPC for a slow model.
        # Only batches a worker made (worker >= 0): one made in the main process (num_workers=0) crossed no queue, and
        # what lies between its collate and its delivery is the DataLoader's own code in the wait, not a transfer
        # (the stage table said "transfer (worker → main)" for a loader with no workers).
        queued = sel & (bt["worker"] >= 0)
        if queued.any():
            asked = _asked_at(t, bt)
            out["transfer"] = np.maximum(0.0, bt["received"] - np.maximum(bt["collate_end"], asked))[queued]
            out["ready_ahead"] = np.maximum(0.0, asked - bt["collate_end"])[queued]
    if st["wait_start"].size:
        out["wait"] = st["wait_end"] - st["wait_start"]
        out["h2d"] = st["h2d_end"] - st["h2d_start"]
        out["compute"] = st["compute_end"] - st["h2d_end"]
    ep = t.epochs
    if ep["iter_start"].size:
        out["epoch_start"] = ep["first_batch"] - ep["iter_start"]
    return {k: np.asarray(out[k], dtype=float) for k in ordered(out)}


def stage_stats(t: Tables) -> dict[str, StageStats]:
    durations = stage_durations(t)
    out = {k: describe(v, vocab.stage(k).per) for k, v in durations.items()}
    for k, v in durations.items():
        out[k]["histogram"] = histogram(v)
    if t.tail is not None and t.tail.steps:
        # Main-loop stages: count and total are exact over every measured step; the percentiles (and every worker
        # stage) describe the steps kept in detail.
        n = int(t.tail.steps)
        tail_s = {"wait": t.tail.wait_s, "h2d": t.tail.h2d_s, "compute": t.tail.compute_s}
        for k, extra_s in tail_s.items():
            if k in out:
                s = out[k]
                s["count"] += n
                s["total_s"] = round(s["total_s"] + float(extra_s), 6)
                s["mean_ms"] = round(s["total_s"] / s["count"] * 1e3, 4) if s["count"] else 0.0
                s["percentiles_over"] = f"the first {int(t.tail.detail_steps)} measured steps"
    sp = t.spans
    if "read" in out and sp["rchar"].size:
        out["read"]["bytes"] = int(sp["rchar"][np.isin(sp["batch"], t.measured_batches)].sum())
    return out


def block_bootstrap_rate(samples: np.ndarray, period: np.ndarray, seed: int = 0,
                         resamples: int | None = None) -> np.ndarray | None:
    """Resampled samples/s of consecutive steps, each draw divided by the point figure (so 1.0 = as measured).

    Moving-block bootstrap: with workers, batches arrive in bursts (a queued batch's step takes ~0 s, the next one
    waits for all of them), so single steps are not independent; blocks of ~sqrt(n) consecutive steps keep a burst
    together, and resampling single steps would make the interval several times too wide. The one home of this
    resampling: the sweep's measured intervals and the what-if's baseline spread both use it. None below 3 steps.
    """
    from ..thresholds import RESAMPLES

    period = np.asarray(period, dtype=float)
    n = np.asarray(samples, dtype=float)
    if period.size < 3 or period.size != n.size or period.sum() <= 0:
        return None
    reps = resamples or RESAMPLES
    rng = np.random.default_rng(seed)
    n_steps = period.size
    block = max(2, min(n_steps, int(round(np.sqrt(n_steps)))))
    k = -(-n_steps // block)
    starts = rng.integers(0, n_steps - block + 1, size=(reps, k))
    idx = (starts[:, :, None] + np.arange(block)).reshape(reps, k * block)[:, :n_steps]
    rates = n[idx].sum(axis=1) / np.maximum(period[idx].sum(axis=1), 1e-12)
    return rates / (n.sum() / period.sum())


def step_periods(steps: Any, measured_only: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(samples, seconds) of each step, a step being one wait_start to the next (the last to its compute end)."""
    ws = np.asarray(steps.get("wait_start") or [], dtype=float)
    if ws.size == 0:
        return np.zeros(0), np.zeros(0)
    nxt = np.append(ws[1:], np.asarray(steps["compute_end"], dtype=float)[-1])
    period = nxt - ws
    n = np.asarray(steps["samples"], dtype=float)
    if measured_only and steps.get("measured") is not None and len(steps["measured"]) == ws.size:
        m = np.asarray(steps["measured"], dtype=bool)
        return n[m], period[m]
    return n, period
