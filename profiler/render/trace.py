"""Chrome trace event format (trace.json) of a run: opens in ui.perfetto.dev and chrome://tracing.

Tracks:
- process "main process", thread "main loop": ``ProfilerStep#N`` spans (named as the PyTorch profiler names its
  steps, so people who know that trace feel at home) enclosing ``wait`` (for the batch), ``H2D`` and ``compute``. On
  CUDA the H2D and compute spans come from CUDA events and can overlap the host's next wait, so they go on their
  own thread "compute device (CUDA events)" instead: one thread's spans must nest.
- workers=0: thread "loading (main process, workers=0)" in the main process, with the loading spans.
- thread "epochs": one ``epoch N`` span per ``iter(loader)`` (timeline.epochs) enclosing ``epoch start`` (until its
  first batch arrived) and ``iter(loader)`` itself; on their own thread because an epoch need not nest with steps.
- one process per DataLoader worker: ``batch N`` spans enclosing one ``sample`` span per dataset call (args: index,
  items, on-CPU and run-queue ms, bytes asked for and read from the device), itself enclosing its named sub-stages
  (``read`` / ``decode`` / ``augment`` / user stages, laid out back to back: see spans.py; the rest of the sample is
  the dataset's own code), and ``collate`` per batch. A flow arrow links each batch's collate to the step that
  received it.
- counters: CPU % (mean, per core), disk read MB/s, RAM GB, GPU util/memory/PCIe when sampled, per-process CPU %.

Bounded size (long runs): aggregates live in the HTML (from the analysis, exact); the trace keeps per-span detail for
a window of steps plus every k-th step after it (see ``plan_detail``), and says so in ``otherData``.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..record.read import DistributedView, read, samples, view
from . import spans as spans_mod
from .output import write_atomic
from .units import printable

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord

# Budgets. A Chrome-trace JSON event costs ~110-170 bytes, so ~120k events is ~15 MB: under the 20 MiB a browser
# tab loads comfortably (chrome://tracing slows down badly past a few hundred MB, and people attach these files to
# issues). Main-loop spans are cheap (~4 per step) and the most useful, so they get their own larger share.
MAIN_EVENTS_MAX = 50_000
WORKER_EVENTS_MAX = 60_000
# Each sampled series is downsampled to at most this many points (bucket means): one per ~0.1 s of a 7-minute run.
COUNTER_POINTS_MAX = 4_000
# Per-process CPU counters share this many points in all: a 32-worker run must not multiply the file by 32.
PROCESS_COUNTER_POINTS_MAX = 12_000
# Per-core counter tracks only up to this many cores (one track each); beyond, the mean only.
COUNTER_MAX_CORES = 32
# Of a budget, this share goes to the contiguous first window (warm-up and start of the run, where problems such as
# slow worker start-up show), the rest to every k-th step spread over the remainder (steady state).
FIRST_WINDOW_SHARE = 0.5

MAIN_PID = 1
SYSTEM_PID = 2
WORKER_PID_BASE = 100  # worker w -> pid 100 + w (stable across runs, unlike OS pids; the OS pid is in the name)
MAIN_TID, DEVICE_TID, LOADER_TID, EPOCH_TID = 1, 2, 3, 4


@dataclass
class Selection:
    """Which steps (row indices of timeline.steps) get spans: rows [0, first) and every ``stride``-th after."""
    total: int
    first: int
    stride: int

    def rows(self) -> np.ndarray:
        head = np.arange(min(self.first, self.total))
        if self.first >= self.total:
            return head
        return np.concatenate([head, np.arange(self.first, self.total, self.stride)])

    @property
    def complete(self) -> bool:
        return self.first >= self.total

    def describe(self, step_numbers: list[int]) -> str:
        if self.total == 0:
            return "no steps"
        if self.complete:
            return f"all {self.total:,} steps"
        last = step_numbers[self.first - 1] if self.first > 0 else None
        head = f"steps {step_numbers[0]}–{last}" if last is not None else "no contiguous window"
        more = len(range(self.first, self.total, self.stride))
        return (f"{head} of {self.total:,}, then every {_ordinal(self.stride)} step ({more:,} more); "
                f"{self.total - self.first - more:,} steps omitted")


@dataclass
class DetailPlan:
    """What per-span detail the trace holds (the HTML repeats it)."""
    main: Selection
    workers: Selection
    counter_stride: int

    def describe(self, step_numbers: list[int]) -> dict[str, str]:
        return {"main_loop": self.main.describe(step_numbers), "workers": self.workers.describe(step_numbers),
                "counters": ("every sample" if self.counter_stride <= 1
                             else f"bucket means of {self.counter_stride} samples")}


def _ordinal(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def _select(total: int, per_step: float, budget: int) -> Selection:
    if total * per_step <= budget:
        return Selection(total, total, 1)
    steps_budget = max(2, int(budget / max(per_step, 1e-9)))
    first = max(1, int(steps_budget * FIRST_WINDOW_SHARE))
    rest = max(1, steps_budget - first)
    stride = max(1, math.ceil((total - first) / rest))
    return Selection(total, first, stride)


def plan_detail(rec: RunRecord) -> DetailPlan:
    """The downsampling rule, from the record's sizes alone (so HTML and trace agree)."""
    steps = rec.timeline["steps"]
    n = len(steps["wait_start"])
    sp = spans_mod.sample_spans(rec.timeline)
    bt = rec.timeline["batches"]
    n_batches = max(1, len(bt["batch"]))
    samples_per_batch = sp.n / n_batches
    per_sample = 1 + len(sp.stage_names())  # the sample span and its named sub-stages
    cuda = rec.timing == "cuda events"
    main = _select(n, 6.0 if cuda else 5.0, MAIN_EVENTS_MAX)  # step(s), wait, H2D, compute, flow end
    workers = _select(n, per_sample * samples_per_batch + 3.0, WORKER_EVENTS_MAX)  # + batch, collate, flow
    ticks = len(samples(rec).t_s)
    return DetailPlan(main, workers, max(1, math.ceil(ticks / COUNTER_POINTS_MAX)))


def _us(t: float) -> int:
    return int(round(float(t) * 1e6))


def _x(name: str, cat: str, start: float, end: float, pid: int, tid: int, args: dict | None = None) -> dict:
    ev = {"ph": "X", "name": name, "cat": cat, "ts": _us(start), "dur": max(0, _us(end) - _us(start)),
          "pid": pid, "tid": tid}
    if args:
        ev["args"] = args
    return ev


def _meta(kind: str, pid: int, tid: int, name: str | int) -> dict:
    key = "sort_index" if kind.endswith("sort_index") else "name"
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {key: name}}


def _main_events(rec: RunRecord, rows: np.ndarray, cuda: bool) -> list[dict]:
    st = rec.timeline["steps"]
    ev: list[dict] = []
    measured = st["measured"]
    for i in rows.tolist():
        n = st["step"][i]
        ws, we, hs, he, ce = (st[k][i] for k in ("wait_start", "wait_end", "h2d_start", "h2d_end", "compute_end"))
        cat = "step" if measured[i] else "warmup"
        args = {"step": n, "batch": st["batch"][i], "worker": st["worker"][i], "samples": st["samples"][i],
                "idle_ms": round(st["idle"][i] * 1e3, 3), "measured": bool(measured[i])}
        device_on_main = not (cuda and measured[i])  # CUDA-event times go on the device thread
        end = max(we, ce) if device_on_main else we
        ev.append(_x(f"ProfilerStep#{n}", cat, ws, end, MAIN_PID, MAIN_TID, args))
        ev.append(_x("wait", "wait", ws, we, MAIN_PID, MAIN_TID, {"batch": st["batch"][i]}))
        tid = MAIN_TID if device_on_main else DEVICE_TID
        if not device_on_main:  # the device's own step span, enclosing its H2D and compute
            ev.append(_x(f"ProfilerStep#{n}", cat, hs, ce, MAIN_PID, DEVICE_TID, args))
        if he > hs:
            ev.append(_x("H2D", "h2d", hs, he, MAIN_PID, tid, {"step": n}))
        ev.append(_x("compute", "compute", he, ce, MAIN_PID, tid, {"step": n}))
        # Flow arrow end: bound to the enclosing step span on the main loop at the moment the batch arrived.
        ev.append({"ph": "f", "bp": "e", "name": "batch", "cat": "batch_flow", "id": int(st["batch"][i]),
                   "ts": _us(we), "pid": MAIN_PID, "tid": MAIN_TID})
    return ev


def _sample_events(sp: spans_mod.Spans, idx: list[int], b: int, pid: int, tid: int,
                   layout: list[tuple[str, np.ndarray, np.ndarray]] | None = None) -> list[dict]:
    """One ``sample`` span per dataset call, its named sub-stages nested inside (back to back from its start).
    ``layout``: ``sp.layout()`` without ``getitem``, made once by the caller (it covers every span: made per batch it
    was quadratic, 7 of the 9 s a 10,000-step, 8-worker trace took)."""
    ev: list[dict] = []
    c = sp.cols
    if layout is None:
        layout = [(k, s0, s1) for k, s0, s1 in sp.layout() if k != "getitem"]
    extra = [k for k in ("bytes", "pixels") if k in c]
    for k in idx:
        items = int(c["items"][k])
        args = {"batch": b, "sample": int(c["index"][k]), "items": items,
                "cpu_ms": round(float(c["cpu"][k]) * 1e3, 3), "runq_ms": round(float(c["runq"][k]) * 1e3, 3),
                "rchar": int(c["rchar"][k]), "read_bytes": int(c["read_bytes"][k])}
        args.update({e: c[e][k].item() for e in extra})  # plain Python numbers: the trace dict is JSON as it is
        name = "sample" if items == 1 else f"samples ×{items}"
        ev.append(_x(name, "sample", c["start"][k], c["end"][k], pid, tid, args))
        for stage, s0, s1 in layout:
            if s1[k] > s0[k]:
                ev.append(_x(printable(stage), "stage", s0[k], s1[k], pid, tid, {"batch": b,
                                                                                  "sample": args["sample"]}))
    return ev


def _worker_events(rec: RunRecord, rows: np.ndarray, flow_batches: set[int]) -> tuple[list[dict], set[int]]:
    tl = rec.timeline
    st, bt = tl["steps"], tl["batches"]
    sp = spans_mod.sample_spans(tl)
    wanted = {int(st["batch"][i]) for i in rows.tolist()}
    n_steps = len(st["wait_start"])
    if len(rows) >= n_steps:  # all steps: also batches prefetched but never consumed (end of run)
        wanted |= {int(b) for b in bt["batch"]}
    ev: list[dict] = []
    workers: set[int] = set()
    by_batch: dict[int, list[int]] = {}
    layout = [(k, s0, s1) for k, s0, s1 in sp.layout() if k != "getitem"]
    for j, b in enumerate(sp.cols.get("batch", np.zeros(0)).tolist()):
        if int(b) in wanted:
            by_batch.setdefault(int(b), []).append(j)
    for j, b in enumerate(bt["batch"]):
        b = int(b)
        if b not in wanted:
            continue
        w = int(bt["worker"][j])
        workers.add(w)
        pid, tid = (MAIN_PID, LOADER_TID) if w < 0 else (WORKER_PID_BASE + w, WORKER_PID_BASE + w)
        idx = by_batch.get(b, [])
        first = min([float(sp.cols["start"][k]) for k in idx] + [float(bt["collate_start"][j])])
        last = max([float(sp.cols["end"][k]) for k in idx] + [float(bt["collate_end"][j])])
        ev.append(_x(f"batch {b}", "batch", first, last, pid, tid,
                     {"batch": b, "samples": bt["samples"][j], "received_s": bt["received"][j]}))
        ev += _sample_events(sp, idx, b, pid, tid, layout)
        ev.append(_x("collate", "collate", bt["collate_start"][j], bt["collate_end"][j], pid, tid,
                     {"batch": b, "samples": bt["samples"][j]}))
        if b in flow_batches:  # flow start inside the collate span; its end is on the step that received it
            ev.append({"ph": "s", "name": "batch", "cat": "batch_flow", "id": b, "ts": _us(bt["collate_start"][j]),
                       "pid": pid, "tid": tid})
    return ev, workers


def _epoch_events(rec: RunRecord) -> list[dict]:
    """``epoch N`` from iter(loader) to its last step's end, enclosing ``epoch start`` (until the first batch
    arrived) and, inside that, the ``iter(loader)`` call itself."""
    tl = rec.timeline
    ep = tl["epochs"]
    st = tl["steps"]
    starts = [float(x) for x in ep["iter_start"]]
    if not starts:
        return []
    ends_by_epoch: dict[int, float] = {}
    for e, ce in zip(st["epoch"], st["compute_end"]):
        ends_by_epoch[int(e)] = max(ends_by_epoch.get(int(e), 0.0), float(ce))
    last = max([float(x) for x in st["compute_end"]] + starts)
    ev: list[dict] = []
    for i, (e, t0) in enumerate(zip(ep["epoch"], starts)):
        nxt = starts[i + 1] if i + 1 < len(starts) else last
        end = max(t0, ends_by_epoch.get(int(e), nxt))
        first = min(end, max(t0, float(ep["first_batch"][i] or t0)))
        it_end = float(ep["iter_end"][i] or t0)
        ev.append(_x(f"epoch {e}", "epoch", t0, end, MAIN_PID, EPOCH_TID, {"epoch": e}))
        ev.append(_x("epoch start", "epoch_start", t0, first, MAIN_PID, EPOCH_TID,
                     {"epoch": e, "first_batch_s": round(first - t0, 6)}))
        if t0 <= it_end <= first:
            ev.append(_x("iter(loader)", "epoch_start", t0, it_end, MAIN_PID, EPOCH_TID, {"epoch": e}))
    return ev


def _bucket_rows(t: Sequence[float], cols: Sequence[Sequence[float | None] | None],
                 stride: int) -> Iterator[tuple[float, list[float | None]]]:
    """Yield (t, [values]) per bucket of ``stride`` ticks (means; None entries skipped)."""
    for a in range(0, len(t), stride):
        vals: list[float | None] = []
        for c in cols:
            if c is None:
                vals.append(None)
                continue
            seg = [v for v in c[a:a + stride] if v is not None]
            vals.append(sum(seg) / len(seg) if seg else None)
        yield t[a], vals


def _counter(name: str, pid: int, ts: float, args: dict[str, float | None]) -> dict | None:
    clean = {k: round(v, 3) for k, v in args.items() if v is not None and math.isfinite(v)}
    if not clean:
        return None
    return {"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": _us(ts), "args": clean}


def _counter_events(rec: RunRecord, stride: int, worker_pids: dict[int, int]) -> list[dict]:
    s = samples(rec)
    t = s.t_s
    ev: list[dict | None] = []
    per_core = s.cpu_percent_per_core
    n_cores = len(per_core[0]) if per_core else 0
    core_cols: list[list[float | None] | None] = [[row[c] if c < len(row) else None for row in per_core]
                                                  for c in range(n_cores)]
    mean = [sum(r) / len(r) if r else None for r in per_core] if per_core else None
    disk = [None if v is None else v / 1e6 for v in s.disk_read_bytes_per_s] or None
    ram = [None if v is None else v / 1e9 for v in s.ram_used_bytes] or None
    cache = [None if v is None else v / 1e9 for v in s.page_cache_bytes] or None
    cols: list[list[float | None] | None] = [mean, disk, ram, cache]
    cols += core_cols if n_cores <= COUNTER_MAX_CORES else []
    cols = [c if c is not None and len(c) == len(t) else None for c in cols]
    for ts, vals in _bucket_rows(t, cols, stride):
        m, d, r, pc = vals[:4]
        ev.append(_counter("CPU % (mean of cores)", SYSTEM_PID, ts, {"mean": m}))
        if n_cores <= COUNTER_MAX_CORES and n_cores:
            ev.append(_counter("CPU % per core", SYSTEM_PID, ts, {f"cpu{c}": v for c, v in enumerate(vals[4:])}))
        ev.append(_counter("disk read MB/s", SYSTEM_PID, ts, {"MB/s": d}))
        ev.append(_counter("RAM GB", SYSTEM_PID, ts, {"used": r, "page cache": pc}))
    gpu = s.gpu
    if gpu is not None and gpu.t_s:
        gt = gpu.t_s
        g: list[list[float | None] | None] = [
            gpu.util_percent, [None if v is None else v / 1e9 for v in gpu.mem_used_bytes],
            [None if v is None else v / 1e6 for v in gpu.pcie_rx_bytes_per_s or []] or None,
            [None if v is None else v / 1e6 for v in gpu.pcie_tx_bytes_per_s or []] or None]
        g = [c if c is not None and len(c) == len(gt) else None for c in g]
        gstride = max(1, math.ceil(len(gt) / COUNTER_POINTS_MAX))
        for ts, (u, mem, rx, tx) in _bucket_rows(gt, g, gstride):
            ev.append(_counter("GPU util %", SYSTEM_PID, ts, {"util": u}))
            ev.append(_counter("GPU memory GB", SYSTEM_PID, ts, {"used": mem}))
            ev.append(_counter("PCIe MB/s", SYSTEM_PID, ts, {"rx (to GPU)": rx, "tx (from GPU)": tx}))
    procs = s.processes
    per_proc = max(1, PROCESS_COUNTER_POINTS_MAX // max(1, len(procs)))
    for p in procs:
        pt = p.t_s
        if p.role == "main":
            pid = MAIN_PID
        elif (wid := p.worker_id) is not None and int(wid) in worker_pids:
            pid = worker_pids[int(wid)]
        else:
            continue
        cpu = p.cpu_percent
        if len(cpu) != len(pt) or not pt:
            continue
        pstride = max(1, math.ceil(len(pt) / min(COUNTER_POINTS_MAX, per_proc)))
        for ts, (c,) in _bucket_rows(pt, [cpu], pstride):
            ev.append(_counter("CPU % of one core", pid, ts, {"process": c}))
    return [e for e in ev if e is not None]


def build_trace(rec: RunRecord, plan: DetailPlan | None = None) -> dict[str, Any]:
    """The trace as a dict ({"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}})."""
    plan = plan or plan_detail(rec)
    st = rec.timeline["steps"]
    cuda = rec.timing == "cuda events"
    main_rows, worker_rows = plan.main.rows(), plan.workers.rows()
    ev = _main_events(rec, main_rows, cuda)
    flow = {int(st["batch"][i]) for i in main_rows.tolist()}
    wev, workers = _worker_events(rec, worker_rows, flow)
    # Flow ends whose start was not emitted would dangle: keep only pairs.
    started = {e["id"] for e in wev if e["ph"] == "s"}
    ev = [e for e in ev if e["ph"] != "f" or e["id"] in started] + wev + _epoch_events(rec)
    bt = rec.timeline["batches"]
    os_pid = {int(w): int(p) for w, p in zip(bt["worker"], bt["pid"])}
    main_os = next((p.pid for p in samples(rec).processes if p.role == "main"), None)
    meta = [_meta("process_name", MAIN_PID, 0, "main process" + (f" (pid {main_os})" if main_os else "")),
            _meta("process_sort_index", MAIN_PID, 0, 0),
            _meta("thread_name", MAIN_PID, MAIN_TID, "main loop (ProfilerStep = wait + H2D + compute)"),
            _meta("thread_sort_index", MAIN_PID, MAIN_TID, 0)]
    if rec.timeline["epochs"]["iter_start"]:
        meta += [_meta("thread_name", MAIN_PID, EPOCH_TID, "epochs (iter(loader) → last step)"),
                 _meta("thread_sort_index", MAIN_PID, EPOCH_TID, 3)]
    if cuda:
        meta += [_meta("thread_name", MAIN_PID, DEVICE_TID, "compute device (CUDA events)"),
                 _meta("thread_sort_index", MAIN_PID, DEVICE_TID, 1)]
    all_workers = sorted(workers | {int(w) for w in bt["worker"]})
    worker_pids: dict[int, int] = {}
    for w in all_workers:
        if w < 0:
            meta += [_meta("thread_name", MAIN_PID, LOADER_TID, "loading (main process, workers=0)"),
                     _meta("thread_sort_index", MAIN_PID, LOADER_TID, 2)]
            continue
        pid = WORKER_PID_BASE + w
        worker_pids[w] = pid
        name = f"DataLoader worker {w}" + (f" (pid {os_pid[w]})" if w in os_pid else "")
        meta += [_meta("process_name", pid, 0, name), _meta("process_sort_index", pid, 0, 1 + w),
                 _meta("thread_name", pid, pid, f"worker {w}: batch = samples (with their stages) + collate")]
    meta += [_meta("process_name", SYSTEM_PID, 0, "system (sampled counters)"),
             _meta("process_sort_index", SYSTEM_PID, 0, 10_000)]
    counters = _counter_events(rec, plan.counter_stride, worker_pids)
    r = read(rec)
    marks = [{"ph": "i", "s": "g", "name": "measured window starts", "ts": _us(r.window.start_s),
              "pid": MAIN_PID, "tid": MAIN_TID},
             {"ph": "i", "s": "g", "name": "measured window ends", "ts": _us(r.window.end_s),
              "pid": MAIN_PID, "tid": MAIN_TID}]
    detail = plan.describe([int(x) for x in st["step"]])
    other = {"tool": "profiler", "record_created_utc": printable(rec.created_utc), "time_zero": "run start (ts 0)",
             "verdict": printable(r.verdict.summary), "detail": detail,
             "detail_rule": asdict(plan), "partial": rec.partial}
    out = {"traceEvents": meta + marks + ev + counters, "displayTimeUnit": "ms", "otherData": other}
    if isinstance(rec.distributed, dict):  # one rank of a torchrun job: HTA reads the rank from here, as from the
        dist = view(DistributedView, rec.distributed)  # PyTorch profiler's traces
        out["distributedInfo"] = {"backend": dist.backend, "rank": dist.rank, "world_size": dist.world_size}
    return out


def write_trace(rec: RunRecord, path: str | Path, plan: DetailPlan | None = None) -> Path:
    trace = build_trace(rec, plan)
    # dumps, not dump: dump streams through the pure-Python encoder, several times slower on 10^5 events.
    # ensure_ascii (the default): any control character or undecodable name in a string is a \u escape in the file.
    return write_atomic(path, json.dumps(trace, separators=(",", ":"), allow_nan=False, default=_json_default))


def render(rec: RunRecord, out_dir: Path, ctx: dict[str, Any]) -> Path:
    """The registry's entry point: trace.json, with the detail plan shared with the HTML (``ctx["plan"]``)."""
    if "plan" not in ctx:
        ctx["plan"] = plan_detail(rec)
    return write_trace(rec, Path(out_dir) / "trace.json", ctx["plan"])


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
