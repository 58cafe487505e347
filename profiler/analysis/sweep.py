"""Pure: a sweep's figures from its points (no I/O, no drawing). The ``sweep`` command (profiler/commands/sweep.py)
runs the points and calls these; the views are in profiler/render (sweep_terminal, sweep_html, sweep_plot).

- :func:`measured_interval`: a point's 95 % interval of samples/s over its measured steps (moving-block bootstrap).
- :func:`summarise`: what the first finished point predicts for every point (profiler/analysis/whatif.py), the
  prediction errors, and the best setting measured.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..record.read import ThroughputView, view
from ..thresholds import CONFIDENCE
from .stats import block_bootstrap_rate, step_periods

if TYPE_CHECKING:  # annotations only: analysis takes the typed record
    from ..record import RunRecord


def measured_interval(rec: RunRecord, seed: int = 0) -> tuple[float, float] | None:
    """95 % interval of samples/s over the measured steps (moving-block bootstrap of consecutive steps)."""
    n, period = step_periods(rec.timeline["steps"])
    rel = block_bootstrap_rate(n, period, seed)
    if rel is None:
        return None
    point = n.sum() / period.sum()
    lo, hi = np.percentile(rel * point, [(1 - CONFIDENCE) / 2 * 100, (1 + CONFIDENCE) / 2 * 100])
    # the sweep hands a stand-in holding only some sections (commands/sweep.py): read the one needed
    x = float(view(ThroughputView, rec.throughput).samples_per_s or point)
    return float(lo / point * x), float(hi / point * x)  # the interval around the window's own figure


def summarise(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Predictions from the first finished point for every finished point (written into each point: predicted_*,
    assumption, error), and the summary: the baseline, the median absolute error, the best setting."""
    from .whatif import predict_setting, rates_from_dict

    done = [p for p in points if p.get("measured_samples_per_s")]
    base = next((p for p in done if p.get("inputs")), None)
    errors = []
    inside: list[bool] = []
    if base is not None:
        r = rates_from_dict(base["inputs"])
        for p in done:
            s = p["setting"]
            pred = predict_setting(r, workers=s.get("--workers"), batch_size=s.get("--batch-size"),
                                   storage=s.get("--storage"), cache=s.get("--cache"),
                                   mechanism=p.get("throttle_mechanism"))
            p["predicted_samples_per_s"] = pred["samples_per_s"]
            p["predicted_binds"] = pred["binds"]
            p["assumption"] = pred["assumption"]
            p["predicted_interval"] = pred.get("interval")
            if p is not base and pred["samples_per_s"] is not None:
                err = (pred["samples_per_s"] - p["measured_samples_per_s"]) / p["measured_samples_per_s"]
                p["error"] = round(err, 4)
                errors.append(abs(err))
                iv = pred.get("interval")
                if iv:
                    p["inside_interval"] = bool(iv[0] <= p["measured_samples_per_s"] <= iv[1])
                    inside.append(p["inside_interval"])
    best = max(done, key=lambda p: p["measured_samples_per_s"]) if done else None
    return {"baseline": base["index"] if base else None,
            "median_abs_error": round(float(np.median(errors)), 4) if errors else None,
            # The share of predicted points whose measured samples/s fell inside the predicted interval.
            "coverage": round(sum(inside) / len(inside), 4) if inside else None,
            "best": {"index": best["index"], "label": best["label"],
                     "samples_per_s": best["measured_samples_per_s"]} if best else None}
