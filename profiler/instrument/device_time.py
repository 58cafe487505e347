"""Device time on CUDA, resolved at the window's close: each measured step's idle time by the device's own clock
(CudaTimeline's events), or its host figures where the events never resolved. The device half of session.Session (a
mixin: the state is the session's, declared here for the types).

Device time on CUDA (the job's current device and stream when the window opens): CUDA events at every boundary —
``B`` on entering ``next()``, ``A`` when the batch is in hand, and the built-in pipeline's h2d stage between its own
pair — resolved lazily (``Event.query()``), never synchronised per step. ``A - B`` is the time the device had nothing
queued because the host was waiting for input; an H2D copy on the compute stream keeps the compute units idle too
and is counted as transfer idle time. Every event is timed against the *previous* one (``elapsed_time`` of a short
pair, float32 ms of a small number) and the chain is summed in float64 from one anchor taken after a synchronize when
the window opens, so resolution does not decay over a long run (one anchor plus float32 offsets would fall to
~250 µs after an hour).

NOTE [ Device idle ]
    A step's device idle is the gap between its ``wait_start_dev`` and ``wait_end_dev`` events (the device had nothing
    queued while the host waited for input) plus its h2d stage on the compute stream; without an h2d stage the device's
    step starts when the batch is in hand. A step whose events are missing keeps its host figure (wait end less wait
    start), and so does every step after a sticky CUDA error or an out-of-memory: never a guess.
"""
from __future__ import annotations

from .steps import CudaTimeline, StepRow, Tail


class DeviceTime:
    """The device half of session.Session."""

    cuda: CudaTimeline | None
    tail: Tail
    rows: list[StepRow]
    peak_device_memory_bytes: int | None

    def _device_step_done(self, r: StepRow) -> None:
        """A tail step's device times are known: its idle by the device's clock, then into the totals."""
        if r.tail:
            self._device_idle(r)
            self.tail.add(r)

    @staticmethod
    def _device_idle(r: StepRow) -> bool:
        ws, we = getattr(r, "wait_start_dev", 0), getattr(r, "wait_end_dev", 0)
        if not (ws and we and r.compute_end_ns):
            r.idle_ns = r.wait_end_ns - r.wait_start_ns
            return False
        if not getattr(r, "h2d_seen", False):  # no h2d stage: the device's step starts when the batch is in hand
            r.h2d_start_ns = r.h2d_end_ns = we
        r.idle_ns = max(0, we - ws) + max(0, r.h2d_end_ns - r.h2d_start_ns)
        return True

    def _resolve_device(self) -> None:
        import torch

        cuda = self.cuda
        assert cuda is not None
        try:
            cuda.resolve(force=True)
            self.peak_device_memory_bytes = int(torch.cuda.max_memory_allocated())
        except Exception:  # noqa: BLE001 - after an OOM or a sticky error: unresolved steps keep host figures
            for ev, r, which in cuda.queue:  # tail steps whose events never resolved: host figures
                if which == "compute_end_ns" and r.tail:
                    r.idle_ns = r.wait_end_ns - r.wait_start_ns
                    self.tail.add(r)
            return
        for r in self.rows:
            if r.measured and self._device_idle(r):
                r.device_ok = True
