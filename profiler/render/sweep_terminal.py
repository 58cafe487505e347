"""The terminal view of ``python -m profiler sweep``: measured vs predicted per point, the best setting, the median
prediction error, the files written. Reads the sweep dict only (what sweep.json holds)."""
from __future__ import annotations

from typing import Any


def print_sweep(doc: dict[str, Any], console: Any, files: list[str]) -> None:
    from rich.table import Table
    from rich.text import Text

    from ..analysis.headline import sweep_headline
    from .units import printable

    console.print(Text(printable(sweep_headline(doc)), style="bold"), highlight=False)  # the answer first
    t = Table(title="sweep: measured vs predicted from the first point")
    for c in ("point", "measured samples/s", "predicted", "error", "would bind"):
        t.add_column(c)
    for p in doc["points"]:
        m = p.get("measured_samples_per_s")
        iv = p.get("interval")
        shown = (f"{m:.1f}" + (f" [{iv[0]:.1f}-{iv[1]:.1f}]" if iv else "")) if m else p.get("failed", "")
        t.add_row(p["label"], shown,
                  (f"≈ {p['predicted_samples_per_s']:.1f}" + (f" ({pi[0]:.1f}–{pi[1]:.1f})"
                   if (pi := p.get("predicted_interval")) else "")) if p.get("predicted_samples_per_s") else
                  ("not predicted" if p.get("predicted_binds") == "unknown" else ""),
                  "baseline" if p["index"] == doc.get("baseline") else
                  (f"{p['error'] * 100:+.0f} %" if p.get("error") is not None else ""),
                  p.get("predicted_binds", ""))
    console.print(t)
    if doc.get("best"):
        console.print(f"Best setting: {doc['best']['label']} ({doc['best']['samples_per_s']:.1f} samples/s)",
                      markup=False)
    if doc.get("median_abs_error") is not None:
        console.print(f"Median prediction error (from the first point): {doc['median_abs_error'] * 100:.0f} %",
                      markup=False)
    if doc.get("coverage") is not None:
        console.print(f"Measured inside the predicted interval: {doc['coverage'] * 100:.0f} % of the predicted points",
                      markup=False)
    if doc.get("interrupted"):
        console.print("Interrupted: the finished points are kept.", markup=False)
    console.print("Wrote: " + ", ".join(files), markup=False)
