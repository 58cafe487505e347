"""The terminal's default summary: the answer in about 30 lines, every detail one flag away (``--details``).

Why short: the full summary (terminal.py ``print_details``: banner, stage table, cause table, own cost, ceilings,
a 12-row what-if table, recommendations and findings in full) runs to ~130 lines at 80 columns, and the answer
scrolls away. Here: the headline (analysis/headline.py, the page's h1 too), the key figures, one stage line, idle
by cause, what would help, the top recommendations, each finding on one line, and where the report is.

Layout rules: lines are words that rich wraps at spaces, never inside a word; a path (which cannot be broken
sensibly) is printed unwrapped on a line of its own; the width is the console's (a wide terminal uses its width).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..analysis.headline import headline, key_figures, no_change
from ..record.read import read
from .loader_facts import loader_lines
from .units import first_clause, ms, pct, printable, short_gain, stage_label, stage_order
from .whatif_rows import table_rows

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord

# Shown at most: recommendations (the page and --details have them all) and what-if settings (the best by change).
RECS_SHOWN = 3
WHATIF_SHOWN = 3
FINDINGS_SHOWN = 5
STYLE = {"compute": "green", "io": "red", "cpu": "red", "transfer": "yellow", "memory": "magenta"}


def _line(console: Console, text: str, style: str = "") -> None:
    """A line of plain words (no markup read from the record), wrapped at spaces to the console's width."""
    console.print(Text(printable(text), style=style), highlight=False)


def _one_line(console: Console, text: str, prefix: str = "", style: str = "") -> None:
    """``text`` cut at a word boundary to fit one line of the console (the whole is in --details and the page)."""
    room = max(console.width - len(prefix), 20)
    _line(console, prefix + first_clause(text, room) if len(text) > room else prefix + printable(text), style)


def stage_line(rec: RunRecord) -> str:
    """Mean time per observation of each stage, grouped by what one observation is (sample, batch, step)."""
    groups: dict[str, list[str]] = {}
    stages = read(rec).stages
    for name in stage_order(stages):
        s = stages[name]
        if not s.count or name in ("ready_ahead", "epoch_start"):
            continue
        label = stage_label(name).split(" (")[0]  # the short label: "read", "decode", "transfer"
        groups.setdefault(str(s.per or "step"), []).append(f"{label} {ms(s.mean_ms)}")
    parts = [f"per {per}: " + ", ".join(v) for per, v in groups.items()]
    return "Stages (mean ms) — " + "; ".join(parts) + "." if parts else "Stages: none measured."


def idle_line(rec: RunRecord) -> str:
    r = read(rec)
    st = r.stall
    idle, window = float(st.seconds), float(r.window.seconds)
    if not rec.window_steps:
        return "Idle: not measured (no measured step)."
    by = {k: float(v) for k, v in st.by_cause.items() if idle > 0 and float(v) / idle >= 0.005}
    causes = ", ".join(f"{k} {pct(v / idle, 0)}" for k, v in sorted(by.items(), key=lambda kv: -kv[1])) \
        if idle > 0 else ""
    return (f"Idle {idle:.2f} s of {window:.2f} s ({pct(st.fraction, 1)})"
            + (f", by cause: {causes}." if causes else ": the compute device never waited for input."))


def whatif_lines(rec: RunRecord) -> list[str]:
    """The slowest stage alone, and the predicted settings with the largest gain (short labels)."""
    c = read(rec).ceilings
    out = []
    low = next((r for r in c.row_views if r.stage == c.lowest), None)
    if low:
        out.append(f"Slowest stage alone: {low.stage}, {low.samples_per_s:,.0f} samples/s ({low.basis}).")
    rows, _, _ = table_rows(rec)
    best = sorted((r for r in rows if r["change"] not in ("—", "±0 %") and r["change"].startswith("+")),
                  key=lambda r: -float(r["change"].rstrip(" %")))[:WHATIF_SHOWN]
    if best:
        out.append("Predicted (samples/s, 95 % interval): " + "; ".join(
            f"{r['setting']} {r['sps']} {r['change']}, then {r['label']}" for r in best) + ".")
    elif rows:
        out.append(f"Predicted: none of the {len(rows)} settings of the what-if gains (report.html: What would help).")
    return out


def figures_line(rec: RunRecord) -> str:
    """The key figures (the page's cards) on one line: "152 samples/s · 1.8 % waiting for input · 2 workers × batch
    32 · window 6.3 s (30 steps, 5 warm-up) · tiny (model, train mode, on the CPU)"."""
    f = key_figures(rec)
    if not rec.window_steps:
        return " · ".join(f"{x.value} ({x.label})" for x in f)
    workers, _, batch = f[2].value.partition(" × ")
    plural = "" if workers == "1" else "s"
    parts = [f[0].value, f"{f[1].value} waiting for input", f"{workers} worker{plural} × batch {batch}",
             f"window {f[3].value} ({f[3].label.split(': ', 1)[-1]})"]
    parts += [f"{x.value} ({x.label})" for x in f[4:]]
    return " · ".join(parts)


def print_short(rec: RunRecord, console: Console, out_files: list[str] | None = None) -> None:
    r = read(rec)
    v = r.verdict
    style = STYLE.get(v.bottleneck or "", "")
    if rec.partial:
        _line(console, f"PARTIAL RUN: {rec.partial_reason or 'the run did not finish'}.", "bold red")
    _line(console, headline(rec), f"bold {style}".strip())
    _line(console, figures_line(rec))
    lines = loader_lines(rec)
    if lines:
        _one_line(console, lines[0])
        if len(lines) > 1 and not lines[1].startswith("No other"):  # a loader not profiled (a sanity check, validation)
            _one_line(console, lines[1])
    _line(console, stage_line(rec))
    _line(console, idle_line(rec))
    prof = r.stall.profiler
    if prof.measured:  # said apart from the job's figures, as in --details (terminal.py own_cost_line)
        _line(console, f"Profiler's own time: {pct(prof.share_of_window, 1)} of the window, not the job's.")
    for text in whatif_lines(rec):
        _line(console, text)
    notices = r.whatif.steadiness.notices
    if notices:
        more = len(notices) - 1
        _one_line(console, f"Unsteady baseline, intervals widened: {notices[0]}"
                  + (f" (and {more} more)" if more else ""), "! ")
    recs = v.recommendations
    if recs:
        _line(console, "Recommendations:", "bold")
        grid = Table.grid(padding=(0, 1))  # a hanging indent: a wrapped action stays right of its number
        grid.add_column(justify="right", no_wrap=True)
        grid.add_column()
        for i, rv in enumerate(recs[:RECS_SHOWN], 1):
            grid.add_row(f"{i}.", Text(printable(str(rv.action))))
            if rv.expected_gain:
                grid.add_row("", Text("expected: " + printable(short_gain(rv.expected_gain,
                                                                          max(console.width - 14, 40)))))
        console.print(grid, highlight=False)
        if len(recs) > RECS_SHOWN:
            _line(console, f"    and {len(recs) - RECS_SHOWN} more (--details, report.html)")
    else:  # said, not left out: a run that waited 99 % with no advice needs the reason
        _line(console, "No change recommended: " + no_change(rec))
    findings = [f.message for f in r.findings]
    for f in findings[:FINDINGS_SHOWN]:
        _one_line(console, str(f or ""), "! ", "")
    if len(findings) > FINDINGS_SHOWN:
        _line(console, f"! and {len(findings) - FINDINGS_SHOWN} more findings (--details, report.html)")
    skipped = rec.skipped
    if skipped["count"]:
        _one_line(console, f"Skipped files: {skipped['count']} could not be read or decoded (listed in report.html)")
    page = next((f for f in out_files or [] if f.endswith("report.html")), None)
    where = page or next(iter(out_files or []), None)
    if where:
        _line(console, "Report (every table, plot and assumption; --details prints them here):")
        console.print(Text(printable(where)), soft_wrap=True, highlight=False)  # a path is never broken
