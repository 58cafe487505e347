"""Terminal views of ``attach``: what was found before sampling, and the summary of an attach record (rich).

Works from the record alone (after analysis) and the discovery's result; measures nothing.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from ..analysis.headline import attach_headline
from ..record.read import AttachView, read
from ..record.read import view as section_view
from ..redact import redact_argv
from .units import markup, pct, stage_label

if TYPE_CHECKING:
    from ..attach.discover import Target
    from ..record import RunRecord

#: The report files an attach record cannot have, and why (said in the terminal and the page).
NOT_DRAWN: dict[str, str] = {
    "timeline.png": "no per-step timeline: stacks are sampled, not timed",
    "latency.png": "no per-batch latencies from outside",
    "utilisation.png": "attach keeps totals over the window, not time series",
    "what_would_help.png": "the what-if model needs per-sample timings",
    "trace.json": "no spans to lay on a timeline",
}


def _cmd(argv: list[str], width: int = 90) -> str:
    text = " ".join(redact_argv(argv))
    return text if len(text) <= width else text[:width - 1] + "…"


def print_found(t: Target, console: Console, duration_s: float, rate_hz: int) -> None:
    """Name the job's parts before sampling starts."""
    given = f" (given {t.given_pid}, a DataLoader worker)" if t.given_pid != t.pid else ""
    console.print(f"[bold]attach[/] to process {t.pid}{given}: {markup(_cmd(t.cmdline))}")
    w = t.workers
    methods = ", ".join(sorted({p.start_method or "?" for p in w}))
    console.print(f"  DataLoader workers: {len(w)}" + (f" ({methods}): " + ", ".join(str(p.pid) for p in w)
                                                        if w else " (none seen: workers = 0, or between epochs)"))
    others = [p for p in t.processes if p.role in ("child", "forkserver")]
    if others:
        console.print("  other children: " + ", ".join(f"{p.pid} ({markup(p.what or p.role)})" for p in others))
    console.print(f"  pin-memory thread: {t.pin_memory_tid if t.pin_memory_tid else 'none'}")
    if t.ranks:
        sib = ", ".join(f"{s['pid']} (rank {s['rank']})" for s in t.siblings) or "none"
        console.print(f"  torchrun rank {t.ranks.get('RANK', '?')} of {t.ranks.get('WORLD_SIZE', '?')}; "
                      f"sibling ranks: {sib}")
    if t.gpus:
        console.print("  GPU: " + ", ".join(f"{g['index']} {markup(g['name'])}" for g in t.gpus))
    else:
        console.print(f"  GPU: none ({markup(t.gpu_absent or 'not found')})")
    console.print(f"  sampling {duration_s:g} s at {rate_hz} Hz with py-spy (non-blocking; Ctrl-C stops early)")


def print_attach(rec: RunRecord, console: Console, files: list[str]) -> None:
    r = read(rec)
    a, v = section_view(AttachView, rec.attach), r.verdict
    style = {"compute": "green", "io": "red", "cpu": "red", "transfer": "yellow"}.get(str(v.bottleneck), "")
    partial = f" [yellow](partial: {markup(rec.partial_reason)})[/]" if rec.partial else ""
    console.print(f"\n[bold {style}]{markup(attach_headline(rec))}[/]{partial}")  # the answer first
    console.print(f"{markup('?' if v.bottleneck is None else v.bottleneck)}: {markup(v.summary)}")
    console.print(f"sampled {a.seconds or 0:.1f} s of process {a.target.pid} at {a.sampler.rate_hz} Hz: "
                  f"{a.sampler.samples or 0} stack samples ({a.sampler.errors} unreadable), stopped by {a.stopped_by}")
    t = Table(title="where the sampled time went (share of the side's samples, 95 % interval)", title_justify="left")
    for col in ("stage", "side", "share", "95 % interval", "samples", "≈ seconds"):
        t.add_column(col, justify="left" if col in ("stage", "side") else "right")
    for name, s in sorted(r.stages.items(), key=lambda kv: (kv[1].per != "main", -(kv[1].share or 0))):
        label = {"idle": "idle (waiting for an index / nothing to send)", "wait": "wait for batch (main)",
                 "compute": "compute (main, outside the DataLoader)"}.get(name) or stage_label(name)
        t.add_row(markup(label), str(s.per), pct(s.share), f"{pct(s.share_low)}–{pct(s.share_high)}", str(s.count),
                  f"{s.total_s:.2f}")
    console.print(t)
    by = r.stall.share_by_cause
    if r.stall.seconds:
        console.print("wait by cause: " + ", ".join(f"{k} {pct(by.get(k, 0))}" for k in ("io", "cpu", "transfer",
                                                                                          "other")))
    for x in v.recommendations:
        console.print(f"  → [bold]{markup(x.action)}[/]: {markup(x.reason)}")
    console.print("not measured from outside: " + ", ".join(sorted(a.absent)))
    if files:
        console.print("Wrote: " + ", ".join(markup(f) for f in files))


def print_attach_comparison(c: dict[str, Any], console: Console, files: list[str]) -> None:
    t = Table(title="compare (an attach record: sampled shares)", title_justify="left")
    t.add_column("")
    for n, k in zip(c["names"], c["kinds"]):
        t.add_column(f"{markup(n)} ({k})", justify="right")
    for r in c["rows"]:
        vals = []
        for v in r["values"]:
            if v is None:
                vals.append("—")
            elif isinstance(v, str):
                vals.append(markup(v))
            elif r["key"] in ("throughput", "window_s"):
                vals.append(f"{v:.1f}")
            else:
                vals.append(pct(v))
        t.add_row(markup(r["label"]), *vals)
    console.print(t)
    for d in c["differences"]:
        console.print(f"  • {markup(d)}")
    console.print(markup(c["note"]))
    if files:
        console.print("Wrote: " + ", ".join(markup(f) for f in files))


def print_attach_ranks(view: dict[str, Any], console: Any, files: list[str]) -> None:
    """--rank-of: one row per rank (its sampled input wait, the wait's causes, the derived collective wait, its
    verdict; * the straggler), then the sentence that names the straggler and how the figures were had."""
    from rich.table import Table

    from ..record.read_docs import ranks_view

    v = ranks_view(view)
    flagged = {s.rank for s in v.stragglers}
    t = Table(title=f"Ranks ({len(v.present)} of {v.world_size}), shares of the sampled window; * straggler")
    for h in ("rank", "input wait", "io / cpu of it", "collective (derived)", "verdict"):
        t.add_column(h, justify="right")
    for r in v.ranks:
        sh = r.stall_share_by_cause
        t.add_row(f"{r.rank}{' *' if r.rank in flagged else ''}", f"{(r.input_wait_share or 0) * 100:.0f} %",
                  f"{(sh.get('io') or 0) * 100:.0f} / {(sh.get('cpu') or 0) * 100:.0f} %",
                  f"{(r.collective_share or 0) * 100:.0f} %", str(r.bottleneck))
    console.print(t)
    console.print(v.summary, markup=False)
    console.print(f"How: {v.attach_note}.", markup=False)
    console.print("Wrote: " + ", ".join(files), markup=False)
