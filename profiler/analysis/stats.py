"""Per-stage statistics from the record's timeline, measured window only (warm-up excluded)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import vocab


def describe(values_s: np.ndarray, per: str) -> dict[str, Any]:
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


@dataclass
class Tables:
    """The timeline as numpy columns, restricted to what the measured window used."""
    steps: dict[str, np.ndarray]  # measured steps only
    batches: dict[str, np.ndarray]  # all batches (warm-up too: attribution needs the workers' whole activity)
    spans: dict[str, np.ndarray]  # all dataset calls
    span_stages: dict[str, np.ndarray]  # named sub-stage self seconds per dataset call
    epochs: dict[str, np.ndarray]
    measured_batches: np.ndarray  # batch numbers received in measured steps
    tail: dict[str, Any] | None = None  # exact totals of the measured steps beyond the detail (timeline.tail)


def tables(timeline: dict[str, Any]) -> Tables:
    st = {k: np.asarray(v) for k, v in timeline["steps"].items()}
    m = st.get("measured")
    if m is not None and m.size:
        keep = m.astype(bool)
        st = {k: v[keep] for k, v in st.items()}
    bt = {k: np.asarray(v) for k, v in timeline.get("batches", {}).items()}
    raw_spans = dict(timeline.get("sample_spans", {}))
    stages = raw_spans.pop("stages", None) or {}
    sp = {k: np.asarray(v) for k, v in raw_spans.items()}
    ss = {k: np.asarray(v, dtype=float) for k, v in stages.items()}
    ep = {k: np.asarray(v) for k, v in (timeline.get("epochs") or {}).items()}
    return Tables(st, bt, sp, ss, ep, st.get("batch", np.array([], dtype=np.int64)), timeline.get("tail") or None)


def _asked_at(t: Tables, bt: dict[str, np.ndarray]) -> np.ndarray:
    """For each batch, when the main loop started waiting for it (its step's wait_start); received if unknown."""
    asked = bt["received"].astype(float).copy()
    pos = {int(b): i for i, b in enumerate(t.steps.get("batch", []))}
    for j, b in enumerate(bt["batch"]):
        i = pos.get(int(b))
        if i is not None:
            asked[j] = float(t.steps["wait_start"][i])
    return asked


def sample_stage_seconds(t: Tables) -> dict[str, np.ndarray]:
    """Self seconds per dataset call of each named sub-stage, plus ``getitem`` (the rest of the call), all rows."""
    sp = t.spans
    if sp.get("start") is None or not sp["start"].size:
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
    if sp.get("batch") is not None and sp["batch"].size:
        sel = np.isin(sp["batch"], t.measured_batches)
        for name, secs in sample_stage_seconds(t).items():
            v = secs[sel]
            # A named stage is observed in the calls where it occurred; getitem in every call.
            out[name] = v if name == "getitem" else v[v > 0]
        if "getitem" in out and not out["getitem"].any() and len(out) > 1:
            out.pop("getitem")
    if bt.get("batch") is not None and bt["batch"].size:
        sel = np.isin(bt["batch"], t.measured_batches)
        out["collate"] = (bt["collate_end"] - bt["collate_start"])[sel]
        # transfer: from the moment the batch was both finished and asked for, until the main process held it.
        # A batch finished before the main loop asked for it sat in the queue meanwhile: that is prefetch slack
        # (ready_ahead), not transfer cost, and counting it as transfer would blame IPC for a slow model.
        asked = _asked_at(t, bt)
        out["transfer"] = np.maximum(0.0, bt["received"] - np.maximum(bt["collate_end"], asked))[sel]
        out["ready_ahead"] = np.maximum(0.0, asked - bt["collate_end"])[sel]
    if st.get("wait_start") is not None and st["wait_start"].size:
        out["wait"] = st["wait_end"] - st["wait_start"]
        out["h2d"] = st["h2d_end"] - st["h2d_start"]
        out["compute"] = st["compute_end"] - st["h2d_end"]
    ep = t.epochs
    if ep.get("iter_start") is not None and ep["iter_start"].size:
        out["epoch_start"] = ep["first_batch"] - ep["iter_start"]
    return {k: np.asarray(out[k], dtype=float) for k in ordered(out)}


def stage_stats(t: Tables) -> dict[str, dict[str, Any]]:
    durations = stage_durations(t)
    out = {k: describe(v, vocab.stage(k).per) for k, v in durations.items()}
    if t.tail and t.tail.get("steps"):
        # Main-loop stages: count and total are exact over every measured step; the percentiles (and every worker
        # stage) describe the steps kept in detail.
        n = int(t.tail["steps"])
        for k, key in (("wait", "wait_s"), ("h2d", "h2d_s"), ("compute", "compute_s")):
            if k in out:
                s = out[k]
                s["count"] += n
                s["total_s"] = round(s["total_s"] + float(t.tail.get(key, 0.0)), 6)
                s["mean_ms"] = round(s["total_s"] / s["count"] * 1e3, 4) if s["count"] else 0.0
                s["percentiles_over"] = f"the first {int(t.tail.get('detail_steps', 0))} measured steps"
    sp = t.spans
    if "read" in out and sp.get("rchar") is not None and sp["rchar"].size:
        out["read"]["bytes"] = int(sp["rchar"][np.isin(sp["batch"], t.measured_batches)].sum())
    return out
