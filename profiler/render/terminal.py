"""Terminal renderer (rich): the live progress bar during a run, and the verdict, stage table and recommendations.

Works from a RunRecord alone (after analysis); measures nothing.
"""
from __future__ import annotations

import time
from types import TracebackType
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ..analysis.headline import headline
from ..record.read import SkippedFileView, read, view
from .loader_facts import loader_lines
from .units import markup, ms, nbytes, pct, printable, stage_label, stage_order

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord

BOTTLENECK_STYLE = {"compute": "green", "io": "red", "cpu": "red", "transfer": "yellow", "memory": "magenta"}


# How often the live progress bar is redrawn, from the job's own loop. Why 4 Hz and not rich's own refresh thread:
# that thread takes the GIL ten times a second from a loop that releases it at every torch op, and each handover
# costs the job far more than drawing (a sampler thread that wakes at 10 Hz measured ~2 ms of CPU per wake on a
# torch loop); 4 Hz still reads as live, and one redraw (~1 ms) lands in a step's profiler_rest, never in its wait.
PROGRESS_REDRAW_S = 0.25


class LiveProgress:
    """Steps, samples/s and the current wait share. Each step only adds to counters (a few attribute updates); the
    bar is redrawn from the job's loop at most every PROGRESS_REDRAW_S (no refresh thread: see there)."""

    def __init__(self, total_steps: int, console: Console | None = None, enabled: bool = True):
        self.enabled = enabled
        self.samples = 0
        self.wait_ns = 0
        self.t_start: int | None = None
        self.done = 0  # steps since the last redraw
        self.measuring = False
        self.next_draw_ns = 0
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[wait]}"), TimeElapsedColumn(),
            console=console, transient=False, disable=not enabled, auto_refresh=False,
        )
        self.task = self.progress.add_task("warm-up", total=total_steps, rate="", wait="")

    def __enter__(self) -> "LiveProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.enabled and self.done:
            self._draw(time.perf_counter_ns())
        self.progress.__exit__(exc_type, exc, tb)

    def on_step(self, measured: bool, wait_start_ns: int, wait_end_ns: int, n_samples: int) -> None:
        """A step's batch arrived (Session.on_step: plain ints, so that a step the session keeps flat needs no row)."""
        if not self.enabled:
            return
        self.done += 1
        if measured:
            if self.t_start is None:
                self.t_start = wait_start_ns
            self.measuring = True
            self.samples += n_samples
            self.wait_ns += wait_end_ns - wait_start_ns
        now = time.perf_counter_ns()
        if now >= self.next_draw_ns:
            self._draw(now)

    def _draw(self, now: int) -> None:
        self.next_draw_ns = now + int(PROGRESS_REDRAW_S * 1e9)
        fields: dict[str, Any] = {}
        if self.measuring and self.t_start is not None:
            el = (now - self.t_start) / 1e9
            fields = {"description": "measuring",
                      "rate": f"{self.samples / el:7.1f} samples/s" if el > 0 else "",
                      "wait": f"wait {100 * self.wait_ns / 1e9 / el:4.0f} %" if el > 0 else ""}
        self.progress.update(self.task, advance=self.done, **fields)
        self.done = 0
        self.progress.refresh()


def stage_table(rec: RunRecord) -> Table:
    t = Table(title="Stages (measured window; worker stages per sample or batch, main-loop stages per step)",
              title_justify="left")
    stages = read(rec).stages
    # The stage column is at least its longest word wide: at 80 columns rich would otherwise cut "(iter(loader))".
    longest = max((len(w) for n in stages for w in printable(stage_label(n)).split()), default=5)
    for col in ("stage", "per", "count", "total s", "mean ms", "p50 ms", "p95 ms", "p99 ms"):
        t.add_column(col, justify="left" if col in ("stage", "per") else "right",
                     min_width=min(longest, 24) if col == "stage" else None)
    for name in stage_order(stages):
        s = stages[name]
        t.add_row(markup(stage_label(name)), markup(s.per or ""), str(s.count), f"{s.total_s:.3f}", ms(s.mean_ms),
                  ms(s.p50_ms), ms(s.p95_ms), ms(s.p99_ms))
    return t


def stall_table(rec: RunRecord) -> Table:
    st = read(rec).stall
    t = Table(title=f"Idle compute device by cause ({st.seconds:.2f} s = "
                    f"{100 * st.fraction:.1f} % of {rec.window['seconds']:.2f} s)",
              title_justify="left")
    t.add_column("cause")
    t.add_column("seconds", justify="right")
    t.add_column("share of idle", justify="right")
    for k, v in st.by_cause.items():
        t.add_row(markup(k), f"{v:.3f}", pct(st.share_by_cause.get(k, 0), 0))
    return t


def own_cost_line(rec: RunRecord) -> str | None:
    """The profiler's own cost, said apart from the job's figures (None for records that did not measure it)."""
    r = read(rec)
    prof = r.stall.profiler
    if not prof.measured:
        return None
    steps = max(1, int(r.throughput.steps or rec.window_steps or 1))
    waits, rest = float(prof.seconds), float(prof.rest_s)
    return (f"Profiler's own time: {waits * 1e6 / steps:.0f} µs per step inside the waits (taken out of the idle "
            f"time above) and {rest * 1e6 / steps:.0f} µs in the rest of the step: "
            f"{pct(prof.share_of_window, 1)} of the window, not the job's.")


def print_report(rec: RunRecord, console: Console | None = None, out_files: list[str] | None = None,
                 details: bool = False) -> None:
    """The run's summary: by default the short view (about 30 lines: render/terminal_short.py); ``details``
    (``run --details``, ``report --details``): every table and sentence, as before the short view existed."""
    from .terminal_short import print_short

    console = console or Console()
    if not details:
        print_short(rec, console, out_files)
        return
    print_details(rec, console, out_files)


def print_details(rec: RunRecord, console: Console, out_files: list[str] | None = None) -> None:
    """Everything: the verdict's full sentence, device and storage lines, the stage and idle tables, own cost, the
    what-if table, every recommendation and finding in full."""
    rd = read(rec)
    v = rd.verdict
    style = BOTTLENECK_STYLE.get(v.bottleneck or "", "white")
    title = printable(f"Verdict: {'?' if v.bottleneck is None else v.bottleneck} ({v.severity})")
    if rec.partial:
        title += "  [PARTIAL RUN]"
    console.print(Text(printable(headline(rec)), style=f"bold {style}"))
    for line in loader_lines(rec):  # which loader the figures are about comes first
        console.print(line, markup=False, highlight=False)
    console.print(Panel(Text(printable(v.summary)), title=Text(title), border_style=style))
    dev, tp = rd.device, rd.throughput
    console.print(f"Compute device: [bold]{markup(dev.type)}[/] ({markup(dev.name)}; timing from "
                  f"{markup(dev.timing)}).  "
                  f"Throughput: [bold]{tp.samples_per_s:.1f}[/] samples/s over {tp.steps} "
                  f"measured steps ({rd.window.warmup_steps} warm-up excluded).")
    st = rd.storage
    if st.summary:  # analysis/io.py: each figure named by its kernel counter
        console.print(printable(str(st.summary)), markup=False, highlight=False)
    elif st.page_cache_hit_fraction is not None:
        console.print(f"Storage: {pct(st.page_cache_hit_fraction, 0)} of worker reads served from page cache "
                      f"({nbytes(st.bytes_from_device)} of {nbytes(st.bytes_requested)} from the device).")
    mem = rd.memory
    if mem.device_peak_bytes:
        total = mem.device_total_bytes
        console.print(f"Device memory: peak {nbytes(mem.device_peak_bytes, binary=True, digits=2)}"
                      + (f" of {nbytes(total, binary=True, digits=0)}" if total else "")
                      + " allocated in the measured window.")
    procs = rd.ram.process_rows
    workers = [p for p in procs if p.role == "worker"]
    main = next((p for p in procs if p.role == "main"), None)
    if rd.ram.summary:  # analysis/ram.py: workers counted at once, processes over the run beside them
        console.print(printable(str(rd.ram.summary)), markup=False, highlight=False)
    elif main and main.peak_rss_bytes:
        uss = [p.peak_uss_bytes or 0 for p in workers]
        if workers and all(uss):
            w, what = uss, "private (USS)"
        else:
            w, what = [p.peak_rss_bytes or 0 for p in workers], "resident (RSS, shared pages included)"
        console.print(f"Host RAM: main process peak {nbytes(main.peak_rss_bytes, binary=True, digits=2)} RSS"
                      + (f"; {len(w)} workers, up to {nbytes(max(w), binary=True, digits=0)} {what} each" if w
                         else "") + ".")
    console.print(stage_table(rec))
    console.print(stall_table(rec))
    own = own_cost_line(rec)
    if own:
        console.print(own, markup=False, highlight=False)
    whatif_section(rec, console)
    recs = v.recommendations
    if recs:
        console.print("[bold]Recommendations[/]")
        for i, r in enumerate(recs, 1):
            console.print(f" {i}. [bold]{markup(r.action)}[/]\n    why: {markup(r.reason)}\n"
                          f"    expected: {markup(r.expected_gain)}")
    for f in rd.findings:
        console.print(f"[yellow]![/] {markup(f.message)}")
    skipped = rec.skipped
    if skipped["count"]:
        files = [view(SkippedFileView, f) for f in rec.skipped_files] or [SkippedFileView("?", "?")]
        console.print(f"Skipped files: {skipped['count']} (first: {markup(files[0].path)}: "
                      f"{markup(files[0].reason)})")
    if out_files:
        console.print("Wrote: " + ", ".join(markup(f) for f in out_files))


def whatif_section(rec: RunRecord, console: Console) -> None:
    """What would help: the ceilings line, the predictions with short "bound by" labels and a note number, then each
    distinct note (binding phrase and assumption) once — not the same 40 words in every row."""
    from .whatif_rows import headline as whatif_headline
    from .whatif_rows import notices, table_rows

    if not read(rec).ceilings.rows:
        return
    console.print("[bold]What would help[/] " + markup(whatif_headline(rec)), highlight=False)
    rows, notes, bounds = table_rows(rec)
    t = Table(title="Predicted from this run, with 95 % intervals (notes below the table)", title_justify="left")
    for col in ("setting", "samples/s", "change", "then bound by", "note"):
        t.add_column(col, justify="left" if col in ("setting", "then bound by") else "right")
    for r in rows:
        t.add_row(*(markup(r[k]) for k in ("setting", "sps", "change", "label")), str(r["note"]))
    console.print(t)
    for b in bounds:
        if b["words"] != b["label"]:
            console.print(Text(printable(f"Bound by {b['label']}: {b['words']}.")), highlight=False)
    for n in notes:
        console.print(Text(printable(f"[{n['n']}] {', '.join(n['settings'])}: {n['text']}.")), highlight=False)
    for line in notices(rec):
        console.print(f"[yellow]![/] {markup(line)}", highlight=False)
