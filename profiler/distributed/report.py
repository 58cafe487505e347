"""The merged report of a torchrun job: from the ranks' records to ranks.json, ranks.png, report.html, trace.json
in the run folder, and the terminal summary (rank 0 only).

Used by rank 0 at the end of a run (after waiting for the others' records, files only, no barrier) and by
``python -m profiler report <run folder>`` (from the records alone).
"""
from __future__ import annotations

import base64
import html
import json
import sys
from pathlib import Path
from typing import Any

from .. import record
from ..errors import UserError
from .layout import find_ranks
from .merge import merge

RANKS_FILES = ("ranks.json", "ranks.png", "report.html", "trace.json")
RANK_PID_STRIDE = 1000  # rank k's trace processes: pid + (k + 1) * 1000 (a trace's own pids stay below 1000)


def load_ranks(folder: Path) -> tuple[dict[int, Any], dict[int, str]]:
    """rank → analysed RunRecord (None where its run.json is missing or unreadable), and why it is missing."""
    from ..analysis import analyze

    recs: dict[int, Any] = {}
    why: dict[int, str] = {}
    for r, d in find_ranks(folder).items():
        if not (d / "run.json").exists():
            recs[r], why[r] = None, "no run.json (the rank died or was killed before writing it)"
            continue
        try:
            recs[r] = analyze(record.load(d / "run.json"))
        except UserError as e:
            recs[r], why[r] = None, f"unreadable run.json ({e})"
    return recs, why


def merged_view(folder: Path, states: dict[int, str] | None = None) -> tuple[dict[str, Any], dict[int, Any]]:
    recs, why = load_ranks(folder)
    st = dict(states or {})
    for r, w in why.items():
        st[r] = f"{st[r]}; {w}" if r in st and st[r] not in ("record",) else w
    dicts = {r: (rec.to_dict() if rec is not None else None)
             for r, rec in recs.items()}
    view = merge(dicts, states={r: s for r, s in st.items() if s != "record"})
    return view, recs


def write_merged(folder: Path, states: dict[int, str] | None = None, plots: bool = True) -> tuple[dict, list[Path]]:
    """Write the merged files into ``folder``; returns (view, files written). A renderer failing costs only itself."""
    from ..fsutil import atomic_write_bytes
    from ..record import json_safe

    folder = Path(folder)
    view, recs = merged_view(folder, states)
    files = [atomic_write_bytes(folder / "ranks.json", json.dumps(json_safe(view), indent=1).encode())]
    if not plots:
        return view, files
    img = None
    try:
        from ..render.ranks_plot import plot_ranks
        img = plot_ranks(view, folder / "ranks.png")
        files.append(img)
    except Exception as e:  # noqa: BLE001 - the numbers are in ranks.json already
        print(f"profiler: could not draw ranks.png ({type(e).__name__}: {e})", file=sys.stderr)
    try:
        files.append(write_trace(recs, view, folder / "trace.json"))
    except Exception as e:  # noqa: BLE001
        print(f"profiler: could not write the merged trace.json ({type(e).__name__}: {e})", file=sys.stderr)
    files.append(write_html(view, folder / "report.html", img))
    return view, files


# --- trace -------------------------------------------------------------------------------------------------------

def build_trace(recs: dict[int, Any], view: dict[str, Any]) -> dict[str, Any]:
    """One Chrome trace, one process group per rank (pids offset by rank), on the shared clock where there is one."""
    from ..render.trace import MAIN_PID
    from ..render.trace import build_trace as rank_trace

    events: list[dict] = []
    offsets = view["clocks"]["offset_s"]
    backend = None
    for r, rec in sorted(recs.items()):
        if rec is None:
            continue
        backend = backend or (rec.distributed or {}).get("backend")
        try:
            t = rank_trace(rec)
        except Exception as e:  # noqa: BLE001 - the rank's detail trace failed: keep its main loop at least
            print(f"profiler: rank {r}: main-loop spans only in the merged trace ({type(e).__name__}: {e})",
                  file=sys.stderr)
            t = {"traceEvents": _main_loop_events(rec, MAIN_PID)}
        shift = int(round(float(offsets.get(r, offsets.get(str(r), 0.0))) * 1e6))
        base = (r + 1) * RANK_PID_STRIDE
        for e in t["traceEvents"]:
            e = dict(e)
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
        col = (rec.distributed or {}).get("collectives") or {}
        if col.get("start"):
            tid = 9
            events.append({"ph": "M", "name": "thread_name", "pid": base + MAIN_PID, "tid": tid,
                           "args": {"name": "all-reduce (DDP comm hook)"}})
            for a, b in zip(col["start"], col["end"]):
                events.append({"ph": "X", "name": "all_reduce", "cat": "collective", "pid": base + MAIN_PID,
                               "tid": tid, "ts": int(round(a * 1e6)) + shift, "dur": max(1, int(round((b - a) * 1e6)))})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "distributedInfo": {"backend": backend, "rank": 0, "world_size": view["world_size"],
                                "ranks": view["present"]},
            "otherData": {"tool": "profiler", "ranks": view["present"], "missing_ranks": view["missing"],
                          "clocks": view["clocks"]["note"], "summary": view["summary"],
                          "time_zero": "the earliest rank's run start" if view["clocks"]["shared"]
                          else "each rank's first measured step"}}


def _main_loop_events(rec: Any, pid: int) -> list[dict]:
    """ProfilerStep / wait / compute spans from timeline.steps alone (the fallback when the detail trace fails)."""
    st = rec.timeline.get("steps") or {}
    ev: list[dict] = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "main process"}},
                      {"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "main loop"}}]
    for k, ws, we, ce in zip(st.get("step", []), st.get("wait_start", []), st.get("wait_end", []),
                             st.get("compute_end", [])):
        for name, a, b in ((f"ProfilerStep#{k}", ws, ce), ("wait", ws, we), ("compute", we, ce)):
            if b > a:
                ev.append({"ph": "X", "name": name, "cat": "step", "pid": pid, "tid": 1, "ts": int(round(a * 1e6)),
                           "dur": max(1, int(round((b - a) * 1e6)))})
    return ev


def write_trace(recs: dict[int, Any], view: dict[str, Any], path: Path) -> Path:
    from ..fsutil import atomic_write_bytes

    text = json.dumps(build_trace(recs, view), separators=(",", ":"), default=lambda o: o.item())
    return atomic_write_bytes(path, text.encode())


# --- HTML --------------------------------------------------------------------------------------------------------

def _f(v: Any, fmt: str = "{:.1f}", scale: float = 1.0) -> str:
    return "–" if v is None else fmt.format(v * scale)


def table_rows(view: dict[str, Any]) -> list[list[str]]:
    """The per-rank table (shared by HTML and terminal)."""
    rows = []
    st = view.get("straggler") or {}
    for r in view["ranks"]:
        rows.append([f"{r['rank']}" + ("*" if st.get("rank") == r["rank"] else ""),
                     str(r.get("hostname") or "–"), _f(r.get("samples_per_s")), str(r.get("steps")),
                     _f(r.get("step_ms")), _f(r.get("wait_ms")), _f(r.get("compute_ms")),
                     _f(r.get("collective_ms")), _f(r.get("collective_share"), "{:.0f} %", 100),
                     _f(r.get("stall_fraction"), "{:.0f} %", 100), str(r.get("bottleneck") or "–")
                     + (" [partial]" if r.get("partial") else "")])
    for m in view["missing"]:
        rows.append([f"{m} (missing)", "–", "–", "–", "–", "–", "–", "–", "–", "–",
                     str(view["states"].get(m, view["states"].get(str(m), "no record")))])
    return rows


HEADERS = ["rank", "host", "samples/s", "steps", "step ms", "input wait ms", "compute ms", "collective ms",
           "collective share", "stall", "bottleneck"]

# The terminal's narrower table (80 columns): the HTML has every column.
TERMINAL_HEADERS = ["rank", "samples/s", "step ms", "input wait ms", "compute ms", "collective ms", "collective share",
                    "bottleneck"]
SHORT = {"samples/s": "smp/s", "step ms": "step", "input wait ms": "input", "compute ms": "compute",
         "collective ms": "collect.", "collective share": "coll %"}


def write_html(view: dict[str, Any], path: Path, img: Path | None) -> Path:
    from ..fsutil import atomic_write_bytes

    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in HEADERS)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in table_rows(view))
    links = " ".join(f'<a href="rank{r}/report.html">rank {r}</a>' for r in view["present"])
    pic = ""
    if img is not None:
        b64 = base64.b64encode(Path(img).read_bytes()).decode()
        pic = f'<img alt="ranks side by side" src="data:image/png;base64,{b64}" style="max-width:100%">'
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>profiler: ranks</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}.s{{font-size:1.15em;background:#f6f6f0;padding:.8em}}
</style></head><body>
<h1>Ranks ({len(view['present'])} of {view['world_size']})</h1>
<p class="s">{e(view['summary'])}</p>
<p>Collective wait: {e(view['collective_method'])}.<br>Clocks: {e(view['clocks']['note'])}.<br>
Step-time skew (slowest − fastest rank, per step): mean {_f(view['skew_ms']['mean'])} ms, max
{_f(view['skew_ms']['max'])} ms over {view['aligned_steps']} aligned steps.</p>
<table><tr>{head}</tr>{body}</table><p>* the straggler</p>
{pic}
<p>Each rank's own report: {links}. Merged trace: trace.json (one process per rank; ui.perfetto.dev).</p>
</body></html>"""
    return atomic_write_bytes(path, page.encode())


# --- terminal ----------------------------------------------------------------------------------------------------

def print_merged(view: dict[str, Any], console: Any, files: list[str] | None = None) -> None:
    from rich.panel import Panel
    from rich.table import Table

    t = Table(title=f"Ranks ({len(view['present'])} of {view['world_size']}): ms per step; * straggler")
    keep = [HEADERS.index(h) for h in TERMINAL_HEADERS]
    for h in TERMINAL_HEADERS:
        t.add_column(SHORT.get(h, h), justify="right")
    for row in table_rows(view):
        t.add_row(*[row[i] for i in keep])
    console.print(t)
    console.print(Panel(view["summary"] or "-", title="Ranks", border_style="magenta"), markup=False)
    console.print(f"Collective wait: {view['collective_method']}. Clocks: {view['clocks']['note']}.", markup=False)
    if files:
        console.print("Wrote: " + ", ".join(files), markup=False)
