"""The profiler's tracks merged into a torch.profiler (kineto) Chrome trace: a pure function of (record, trace dict).

The job's kineto trace is the frame (docs/trace_merge.md); everything of ours is placed on its time base and added
beside its events, none of which is changed or dropped:

- one process per DataLoader worker, its real pid, named ``DataLoader worker k``: ``batch N`` spans enclosing one
  ``sample`` span per dataset call (with its named sub-stages: read / decode / augment / user stages) and ``collate``
  (the very events of our own trace.json, from render/trace.py's span extraction, moved onto the kineto clock);
- in the job's main process, a thread of its own, ``DataLoader wait (profiler)``: one ``DataLoader wait`` span per
  next() of the profiled loader, enclosing the wait's causes (``wait: io`` / ``wait: cpu`` / ``wait: transfer`` /
  ``wait: other``, from the analysis' per-step split, laid out back to back from the wait's start as the report's
  Gantt lays them). Why not on the main thread itself: kineto already has a span there for the same call
  (``enumerate(DataLoader)#...__next__``, and with ``num_workers=0`` every aten op of the loading under it); causes laid
  out inside would partly overlap those, and Perfetto hides partly overlapping slices of one thread;
- with ``num_workers=0`` the loading spans go on a thread ``DataLoader loading (profiler, workers=0)`` of the main
  process, for the same reason;
- a flow arrow (``s`` → ``f``, ``bp: "e"``) from each batch's worker span to the wait that received it, ids above
  every id kineto used.

Clocks: our times are seconds on CLOCK_MONOTONIC from the run's start (``torch_traces.clock.t0_monotonic_ns``);
kineto's are CLOCK_REALTIME, ``baseTimeNanoseconds + ts`` µs (absolute µs when the trace has no base). The record's
clock pair (instrument/torch_profiler_hooks.py) moves ours onto theirs. ``otherData.profiler_merge`` says what was
added, the clock facts, and the checks: how many of our waits lie inside one of the job's ``ProfilerStep#N`` spans,
and how many of kineto's own ``enumerate(DataLoader)#...__next__`` spans lie inside one of our waits.

Only the steps whose time overlaps the trace's (and the batches they consumed) are added, at most what trace.json
holds (its detail plan): the merged trace stays within the job's trace plus our trace.json.
"""
from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import vocab
from ..record.read import DistributedView, TorchTraceClockView, TorchTracesView, read, samples, view
from . import trace as trace_mod
from .output import write_atomic

if TYPE_CHECKING:
    from ..record import RunRecord

WAIT_NAME = "DataLoader wait"  # what HTA's data-load matching and the docs' recipe look for
CAUSE_PREFIX = "wait: "
FLOW_CAT = "dataloader_flow"
# Our threads in the job's main process. Kernel tids are below 2**22 (pid_max's ceiling), so these never meet one,
# and they stay under 2**31 for readers that hold a tid in an int32.
WAIT_TID = 2_000_000_001
LOADING_TID = 2_000_000_002
# Kineto's span for each next() of a DataLoader iterator (record_function in _BaseDataLoaderIter.__next__): our wait
# for the same call encloses it (our hook is outside torch's), the time-base check for traces without ProfilerStep.
DATALOADER_NEXT = "enumerate(DataLoader)#"
# Batches made just after the last step in the trace's range are still drawn (their workers were busy inside it):
# this many per worker beyond the last step.
LEAD_BATCHES_PER_WORKER = 2


class MergeError(ValueError):
    """The record cannot be placed on this trace (no clock pair, not a kineto trace): said in one line."""


def read_trace(path: str | Path) -> dict[str, Any]:
    """A kineto trace file (``.json`` or ``.json.gz``) as a dict; MergeError when it is not a Chrome trace."""
    p = Path(path)
    try:
        raw = gzip.open(p, "rb").read() if p.name.endswith(".gz") else p.read_bytes()
        d = json.loads(raw)
    except (OSError, ValueError, EOFError) as e:
        raise MergeError(f"{p}: not a readable Chrome trace ({type(e).__name__}: {e})") from None
    if not isinstance(d, dict) or not isinstance(d.get("traceEvents"), list):
        raise MergeError(f"{p}: not a Chrome trace (no traceEvents list)")
    return d


def _kineto_facts(events: list[Any]) -> dict[str, Any]:
    """Time range (µs), ProfilerStep spans, the main pid/tid, and the largest id any event uses. One plain pass (no
    helper call per event: a 10,000-step trace has ~300,000 of them)."""
    lo, hi = math.inf, -math.inf
    steps: list[tuple[float, float, Any, Any]] = []
    nexts: list[tuple[float, float, Any, Any]] = []
    max_id = 0
    pids: dict[Any, int] = defaultdict(int)
    num = (int, float)
    for e in events:
        if type(e) is not dict:
            continue
        i = e.get("id")
        if type(i) is int and i > max_id:
            max_id = i
        if e.get("ph") != "X":
            continue
        raw_ts: Any = e.get("ts")
        dur: Any = e.get("dur", 0)
        if type(raw_ts) not in num:
            continue
        ts = float(raw_ts)
        end = ts + float(dur) if type(dur) in num else ts
        if not math.isfinite(end):
            continue
        if ts < lo:
            lo = ts
        if end > hi:
            hi = end
        name = e.get("name")
        if type(name) is str:
            if name.startswith("ProfilerStep#"):
                steps.append((ts, end, e.get("pid"), e.get("tid")))
            elif name.startswith(DATALOADER_NEXT):
                nexts.append((ts, end, e.get("pid"), e.get("tid")))
        pids[e.get("pid")] += 1
    main = (steps[0][2], steps[0][3]) if steps else (max(pids, key=lambda k: pids[k]) if pids else None, None)
    return {"lo": lo, "hi": hi, "steps": sorted(steps, key=lambda s: s[0]), "main_pid": main[0],
            "main_tid": main[1], "max_id": max_id, "nexts": sorted(nexts, key=lambda s: s[0])}


def shift_us(clock: dict[str, Any], base_ns: int | None) -> float:
    """µs to add to our run-relative µs to land on the trace's time base."""
    t0_real = int(clock["t0_monotonic_ns"]) + int(clock["realtime_minus_monotonic_us"]) * 1000
    return (t0_real - (base_ns or 0)) / 1e3


def _steps_in_range(rec: RunRecord, lo_s: float, hi_s: float, rows: np.ndarray) -> np.ndarray:
    st = rec.timeline["steps"]
    if not rows.size:
        return rows
    ws = np.asarray(st["wait_start"], dtype=float)[rows]
    ce = np.maximum(np.asarray(st["compute_end"], dtype=float)[rows], np.asarray(st["wait_end"], dtype=float)[rows])
    return rows[(ce >= lo_s) & (ws <= hi_s)]


def _nest(events: list[dict[str, Any]]) -> None:
    """Make our spans nest strictly per (pid, tid): a span sticking out of the one enclosing it is clipped to it (a
    rounding tie or a stage layout scaled to its sample), so Perfetto hides none. In place."""
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            by_thread[(e["pid"], e["tid"])].append(e)
    for spans in by_thread.values():
        spans.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[float] = []  # end times of the open spans
        for e in spans:
            while stack and stack[-1] <= e["ts"]:
                stack.pop()
            if stack and e["ts"] + e["dur"] > stack[-1]:
                e["dur"] = round(max(0.0, stack[-1] - e["ts"]), 3)
            stack.append(e["ts"] + e["dur"])


def _cause_spans(rec: RunRecord) -> dict[int, list[tuple[str, float]]]:
    """Row of timeline.steps -> [(cause, seconds)] of its wait, from the analysis' per-step split by stage."""
    per = rec.idle_per_step
    st = rec.timeline["steps"]
    measured = np.flatnonzero(np.asarray(st["measured"], dtype=bool))
    out: dict[int, list[tuple[str, float]]] = {}
    if not per or len(next(iter(per.values()))) != measured.size:
        return out
    for j, row in enumerate(measured.tolist()):
        sums: dict[str, float] = {}
        for stage, col in per.items():
            cause = "other" if stage == "other" else (vocab.stage(stage).cause or "other")
            sums[cause] = sums.get(cause, 0.0) + max(0.0, float(col[j]))
        out[row] = [(c, sums[c]) for c in vocab.CAUSE_NAMES if sums.get(c, 0.0) > 0]
    return out


def _main_events(rec: RunRecord, rows: np.ndarray, pid: Any, sh: float) -> list[dict[str, Any]]:
    """Our wait spans (and their causes) on WAIT_TID of the job's main process, ts already on the trace's base."""
    st = rec.timeline["steps"]
    causes = _cause_spans(rec)
    measured = st["measured"]
    ev: list[dict[str, Any]] = []
    for i in rows.tolist():
        ws, we = float(st["wait_start"][i]), float(st["wait_end"][i])
        a, b = round(ws * 1e6 + sh, 3), round(we * 1e6 + sh, 3)
        ev.append({"ph": "X", "name": WAIT_NAME, "cat": "dataloader", "ts": a, "dur": round(max(0.0, b - a), 3),
                   "pid": pid, "tid": WAIT_TID,
                   "args": {"step": int(st["step"][i]), "batch": int(st["batch"][i]), "worker": int(st["worker"][i]),
                            "idle_ms": round(float(st["idle"][i]) * 1e3, 3), "measured": bool(measured[i])}})
        t = a
        for cause, sec in causes.get(i, []):
            d = min(sec * 1e6, b - t)
            if d <= 0:
                break
            ev.append({"ph": "X", "name": CAUSE_PREFIX + cause, "cat": "dataloader_cause", "ts": round(t, 3),
                       "dur": round(d, 3), "pid": pid, "tid": WAIT_TID,
                       "args": {"step": int(st["step"][i]), "cause": vocab.CAUSE[cause].words}})
            t += d
    return ev


def merge(rec: RunRecord, kineto: dict[str, Any], clock: dict[str, Any] | None = None) -> dict[str, Any]:
    """The merged trace: ``kineto``'s events unchanged, ours added on its time base (see the module docstring).

    ``clock``: the record's ``torch_traces.clock`` by default. Pure: reads nothing, writes nothing, and returns a new
    dict (``kineto`` is not modified)."""
    # The pair is passed through whole into the output's otherData, so it stays the record's object here.
    clock = clock or dict((rec.torch_traces or {}).get("clock") or {})
    pair = view(TorchTraceClockView, clock)
    if not clock or pair.t0_monotonic_ns is None or pair.realtime_minus_monotonic_us is None:
        raise MergeError("the record has no clock pair (torch_traces.clock): it was made before the profiler noted "
                         "one, so its spans cannot be placed on a torch.profiler trace")
    events = kineto.get("traceEvents")
    if not isinstance(events, list):
        raise MergeError("not a Chrome trace (no traceEvents list)")
    base = kineto.get("baseTimeNanoseconds")
    base_ns = int(base) if isinstance(base, (int, float)) and not isinstance(base, bool) else None
    sh = shift_us(clock, base_ns)
    facts = _kineto_facts(events)
    plan = trace_mod.plan_detail(rec)
    st = rec.timeline["steps"]
    if math.isfinite(facts["lo"]):
        lo_s, hi_s = (facts["lo"] - sh) / 1e6, (facts["hi"] - sh) / 1e6
        main_rows = _steps_in_range(rec, lo_s, hi_s, plan.main.rows())
        worker_rows = _steps_in_range(rec, lo_s, hi_s, plan.workers.rows())
        workers = len({int(w) for w in st["worker"]}) or 1
        if worker_rows.size:  # the batches being made when the trace ended
            last = int(worker_rows[-1])
            extra = plan.workers.rows()
            extra = extra[(extra > last) & (extra <= last + LEAD_BATCHES_PER_WORKER * workers)]
            worker_rows = np.concatenate([worker_rows, extra])
    else:
        main_rows, worker_rows = plan.main.rows(), plan.workers.rows()
    main_pid = facts["main_pid"]
    if main_pid is None:
        main_pid = next((p.pid for p in samples(rec).processes if p.role == "main"), 0)
    ours = _main_events(rec, main_rows, main_pid, sh)
    wev, _ = trace_mod._worker_events(rec, worker_rows, set())
    bt = rec.timeline["batches"]
    os_pid = {int(w): int(p) for w, p in zip(bt["worker"], bt["pid"])}
    flow_base = facts["max_id"] + 1
    consumed = {int(st["batch"][i]): i for i in main_rows.tolist()}
    workers_seen: set[int] = set()
    for e in wev:  # trace.py's events, from run-relative µs on its own pids to the trace's base and the real pids
        w = e["pid"] - trace_mod.WORKER_PID_BASE if e["pid"] != trace_mod.MAIN_PID else -1
        pid, tid = (main_pid, LOADING_TID) if w < 0 else (os_pid.get(w, e["pid"]), os_pid.get(w, e["pid"]))
        workers_seen.add(w)
        e["pid"], e["tid"] = pid, tid
        e["ts"] = round(e["ts"] + sh, 3)
        e["dur"] = float(e["dur"])
        ours.append(e)
        b = (e.get("args") or {}).get("batch")
        if e.get("cat") == "collate" and b in consumed:  # the arrow: this batch's collate -> the wait that took it
            i = consumed[int(b)]
            we = float(st["wait_end"][i]) * 1e6 + sh
            ws = float(st["wait_start"][i]) * 1e6 + sh
            fid = flow_base + int(b)
            # Just inside the collate's end (the batch leaves) and the wait's end (it arrives): the arrow goes forward
            # in time, and each end binds to the span enclosing it (the collate; the wait's last cause).
            f_ts = round(we - min(1.0, (we - ws) / 2), 3)
            s_ts = min(round(e["ts"] + e["dur"] - min(1.0, e["dur"] / 2), 3), f_ts)
            ours.append({"ph": "s", "name": "batch", "cat": FLOW_CAT, "id": fid, "pid": pid, "tid": tid, "ts": s_ts})
            ours.append({"ph": "f", "bp": "e", "name": "batch", "cat": FLOW_CAT, "id": fid, "pid": main_pid,
                         "tid": WAIT_TID, "ts": f_ts})
    _nest(ours)
    meta = _metadata(main_pid, workers_seen, os_pid, bool(main_rows.size))
    inside = _waits_inside_steps(ours, facts["steps"])
    around = _nexts_inside_waits(ours, facts["nexts"], main_pid)
    out = {k: v for k, v in kineto.items() if k != "traceEvents"}
    dist = view(DistributedView, rec.distributed)
    if "distributedInfo" not in out:  # HTA reads the rank from here (and a folder of ranks as one job)
        out["distributedInfo"] = ({"backend": dist.backend, "rank": dist.rank, "world_size": dist.world_size}
                                  if isinstance(rec.distributed, dict) else {"rank": 0, "world_size": 1})
    other = dict(out.get("otherData") or {}) if isinstance(out.get("otherData"), dict) else {}
    other["profiler_merge"] = {
        "tool": "profiler", "record_created_utc": rec.created_utc, "clock": dict(clock),
        "time_base": "baseTimeNanoseconds + ts µs" if base_ns is not None else "absolute µs (no baseTimeNanoseconds)",
        "shift_us": round(sh, 3), "steps_added": int(main_rows.size), "batch_steps_added": int(worker_rows.size),
        "waits_inside_profiler_step": inside[0], "waits_checked": inside[1],
        "profiler_steps_in_trace": len(facts["steps"]),
        "dataloader_next_inside_wait": around[0], "dataloader_next_checked": around[1],
        "verdict": read(rec).verdict.summary,
        "threads": {"wait": WAIT_TID, "loading_workers0": LOADING_TID}}
    out["otherData"] = other
    out["traceEvents"] = list(events) + meta + ours
    return out


def _waits_inside_steps(ours: list[dict[str, Any]], steps: list[tuple[float, float, Any, Any]]) -> tuple[int, int]:
    """(waits lying inside one ProfilerStep span, waits that overlap the steps' range at all)."""
    if not steps:
        return 0, 0
    starts = np.array([s[0] for s in steps])
    ends = np.array([s[1] for s in steps])
    inside = checked = 0
    for e in ours:
        if e.get("name") != WAIT_NAME or e.get("ph") != "X":
            continue
        a, b = e["ts"], e["ts"] + e["dur"]
        if b < starts[0] or a > ends[-1]:
            continue
        checked += 1
        k = int(np.searchsorted(starts, a, side="right")) - 1
        inside += int(k >= 0 and b <= ends[k] + 1e-3)
    return inside, checked


def _nexts_inside_waits(ours: list[dict[str, Any]], nexts: list[tuple[float, float, Any, Any]],
                        main_pid: Any) -> tuple[int, int]:
    """(kineto's ``enumerate(DataLoader)#...__next__`` spans of the main process lying inside one of our waits, those
    overlapping our waits' range at all): the clocks' check that needs no ProfilerStep (a ``with profile()`` block
    without a schedule has none). Spans of another loader than the profiled one count as outside."""
    waits = sorted((e["ts"], e["ts"] + e["dur"]) for e in ours if e.get("name") == WAIT_NAME and e.get("ph") == "X")
    if not waits or not nexts:
        return 0, 0
    starts = np.array([w[0] for w in waits])
    inside = checked = 0
    for a, b, pid, _ in nexts:
        if pid != main_pid or b < waits[0][0] or a > waits[-1][1]:
            continue
        checked += 1
        k = int(np.searchsorted(starts, a + 1e-3, side="right")) - 1
        inside += int(k >= 0 and waits[k][0] <= a + 1e-3 and b <= waits[k][1] + 1e-3)
    return inside, checked


def _metadata(main_pid: Any, workers: set[int], os_pid: dict[int, int], waits: bool) -> list[dict[str, Any]]:
    def m(kind: str, pid: Any, tid: Any, value: Any) -> dict[str, Any]:
        key = "sort_index" if kind.endswith("sort_index") else "name"
        return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {key: value}}

    out: list[dict[str, Any]] = []
    if waits:
        out += [m("thread_name", main_pid, WAIT_TID, "DataLoader wait (profiler: io / cpu / transfer / other)"),
                m("thread_sort_index", main_pid, WAIT_TID, -1)]
    if -1 in workers:
        out += [m("thread_name", main_pid, LOADING_TID, "DataLoader loading (profiler, workers=0)"),
                m("thread_sort_index", main_pid, LOADING_TID, -1)]
    for w in sorted(x for x in workers if x >= 0):
        pid = os_pid.get(w, trace_mod.WORKER_PID_BASE + w)
        out += [m("process_name", pid, 0, f"DataLoader worker {w}"),
                m("process_sort_index", pid, 0, 1_000 + w),
                m("thread_name", pid, pid, f"DataLoader worker {w}")]
    return out


def dumps(trace: dict[str, Any]) -> str:
    """The merged trace as JSON text: compact, but ``distributedInfo`` first and spaced as kineto writes it, since HTA
    finds a file's rank with the regex ``"rank":\\s+(\\d+)``, first match in the file."""
    rest = {k: v for k, v in trace.items() if k != "distributedInfo"}
    body = json.dumps(rest, separators=(",", ":"), allow_nan=False, default=trace_mod._json_default)
    if "distributedInfo" not in trace:
        return body
    head = json.dumps({"distributedInfo": trace["distributedInfo"]}, allow_nan=False)
    return head[:-1] + ("," + body[1:] if len(body) > 2 else "}")


def merged_name(job_trace: str | Path) -> Path:
    """``<name>.profiler_merged.json`` next to the job's trace (``x.pt.trace.json[.gz]`` -> ``x.pt.trace
    .profiler_merged.json``)."""
    p = Path(job_trace)
    stem = p.name
    for suffix in (".json.gz", ".gz", ".json"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    return p.with_name(stem + ".profiler_merged.json")


def run_trace_name(rec: RunRecord) -> str:
    """``torch_trace.json``, or ``torch_trace.rank<k>.json`` for one rank of a torchrun job."""
    rank = view(DistributedView, rec.distributed).rank
    return f"torch_trace.rank{rank}.json" if rank is not None else "torch_trace.json"


def render(rec: RunRecord, out_dir: Path, ctx: dict[str, Any]) -> Path:
    """The registry's entry point (render/__init__.py ``TORCH_TRACE``): every torch.profiler trace the record lists
    merged next to itself (``<name>.profiler_merged.json``, the job's file left as it was), and the one holding most
    of the window's waits as ``torch_trace.json`` in the run's folder (``torch_trace.rank<k>.json`` under torchrun, in
    the job's folder above the rank's). ``ctx["torch_traces"]``: trace paths to merge instead (``report
    --torch-trace``: written into ``out_dir`` itself). MergeError when there is nothing to merge or none could be
    read."""
    given = ctx.get("torch_traces")
    listed = view(TorchTracesView, rec.torch_traces).traces
    traces: list[tuple[str, str | None]] = ([(str(p), "given") for p in given] if given
                                            else [(str(t.path), t.by) for t in listed])
    if not traces:
        raise MergeError("no torch.profiler trace to merge (the job exported none while it was profiled)")
    dist = view(DistributedView, rec.distributed)
    folder = Path(out_dir)
    if dist.rank is not None and not given:
        folder = Path(dist.run_folder or folder.parent)
    best: tuple[int, int, Path, dict[str, Any]] | None = None
    errors: list[str] = []
    written: list[Path] = ctx.setdefault("torch_trace_files", [])
    for k, (where, by) in enumerate(traces):
        src = Path(where)
        try:
            merged = merge(rec, read_trace(src))
        except MergeError as e:
            errors.append(str(e))
            continue
        text = dumps(merged)
        if by == "job":  # beside the job's own file, never over it
            written.append(write_atomic(merged_name(src), text))
        facts = merged["otherData"]["profiler_merge"]
        score = (int(facts["waits_checked"]) + int(facts["steps_added"]), k)
        if best is None or score >= best[:2]:
            best = (score[0], score[1], src, {"text": text})
    if best is None:
        raise MergeError(errors[0] if errors else "no torch.profiler trace could be read")
    path = write_atomic(folder / run_trace_name(rec), best[3]["text"])
    written.append(path)
    return path
