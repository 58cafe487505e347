"""From a finished Session to the record's raw sections: the v2 timeline (columnar), window, job, skipped files.

Times become seconds since the run started (µs resolution); nothing is averaged here — analysis derives every figure
from these columns (docs/run_json.md).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .session import Session


def _sec(v: Any, t0: int) -> Any:
    return np.round((np.asarray(v, dtype=np.int64) - t0) / 1e9, 6).tolist()


def _dur(v: Any) -> Any:
    return np.round(np.maximum(np.asarray(v, dtype=np.int64), 0) / 1e9, 6).tolist()


def samples_per_call(items: np.ndarray, held: int, returned: int) -> np.ndarray:
    """Samples each dataset call of a batch contributed, so that they sum to what the batch holds.

    A call's ``items`` is what the profiler saw go in (1 per ``__getitem__``, ``len(indices)`` per ``__getitems__``,
    1 per ``next()`` of an iterable). When the batch holds another number — a batching dataset under
    ``batch_size=None`` or webdataset's ``.batched()`` yields 16 samples per ``next()`` — the batch's own count is
    shared out over its calls by their items, so per-sample stage times divide by the samples really returned.
    Skipped samples (reported by the dataset) explain a shortfall themselves and are left as they are."""
    items = np.asarray(items, dtype=np.int64)
    if not items.size or held <= 0 or held == int(items.sum()) or held == returned:
        return items
    w = np.maximum(items, 0).astype(np.float64)
    w = w / w.sum() if w.sum() > 0 else np.full(items.size, 1.0 / items.size)
    exact = held * w
    out = np.floor(exact).astype(np.int64)
    rest = held - int(out.sum())
    if rest > 0:  # largest remainders first, so the shares sum exactly to the batch's count
        out[np.argsort(out - exact)[:rest]] += 1
    return out


def timeline(s: Session) -> dict[str, Any]:
    t0 = s.t0_ns
    rows = [r for r in s.rows if r.compute_end_ns]  # a step still waiting when the run ended has no end
    steps = {
        "step": [r.step for r in rows], "epoch": [r.epoch for r in rows], "batch": [r.batch for r in rows],
        "worker": [r.worker_id for r in rows], "samples": [r.n_samples for r in rows],
        "wait_start": _sec([r.wait_start_ns for r in rows], t0), "wait_end": _sec([r.wait_end_ns for r in rows], t0),
        "h2d_start": _sec([r.h2d_start_ns for r in rows], t0), "h2d_end": _sec([r.h2d_end_ns for r in rows], t0),
        "compute_end": _sec([r.compute_end_ns for r in rows], t0), "idle": _dur([r.idle_ns for r in rows]),
        "measured": [r.measured for r in rows],
        "main_cpu": _dur([r.main_cpu_ns for r in rows]), "main_runq": _dur([r.main_runq_ns for r in rows]),
        "profiler_wait": _dur([r.own_wait_ns for r in rows]), "profiler_rest": _dur([r.own_rest_ns for r in rows]),
    }
    received = {r.batch: r.wait_end_ns for r in s.rows if r.batch >= 0}
    held = {r.batch: r.n_samples for r in s.rows if r.batch >= 0}
    metas = [(i, m) for i, m in enumerate(s.metas) if i in received]
    batches: dict[str, list] = {k: [] for k in ("batch", "worker", "pid", "collate_start", "collate_end", "sent",
                                                "received", "samples", "rchar", "read_bytes", "collate_cpu",
                                                "collate_runq", "gap_start", "gap_end", "gap_cpu", "gap_runq")}
    span_cols = ("batch", "worker", "index", "items", "start", "end", "cpu", "runq", "rchar", "read_bytes", "pixels")
    spans: dict[str, Any] = {k: [] for k in span_cols}  # columns, then "stages": name -> column
    stage_parts: dict[str, list[np.ndarray]] = {}
    n_rows = 0
    for b, m in metas:
        c0, c1, ccpu, crunq = m.collate
        if not c0:  # a fetch without collate (should not happen): an empty span at the last sample's end
            c0 = c1 = int(m.rows[-1, 1]) if m.rows.size else received[b]
        batches["batch"].append(b)
        batches["worker"].append(m.worker_id)
        batches["pid"].append(m.pid)
        batches["collate_start"].append(c0)
        batches["collate_end"].append(c1)
        batches["sent"].append(m.sent_ns if m.sent_ns >= c1 else c1)
        batches["received"].append(received[b])
        items = samples_per_call(m.rows[:, 7], held[b], m.items - len(m.skipped))
        batches["samples"].append(int(items.sum()) if items.size else m.items)
        batches["rchar"].append(int(m.io[0]))
        batches["read_bytes"].append(int(m.io[1]))
        batches["collate_cpu"].append(ccpu)
        batches["collate_runq"].append(crunq)
        g0, g1, gcpu, grunq = m.gap
        batches["gap_start"].append(g0 or c0)  # unknown: an empty gap
        batches["gap_end"].append(g1 or c0)
        batches["gap_cpu"].append(gcpu)
        batches["gap_runq"].append(grunq)
        n = m.rows.shape[0]
        a = m.rows
        spans["batch"].extend([b] * n)
        spans["worker"].extend([m.worker_id] * n)
        spans["index"].extend(a[:, 6].tolist())
        spans["items"].extend(items.tolist())
        spans["pixels"].extend(a[:, 8].tolist())
        for col, j in (("start", 0), ("end", 1)):
            spans[col].append(a[:, j])
        for col, j in (("cpu", 2), ("runq", 3)):
            spans[col].append(a[:, j])
        spans["rchar"].extend(np.maximum(a[:, 4], 0).tolist())
        spans["read_bytes"].extend(np.maximum(a[:, 5], 0).tolist())
        for name in set(stage_parts) | set(m.stages):
            part = m.stages.get(name)
            stage_parts.setdefault(name, [np.zeros(n_rows, dtype=np.int64)] if n_rows else [])
            stage_parts[name].append(part if part is not None else np.zeros(n, dtype=np.int64))
        n_rows += n
    for col in ("start", "end"):
        spans[col] = _sec(np.concatenate(spans[col]) if spans[col] else [], t0)
    for col in ("cpu", "runq"):
        spans[col] = _dur(np.concatenate(spans[col]) if spans[col] else [])
    spans["stages"] = {k: _dur(np.concatenate(v)) for k, v in sorted(stage_parts.items())}
    for col in ("collate_start", "collate_end", "sent", "received", "gap_start", "gap_end"):
        batches[col] = _sec(batches[col], t0)
    for col in ("collate_cpu", "collate_runq", "gap_cpu", "gap_runq"):
        batches[col] = _dur(batches[col])
    epochs = {"epoch": [e.epoch for e in s.epochs], "iter_start": _sec([e.iter_start_ns for e in s.epochs], t0),
              "iter_end": _sec([e.iter_end_ns for e in s.epochs], t0),
              "first_batch": _sec([e.first_batch_ns or e.iter_end_ns for e in s.epochs], t0)}
    out = {"steps": steps, "batches": batches, "sample_spans": spans, "epochs": epochs,
           "accounting": s.accounting, "time_unit": "s since run start"}
    if s.tail.steps:
        tl = s.tail
        out["tail"] = {"steps": tl.steps, "samples": tl.samples, "wait_s": round(tl.wait_ns / 1e9, 6),
                       "idle_s": round(tl.idle_ns / 1e9, 6), "h2d_s": round(tl.h2d_ns / 1e9, 6),
                       "compute_s": round(tl.compute_ns / 1e9, 6), "main_runq_s": round(tl.runq_estimate_ns() / 1e9, 6),
                       "profiler_wait_s": round(tl.own_wait_ns / 1e9, 6),
                       "profiler_rest_s": round(tl.own_rest_ns / 1e9, 6),
                       "start_s": round((tl.first_ns - t0) / 1e9, 6), "end_s": round((tl.last_ns - t0) / 1e9, 6),
                       "detail_steps": s.detail_steps,
                       "hist_us_log2": {k: list(v) for k, v in tl.hist.items()}}
    return out


def window(s: Session) -> dict[str, Any]:
    measured = [r for r in s.rows if r.measured and r.compute_end_ns]
    return {"start_s": round((s.window_start_ns - s.t0_ns) / 1e9, 6),
            "end_s": round((s.window_end_ns - s.t0_ns) / 1e9, 6),
            "seconds": round(max(0, s.window_end_ns - s.window_start_ns) / 1e9, 6),
            "steps": len(measured) + s.tail.steps, "samples": sum(r.n_samples for r in measured) + s.tail.samples,
            "warmup_steps": s.warmup}


def skipped(s: Session, extra: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    seen: dict[str, str] = {}
    for path, reason in extra or []:
        seen.setdefault(path, reason)
    for m in s.metas:
        for _, path, reason in m.skipped:
            seen.setdefault(path, reason)
    for _, path, reason in s.tail_skipped:
        seen.setdefault(path, reason)
    return {"count": len(seen), "files": [{"path": k, "reason": v} for k, v in sorted(seen.items())]}
