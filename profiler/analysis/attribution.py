"""Attribute every second the compute device sat idle waiting for input to io, cpu, transfer or other.

Method (docs/attribution.md has the long form):
1. Idle time per measured step. CPU: the main thread's wait in ``next()`` (the model cannot run meanwhile). CUDA: the
   gap on the device timeline between the previous step's compute end and this step's H2D start (CUDA events).
2. Each step waited for one batch, made by one worker ``w``. For each instant of the host wait interval
   ``[wait_start, wait_end]`` we ask what the batch was doing:
   - after the worker finished collating it (``collate_end``) and before the main process held it: ``transfer``
     (worker→main queue and shared memory, pin-memory thread);
   - before that, what worker ``w`` was doing at that instant, from its spans (for any of its batches, since a worker
     busy with its previous batch is exactly why this one is late): reading a file → ``io``; decoding, augmenting
     or collating → ``cpu``;
   - anything else (worker between spans: Python overhead, GC, the sampler's index queue, process start) → ``other``.
3. On CUDA the device gap and the host wait need not be equal: the gap's part up to the wait's length is split in the
   wait's proportions; any gap beyond the wait (e.g. the host busy launching kernels) is ``other``.
So ``by_cause`` sums to the idle seconds exactly, by construction.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .stats import Tables

CAUSES = ("io", "cpu", "transfer", "other")
DETAIL = ("read", "decode", "augment", "collate", "transfer", "other")
DETAIL_CAUSE = {"read": "io", "decode": "cpu", "augment": "cpu", "collate": "cpu", "transfer": "transfer",
                 "other": "other"}
_CAT = {"read": 0, "decode": 1, "augment": 2, "collate": 3}


class _WorkerSpans:
    """One worker's non-overlapping activity intervals, sorted, for fast overlap queries."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray, cats: np.ndarray):
        order = np.argsort(starts, kind="stable")
        self.s, self.e, self.c = starts[order], ends[order], cats[order]
        # Spans of one worker are sequential, so ends are sorted too, up to clock jitter; enforce it for searchsorted.
        self.e_sorted = np.maximum.accumulate(self.e) if self.e.size else self.e

    def overlap(self, a: float, b: float) -> np.ndarray:
        """Seconds of [a, b] spent in each category (read, decode, augment, collate)."""
        out = np.zeros(4)
        if b <= a or self.s.size == 0:
            return out
        lo = int(np.searchsorted(self.e_sorted, a, side="right"))
        hi = int(np.searchsorted(self.s, b, side="left"))
        if hi <= lo:
            return out
        ov = np.minimum(self.e[lo:hi], b) - np.maximum(self.s[lo:hi], a)
        ov = np.clip(ov, 0.0, None)
        np.add.at(out, self.c[lo:hi], ov)
        return out


def _worker_spans(t: Tables) -> dict[int, _WorkerSpans]:
    sp, bt = t.spans, t.batches
    by_worker: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    if sp.get("worker") is not None and sp["worker"].size:
        for lo_key, hi_key, cat in (("read_start", "read_end", "read"), ("read_end", "decode_end", "decode"),
                                    ("decode_end", "augment_end", "augment")):
            for w in np.unique(sp["worker"]):
                m = sp["worker"] == w
                by_worker.setdefault(int(w), []).append(
                    (sp[lo_key][m], sp[hi_key][m], np.full(int(m.sum()), _CAT[cat])))
    if bt.get("worker") is not None and bt["worker"].size:
        for w in np.unique(bt["worker"]):
            m = bt["worker"] == w
            by_worker.setdefault(int(w), []).append(
                (bt["collate_start"][m], bt["collate_end"][m], np.full(int(m.sum()), _CAT["collate"])))
    return {w: _WorkerSpans(np.concatenate([p[0] for p in parts]).astype(float),
                            np.concatenate([p[1] for p in parts]).astype(float),
                            np.concatenate([p[2] for p in parts]).astype(int))
            for w, parts in by_worker.items()}


def attribute(t: Tables, window_s: float) -> dict[str, Any]:
    """The ``stall`` section: fraction, seconds, by_cause, by_stage, and per-step attribution for the renderers."""
    st, bt = t.steps, t.batches
    n = int(st["wait_start"].size) if "wait_start" in st else 0
    per_step = np.zeros((n, len(DETAIL)))
    spans = _worker_spans(t)
    batch_pos = {int(b): i for i, b in enumerate(bt.get("batch", np.array([])))}
    for i in range(n):
        a, b = float(st["wait_start"][i]), float(st["wait_end"][i])
        wait = max(0.0, b - a)
        idle = max(0.0, float(st["idle"][i]))
        if idle <= 0:
            continue
        detail = np.zeros(len(DETAIL))
        if wait > 0:
            j = batch_pos.get(int(st["batch"][i]))
            ce = float(bt["collate_end"][j]) if j is not None else b
            transfer = max(0.0, min(b, float(bt["received"][j]) if j is not None else b) - max(a, ce))
            ws = spans.get(int(st["worker"][i]))
            busy = ws.overlap(a, min(b, ce)) if ws is not None else np.zeros(4)
            detail[:4] = busy
            detail[4] = transfer
            detail[5] = max(0.0, wait - busy.sum() - transfer)
            # Scale to the idle time: on CPU idle == wait (factor 1); on CUDA the gap may differ from the wait.
            explained = min(idle, wait)
            detail *= explained / wait
            detail[5] += idle - explained
        else:
            detail[5] = idle
        per_step[i] = detail
    by_stage = {k: float(per_step[:, j].sum()) for j, k in enumerate(DETAIL)}
    by_cause = {c: 0.0 for c in CAUSES}
    for k, v in by_stage.items():
        by_cause[DETAIL_CAUSE[k]] += v
    seconds = float(per_step.sum())
    # Exactness: round the parts and put the rounding residue into `other` so the parts sum to `seconds` exactly.
    by_cause = {k: round(v, 6) for k, v in by_cause.items()}
    seconds = round(seconds, 6)
    by_cause["other"] = max(0.0, round(seconds - (by_cause["io"] + by_cause["cpu"] + by_cause["transfer"]), 6))
    seconds = round(sum(by_cause.values()), 6)
    return {
        "seconds": seconds,
        "fraction": round(seconds / window_s, 6) if window_s > 0 else 0.0,
        "by_cause": by_cause,
        "by_stage": {k: round(v, 6) for k, v in by_stage.items()},
        "share_by_cause": {k: (round(v / seconds, 4) if seconds > 0 else 0.0) for k, v in by_cause.items()},
        "per_step": {k: [round(float(x), 6) for x in per_step[:, j]] for j, k in enumerate(DETAIL)},
    }
