"""The monitor around a job: one Session for the whole job, a cut every window, the record and the exporters.

A cut runs inside the Session's on_step callback, on the main thread between two of the job's steps: it takes the
window's steps out of the Session (windows.take), summarises them (windows.summarize), feeds the change detector,
adds the window to the bounded record, hands the new window to the exporters and the terminal line, and rewrites
monitor.json at most every MONITOR_WRITE_EVERY_S. Its own time is measured (``monitor_cost``) and counted in the
window it ends. A failure of the monitor's own is one line and the job goes on unmonitored; it never raises into
the job's ``next()``.
"""
from __future__ import annotations

import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .. import signals
from .. import thresholds as th
from ..errors import UserError
from ..instrument.batch import detail_margin, set_detail_range, set_sampling
from .changes import ChangePoint, Detector
from .procs import TreeCounters
from .record import MonitorRecord
from .windows import WindowSummary, summarize, take

if TYPE_CHECKING:
    from ..instrument.gaps import Gaps
    from ..instrument.session import Session
    from .exporters import Exporter

#: The Session's own window never closes under the monitor: the job's end (or a signal) closes it.
FOREVER = 1 << 62
#: The last detail ranges a Monitor keeps (Monitor.recent): what the tests compare the windows' detail with.
CHUNKS_KEPT = 64


def rank_folder(denv: Any, out: str | None, name: str) -> Path:
    """A torchrun rank's monitor folder, ``<folder>/rank<k>``, of one folder for the job (agreed as ``run``'s ranks
    agree on theirs: distributed/layout.py); ``out``: the folder asked for, else ``reports/<name>_ddp<N>``."""
    from .. import outdir
    from ..distributed.layout import agree_run_folder, rank_dir

    return outdir.claim(outdir.prepare_out(rank_dir(agree_run_folder(denv, out, "reports", name), denv.rank)))


def parse_window(text: str, name: str = "--window ") -> tuple[int, float | None]:
    """``--window`` (or the API's ``window=``, ``name``): (steps, seconds); a time window still cuts at MONITOR_MAX
    steps so one window stays bounded."""
    t = text.strip().lower()
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    try:
        if t and t[-1] in units:
            secs = float(t[:-1]) * units[t[-1]]
            if not 0 < secs <= 7 * 86400:
                raise ValueError
            return 1 << 40, secs
        n = int(t)
        if not 1 <= n <= 10_000_000:
            raise ValueError
        return n, None
    except ValueError:
        raise UserError(f"{name}{text}: give a step count (1000) or a time (60s, 5m, 1h)") from None


def _cores() -> float:
    try:
        return float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return float(os.cpu_count() or 1)


class Monitor:
    """Cuts windows out of a Session (``attach``), keeps the record, feeds the exporters and the status line."""

    def __init__(self, out: Path, *, window_steps: int = th.MONITOR_WINDOW_STEPS, window_s: float | None = None,
                 detail: int = th.MONITOR_DETAIL_STEPS, exporters: list[Exporter] | None = None,
                 status: Callable[[WindowSummary, list[ChangePoint]], None] | None = None,
                 job: dict[str, Any] | None = None, write_every_s: float | None = None,
                 max_windows: int | None = None, full_windows: int | None = None, min_window_s: float = 0.0,
                 sample: bool = True, gaps: bool = True):
        if window_steps < 1 or detail < 0:
            raise ValueError("window_steps must be >= 1 and detail >= 0")
        self.out = out
        self.window_steps, self.window_ns = window_steps, int(window_s * 1e9) if window_s else 0
        self.min_ns = int(min_window_s * 1e9)  # a step window also lasts at least this long (the default window)
        self.detail = detail
        self.sample = sample  # detail batches chosen in the fetchers (NOTE [ Monitor sampling ]); False: every batch
        self.gaps = gaps and sample  # the hook off the path between chunks (NOTE [ Monitor gaps ], instrument/gaps.py)
        self.chunk_ns = 0  # when the last chunk began (a gap opens only if no other loader was stepped since)
        # The detail is spread over the window in MONITOR_DETAIL_CHUNKS chunks, so a change inside a window is seen
        # by its cause split too, not only by its wait share. The k-th of C chunks starts once k/C of the window's
        # steps *and* of its seconds have passed (a step window's minimum length, a time window's length): however
        # many steps the window turns out to hold, it gets C chunks at most, ``detail`` steps (detail_plan).
        self.chunks = max(1, min(th.MONITOR_DETAIL_CHUNKS, detail))
        self.per_chunk = -(-detail // self.chunks) if detail else 0
        self.span_steps = 0 if window_s else window_steps  # what k/C is of
        self.span_ns = self.window_ns or self.min_ns
        self.k = 0  # the next chunk of the window
        self.due_n = 0  # ... starts at the first step with n >= due_n and t0 >= due_ns (the cut's own test follows)
        self.due_ns = 0
        self.range_epoch = -1  # the epoch (len(session.epochs)) of the detail range set last, and its end
        self.range_hi = 0
        self.chunks_set = 0  # detail ranges set (chunks), and the last few: (epoch, lo, hi), for the tests and --long
        self.recent: list[tuple[int, int, int]] = []
        self.exporters = list(exporters or [])
        self.status = status
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.rec = MonitorRecord(job=dict(job or {}), started_at=started)
        if max_windows is not None or full_windows is not None:
            from .fold import WindowLog

            self.rec.log = WindowLog(max_windows or th.MONITOR_MAX_WINDOWS, full_windows or th.MONITOR_FULL_WINDOWS)
        self.rec.config = {"window_steps": window_steps, "window_s": window_s, "min_window_s": min_window_s,
                           "detail_steps": detail,
                           "exporters": [e.name for e in self.exporters]}
        self.detector = Detector()
        self.procs = TreeCounters()
        self.session: Session | None = None
        self.n = 0  # steps of the window so far, the open one included: the Session's count less base
        self.base = 0
        self.cut_ns = 0
        self.next_first = 0  # the job's step the next window starts with
        self.other_wait = 0
        self.other_in_step = 0  # other loaders' loops inside steps, up to the last cut (windows.Cut)
        self.write_every_ns = int((th.MONITOR_WRITE_EVERY_S if write_every_s is None else write_every_s) * 1e9)
        self.last_write_ns = 0
        self.cost_ns = 0
        self.cuts = 0
        self.failed: str | None = None
        self.procs.snapshot()  # the byte counters' origin: the job's start
        # Imported now, before the job starts: the first cut would otherwise pay the analysis modules' import
        # (~100-250 ms on the loaded 2-core VM) inside the job's step, and the queue filling meanwhile reads as a
        # transfer stall in the next window.
        from ..analysis import attribution, context, stats, verdict  # noqa: F401
        from ..instrument import collect  # noqa: F401

    # --- the Session's side -------------------------------------------------------------------------------------
    def attach(self, session: Session) -> None:
        """Take ``session``'s on_step (chained to any callback it had) and its detail boundary."""
        self.session = session
        chained = session.on_step

        def on_step(measured: bool, t0: int, t1: int, n: int) -> None:
            # On a detail step, and on a light step only once a chunk or a cut is due (the Session's due_step /
            # due_ns, published by _due; every light step when another callback is chained).
            if chained is not None:
                chained(measured, t0, t1, n)
            k = session._n_steps - self.base
            if k < 1:  # the Session restarted on another loader (its count began again): the window's goes on
                self.base = session._n_steps - self.n - 1
                k = self.n + 1
            self.n = k
            if k >= self.due_n and t0 >= self.due_ns:
                self._due(t0)
            if chained is None:
                due_step, due_ns = self.base + self.due_n - 1, self.due_ns
                gap = session._gap
                if gap is not None and not gap.open and self.failed is None:
                    due_step, due_ns = self._gap_or_call_back(session, gap, t0, t1, due_step, due_ns)
                session.due_step, session.due_ns = due_step, due_ns

        session.on_step = on_step
        session.untimed_tail = False  # its detail chunks come back after the Session's first tail step
        if self.sample:
            # NOTE [ Monitor sampling ] (instrument/batch.py): the fetchers make only the batches of the detail
            # range in detail, and the Session keeps exactly those as rows (every row it makes is detail: its own
            # boundary never moves); the other steps cost it two clock reads into its tail's totals.
            set_sampling(True)
            session.sampling = (self.chunks, self.per_chunk)
            session.detail_steps = FOREVER
            if self.gaps:
                from ..instrument.gaps import Gaps

                session._gap = Gaps(session)
        else:
            session.detail_steps = self.per_chunk

    def _gap_or_call_back(self, s: Session, gap: Gaps, t0: int, t1: int, due_step: int, due_ns: int
                          ) -> tuple[int, int]:
        """After a light step that began at ``t0`` (its batch in hand at ``t1``): open a gap until the next event
        (``due_step`` / ``due_ns``) once the detail range is behind, or else be called back at the step where it will
        be (NOTE [ Monitor gaps ]). Returns the Session's due_step / due_ns."""
        start = self.cut_ns or s.window_start_ns or t0
        rate = self.n / (t1 - start) if t1 > start else 0.0  # the window's steps per ns so far
        gap.due_step, gap.due_ns = due_step, due_ns
        if gap.due_in(t1, s._n_steps, rate) < gap.min_ns:  # the next event is too near for a gap
            return due_step, due_ns
        behind = s._n_steps + max(0, self.range_hi - s._epoch_batches) if len(s.epochs) == self.range_epoch \
            else s._n_steps
        if behind > s._n_steps or not s._lw1 or s._lw0 != t0:
            # the range's last batch is still ahead (or this is one of its steps): be called back at the first step
            # after it (the event's own test is made first at every call, so it is never missed by more than that)
            return max(behind, s._n_steps), 0
        it = s._live_iter() if s._live_iter is not None else None
        if it is not None and gap.may_open(it, self.chunk_ns) and not gap.begin(it, t1, due_step, due_ns, rate):
            left = gap.left(it)  # too near the epoch's end (the event is not): called back at the next epoch's first
            if left is not None:
                return s._n_steps + left, 0
        return due_step, due_ns

    def detail_plan(self, k: int) -> tuple[int, int]:
        """(steps since the cut, ns since the cut) from which the window's ``k``-th chunk may start."""
        c = self.chunks
        return -(-k * self.span_steps // c), k * self.span_ns // c

    def _set_due(self, start_ns: int) -> None:
        """The next event of the window that started at ``start_ns``: its next chunk, or else its cut."""
        if self.k < self.chunks and self.per_chunk:
            dn, dt = self.detail_plan(self.k)
            self.due_n, self.due_ns = max(dn, 1), start_ns + dt
        elif self.window_ns:
            self.due_n, self.due_ns = 0, start_ns + self.window_ns
        else:
            self.due_n, self.due_ns = self.window_steps + 1, start_ns + self.min_ns

    def _due(self, t0: int) -> None:
        s = self.session
        if s is None:
            return
        start = self.cut_ns or s.window_start_ns or t0
        if (self.n > self.window_steps and (not self.min_ns or t0 - start >= self.min_ns)) \
                or (self.window_ns and t0 - start >= self.window_ns):
            self.cut(t0)  # (its chunk 0 follows at once: the due test is met again below)
            start = t0
            if self.failed is not None:
                return
        if self.k < self.chunks and self.per_chunk:
            dn, dt = self.detail_plan(self.k)
            if self.n >= dn and t0 - start >= dt:
                if self._chunk():
                    self.k += 1
                else:  # the last chunk's batches are still ahead: try again at the next step
                    self.due_n, self.due_ns = self.n + 1, 0
                    return
        if self.failed is None:
            self._set_due(start)

    def _chunk(self) -> bool:
        """A detail chunk starts: the steps since the last one that the Session kept flat are made rows (under the
        boundary they were taken with), then the next ``per_chunk`` steps are kept in detail (sampled: the detail
        range is set for the fetchers, ahead of every batch torch has asked for). False: not now (the last chunk's
        range is not passed yet)."""
        s = self.session
        if s is None or self.failed is not None:
            return True
        t = self.chunk_ns = time.perf_counter_ns()
        try:
            with signals.deferred():  # (as a cut: the detail range, its record and the Session's boundary together)
                epoch = len(s.epochs)
                at = s._epoch_batches  # the epoch's index of the batch the next step waits for
                if s.sampling is not None:
                    if epoch == self.range_epoch and at < self.range_hi:
                        return False
                    li = s.loader
                    loader = s._loader_ref() if s._loader_ref is not None else None
                    workers = li.num_workers if li is not None else 0
                    lo = at + detail_margin(workers, getattr(loader, "prefetch_factor", None))
                    set_detail_range(lo, lo + self.per_chunk)
                    self.range_epoch, self.range_hi = epoch, lo + self.per_chunk
                    self.chunks_set += 1
                    self.recent.append((epoch - 1, lo, lo + self.per_chunk))
                    del self.recent[:-CHUNKS_KEPT]
                s._materialize()
                if s.sampling is None:  # sampled in the fetchers, the Session's boundary stays put (attach)
                    s.detail_steps = max(0, s._n_steps - s.warmup) + self.per_chunk
        except Exception as e:  # noqa: BLE001 - the monitor must never crash the job it watches
            self.failed = f"{type(e).__name__}: {e}"
            self.due_n = FOREVER
            print(f"profiler monitor: stopped watching after an error of its own ({self.failed})", file=sys.stderr)
        finally:
            self.cost_ns += time.perf_counter_ns() - t
        return True

    def cut(self, end_ns: int, final: bool = False) -> WindowSummary | None:
        """End the window at ``end_ns`` (the open step's wait start); never raises into the job."""
        s = self.session
        if s is None or self.failed is not None:
            return None
        t = time.perf_counter_ns()
        try:
            # Signals held until the cut is done: SIGTERM between the window's summary and its place in the record
            # lost the window (the next one began where it would have ended); the job stops right after instead.
            with signals.deferred():
                return self._cut(s, end_ns, final)
        except Exception as e:  # noqa: BLE001 - the monitor must never crash the job it watches
            self.failed = f"{type(e).__name__}: {e}"
            print(f"profiler monitor: stopped watching after an error of its own ({self.failed}); the job goes on",
                  file=sys.stderr)
            return None
        finally:
            self.cost_ns += time.perf_counter_ns() - t
            self.base = s._n_steps - 1  # the open step is the next window's first
            self.n = 1 if not final else 0
            self.k = 0
            if self.failed is not None:
                self.due_n = FOREVER

    def _cut(self, s: Session, end_ns: int, final: bool) -> WindowSummary | None:
        start = self.cut_ns or s.window_start_ns or end_ns
        cut = take(s, start, end_ns, self.per_chunk, self.other_wait, self.next_first, final, self.other_in_step)
        self.other_wait += cut.other_wait_ns
        self.other_in_step += cut.other_in_step_ns
        self.cut_ns = end_ns
        self.next_first = cut.step_last + 1
        v = cut.view
        if not v.rows and not v.tail.steps:
            return None
        if final:  # the job's end: the window ends with its last step
            ends = [r.compute_end_ns for r in v.rows] + [v.tail.last_ns]
            cut.end_ns = max(end_ns if end_ns > start else 0, *ends)
        li = s.loader
        w = summarize(cut, self.rec.windows_total, li.num_workers if li is not None else 0, self.procs.snapshot(),
                      li.batch_size if li is not None else None, _cores())
        if s._gap is not None:
            w.estimated_steps, w.probe_steps, w.probe_wait_share, w.probe_wait_share_pm = s._gap.take_window()
        self.rec.windows_total += 1
        self.rec.steps_total += w.steps
        found = self.detector.feed(w)
        self.rec.log.add(w)
        for c in found:
            self.rec.log.mark_keep(c.window)
        self.rec.changes = list(self.detector.changes)
        self.cuts += 1
        for e in list(self.exporters):
            try:
                e.window(w)
                for c in found:
                    e.change(c)
            except Exception as err:  # noqa: BLE001 - an exporter's failure is its own, said once
                print(f"profiler monitor: --{e.name} stopped ({type(err).__name__}: {err})", file=sys.stderr)
                self.exporters.remove(e)
        if self.status is not None:
            self.status(w, found)
        now = time.perf_counter_ns()
        if final or now - self.last_write_ns >= self.write_every_ns:
            self._write()
            self.last_write_ns = now
        return w

    def _write(self) -> Path:
        self.rec.monitor_cost = {"cuts": self.cuts, "seconds": round(self.cost_ns / 1e9, 6)}
        return self.rec.save(self.out)

    def abandon(self) -> None:
        """The block recorded nothing (no loader iterated) or could not start: write nothing, but leave the process as
        ``finish`` does — its fetchers back to recording every batch (a later ``run`` or ``profile()`` in this process
        must not find the monitor's sampling still on) and the exporters closed."""
        set_sampling(False)
        self._close_exporters()

    def _close_exporters(self) -> None:
        for e in self.exporters:
            try:
                e.close()
            except Exception as err:  # noqa: BLE001 - the record is written all the same
                print(f"profiler monitor: --{e.name} could not close ({type(err).__name__}: {err})", file=sys.stderr)

    def finish(self, status: str, loader: dict[str, Any] | None = None) -> Path:
        """The job ended (``status``: ended | interrupted | failed | exit): the last window, the record, the
        exporters closed. Call after the Session stopped (its open step ended)."""
        s = self.session
        set_sampling(False)  # fetchers made from now on record every batch again
        if s is not None and self.failed is None:
            self.cut(s.window_end_ns or time.perf_counter_ns(), final=True)
        self.rec.status = status
        if loader is not None:
            self.rec.job["loader"] = loader
        self._close_exporters()
        return self._write()


def status_printer(stream: Any = None) -> Callable[[WindowSummary, list[ChangePoint]], None]:
    """The live one-line status: on a terminal the line is rewritten in place at each cut (no refresh thread: the
    cut draws it); elsewhere only change points are printed, one line each."""
    out = stream or sys.stderr
    tty = bool(getattr(out, "isatty", lambda: False)())

    def show(w: WindowSummary, found: list[ChangePoint]) -> None:
        try:
            for c in found:
                out.write(("\r\x1b[2K" if tty else "") + f"profiler monitor: change: {c.summary}\n")
            if tty:
                out.write("\r\x1b[2K" + line(w))
            out.flush()
        except (OSError, ValueError):
            pass

    return show


def line(w: WindowSummary) -> str:
    """One window in one line: where, how fast, how much waiting and why."""
    cause = "compute-bound" if w.bottleneck == "compute" else f"input-bound {w.bottleneck}"
    return (f"monitor: step {w.step_last:,}  {w.samples_per_s:,.0f} samples/s  wait {w.wait_share * 100:.0f} %  "
            f"{cause}  (io {w.idle_share('io') * 100:.0f} / cpu {w.idle_share('cpu') * 100:.0f} / transfer "
            f"{w.idle_share('transfer') * 100:.0f} %)  RSS {w.rss_bytes / 1e6:,.0f} MB")
