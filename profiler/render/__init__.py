"""Renderers: terminal, PNG plots, self-contained HTML, Chrome/Perfetto trace. They read a RunRecord only."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPORT_FILES = ("where_time_went.png", "timeline.png", "utilisation.png", "latency.png", "trace.json", "report.html")


def write_reports(rec: Any, out_dir: str | Path) -> list[Path]:
    """Write every file renderer's output for ``rec`` (analysed) into ``out_dir``; returns the paths written.

    One renderer failing (a plot on an odd record) must not cost the others: the run's measurements are already in
    run.json, and the HTML says which plot is missing and why. The failure is also printed to stderr.
    """
    from . import html, plots, trace

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    images: dict[str, Any] = {}
    fns = {"where_time_went": plots.plot_where_time_went, "timeline": plots.plot_timeline,
           "utilisation": plots.plot_utilisation, "latency": plots.plot_latency}
    for key, fn in fns.items():
        try:
            images[key] = fn(rec, out / f"{key}.png")
            written.append(images[key])
        except Exception as e:  # noqa: BLE001 - reported, and the other files still get written
            images[key] = f"{type(e).__name__}: {e}"
            print(f"profiler: could not draw {key}.png ({images[key]})", file=sys.stderr)
    plan = trace.plan_detail(rec)
    try:
        written.append(trace.write_trace(rec, out / "trace.json", plan))
    except Exception as e:  # noqa: BLE001
        print(f"profiler: could not write trace.json ({type(e).__name__}: {e})", file=sys.stderr)
    written.append(html.write_html(rec, out / "report.html", images, plan))
    return written
