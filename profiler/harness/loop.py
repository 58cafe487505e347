"""The main loop: wait for a batch, copy it to the device, compute; timed per step.

On the CPU, host clocks are exact: the model runs synchronously in this thread. On CUDA, host clocks would measure
kernel *launches*, not execution, so every step records three CUDA events (before H2D, after H2D, after compute) on
the current stream. Nothing synchronizes per step: events are resolved lazily once they have completed
(``Event.query()``), and the rest after one synchronize at the end. Device times are mapped onto the host clock
through an anchor event recorded right after a synchronize at the start of the measured window.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from .timed import BatchMeta

# Resolve finished CUDA events every this many steps: bounds live events on long runs without adding syncs.
RESOLVE_EVERY = 32


class OutOfDeviceMemory(Exception):
    """The model step ran out of device memory; the runner ends the run with verdict ``memory``."""

    def __init__(self, step: int, message: str):
        super().__init__(message)
        self.step = step


@dataclass
class StepRow:
    step: int
    batch_no: int
    worker_id: int
    pid: int
    n_samples: int
    wait_start_ns: int
    wait_end_ns: int
    h2d_start_ns: int = 0  # host-clock domain; on CUDA mapped from device events
    h2d_end_ns: int = 0
    compute_end_ns: int = 0
    idle_ns: int = 0  # compute device idle before this step's work (CPU: the wait; CUDA: device gap)
    host_step_end_ns: int = 0
    measured: bool = True  # False for warm-up steps: kept for the timeline, excluded from every figure


@dataclass
class LoopResult:
    steps: list[StepRow] = field(default_factory=list)
    metas: list[BatchMeta] = field(default_factory=list)
    window_start_ns: int = 0
    window_end_ns: int = 0
    device_timing: str = "host clocks"
    peak_device_memory_bytes: int | None = None
    error: BaseException | None = None


class _CudaEvents:
    """Per-step CUDA events, resolved lazily into host-domain nanoseconds."""

    def __init__(self, anchor_host_ns: int):
        self.anchor = torch.cuda.Event(enable_timing=True)
        self.anchor.record()
        self.anchor_host_ns = anchor_host_ns
        self.pending: list[tuple[StepRow, Any, Any, Any]] = []
        self.prev_end_ns = anchor_host_ns

    def record(self) -> Any:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def _host(self, ev) -> int:
        return self.anchor_host_ns + int(self.anchor.elapsed_time(ev) * 1e6)

    def resolve(self, force: bool = False) -> None:
        if force:
            torch.cuda.synchronize()
        while self.pending:
            row, e0, e1, e2 = self.pending[0]
            if not force and not e2.query():
                break
            self.pending.pop(0)
            row.h2d_start_ns, row.h2d_end_ns, row.compute_end_ns = self._host(e0), self._host(e1), self._host(e2)
            row.idle_ns = max(0, row.h2d_start_ns - self.prev_end_ns)
            self.prev_end_ns = row.compute_end_ns


def make_step_fn(model: torch.nn.Module | None, mode: str, device: torch.device, amp: bool
                 ) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """The compute of one step: forward (+ loss, backward, optimizer step in train mode)."""
    if model is None:
        return lambda x, y: None
    loss_fn = torch.nn.CrossEntropyLoss()
    # SGD with momentum 0.9, lr 0.1 x batch/256: torchvision's ResNet recipe. The value does not change speed.
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9) if mode == "train" else None
    autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if amp else None

    def train_step(x, y):
        if autocast:
            with autocast():
                loss = loss_fn(model(x), y)
        else:
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def infer_step(x, y):
        with torch.inference_mode():
            if autocast:
                with autocast():
                    model(x)
            else:
                model(x)

    if mode == "train":
        model.train()
        return train_step
    model.eval()
    return infer_step


def run_loop(batches, step_fn, device: torch.device, total_steps: int, warmup: int, pin_memory: bool,
             on_step: Callable[[StepRow, bool], None] | None = None,
             on_meta: Callable[[BatchMeta], None] | None = None) -> LoopResult:
    """Iterate ``batches`` for up to ``total_steps`` steps; the first ``warmup`` are run but not kept.

    Errors end the loop but never lose what was measured: the exception is stored in ``LoopResult.error`` and the
    caller writes a partial record. KeyboardInterrupt is stored the same way.
    """
    cuda = device.type == "cuda"
    res = LoopResult(device_timing="cuda events" if cuda else "host clocks")
    clock = time.perf_counter_ns
    events: _CudaEvents | None = None
    it = iter(batches)
    step = 0
    try:
        while step < total_steps:
            measured = step >= warmup
            if step == warmup:
                if cuda:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                res.window_start_ns = clock()
                if cuda:
                    events = _CudaEvents(res.window_start_ns)
            t_wait0 = clock()
            try:
                images, labels, meta = next(it)
            except StopIteration:
                break
            t_wait1 = clock()
            if on_meta is not None:
                on_meta(meta)
            row = StepRow(step, meta.batch_no, meta.worker_id, meta.pid, 0 if images is None else len(images),
                          t_wait0, t_wait1, measured=measured)
            if images is not None:
                try:
                    if cuda and measured:
                        e0 = events.record()
                    x = images.to(device, non_blocking=pin_memory)
                    y = labels.to(device, non_blocking=pin_memory)
                    if cuda and measured:
                        e1 = events.record()
                    step_fn(x, y)
                    if cuda and measured:
                        e2 = events.record()
                except torch.cuda.OutOfMemoryError as e:
                    raise OutOfDeviceMemory(step, str(e).splitlines()[0]) from None
            row.host_step_end_ns = clock()
            if cuda and measured and images is not None:
                events.pending.append((row, e0, e1, e2))
                if step % RESOLVE_EVERY == 0:
                    events.resolve()
            else:
                # CPU: host clocks are the device clock. CUDA warm-up steps: host figures, for the timeline only.
                row.h2d_start_ns = row.h2d_end_ns = t_wait1
                row.compute_end_ns = row.host_step_end_ns
                row.idle_ns = t_wait1 - t_wait0
            res.steps.append(row)
            res.metas.append(meta)
            if on_step is not None:
                on_step(row, measured)
            step += 1
    except BaseException as e:  # KeyboardInterrupt included: keep what was measured
        res.error = e
    finally:
        if cuda:
            try:
                if events is not None:
                    events.resolve(force=True)
                # after an OOM in warm-up this is the peak before the failed allocation, still worth recording
                res.peak_device_memory_bytes = int(torch.cuda.max_memory_allocated())
            except Exception:  # a CUDA error after OOM can poison later calls; keep host-side figures
                pass
        res.window_end_ns = clock()
        last = [r for r in res.steps if r.measured]
        if last and not cuda:
            res.window_end_ns = last[-1].compute_end_ns
        elif last and last[-1].compute_end_ns:
            res.window_end_ns = max(last[-1].compute_end_ns, last[-1].host_step_end_ns)
        if not res.window_start_ns:  # interrupted during warm-up: an empty window
            res.window_start_ns = res.window_end_ns
    return res


def steps_to_columns(steps: list[StepRow], t0_ns: int) -> dict[str, list]:
    """Columnar, JSON-ready step table; times in seconds since t0 (µs resolution)."""
    def s(v: int) -> float:
        return round((v - t0_ns) / 1e9, 6)

    return {
        "step": [r.step for r in steps],
        "batch": [r.batch_no for r in steps],
        "worker": [r.worker_id for r in steps],
        "samples": [r.n_samples for r in steps],
        "wait_start": [s(r.wait_start_ns) for r in steps],
        "wait_end": [s(r.wait_end_ns) for r in steps],
        "h2d_start": [s(r.h2d_start_ns) for r in steps],
        "h2d_end": [s(r.h2d_end_ns) for r in steps],
        "compute_end": [s(r.compute_end_ns) for r in steps],
        "idle": [round(r.idle_ns / 1e9, 6) for r in steps],
        "measured": [r.measured for r in steps],
    }


def metas_to_columns(metas: list[BatchMeta], received_ns: list[int], t0_ns: int) -> tuple[dict, dict]:
    """(batches, sample spans) as columnar tables; times in seconds since t0."""
    def s(v) -> float:
        return round((int(v) - t0_ns) / 1e9, 6)

    batches = {"batch": [], "worker": [], "pid": [], "collate_start": [], "collate_end": [], "received": [],
               "samples": [], "rchar": [], "read_bytes": []}
    cols = {k: [] for k in ("batch", "worker", "index", "read_start", "read_end", "decode_end", "augment_end",
                            "bytes", "pixels")}
    for m, recv in zip(metas, received_ns):
        batches["batch"].append(m.batch_no)
        batches["worker"].append(m.worker_id)
        batches["pid"].append(m.pid)
        batches["collate_start"].append(s(m.collate_start_ns))
        batches["collate_end"].append(s(m.collate_end_ns))
        batches["received"].append(s(recv))
        batches["samples"].append(int(m.samples.shape[0]))
        batches["rchar"].append(int(m.io[0]))
        batches["read_bytes"].append(int(m.io[1]))
        a = m.samples
        n = a.shape[0]
        cols["batch"].extend([m.batch_no] * n)
        cols["worker"].extend([m.worker_id] * n)
        cols["index"].extend(a[:, 0].tolist())
        for name, c in (("read_start", 1), ("read_end", 2), ("decode_end", 3), ("augment_end", 4)):
            cols[name].extend(np.round((a[:, c] - t0_ns) / 1e9, 6).tolist())
        cols["bytes"].extend(a[:, 5].tolist())
        cols["pixels"].extend(a[:, 6].tolist())
    return batches, cols
