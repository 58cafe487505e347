"""Pure: a sweep's figures from its points (no I/O, no drawing). The ``sweep`` command (profiler/commands/sweep.py)
runs the points and calls these; the views are in profiler/render (sweep_terminal, sweep_html, sweep_plot).

- :func:`measured_interval`: a point's 95 % interval of samples/s over its measured steps (moving-block bootstrap).
- :func:`summarise`: what the first finished point predicts for every point (profiler/analysis/whatif.py), the
  prediction errors, and the best setting measured.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..thresholds import CONFIDENCE, RESAMPLES

if TYPE_CHECKING:  # annotations only: analysis takes the typed record
    from ..record import RunRecord


def measured_interval(rec: RunRecord, seed: int = 0) -> tuple[float, float] | None:
    """95 % interval of samples/s over the measured steps (moving-block bootstrap of consecutive steps)."""
    st = rec.timeline.get("steps") or {}
    m = np.asarray(st.get("measured") or [], dtype=bool)
    if m.size < 3:
        return None
    ws = np.asarray(st["wait_start"], dtype=float)
    nxt = np.append(ws[1:], np.asarray(st["compute_end"], dtype=float)[-1])
    period = (nxt - ws)[m]
    n = np.asarray(st["samples"], dtype=float)[m]
    if period.size < 3 or period.sum() <= 0:
        return None
    # Moving-block bootstrap: with workers, batches arrive in bursts (a queued batch's step takes ~0 s, the next one
    # waits for all of them), so single steps are not independent; blocks of ~sqrt(n) consecutive steps keep a burst
    # together, and resampling single steps would make the interval several times too wide.
    rng = np.random.default_rng(seed)
    n_steps = period.size
    block = max(2, min(n_steps, int(round(np.sqrt(n_steps)))))
    k = -(-n_steps // block)
    starts = rng.integers(0, n_steps - block + 1, size=(RESAMPLES, k))
    idx = (starts[:, :, None] + np.arange(block)).reshape(RESAMPLES, k * block)[:, :n_steps]
    rates = n[idx].sum(axis=1) / np.maximum(period[idx].sum(axis=1), 1e-12)
    lo, hi = np.percentile(rates, [(1 - CONFIDENCE) / 2 * 100, (1 + CONFIDENCE) / 2 * 100])
    point = n.sum() / period.sum()
    x = float((rec.throughput or {}).get("samples_per_s") or point)
    return float(lo / point * x), float(hi / point * x)  # the interval around the window's own figure


def summarise(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Predictions from the first finished point for every finished point (written into each point: predicted_*,
    assumption, error), and the summary: the baseline, the median absolute error, the best setting."""
    from .whatif import predict_setting, rates_from_dict

    done = [p for p in points if p.get("measured_samples_per_s")]
    base = next((p for p in done if p.get("inputs")), None)
    errors = []
    if base is not None:
        r = rates_from_dict(base["inputs"])
        lo_hi = base.get("interval")
        rel = ((lo_hi[0] / base["measured_samples_per_s"], lo_hi[1] / base["measured_samples_per_s"])
               if lo_hi else None)
        for p in done:
            s = p["setting"]
            pred = predict_setting(r, workers=s.get("--workers"), batch_size=s.get("--batch-size"),
                                   storage=s.get("--storage"), cache=s.get("--cache"),
                                   mechanism=p.get("throttle_mechanism"))
            p["predicted_samples_per_s"] = pred["samples_per_s"]
            p["predicted_binds"] = pred["binds"]
            p["assumption"] = pred["assumption"]
            p["predicted_interval"] = [round(pred["samples_per_s"] * rel[0], 3),
                                       round(pred["samples_per_s"] * rel[1], 3)] if rel else None
            if p is not base:
                err = (pred["samples_per_s"] - p["measured_samples_per_s"]) / p["measured_samples_per_s"]
                p["error"] = round(err, 4)
                errors.append(abs(err))
    best = max(done, key=lambda p: p["measured_samples_per_s"]) if done else None
    return {"baseline": base["index"] if base else None,
            "median_abs_error": round(float(np.median(errors)), 4) if errors else None,
            "best": {"index": best["index"], "label": best["label"],
                     "samples_per_s": best["measured_samples_per_s"]} if best else None}
