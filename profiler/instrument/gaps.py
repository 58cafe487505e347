"""Monitor gaps: the stretches between detail chunks where no per-step Python runs on the job's path.

NOTE [ Monitor gaps ]
    Under ``profiler monitor`` a light step (outside the detail) cost ~2 µs of the profiler's own Python between
    ``next()`` and the job's model step, and on the 2-core VM that work cost about five times its own time in the
    step after it (docs/monitor.md § Cost): +2.5-6 % of a light loop's CPU, where the target is 1 %. So between
    detail chunks the monitor takes its ``__next__`` off the loader's path (torch_hooks.hook_next: torch's own
    ``__next__`` plus an envelope check, ``_gap_next``) and a daemon thread (this module) does the bookkeeping:

    - *Counting*: the iterator's own batch count (torch_hooks.batches_yielded, seam 9) read by the thread; at the
      gap's close the steps in between go into the Session's tail totals at once: steps exact, samples as the
      step before the gap's (a constant batch size); the epoch's last batch, which falls in a gap only when the
      thread was late (below), by its own size (LoaderInfo.last_batch_samples: a partial last batch).
    - *The wait share*: the thread turns the hook back on for one step MONITOR_GAP_HZ times a second (a *probe*):
      that step's wait and its whole length are timed (its ``next()``, then the next one's entry), and the hook
      goes off again. The gap's wait is the probes' ratio estimate (their waits over their lengths) applied to its
      time. Why probes and not the main thread's stack sampled from the thread: the thread runs only when the main
      thread lets go of the GIL, so a stack sample lands where the job releases it (torch ops), not where it was
      when the sample was due: a bias in favour of compute that depends on the job. A probe times a step chosen by
      the clock, independently of its own length (it is the step *after* the tick).
    - *Closing*: the thread sleeps until the next probe or until just before the monitor's next event (chunk or
      cut: the Session's ``due_step`` / ``due_ns``, by the clock and the gap's step rate), and turns the hook on for
      good then, when the epoch has fewer batches left than MONITOR_GAP_EPOCH_MARGIN_S' worth (its end,
      StopIteration and all, is then seen by the hook as in ``run``), or when the job dropped the iterator. The
      next ``next()`` on the hooked path closes the gap (``close``) and carries on as a light step. A new ``iter()``
      of any loader closes it at once (tracking.py): the open step is then the one in progress, with its wait taken
      as 0 (the time since its ``next()`` is counted in the gap's steps). An epoch that ends inside a gap all the
      same (the thread late) ends its steps at its StopIteration (torch_hooks.gap_ended). The gap holds its
      iterator (a job that breaks out of its loop mid-gap would take the count with it); the thread lets go of it
      once it is the only holder, reading its final count.

    What the window then says: steps and samples exact as before; the idle time of its gap steps estimated (their
    count: ``estimated_steps``, the probes behind it: ``probe_steps``, their own share and its 95 % half-width:
    ``probe_wait_share`` / ``_pm``); the cause split, as before, the detail's.
    Opened only where it cannot go wrong (``Gaps.may_open``): host clocks, a map-style dataset of known length,
    workers by ``fork`` (or none: their detail range is the epoch's), no other loader stepped since the last
    chunk (an interleaved loader would go uncounted), torch's ``_num_yielded`` present and the iterator's
    ``__next__`` the hooked one. ``run`` never has a Gaps object.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from .. import thresholds as th
from . import torch_hooks

if TYPE_CHECKING:
    from .session import Session

_perf = time.perf_counter_ns
_EARLY_NS = 2_000_000  # the thread closes a gap this long before the monitor's event is due


class Gaps:
    """A Session's gaps (one open at a time) and the thread that watches them; made by the monitor."""

    def __init__(self, session: Session, hz: float = th.MONITOR_GAP_HZ, min_s: float = th.MONITOR_GAP_MIN_S):
        self.s = session
        self.tick_s = 1.0 / hz
        self.min_ns = int(min_s * 1e9)
        self.usable = not torch_hooks.gap_problems()
        self.open = False
        self.closing = False  # the thread asked for the close (the hook is back on)
        self.probe = 0  # 0: none; 1: the hook is on for a probe; 2: its wait timed, its end is the next entry
        # The gap's iterator, held while the gap is open: a job that drops it mid-gap (``break`` out of its loop)
        # would take its count with it. The thread lets go of it once it is the only holder (its count is then
        # final: nobody can call next() on it), so it dies at most a tick later than it would have.
        self.held: Any = None
        self.dropped = False  # ... it did: last_y is its final count
        self.n0 = 0  # its batch count when the gap opened
        self.t_open = 0
        self.epoch_len = 0
        self.due_step = self.due_ns = 0  # the monitor's next event (Session.due_step / due_ns when the gap opened)
        self.pw0 = self.pw1 = 0  # the probe step's wait
        self.p_n = 0  # this gap's probes, their waits and lengths (ns)
        self.p_wait = self.p_span = 0
        self.ratio = -1.0  # the last gap's wait share (a gap without a probe takes it; -1: none yet)
        self.rate = 0.0  # steps per ns: the last gap's, or the window's when the gap opened
        self.n_open = 0  # the Session's step count when the gap opened
        self.end_y = self.end_ns = 0  # the gap's iterator's StopIteration (torch_hooks.gap_ended): count, time
        self.last_y = self.last_ns = 0  # its count when the thread last read it (the job may drop it mid-gap)
        self.next_probe_ns = 0
        # The window's figures, taken by the monitor at each cut (take_window)
        self.w_steps = self.w_probes = 0
        self.w_sums = [0.0] * 5  # the window's probes: Σ wait, Σ length, Σ wait², Σ length², Σ wait·length (ms)
        self.gaps = 0  # gaps opened (the tests' and the bench's)
        self._lock = threading.Lock()
        self._stopped = False
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the main thread ----------------------------------------------------------------------------------------
    def may_open(self, it: Any, others_since: int) -> bool:
        """Can a gap open on ``it`` now (module docstring: where it cannot go wrong)?"""
        s = self.s
        li = s.loader
        if not self.usable or self.open or s.cuda is not None or s.closed or li is None or s._lw1 == 0:
            return False
        if li.num_workers > 0 and not (li.multiprocessing_context or "").startswith("fork") \
                or (li.multiprocessing_context or "").startswith("forkserver"):
            return False
        if not li.batches_per_epoch or torch_hooks.batches_yielded(it) is None or not torch_hooks.next_is_hooked(it):
            return False
        return not any(o.last_ns > others_since for o in s.others)

    def begin(self, it: Any, t_ns: int, due_step: int, due_ns: int, rate: float) -> bool:
        """Open a gap after the light step that just began (its ``next()`` returned at ``t_ns``) on ``it``: the hook
        comes off until the monitor's next event (``due_step`` / ``due_ns``, as Session.due_step / due_ns), ``rate``
        the job's steps per ns of late. False: not worth it (the event too near) or too near the epoch's end."""
        y = torch_hooks.batches_yielded(it)
        li = self.s.loader
        self.due_step, self.due_ns = due_step, due_ns
        if y is None or li is None or not li.batches_per_epoch or li.batches_per_epoch - y <= self.margin(rate) \
                or self.due_in(t_ns, self.s._n_steps, rate) < self.min_ns:
            return False
        self.held, self.dropped = it, False
        self.n0, self.t_open, self.epoch_len = y, t_ns, int(li.batches_per_epoch)
        self.n_open, self.rate = self.s._n_steps, rate
        self.end_y = self.end_ns = 0
        self.last_y, self.last_ns = y, t_ns
        torch_hooks.gap_ended = self._ended
        self.next_probe_ns = t_ns + int(self.tick_s * 1e9)
        self.probe = self.p_n = self.p_wait = self.p_span = 0
        self.closing = False
        self.open = True
        self.gaps += 1
        torch_hooks.hook_next(False)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="profiler-monitor-gaps", daemon=True)
            self._thread.start()
        self._wake.set()
        return True

    def on_next(self, it: Any, orig: Callable[[Any], Any]) -> Any:
        """Session._on_next while a gap is open and the hook is on (a probe, or the close)."""
        s = self.s
        if self.closing or it is not self.held:
            self.close(_perf(), True)
            return s._on_next(it, orig)
        t0 = _perf()
        p = self.probe
        if p == 2:  # the probe step ends here
            self.p_n += 1
            w, d = self.pw1 - self.pw0, t0 - self.pw0
            self.p_wait += w
            self.p_span += d
            ws, wm, dm = self.w_sums, w / 1e6, d / 1e6
            ws[0] += wm
            ws[1] += dm
            ws[2] += wm * wm
            ws[3] += dm * dm
            ws[4] += wm * dm
        with self._lock:
            if p == 1:
                self.probe = 2  # this step is the probe: the hook stays on for its end
            else:
                self.probe = 0
                if not self.closing:
                    torch_hooks.hook_next(False)
        try:
            data = orig(it)
        except BaseException as e:
            self.close(t0, True)  # the epoch's end (or the job's error) ends the gap's steps here
            s._wait_raised(e, t0)
            raise
        if p == 1:
            self.pw0, self.pw1 = t0, _perf()
        return data.batch if data.__class__ is torch_hooks.Instrumented else data

    def _ended(self, it: Any) -> None:
        """torch_hooks.gap_ended: an iterator's StopIteration inside a gap (main thread)."""
        if self.open and not self.end_ns and it is self.held:
            self.end_y, self.end_ns = torch_hooks.batches_yielded(it) or 0, _perf()

    def close(self, t_ns: int, boundary: bool) -> None:
        """End the gap at ``t_ns``: the steps it held go into the Session's tail totals. ``boundary``: ``t_ns`` is a
        ``next()`` of its iterator (the steps so far all end there); else the time of some other event (a new
        ``iter()``, the job's end): the step in progress, if the epoch has one, stays open from ``t_ns``."""
        if not self.open:
            return
        with self._lock:
            self.open = self.closing = False
            self.probe = 0
            torch_hooks.hook_next(True)
        s = self.s
        s.due_step = s.due_ns = 0  # the monitor's callback at the next step (it publishes the next event again)
        it, self.held = self.held, None
        y = torch_hooks.batches_yielded(it) if it is not None else None
        del it
        if self.end_ns:  # the epoch ended in the gap: its steps end with it (the time after is outside any step)
            y, t_ns, boundary = self.end_y, self.end_ns, True
        elif y is None:  # the job dropped the iterator mid-epoch: its final count (the thread's read)
            y = self.last_y
        k = max(0, y - self.n0)  # batches handed out in the gap (the Session saw none)
        if t_ns > self.t_open and k > 0:
            self.rate = k / (t_ns - self.t_open)
        exhausted = y >= self.epoch_len
        # At a next() (or after the epoch's last batch) the light step open when the gap began and the gap's steps
        # have all ended; at another event the last one handed out is still under way and stays open (below).
        in_progress = not boundary and not exhausted
        ended = k if in_progress else k + 1
        w0, w1, n = s._lw0, s._lw1, s._ln
        if not w1 or not ended:  # (no light step: cannot happen) or the step open when the gap began still is
            return
        span = max(0, t_ns - w1)
        tail = s.tail
        if self.p_span > 0:
            self.ratio = self.p_wait / self.p_span
        if self.p_span > 0 or self.ratio >= 0:
            extra = int(self.ratio * span)
        else:  # no probe yet (a gap shorter than a tick): the steps' mean wait so far
            extra = min(span, (tail.wait_ns // tail.steps if tail.steps else w1 - w0) * (ended - 1))
        wait = (w1 - w0) + extra
        tail.steps += ended
        tail.samples += n * ended
        last = self.s.loader.last_batch_samples if self.s.loader is not None else None
        if exhausted and k > 0 and last is not None:  # the epoch's last batch was handed out in the gap (the thread
            tail.samples += last - n  # late): its own size, not the full batch before the gap (a partial last one)
        tail.wait_ns += wait
        tail.idle_ns += wait
        tail.compute_ns += max(0, t_ns - w0 - wait)
        if not tail.first_ns:
            tail.first_ns = w0
        if t_ns > tail.last_ns:
            tail.last_ns = t_ns
        s._measured_done += ended
        s._n_steps += k
        s._epoch_batches += k
        s._last_next_ns = t_ns
        if in_progress:
            s._lw0 = s._lw1 = t_ns  # its wait unknown (0), its rest from now
        else:
            s._lw1 = 0
            if exhausted:
                s._epoch_done = True
        self.w_steps += ended
        self.w_probes += self.p_n

    @staticmethod
    def margin(rate: float) -> int:
        """Batches a gap closes before the epoch's end at ``rate`` steps per ns (MONITOR_GAP_EPOCH_MARGIN_S)."""
        return int(rate * th.MONITOR_GAP_EPOCH_MARGIN_S * 1e9) + 2

    def due_in(self, now: int, steps: int, rate: float) -> int:
        """ns until the monitor's next event (its step ``due_step`` *and* its time ``due_ns``) at ``rate`` steps per
        ns, the job at step ``steps`` (an unknown rate: a tick away)."""
        to_step = self.due_step - steps
        by_steps = 0 if to_step <= 0 else int(to_step / rate) if rate > 0 else int(self.tick_s * 1e9)
        return max(self.due_ns - now, by_steps)

    def left(self, it: Any) -> int | None:
        """Batches ``it``'s epoch has still to hand out (None: not known)."""
        y = torch_hooks.batches_yielded(it)
        li = self.s.loader
        return max(0, li.batches_per_epoch - y) if y is not None and li is not None and li.batches_per_epoch \
            else None

    def take_window(self) -> tuple[int, int, float | None, float | None]:
        """Since the last call (a cut): the steps whose wait was estimated, the probes behind the estimates, and the
        probes' wait share with its 95 % half-width (None: fewer than 2 probes). The share is a ratio of sums
        (Σ wait / Σ length); its standard error by the delta method, sqrt(Σ (w_i - R d_i)² / (n (n-1))) / mean d."""
        n, (sw, sd, sww, sdd, swd) = self.w_probes, self.w_sums
        share = pm = None
        if n >= 2 and sd > 0:
            r = sw / sd
            resid = max(0.0, sww - 2 * r * swd + r * r * sdd)  # Σ (w_i - r d_i)²
            share, pm = round(r, 6), round(1.96 * (resid / (n * (n - 1))) ** 0.5 / (sd / n), 6)
        got = (self.w_steps, n, share, pm)
        self.w_steps = self.w_probes = 0
        self.w_sums = [0.0] * 5
        return got

    def stop(self, t_ns: int) -> None:
        """The job's end: the open gap closes at ``t_ns``, the thread ends (before the hooks come out)."""
        self.close(t_ns, False)
        torch_hooks.gap_ended = None
        self._stopped = True
        self._wake.set()
        th_ = self._thread
        if th_ is not None and th_ is not threading.current_thread():
            th_.join(timeout=1.0)

    # --- the thread ---------------------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopped:
            if not self.open:
                self._wake.wait()  # no gap: asleep until the next one opens (no wake-up per tick)
                self._wake.clear()
                continue
            time.sleep(self._visit(_perf()))

    def _visit(self, now: int) -> float:
        """One look at the open gap: a probe when one is due, the close when the monitor's next event or the epoch's
        end is near. Returns the seconds until the next look: the next probe, or just before the event (so a tick
        of MONITOR_GAP_HZ does not cost the gap its last tick of steps, hooked)."""
        y = torch_hooks.batches_yielded(self.held) if self.held is not None else None
        tick_ns = int(self.tick_s * 1e9)
        if y is not None and sys.getrefcount(self.held) <= 2:  # this attribute's and the call's: the job dropped it
            self.last_y, self.dropped = y, True
            self.held = None  # (it dies here, in this thread: a tick after the job let go of it)
            y = None
        with self._lock:
            if not self.open:
                return 0.0
            if y is not None:
                self.last_y, self.last_ns = y, now
            if self.closing or y is None:
                self.closing = True
                torch_hooks.hook_next(True)  # (again: a probe's end may have taken it off meanwhile)
                return self.tick_s
            k = y - self.n0
            rate = k / (now - self.t_open) if k > 0 and now > self.t_open else self.rate  # steps per ns
            margin = self.margin(rate)
            left = self.epoch_len - y
            due_in = self.due_in(now, self.n_open + k, rate)
            if due_in <= _EARLY_NS or left <= margin:
                self.closing = True
                torch_hooks.hook_next(True)
                return self.tick_s
            if now >= self.next_probe_ns:
                self.next_probe_ns = now + tick_ns
                if self.probe == 0:
                    self.probe = 1
                    torch_hooks.hook_next(True)
            wait = min(self.next_probe_ns - now, due_in - _EARLY_NS // 2,
                       int((left - margin) / rate) if rate > 0 else tick_ns)
        return max(0.001, wait / 1e9)
