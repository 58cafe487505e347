"""Display rows of a comparison: the one row model of the terminal table (compare_terminal.py) and the HTML page
(compare_html.py).

Reads the dict of ``profiler.analysis.compare.compare`` only. Rows are computed once here so the terminal and the
HTML page can never disagree on a number or on what counts as significant.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..record.read_docs import Metric, comparison_view
from .units import ms, nbytes, pct, printable, seconds

# Metrics whose values are all zero or missing (h2d on a CPU run) say nothing; they are listed, not shown as rows.
ALWAYS_SHOWN = ("throughput", "verdict", "stall_seconds", "stall_fraction")
SHORT_TITLES = {"throughput": "throughput", "stall": "stall (idle)", "stages": "stages (ms)", "storage": "storage",
                "verdict": "verdict"}
GROUP_TITLES = {"throughput": "Throughput", "stall": "Idle compute device (stall)",
                "stages": "Stages (worker stages per sample or batch, main-loop stages per step)",
                "storage": "Storage", "verdict": "Verdict"}


def fmt_value(v: Any, unit: str) -> str:
    if v is None:
        return "—"
    if isinstance(v, str):
        return printable(v)
    if unit == "samples/s":
        return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"
    if unit == "fraction":
        return pct(v)
    if unit == "s":
        return seconds(v, 3 if abs(v) < 10 else 1)
    if unit == "ms":
        return ms(v)
    if unit == "bytes":
        return nbytes(v)
    return f"{v:.4g}"


def fmt_ratio(r: float | None) -> str:
    if r is None:
        return "—"
    return f"{r:.2f}x" if r < 10 else f"{r:.1f}x" if r < 100 else f"{r:.0f}x"


def fmt_diff(d: float, unit: str) -> str:
    sign = "+" if d >= 0 else "−"
    if unit == "fraction":
        return f"{sign}{abs(d) * 100:.1f} pt"
    if unit == "s":
        return sign + seconds(abs(d), 3 if abs(d) < 1 else 2)
    if unit == "ms":
        return f"{sign}{ms(abs(d))} ms"
    if unit == "bytes":
        return sign + fmt_value(abs(d), "bytes")
    return f"{sign}{abs(d):.3g}"


@dataclass
class Cell:
    value: str
    ratio: str = ""
    interval: str = ""
    significant: bool | None = None
    direction: str = ""  # "better" | "worse" | "" (for color only)


@dataclass
class Row:
    key: str
    label: str
    group: str
    unit: str
    cells: list[Cell] = field(default_factory=list)


def _vs_cell(m: Metric, i: int) -> Cell:
    val = fmt_value(m.values[i], m.unit)
    vs = m.versus(i)
    if i == 0 or vs is None:
        return Cell(val)
    if m.key == "verdict":
        return Cell(val, "changed" if vs.changed else "same")
    ratio = fmt_ratio(vs.ratio)
    # A ratio of hit rates (0.00x) reads worse than the change in points; metrics can ask for the difference.
    if (vs.ratio is None or m.show == "difference") and vs.difference is not None:
        ratio = "=" if vs.difference == 0 else "Δ " + fmt_diff(vs.difference, m.unit)
    ci = vs.ci
    if ci is None:
        interval = "n/a" if vs.test is None and m.group == "storage" else "—"
    elif vs.test == "ratio":
        interval = f"{fmt_ratio(ci[0])[:-1]}–{fmt_ratio(ci[1])}"
    else:
        lo, hi = fmt_diff(ci[0], m.unit), fmt_diff(ci[1], m.unit)
        interval = f"{lo.split(' ')[0]}…{hi}" if lo.split(" ")[1:] == hi.split(" ")[1:] else f"{lo}…{hi}"
    direction = ""
    hib = m.higher_is_better
    if vs.significant and ci is not None and hib is not None:
        up = (ci[0] > 1.0) if vs.test == "ratio" else (ci[0] > 0.0)
        direction = "better" if up == hib else "worse"
    return Cell(val, ratio, interval, vs.significant, direction)


def rows(comparison: dict[str, Any]) -> tuple[list[Row], list[str]]:
    """(rows to show, labels of metrics left out because every run's value is zero or missing)."""
    out: list[Row] = []
    omitted: list[str] = []
    for m in comparison_view(comparison).metrics:
        if m.key not in ALWAYS_SHOWN and all(v in (None, 0, 0.0) for v in m.values):
            omitted.append(printable(m.label))
            continue
        out.append(Row(m.key, printable(m.label), m.group, m.unit, [_vs_cell(m, i) for i in range(len(m.values))]))
    return out, omitted


def groups(shown: list[Row]) -> list[tuple[str, list[Row]]]:
    """Consecutive rows of one group, in order: the sections of both tables."""
    out: list[tuple[str, list[Row]]] = []
    for r in shown:
        if not out or out[-1][0] != r.group:
            out.append((r.group, []))
        out[-1][1].append(r)
    return out
