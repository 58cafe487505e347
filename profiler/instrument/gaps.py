"""Monitor gaps: the stretches between detail chunks where the profiler's per-step Python is off the job's path.

NOTE [ Monitor gaps ]
    Under ``profiler monitor`` a light step (outside the detail) cost ~2 µs of the profiler's own Python between
    ``next()`` and the job's model step: +2.5-6 % of a light loop's CPU, where the target is 1 % (docs/monitor.md §
    Cost). So between detail chunks the monitor takes its ``__next__`` hook off the loader's path: torch's own
    ``__next__`` runs inside ``torch_hooks._gap_next``, which adds an attribute read and a comparison per step, a
    clock read every few steps (MONITOR_GAP_CLOCK_EVERY_S), ~0.05-0.1 µs a step, and calls back into this module
    (``_look``, on the main thread) only when something is due: a *look*, by the clock (the next probe, the
    monitor's next event by time) or by the iterator's own batch count (the monitor's next event by step, the
    epoch's end). With ``num_workers=0`` torch's own fetch makes the gap's batches (torch_hooks.fetch_untimed).

    Why no thread (until 2026-12-06 a daemon thread did the looks, 10 times a second): on the 2-core VM a loop with
    a sleeping 10 Hz Python thread beside it cost +1.15 % CPU per step, and one that had merely started and joined a
    thread +0.49 % (concurrent pairs, scripts/paired_processes.py): the thread alone was over the 1 % budget. The
    looks are on the job's thread now, at the step where they fall due, which also makes the closes exact: a gap
    ends at the step the monitor's event needs, not at a thread's estimate of it.

    - *Counting*: the iterator's own batch count (torch_hooks.batches_yielded, seam 9), also copied per step into
      ``torch_hooks.gap_y`` (a job that drops the iterator mid-gap takes its count with it); at the gap's close the
      steps in between go into the Session's tail totals at once: steps exact, samples as the step before the gap's
      (a constant batch size); the epoch's last batch, if it fell in the gap, by its own size
      (LoaderInfo.last_batch_samples: a partial last batch).
    - *The wait share*: a look turns the hook back on for one step MONITOR_GAP_HZ times a second (a *probe*): that
      step's wait and its whole length are timed (its ``next()``, then the next one's entry), and the hook goes off
      again. The gap's wait is the probes' ratio estimate (their waits over their lengths) applied to its time. A
      probe times the step *after* the look that the clock chose, so the choice is independent of its length.
    - *Closing*: a look turns the hook on for good when the monitor's next event (chunk or cut: the Session's
      ``due_step`` *and* ``due_ns``) is due, or when the epoch has MONITOR_GAP_EPOCH_MARGIN batches left (its end,
      StopIteration and all, is then seen by the hook as in ``run``), or when another iterator's step called it.
      The next ``next()`` on the hooked path closes the gap (``close``) and carries on as a light step. A new
      ``iter()`` of any loader closes it at once (tracking.py): the open step is then the one in progress, with its
      wait taken as 0 (the time since its ``next()`` is counted in the gap's steps). An epoch that ends inside a gap
      all the same ends its steps at its StopIteration (torch_hooks.gap_ended). The gap holds its iterator only by
      a weak reference: a job that breaks out of its loop mid-gap lets it (and its workers) go at once.

    What the window then says: steps and samples exact as before; the idle time of its gap steps estimated (their
    count: ``estimated_steps``, the probes behind it: ``probe_steps``, their own share and its 95 % half-width:
    ``probe_wait_share`` / ``_pm``); the cause split, as before, the detail's.
    Opened only where it cannot go wrong (``Gaps.may_open``): host clocks, a map-style dataset of known length,
    workers by ``fork`` (or none: their detail range is the epoch's), no other loader stepped since the last
    chunk (an interleaved loader would go uncounted), torch's ``_num_yielded`` present and the iterator's
    ``__next__`` the hooked one. ``run`` never has a Gaps object.
"""
from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING, Any, Callable

from .. import signals
from .. import thresholds as th
from . import torch_hooks

if TYPE_CHECKING:
    from .session import Session

_perf = time.perf_counter_ns
_NEVER = 1 << 62  # a look's threshold that is never reached (a count, or a perf_counter_ns)


class Gaps:
    """A Session's gaps (one open at a time), looked at from its iterator's ``__next__``; made by the monitor."""

    def __init__(self, session: Session, hz: float | None = None, min_s: float | None = None):
        # (the thresholds read here, not bound as defaults at import: scripts/paired_processes.py scales them)
        self.s = session
        self.tick_ns = int(1e9 / (th.MONITOR_GAP_HZ if hz is None else hz))
        self.min_ns = int((th.MONITOR_GAP_MIN_S if min_s is None else min_s) * 1e9)
        self.usable = not torch_hooks.gap_problems()
        self.open = False
        self.closing = False  # a look asked for the close (the hook is back on)
        self.probe = 0  # 0: none; 1: the hook is on for a probe; 2: its wait timed, its end is the next entry
        self.ref: weakref.ReferenceType[Any] | None = None  # the gap's iterator (weakly: the job may drop it)
        self.fetch_taken: tuple[Any, Any] | None = None  # its fetcher's fetch, taken off: torch_hooks.fetch_untimed
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
        self.next_probe_ns = 0
        # The window's figures, taken by the monitor at each cut (take_window)
        self.w_steps = self.w_probes = 0
        self.w_sums = [0.0] * 5  # the window's probes: Σ wait, Σ length, Σ wait², Σ length², Σ wait·length (ms)
        self.gaps = 0  # gaps opened (the tests' and the bench's)

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
        if y is None or li is None or not li.batches_per_epoch or li.batches_per_epoch - y <= self.margin() \
                or self.due_in(t_ns, self.s._n_steps, rate) < self.min_ns:
            return False
        try:
            self.ref = weakref.ref(it)
        except TypeError:  # (an iterator class with __slots__ and no __weakref__)
            return False
        self.n0, self.t_open, self.epoch_len = y, t_ns, int(li.batches_per_epoch)
        self.n_open, self.rate = self.s._n_steps, rate
        self.end_y = self.end_ns = 0
        self.next_probe_ns = t_ns + self.tick_ns
        self.probe = self.p_n = self.p_wait = self.p_span = 0
        self.closing = False
        self.open = True
        self.gaps += 1
        torch_hooks.gap_y = y
        torch_hooks.gap_ended = self._ended
        torch_hooks.gap_look = self._look
        self._arm(t_ns, y)
        torch_hooks.hook_next(False)
        self.fetch_taken = torch_hooks.fetch_untimed(it)  # num_workers=0: torch's own fetch makes the gap's batches
        return True

    def on_next(self, it: Any, orig: Callable[[Any], Any]) -> Any:
        """Session._on_next while a gap is open and the hook is on (a probe, or the close)."""
        s = self.s
        if self.closing or self.ref is None or it is not self.ref():
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
        if p == 1:
            self.probe = 2  # this step is the probe: the hook stays on for its end
        else:
            self.probe = 0
            torch_hooks.hook_next(False)
        try:
            data = orig(it)
        except BaseException as e:
            self.close(t0, True)  # the epoch's end (or the job's error) ends the gap's steps here
            s._wait_raised(e, t0)
            raise
        if p == 1:
            self.pw0, self.pw1 = t0, _perf()
        y = torch_hooks.batches_yielded(it)
        if y is not None:  # (a probe's steps count too: the job may drop the iterator after one)
            torch_hooks.gap_y = y
        return data.batch if data.__class__ is torch_hooks.Instrumented else data

    def _look(self, it: Any, y: int) -> None:
        """torch_hooks.gap_look: a step through the gap (``it`` handed out its ``y``-th batch) at which something
        may be due (a threshold of ``_arm`` reached). Main thread."""
        if not self.open or self.closing:
            torch_hooks.gap_due_ns = torch_hooks.gap_stop_y = _NEVER
            return
        if self.ref is None or it is not self.ref():  # another loader's iterator, stepped inside the gap
            self._close_next()
            return
        now = _perf()
        if now >= self.next_probe_ns:
            self.next_probe_ns = now + self.tick_ns
            if self.probe == 0:
                self.probe = 1
                torch_hooks.hook_next(True)
        self._arm(now, y)

    def _arm(self, now: int, y: int) -> None:
        """Close the gap if the monitor's event or the epoch's end is here, else set the next look's thresholds."""
        y_event = self.n0 + self.due_step - self.n_open  # the count at which the Session reaches the event's step
        y_end = self.epoch_len - self.margin()
        step_due, time_due = y >= y_event, now >= self.due_ns
        if step_due and time_due or y >= y_end:
            self._close_next()
            return
        torch_hooks.gap_stop_y = min(y_end, _NEVER if step_due else y_event)
        torch_hooks.gap_due_ns = min(self.next_probe_ns, _NEVER if time_due else self.due_ns)
        # The clock read every 2^j steps, 2^j steps lasting about MONITOR_GAP_CLOCK_EVERY_S at the gap's rate so far
        k = y - self.n0
        rate = k / (now - self.t_open) if k > 0 and now > self.t_open else self.rate  # steps per ns
        every = min(rate * th.MONITOR_GAP_CLOCK_EVERY_S * 1e9, th.MONITOR_GAP_CLOCK_EVERY_MAX)
        torch_hooks.gap_mask = (1 << (int(every).bit_length() - 1)) - 1 if every >= 1 else 0

    def _close_next(self) -> None:
        """The hook on for good: the next ``next()`` on its path closes the gap."""
        self.closing = True
        torch_hooks.gap_due_ns = torch_hooks.gap_stop_y = _NEVER
        torch_hooks.hook_next(True)

    def _ended(self, it: Any) -> None:
        """torch_hooks.gap_ended: an iterator's StopIteration inside a gap (main thread)."""
        if self.open and not self.end_ns and self.ref is not None and it is self.ref():
            self.end_y, self.end_ns = torch_hooks.batches_yielded(it) or 0, _perf()

    def close(self, t_ns: int, boundary: bool) -> None:
        """End the gap at ``t_ns``: the steps it held go into the Session's tail totals. ``boundary``: ``t_ns`` is a
        ``next()`` of its iterator (the steps so far all end there); else the time of some other event (a new
        ``iter()``, the job's end): the step in progress, if the epoch has one, stays open from ``t_ns``."""
        if not self.open:
            return
        with signals.deferred():  # (a signal half-way would lose the gap's steps: the record's counts hold them)
            self._close(t_ns, boundary)

    def _close(self, t_ns: int, boundary: bool) -> None:
        self.open = self.closing = False
        self.probe = 0
        torch_hooks.hook_next(True)
        torch_hooks.gap_look = None
        torch_hooks.gap_due_ns = torch_hooks.gap_stop_y = _NEVER
        s = self.s
        s.due_step = s.due_ns = 0  # the monitor's callback at the next step (it publishes the next event again)
        it = self.ref() if self.ref is not None else None
        self.ref = None
        if self.fetch_taken is not None:
            if it is not None:  # (a dropped iterator took its fetcher with it)
                torch_hooks.fetch_timed_again(self.fetch_taken, it)
            self.fetch_taken = None
        y = torch_hooks.batches_yielded(it) if it is not None else None
        del it
        if self.end_ns:  # the epoch ended in the gap: its steps end with it (the time after is outside any step)
            y, t_ns, boundary = self.end_y, self.end_ns, True
        elif y is None:  # the job dropped the iterator mid-epoch: its last count, copied at its last step
            y = torch_hooks.gap_y
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
        if exhausted and k > 0 and last is not None:  # the epoch's last batch was handed out in the gap (it ended
            tail.samples += last - n  # there): its own size, not the full batch before the gap (a partial last one)
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
    def margin() -> int:
        """Batches of the epoch a gap leaves to the hook (MONITOR_GAP_EPOCH_MARGIN)."""
        return th.MONITOR_GAP_EPOCH_MARGIN

    def due_in(self, now: int, steps: int, rate: float) -> int:
        """ns until the monitor's next event (its step ``due_step`` *and* its time ``due_ns``) at ``rate`` steps per
        ns, the job at step ``steps`` (an unknown rate: a tick away)."""
        to_step = self.due_step - steps
        by_steps = 0 if to_step <= 0 else int(to_step / rate) if rate > 0 else self.tick_ns
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
        """The job's end: the open gap closes at ``t_ns`` (before the hooks come out)."""
        self.close(t_ns, False)
        torch_hooks.gap_ended = None
        torch_hooks.gap_look = None
