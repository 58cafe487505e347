"""A torchrun job's merged trace.json: one Chrome/Perfetto trace, one process group per rank (pids offset by rank),
on the shared clock where there is one, ``distributedInfo`` at the top (HTA). Built from each rank's own trace
(profiler/render/trace.py) and the merged ``ranks`` view (profiler/distributed/merge.py).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..record.read import DistributedView
from ..record.read import view as section_view
from .output import write_atomic
from .trace import MAIN_PID
from .trace import build_trace as rank_trace

if TYPE_CHECKING:  # annotations only: renderers take the typed record
    from ..record import RunRecord

RANK_PID_STRIDE = 1000  # rank k's trace processes: pid + (k + 1) * 1000 (a trace's own pids stay below 1000)


def build_trace(recs: dict[int, RunRecord | None], view: dict[str, Any]) -> dict[str, Any]:
    """One Chrome trace, one process group per rank (pids offset by rank), on the shared clock where there is one."""
    events: list[dict] = []
    offsets = view["clocks"]["offset_s"]
    backend = None
    for r, rec in sorted(recs.items()):
        if rec is None:
            continue
        dist = section_view(DistributedView, rec.distributed)
        backend = backend or dist.backend
        try:
            t = rank_trace(rec)
        except Exception as err:  # noqa: BLE001 - the rank's detail trace failed: keep its main loop at least
            print(f"profiler: rank {r}: main-loop spans only in the merged trace ({type(err).__name__}: {err})",
                  file=sys.stderr)
            t = {"traceEvents": _main_loop_events(rec, MAIN_PID)}
        shift = int(round(float(offsets.get(r, offsets.get(str(r), 0.0))) * 1e6))
        base = (r + 1) * RANK_PID_STRIDE
        for src in t["traceEvents"]:
            e = dict(src)
            e["pid"] = base + int(e.get("pid", 0))
            if "ts" in e:
                e["ts"] = int(e["ts"]) + shift
            if e.get("ph") == "M" and e.get("name") == "process_name":
                e["args"] = {"name": f"rank {r}: {e['args'].get('name')}"}
            elif e.get("ph") == "M" and e.get("name") == "process_sort_index":
                e["args"] = {"sort_index": base + int(e["args"].get("sort_index", 0))}
            if "id" in e:
                e["id"] = f"r{r}-{e['id']}"
            events.append(e)
        col = dist.collectives
        if col.start:
            tid = 9
            events.append({"ph": "M", "name": "thread_name", "pid": base + MAIN_PID, "tid": tid,
                           "args": {"name": "all-reduce (DDP comm hook)"}})
            for a, b in zip(col.start, col.end):
                events.append({"ph": "X", "name": "all_reduce", "cat": "collective", "pid": base + MAIN_PID,
                               "tid": tid, "ts": int(round(a * 1e6)) + shift, "dur": max(1, int(round((b - a) * 1e6)))})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "distributedInfo": {"backend": backend, "rank": 0, "world_size": view["world_size"],
                                "ranks": view["present"]},
            "otherData": {"tool": "profiler", "ranks": view["present"], "missing_ranks": view["missing"],
                          "clocks": view["clocks"]["note"], "summary": view["summary"],
                          "time_zero": "the earliest rank's run start" if view["clocks"].get("comparable",
                                                                                              view["clocks"]["shared"])
                          else "each rank's first measured step"}}


def _main_loop_events(rec: RunRecord, pid: int) -> list[dict]:
    """ProfilerStep / wait / compute spans from timeline.steps alone (the fallback when the detail trace fails)."""
    st = rec.timeline["steps"]
    ev: list[dict] = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "main process"}},
                      {"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "main loop"}}]
    for k, ws, we, ce in zip(st["step"], st["wait_start"], st["wait_end"], st["compute_end"]):
        for name, a, b in ((f"ProfilerStep#{k}", ws, ce), ("wait", ws, we), ("compute", we, ce)):
            if b > a:
                ev.append({"ph": "X", "name": name, "cat": "step", "pid": pid, "tid": 1, "ts": int(round(a * 1e6)),
                           "dur": max(1, int(round((b - a) * 1e6)))})
    return ev


def write_trace(recs: dict[int, RunRecord | None], view: dict[str, Any], path: Path) -> Path:
    text = json.dumps(build_trace(recs, view), separators=(",", ":"), default=lambda o: o.item())
    return write_atomic(path, text.encode())


def render(view: dict[str, Any], out_dir: Path, ctx: dict[str, Any]) -> Path:
    """The registry's entry point: trace.json in ``out_dir``, from the ranks' records in ``ctx["recs"]``."""
    return write_trace(ctx["recs"], view, Path(out_dir) / "trace.json")
