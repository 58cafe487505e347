"""Attribute every second the compute device sat idle waiting for input — by stage (where) and by kind (what).

Method (docs/attribution.md has the long form):
1. Idle time per measured step. CPU: the main thread's wait in ``next()`` (the model cannot run meanwhile). CUDA: the
   device-timeline gap between entering ``next()`` and having the batch (CUDA events), plus the H2D copy of the
   built-in pipeline (the compute units are idle during a copy on the compute stream) — counted as ``transfer``.
2. The gap is the *tail* of the host wait: the interval ``[wait_end - gap, wait_end]`` (all of it on the CPU) is
   intersected with what the batch waited for was doing at each instant:
   - after its worker finished collating it: on its way to the main process. The part of that time the main
     thread spent waiting for a core (its run-queue delay during the wait) and the time the worker's queue thread
     took to pick the batch up is CPU contention (``cpu``, kind ``runqueue``); the rest is ``transfer`` — except
     with workers = 0, where the batch never moved: the main thread ran the loader's own code (``cpu``/``on_cpu``,
     stage ``other``);
   - before that, what its worker was doing at that instant (for any of its batches: a worker busy with its previous
     batch is exactly why this one is late): the dataset calls and collates overlapping the interval, each split by
     its own kernel accounting — on a core → ``cpu``/``on_cpu``, waiting for a core → ``cpu``/``runqueue``, blocked
     with block-device reads → ``io``/``blocked_device``, blocked without → ``io``/``blocked_other`` — and by its
     named sub-stages (read, decode, augment, the user's own) with the rest of the call as ``getitem``;
   - the worker between two fetches (torch's loop): its own kernel accounting of that gap — on a core →
     ``cpu``/``on_cpu``, waiting for a core → ``cpu``/``runqueue``, blocked on its index queue → ``other``; all
     stage ``other``;
   - instants no span covers (process start, a worker's first fetch) → ``other``; with workers = 0, the main
     thread's own run-queue and on-CPU time in the wait beyond its spans (the sampler, the loader's ``__next__``)
     → ``cpu``, the rest ``other``.
   A gap longer than the host wait (e.g. the host busy launching kernels) is ``other`` beyond the wait.
3. Records without kernel accounting (schema 1) use each stage's default cause from the registry (read → io).
So ``by_cause``, ``by_stage`` and ``by_kind`` each sum to the idle seconds exactly, by construction.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import vocab
from ..record.read import AccountingView, view
from .stats import Tables, ordered, sample_stage_seconds

if TYPE_CHECKING:  # annotations only
    from ..record.read import TailView
    from ..record.schema import ProfilerCost, Stall, Timeline

KIND_NAMES = tuple(vocab.KINDS)
_K = {k: i for i, k in enumerate(KIND_NAMES)}


class _WorkerSpans:
    """One worker's activity intervals with, per span, its kernel-kind shares and its stage shares."""

    def __init__(self, s: np.ndarray, e: np.ndarray, kinds: np.ndarray, stages: np.ndarray):
        order = np.argsort(s, kind="stable")
        self.s, self.e, self.kinds, self.stages = s[order], e[order], kinds[order], stages[order]
        # Spans of one worker are sequential, so ends are sorted too, up to clock jitter; enforce it for searchsorted.
        self.e_sorted = np.maximum.accumulate(self.e) if self.e.size else self.e

    def overlap(self, a: float, b: float) -> tuple[np.ndarray, np.ndarray]:
        """Seconds of [a, b] per kernel kind and per stage column."""
        kinds = np.zeros(self.kinds.shape[1])
        stages = np.zeros(self.stages.shape[1])
        if b <= a or self.s.size == 0:
            return kinds, stages
        lo = int(np.searchsorted(self.e_sorted, a, side="right"))
        hi = int(np.searchsorted(self.s, b, side="left"))
        if hi <= lo:
            return kinds, stages
        ov = np.clip(np.minimum(self.e[lo:hi], b) - np.maximum(self.s[lo:hi], a), 0.0, None)
        return ov @ self.kinds[lo:hi], ov @ self.stages[lo:hi]


def _kind_shares(wall: np.ndarray, cpu: np.ndarray, runq: np.ndarray, read_bytes: np.ndarray,
                 default: np.ndarray | None) -> np.ndarray:
    """Per span, the share of its wall time in each kernel kind (rows sum to 1)."""
    n = wall.size
    out = np.zeros((n, len(KIND_NAMES)))
    safe = np.where(wall > 0, wall, 1.0)
    on = np.clip(cpu / safe, 0.0, 1.0)
    rq = np.clip(runq / safe, 0.0, 1.0 - on)
    blocked = np.clip(1.0 - on - rq, 0.0, 1.0)
    out[:, _K["on_cpu"]] = on
    out[:, _K["runqueue"]] = rq
    dev = read_bytes > 0
    out[:, _K["blocked_device"]] = np.where(dev, blocked, 0.0)
    out[:, _K["blocked_other"]] = np.where(dev, 0.0, blocked)
    if default is not None:  # no kernel accounting for these spans: each stage's default cause, by its share
        none = (cpu <= 0) & (runq <= 0)
        out[none] = default[none]
    return out


def _default_kinds(stage_mat: np.ndarray, stage_names: list[str]) -> np.ndarray:
    """Kind shares from named stages alone (records without kernel accounting): io stages → blocked_device, the
    rest → on_cpu."""
    out = np.zeros((stage_mat.shape[0], len(KIND_NAMES)))
    for j, name in enumerate(stage_names):
        kind = "blocked_device" if vocab.stage(name).cause == "io" else "on_cpu"
        out[:, _K[kind]] += stage_mat[:, j]
    return out


def _worker_spans(t: Tables, stage_names: list[str], kernel: bool) -> dict[int, _WorkerSpans]:
    sp, bt = t.spans, t.batches
    col = {k: i for i, k in enumerate(stage_names)}
    parts: dict[int, list[tuple[np.ndarray, ...]]] = {}
    if sp["start"].size:
        s, e = sp["start"].astype(float), sp["end"].astype(float)
        wall = np.maximum(e - s, 0.0)
        per_stage = sample_stage_seconds(t)
        stage_mat = np.zeros((s.size, len(stage_names)))
        safe = np.where(wall > 0, wall, 1.0)
        for name, secs in per_stage.items():
            stage_mat[:, col[name]] = secs / safe
        default = None if kernel else _default_kinds(stage_mat, stage_names)
        kinds = _kind_shares(wall, sp["cpu"].astype(float),
                             sp["runq"].astype(float),
                             sp["read_bytes"].astype(float), default)
        for w in np.unique(sp["worker"]):
            m = sp["worker"] == w
            parts.setdefault(int(w), []).append((s[m], e[m], kinds[m], stage_mat[m]))
    if bt["batch"].size:
        s, e = bt["collate_start"].astype(float), bt["collate_end"].astype(float)
        wall = np.maximum(e - s, 0.0)
        default = None
        if not kernel:
            default = np.zeros((s.size, len(KIND_NAMES)))
            default[:, _K["on_cpu"]] = 1.0
        kinds = _kind_shares(wall, bt["collate_cpu"].astype(float),
                             bt["collate_runq"].astype(float), np.zeros_like(s), default)
        stage_mat = np.zeros((s.size, len(stage_names)))
        stage_mat[:, col["collate"]] = 1.0
        for w in np.unique(bt["worker"]):
            m = bt["worker"] == w
            parts.setdefault(int(w), []).append((s[m], e[m], kinds[m], stage_mat[m]))
    if kernel and "gap_start" in bt and bt["gap_start"].size:
        # Between fetches the worker runs torch's loop (on a core) or waits for a core to run it, or is blocked on
        # its index queue (the main process has not asked: no cause of ours, left "other").
        s, e = bt["gap_start"].astype(float), bt["gap_end"].astype(float)
        wall = np.maximum(e - s, 0.0)
        kinds = _kind_shares(wall, bt["gap_cpu"].astype(float), bt["gap_runq"].astype(float), np.zeros_like(s), None)
        kinds[:, _K["other"]] += kinds[:, _K["blocked_other"]]
        kinds[:, _K["blocked_other"]] = 0.0
        stage_mat = np.zeros((s.size, len(stage_names)))
        stage_mat[:, col["other"]] = 1.0
        keep = wall > 0
        for w in np.unique(bt["worker"][keep]):
            m = keep & (bt["worker"] == w)
            parts.setdefault(int(w), []).append((s[m], e[m], kinds[m], stage_mat[m]))
    return {w: _WorkerSpans(*(np.concatenate([p[i] for p in ps]) for i in range(4))) for w, ps in parts.items()}


def has_kernel_accounting(timeline: Timeline, t: Tables) -> bool:
    acc = view(AccountingView, timeline["accounting"])
    if "per-thread accounting" in acc.absent:  # a migrated schema-1 record: nothing was measured
        return False
    if acc.cpu_clock:  # written by a harness that measured per-thread CPU (schema 2)
        return True
    cpu = t.spans["cpu"]
    return bool(cpu.size and (cpu > 0).any())


def attribute(t: Tables, window_s: float, device_timing: str = "host clocks",
              kernel: bool = True) -> Stall:
    """The ``stall`` section: seconds, fraction, by_cause, by_stage, by_kind, per_step, share_by_cause."""
    st, bt = t.steps, t.batches
    n = int(st["wait_start"].size) if "wait_start" in st else 0
    stage_names = ordered(list(sample_stage_seconds(t)) + ["collate", "transfer", "h2d", "other"])
    stage_names = [k for k in stage_names if k in set(sample_stage_seconds(t)) | {"collate", "transfer", "h2d",
                                                                                   "other"}]
    scol = {k: i for i, k in enumerate(stage_names)}
    per_stage = np.zeros((n, len(stage_names)))
    per_kind = np.zeros((n, len(KIND_NAMES)))
    spans = _worker_spans(t, stage_names, kernel)
    batch_pos = {int(b): i for i, b in enumerate(bt["batch"])}
    cuda = device_timing == "cuda events"
    zero_runq = np.zeros(n)
    main_runq = st["main_runq"].astype(float) if n else zero_runq
    own_wait = (st["profiler_wait"] if "profiler_wait" in st else zero_runq).astype(float) if n else zero_runq
    main_cpu = st["main_cpu"].astype(float) if n else zero_runq
    taken_out = 0.0
    for i in range(n):
        a, b = float(st["wait_start"][i]), float(st["wait_end"][i])
        wait = max(0.0, b - a)
        idle = max(0.0, float(st["idle"][i]))
        if idle <= 0:
            continue
        h2d = max(0.0, float(st["h2d_end"][i] - st["h2d_start"][i])) if cuda else 0.0
        h2d = min(h2d, idle)
        gap = idle - h2d
        explained = min(gap, wait)
        lo = b - explained
        j = batch_pos.get(int(st["batch"][i]))
        ce = float(bt["collate_end"][j]) if j is not None else b
        sent = float(bt["sent"][j]) if j is not None and "sent" in bt else ce
        # On its way to the main process: [max(lo, ce), b]; contention first, the rest is transfer.
        tr = max(0.0, b - max(lo, ce))
        pickup = max(0.0, min(sent, b) - max(ce, lo))
        contention = min(tr, float(main_runq[i]) + pickup)
        kinds = np.zeros(len(KIND_NAMES))
        stages = np.zeros(len(stage_names))
        kinds[_K["runqueue"]] += contention
        if int(st["worker"][i]) < 0:
            # workers = 0: the batch was made in the main thread, nothing was transferred; after its collate the
            # main thread runs the loader's own code (pin_memory, bookkeeping): on a core, at no stage of ours.
            kinds[_K["on_cpu"]] += tr - contention
            stages[scol["other"]] += tr
        else:
            kinds[_K["transfer"]] += tr - contention
            stages[scol["transfer"]] += tr
        ws = spans.get(int(st["worker"][i]))
        if ws is not None and explained > 0:
            kind_s, stage_s = ws.overlap(lo, min(b, ce))
            kinds += kind_s
            stages += stage_s
        rest = max(0.0, explained - kinds.sum())
        own = min(float(own_wait[i]), idle)  # the step's split sums to its idle time
        if int(st["worker"][i]) < 0 and kernel and rest > 0 and wait > 0:
            rest -= _main_thread_rest(kinds, rest - min(own, rest), explained / wait,
                                      float(main_runq[i]), float(main_cpu[i]) - float(own_wait[i]))
        kinds[_K["other"]] += rest + (gap - explained)
        stages[scol["other"]] += max(0.0, explained - stages.sum()) + (gap - explained)
        if h2d > 0:
            kinds[_K["transfer"]] += h2d
            stages[scol["h2d"]] += h2d
        if own > 0:  # the profiler's own time in the wait is not the job's: out, from what no span explains first
            _take_out(kinds, _K["other"], own)
            _take_out(stages, scol["other"], own)
            taken_out += own
        per_kind[i], per_stage[i] = kinds, stages
    by_kind = {k: float(per_kind[:, j].sum()) for j, k in enumerate(KIND_NAMES)}
    by_stage = {k: float(per_stage[:, j].sum()) for j, k in enumerate(stage_names)}
    by_cause = {c: 0.0 for c in vocab.CAUSE_NAMES}
    for k, v in by_kind.items():
        by_cause[vocab.KINDS[k][0]] += v
    seconds = round(float(per_kind.sum()), 6)
    by_cause = _exact({k: round(v, 6) for k, v in by_cause.items()}, seconds)
    by_kind = _exact({k: round(v, 6) for k, v in by_kind.items()}, seconds)
    by_stage = _exact({k: round(v, 6) for k, v in by_stage.items()}, seconds)
    seconds = round(sum(by_cause.values()), 6)
    return {
        "seconds": seconds,
        "fraction": round(seconds / window_s, 6) if window_s > 0 else 0.0,
        "by_cause": by_cause,
        "by_stage": by_stage,
        "by_kind": by_kind,
        "share_by_cause": {k: (round(v / seconds, 4) if seconds > 0 else 0.0) for k, v in by_cause.items()},
        "per_step": {k: [round(float(x), 6) for x in per_stage[:, j]] for j, k in enumerate(stage_names)},
        "profiler": profiler_cost(st, window_s, taken_out),
    }


def _main_thread_rest(kinds: np.ndarray, free: float, scale: float, main_runq: float, main_cpu: float) -> float:
    """With ``num_workers = 0`` the main thread runs the loader itself for the whole wait; the part no span covers
    (the sampler, the loader's ``__next__``, the fetcher around the calls) is its own CPU work or its wait for a core,
    not "unexplained". The thread's run-queue and on-CPU time in the wait (scaled to the explained tail) beyond what the
    spans already hold fill ``free`` seconds of it, waiting first: runqueue, then on_cpu. Returns the seconds placed
    (the rest stays ``other``: the thread was blocked there, on something no span saw)."""
    rq = min(free, max(0.0, main_runq * scale - float(kinds[_K["runqueue"]])))
    oc = min(free - rq, max(0.0, main_cpu * scale - float(kinds[_K["on_cpu"]])))
    kinds[_K["runqueue"]] += rq
    kinds[_K["on_cpu"]] += oc
    return rq + oc


def _take_out(v: np.ndarray, first: int, amount: float) -> None:
    """Remove ``amount`` seconds from a step's split: from part ``first`` (what no span explains, where the profiler's
    own time lands: between the calls it times) and, for any remainder, from every part in proportion."""
    t = min(amount, float(v[first]))
    v[first] -= t
    rest, left = float(v.sum()), amount - t
    if left > 0 and rest > 0:
        v *= max(0.0, 1.0 - left / rest)


def profiler_cost(st: dict[str, np.ndarray], window_s: float, taken_out: float) -> ProfilerCost:
    """The ``stall.profiler`` section: the profiler's own main-thread time in the measured steps, reported apart.

    ``seconds`` is what was taken out of the waits (the stall above is net of it); ``rest_s`` is its bookkeeping in
    the rest of the steps (in the window, not in any wait); ``share_of_window`` is both over the window. Records
    written before these were measured have no such columns: zeros, and ``measured`` false."""
    rest = st["profiler_rest"] if "profiler_rest" in st else None  # the measured steps only; absent: not measured
    rest_s = float(rest.sum()) if rest is not None else 0.0
    total = taken_out + rest_s
    return {"seconds": round(taken_out, 6), "rest_s": round(rest_s, 6),
            "share_of_window": round(total / window_s, 6) if window_s > 0 else 0.0,
            "measured": "profiler_wait" in st}


def extend_to_tail(stall: Stall, tail: TailView | None, window_s: float) -> Stall:
    """Add the idle time of the measured steps beyond the detail (their exact total), split in the proportions the
    detailed steps measured — the one assumption, stated in ``stall.tail``. ``per_step`` stays the detail's."""
    if tail is None or not tail.steps:
        return stall
    own = min(float(tail.profiler_wait_s), float(tail.idle_s))
    extra = float(tail.idle_s) - own
    base = float(stall["seconds"])
    for key in ("by_cause", "by_kind", "by_stage"):
        parts = stall[key]
        if base > 0:
            scaled = {k: round(v + extra * v / base, 6) for k, v in parts.items()}
        else:
            scaled = {**parts, "other": round(parts.get("other", 0.0) + extra, 6)}
        stall[key] = _exact(scaled, round(base + extra, 6))
    stall["seconds"] = round(sum(stall["by_cause"].values()), 6)
    stall["fraction"] = round(stall["seconds"] / window_s, 6) if window_s > 0 else 0.0
    secs = stall["seconds"]
    stall["share_by_cause"] = {k: (round(v / secs, 4) if secs > 0 else 0.0) for k, v in stall["by_cause"].items()}
    if "profiler" in stall:  # the stall being built: its own-cost part, where attribute() measured one
        prof = stall["profiler"]
        prof["seconds"] = round(float(prof["seconds"]) + own, 6)
        prof["rest_s"] = round(float(prof["rest_s"]) + float(tail.profiler_rest_s), 6)
        prof["share_of_window"] = round((prof["seconds"] + prof["rest_s"]) / window_s, 6) if window_s > 0 else 0.0
    stall["tail"] = {"steps": int(tail.steps), "idle_s": round(extra, 6),
                     "method": "exact idle total; split in the shares of the steps kept in detail"}
    return stall


def _exact(parts: dict[str, float], total: float) -> dict[str, float]:
    """Put the rounding residue into ``other`` so the parts sum to ``total`` exactly."""
    rest = round(total - sum(v for k, v in parts.items() if k != "other"), 6)
    parts["other"] = max(0.0, rest)
    return parts
