"""The terminal view of ``python -m profiler sweep``: measured vs predicted per point, the best setting, the median
prediction error, the files written. Reads the sweep dict only (what sweep.json holds)."""
from __future__ import annotations

from typing import Any


def print_sweep(doc: dict[str, Any], console: Any, files: list[str]) -> None:
    from rich.table import Table
    from rich.text import Text

    from ..analysis.headline import sweep_headline
    from ..record.read_docs import sweep_view
    from .units import printable

    console.print(Text(printable(sweep_headline(doc)), style="bold"), highlight=False)  # the answer first
    t = Table(title="sweep: measured vs predicted from the first point")
    for c in ("point", "measured samples/s", "predicted", "error", "would bind"):
        t.add_column(c)
    sw = sweep_view(doc)
    for p in sw.points:
        m, iv, pi = p.measured_samples_per_s, p.interval, p.predicted_interval
        shown = (f"{m:.1f}" + (f" [{iv[0]:.1f}-{iv[1]:.1f}]" if iv else "")) if m else p.failed or ""
        t.add_row(p.label, shown,
                  (f"≈ {p.predicted_samples_per_s:.1f}" + (f" ({pi[0]:.1f}–{pi[1]:.1f})" if pi else ""))
                  if p.predicted_samples_per_s else ("not predicted" if p.predicted_binds == "unknown" else ""),
                  "baseline" if p.index == sw.baseline else (f"{p.error * 100:+.0f} %" if p.error is not None else ""),
                  p.predicted_binds or "")
    console.print(t)
    if sw.best:
        console.print(f"Best setting: {sw.best.label} ({sw.best.samples_per_s:.1f} samples/s)", markup=False)
    if sw.median_abs_error is not None:
        console.print(f"Median prediction error (from the first point): {sw.median_abs_error * 100:.0f} %",
                      markup=False)
    if sw.coverage is not None:
        console.print(f"Measured inside the predicted interval: {sw.coverage * 100:.0f} % of the predicted points",
                      markup=False)
    if sw.interrupted:
        console.print("Interrupted: the finished points are kept.", markup=False)
    console.print("Wrote: " + ", ".join(files), markup=False)
