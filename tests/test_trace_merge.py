"""The profiler's tracks merged into torch.profiler (kineto) traces (render/kineto_merge.py, docs/trace_merge.md).

Real runs, in their own interpreters: a script running its own torch.profiler (tensorboard_trace_handler, 2 workers,
the window closing the job), one exporting with prof.export_chrome_trace after its block (0 workers, --then continue:
the trace comes after the record was first saved), the Python API with torch_profiler=True, and a torchrun pair with
--torch-profiler. Each merged trace is checked as Perfetto's JSON importer and HTA read it: event types, strict
nesting per thread, flows, the time base (every wait inside its ProfilerStep), the job's file unchanged.
"""
from __future__ import annotations

import hashlib
import json
import math
import shutil
import subprocess
import sys
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from profiler import record
from profiler.analysis import analyze
from profiler.instrument import torch_profiler_hooks
from profiler.render import kineto_merge
from profiler.render import trace as trace_mod

from _util import free_port, repo_env

JOBS = Path(__file__).parent / "jobs"
OWN = JOBS / "tm_own_profiler.py"


def _cli(cwd: Path, *args: str, timeout: int = 240) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "profiler", *args], capture_output=True, text=True, cwd=cwd,
                       env=repo_env(), timeout=timeout)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return p


# --- what Perfetto's JSON importer and HTA need of every event -----------------------------------------------------

def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def chrome_problems(trace: dict[str, Any], ours_only: bool = False) -> list[str]:
    """Why the trace is not valid Chrome trace JSON as Perfetto imports it (empty when it is): each event's ph, ts,
    dur, pid and tid types, flows paired, and no partly overlapping X spans on one thread."""
    out: list[str] = []
    ours = {kineto_merge.WAIT_TID, kineto_merge.LOADING_TID}
    by_thread: dict[tuple[Any, Any], list[tuple[float, float, str]]] = defaultdict(list)
    flows: dict[Any, set[str]] = defaultdict(set)
    for k, e in enumerate(trace["traceEvents"]):
        ph = e.get("ph")
        if ph not in {"X", "B", "E", "i", "I", "C", "M", "s", "t", "f", "b", "e", "n", "R", "O", "N", "D", "P"}:
            out.append(f"event {k}: ph {ph!r}")
            continue
        for key in ("pid", "tid"):
            v = e.get(key, 0)
            if isinstance(v, bool) or not isinstance(v, (int, str)):
                out.append(f"event {k}: {key} {v!r}")
        if ph != "M" and not _is_num(e.get("ts")):
            out.append(f"event {k}: ts {e.get('ts')!r}")
        if ph == "X":
            if not _is_num(e.get("dur")) or e["dur"] < 0:
                out.append(f"event {k}: dur {e.get('dur')!r}")
                continue
            by_thread[(e["pid"], e["tid"])].append((float(e["ts"]), float(e["ts"] + e["dur"]), str(e.get("name"))))
        if ph in ("s", "f") and e.get("cat") == kineto_merge.FLOW_CAT:
            flows[e["id"]].add(ph)
            if ph == "f" and e.get("bp") != "e":
                out.append(f"event {k}: flow end without bp 'e'")
    for (pid, tid), spans in by_thread.items():
        if ours_only and tid not in ours and pid == tid and not isinstance(pid, int):
            continue
        spans.sort(key=lambda s: (s[0], -(s[1] - s[0])))
        stack: list[tuple[float, float, str]] = []
        for s in spans:
            while stack and stack[-1][1] <= s[0]:
                stack.pop()
            if stack and s[1] > stack[-1][1] + 1e-6:
                out.append(f"pid {pid} tid {tid}: {s[2]} [{s[0]}, {s[1]}] partly overlaps {stack[-1][2]} "
                           f"[{stack[-1][0]}, {stack[-1][1]}]")
            stack.append(s)
    out += [f"flow {i}: {sorted(v)}" for i, v in flows.items() if v != {"s", "f"}]
    return out


def check_merged(merged: dict[str, Any], job: dict[str, Any], rec: record.RunRecord, workers: int,
                 min_waits: int = 5) -> dict[str, Any]:
    """The merged trace's structure, time base and nesting; returns its profiler_merge facts. The jobs here step their
    torch.profiler once per batch from the loader's first, so ``ProfilerStep#N`` holds the wait for batch N."""
    n_job = len(job["traceEvents"])
    assert merged["traceEvents"][:n_job] == job["traceEvents"], "the job's events must be kept as they were"
    assert {k: v for k, v in merged.items() if k not in ("traceEvents", "otherData", "distributedInfo")} == \
        {k: v for k, v in job.items() if k not in ("traceEvents", "otherData", "distributedInfo")}
    if "distributedInfo" in job:
        assert merged["distributedInfo"] == job["distributedInfo"]
    assert isinstance(merged["distributedInfo"].get("rank"), int)
    # Everything we add is valid and nests; kineto's own events are the job's (with_stack=True traces have partly
    # overlapping Python spans of kineto's: not ours to change), so only what the merge adds is held against it.
    problems = sorted(set(chrome_problems(merged)) - set(chrome_problems(job)))
    assert not problems, problems[:5]
    ours = merged["traceEvents"][n_job:]
    facts = merged["otherData"]["profiler_merge"]
    # Time base: the job's ProfilerStep spans hold our waits (the clock pair is right to well under a step), each
    # wait the one of its own step; and kineto's own span of each next() lies inside our wait for that call (the
    # check a trace without ProfilerStep spans still has).
    if facts["profiler_steps_in_trace"]:
        assert facts["waits_checked"] >= min_waits, facts
        assert facts["waits_inside_profiler_step"] == facts["waits_checked"], facts
        steps = [e for e in merged["traceEvents"][:n_job]
                 if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
        for w in (e for e in merged["traceEvents"][n_job:] if e.get("name") == kineto_merge.WAIT_NAME):
            holding = [s for s in steps if s["ts"] <= w["ts"] and w["ts"] + w["dur"] <= s["ts"] + s["dur"] + 1e-3]
            assert all(s["name"] == f"ProfilerStep#{w['args']['batch']}" for s in holding), (w, holding)
    else:
        assert facts["dataloader_next_checked"] >= min_waits, facts
    assert facts["dataloader_next_inside_wait"] == facts["dataloader_next_checked"], facts
    names = {e["args"]["name"] for e in ours if e.get("ph") == "M" and e["name"] == "process_name"}
    bt = rec.timeline["batches"]
    pids = {int(w): int(p) for w, p in zip(bt["worker"], bt["pid"])}
    if workers:
        assert names == {f"DataLoader worker {w}" for w in range(workers)}
        worker_x = [e for e in ours if e.get("ph") == "X" and e["pid"] in set(pids.values())]
        assert {e["pid"] for e in worker_x} == set(pids.values())  # real pids
        assert all(e["tid"] == e["pid"] for e in worker_x)
    else:
        assert not names
        worker_x = [e for e in ours if e.get("tid") == kineto_merge.LOADING_TID and e.get("ph") == "X"]
    cats = {e.get("cat") for e in worker_x}
    assert {"batch", "sample", "collate"} <= cats
    waits = [e for e in ours if e.get("name") == kineto_merge.WAIT_NAME]
    causes = [e for e in ours if str(e.get("name")).startswith(kineto_merge.CAUSE_PREFIX)]
    assert waits and causes
    assert {e["name"][len(kineto_merge.CAUSE_PREFIX):] for e in causes} <= {"io", "cpu", "transfer", "other"}
    for c in causes:  # each cause is a child of its step's wait
        w = next(w for w in waits if w["args"]["step"] == c["args"]["step"])
        assert w["ts"] <= c["ts"] and c["ts"] + c["dur"] <= w["ts"] + w["dur"] + 1e-6 and w["tid"] == c["tid"]
    kineto_ids = [e["id"] for e in job["traceEvents"] if isinstance(e.get("id"), int)]
    flow_ids = [e["id"] for e in ours if e.get("cat") == kineto_merge.FLOW_CAT]
    assert flow_ids and min(flow_ids) > max(kineto_ids, default=-1)
    ends: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
    for e in ours:
        if e.get("cat") == kineto_merge.FLOW_CAT:
            ends[e["id"]][e["ph"]] = e
    for f in ends.values():  # forward in time: from the batch's collate to the end of the wait that took it
        assert f["s"]["ts"] <= f["f"]["ts"]
        w = min((w for w in waits if w["ts"] <= f["f"]["ts"] <= w["ts"] + w["dur"]),
                key=lambda w: w["ts"] + w["dur"] - f["f"]["ts"])  # the one whose end it marks
        c = next(c for c in worker_x if c.get("cat") == "collate" and c["args"]["batch"] == w["args"]["batch"])
        assert c["pid"] == f["s"]["pid"] and c["ts"] <= f["s"]["ts"] <= c["ts"] + c["dur"]
    return facts


def _hta(folder: Path) -> Any:
    pytest.importorskip("hta", reason="HolisticTraceAnalysis (the test extra) is not installed")
    from hta.trace_analysis import TraceAnalysis

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TraceAnalysis(trace_dir=str(folder))


def _hta_outcome(fn: Any) -> str:
    try:
        fn()
        return "ok"
    except Exception as e:  # noqa: BLE001 - compared between the job's trace and the merged one
        return type(e).__name__


def hta_input_bound_steps(analyzer: Any, rank: int = 0, share: float = 0.5) -> dict[int, float]:
    """docs/trace_merge.md's recipe on CPU: each ProfilerStep's share spent in our ``DataLoader wait`` spans, from
    the frame HTA loaded; the steps at ``share`` or more are input-bound."""
    df = analyzer.t.get_trace(rank)
    sym = analyzer.t.symbol_table.get_sym_table()
    name = df["name"].map(lambda i: sym[i])
    steps = df[name.str.startswith("ProfilerStep#")]
    waits = df[name == kineto_merge.WAIT_NAME]
    out: dict[int, float] = {}
    for _, s in steps.iterrows():
        a, b = s["ts"], s["ts"] + s["dur"]
        inside = waits[(waits["ts"] >= a) & (waits["ts"] + waits["dur"] <= b)]
        out[int(sym[s["name"]].split("#")[1])] = float(inside["dur"].sum()) / max(float(s["dur"]), 1.0)
    return {k: v for k, v in out.items() if v >= share}


# --- a job's own torch.profiler ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def handler_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """run of a script whose torch.profiler writes through tensorboard_trace_handler, 2 workers; the window closes
    the job (its profiler's __exit__ exports as the job stops). With --torch-profiler too: ours must step aside when
    the job's starts (two at once crashed the process: a segfault)."""
    d = tmp_path_factory.mktemp("tm_handler")
    _cli(d, "run", "--no-progress", "--no-plots", "--torch-profiler", "--warmup", "2", "--steps", "10", "--out",
         "run", str(OWN), "2", "tb")
    return d / "run", d / "tb"


def test_handler_trace_merged_beside_it_and_in_the_run_folder(handler_run: tuple[Path, Path]) -> None:
    run, tb = handler_run
    job_files = sorted(tb.glob("*.pt.trace.json"))
    assert len(job_files) == 1
    digest = hashlib.sha256(job_files[0].read_bytes()).hexdigest()
    rec = record.load(run / "run.json")
    listed = rec.torch_traces["traces"]  # type: ignore[index]
    assert [t["path"] for t in listed] == [str(job_files[0].resolve())] and listed[0]["by"] == "job"
    assert "the job started its own torch.profiler" in rec.torch_traces["error"]  # type: ignore[index]
    beside = kineto_merge.merged_name(job_files[0])
    assert beside.name.endswith(".pt.trace.profiler_merged.json") and beside.is_file()
    job = json.loads(job_files[0].read_text())
    merged = json.loads((run / "torch_trace.json").read_text())
    assert json.loads(beside.read_text()) == merged
    analyze(rec)
    facts = check_merged(merged, job, rec, workers=2)
    assert facts["time_base"].startswith("baseTimeNanoseconds")
    assert hashlib.sha256(job_files[0].read_bytes()).hexdigest() == digest  # read, never written
    # The merge is a pure function of (record, trace): redone from the saved run.json alone, the same events.
    redo = kineto_merge.merge(rec, job)
    assert redo["traceEvents"] == merged["traceEvents"]


def test_report_torch_trace_redoes_the_merge_and_refuses_bad_input(handler_run: tuple[Path, Path],
                                                                  tmp_path: Path) -> None:
    run, tb = handler_run
    job_file = next(tb.glob("*.pt.trace.json"))
    p = _cli(tmp_path, "report", str(run / "run.json"), "--torch-trace", str(job_file), "--out", "again")
    assert "torch_trace.json" in p.stdout
    again = json.loads((tmp_path / "again" / "torch_trace.json").read_text())
    assert again["traceEvents"] == json.loads((run / "torch_trace.json").read_text())["traceEvents"]
    bad = subprocess.run([sys.executable, "-m", "profiler", "report", str(run / "run.json"), "--torch-trace",
                          str(run / "run.json"), "--out", "bad"], capture_output=True, text=True, cwd=tmp_path,
                         env=repo_env(), timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr


def test_hta_loads_the_merged_trace_and_finds_the_input_bound_steps(handler_run: tuple[Path, Path],
                                                                   tmp_path: Path) -> None:
    run, tb = handler_run
    (tmp_path / "merged").mkdir()
    (tmp_path / "job").mkdir()
    shutil.copy(run / "torch_trace.json", tmp_path / "merged" / "rank0.json")
    shutil.copy(next(tb.glob("*.pt.trace.json")), tmp_path / "job" / "rank0.json")
    merged, job = _hta(tmp_path / "merged"), _hta(tmp_path / "job")
    assert merged.get_profiler_steps() == job.get_profiler_steps() and len(merged.get_profiler_steps()) >= 5
    sym = merged.t.symbol_table.get_sym_table()
    assert {kineto_merge.WAIT_NAME, "DataLoader worker 0"} & set(sym) and kineto_merge.WAIT_NAME in sym
    # Temporal and idle-time breakdowns (and HTA 0.5's critical path) analyse GPU kernels: on a CPU trace they
    # behave on the merged trace exactly as on the job's own (today both raise inside HTA; on a GPU both run).
    for analysis in ("get_temporal_breakdown", "get_idle_time_breakdown"):
        assert _hta_outcome(lambda: getattr(merged, analysis)(visualize=False)) == \
            _hta_outcome(lambda: getattr(job, analysis)(visualize=False)), analysis
    # instance_id is the position among the ProfilerStep spans (an int: HTA refuses numpy's), not the step number.
    assert _hta_outcome(lambda: merged.critical_path_analysis(0, "ProfilerStep", 1)) == \
        _hta_outcome(lambda: job.critical_path_analysis(0, "ProfilerStep", 1))
    rec = record.load(run / "run.json")
    analyze(rec)
    assert rec.verdict["bottleneck"] != "compute"  # the slow dataset: input-bound
    # HTA marks the steps our spans say were spent mostly waiting (computed here from the JSON itself): the same set.
    trace = json.loads((run / "torch_trace.json").read_text())["traceEvents"]
    waits = [e for e in trace if e.get("name") == kineto_merge.WAIT_NAME]
    expect = set()
    for s in (e for e in trace if str(e.get("name", "")).startswith("ProfilerStep#")):
        inside = sum(w["dur"] for w in waits if w["ts"] >= s["ts"] and w["ts"] + w["dur"] <= s["ts"] + s["dur"])
        if inside / s["dur"] >= 0.3:
            expect.add(int(s["name"].split("#")[1]))
    bound = hta_input_bound_steps(merged, share=0.3)
    assert expect and set(bound) == expect, (bound, expect)


def test_size_stays_within_the_bound(handler_run: tuple[Path, Path]) -> None:
    run, tb = handler_run
    rec = record.load(run / "run.json")
    analyze(rec)
    ours = len(json.dumps(trace_mod.build_trace(rec), separators=(",", ":")))
    job = next(tb.glob("*.pt.trace.json")).stat().st_size
    assert (run / "torch_trace.json").stat().st_size <= 2 * job + ours


def test_gzipped_trace_reads_the_same_and_is_named_beside_it(handler_run: tuple[Path, Path], tmp_path: Path) -> None:
    """tensorboard_trace_handler(use_gzip=True) writes .pt.trace.json.gz: read as the plain file, merged beside it."""
    import gzip

    src = next(handler_run[1].glob("*.pt.trace.json"))
    gz = tmp_path / (src.name + ".gz")
    gz.write_bytes(gzip.compress(src.read_bytes()))
    assert kineto_merge.read_trace(gz) == kineto_merge.read_trace(src)
    assert kineto_merge.merged_name(gz) == tmp_path / src.name.replace(".json", ".profiler_merged.json")


def test_export_after_the_block_workers0_then_continue(tmp_path: Path) -> None:
    """workers=0, prof.export_chrome_trace after the block, --then continue: the trace comes after the record was
    first saved; the record is saved again with it and the merge has the loading thread, no worker process."""
    _cli(tmp_path, "run", "--no-progress", "--no-plots", "--then", "continue", "--warmup", "2", "--steps", "8",
         "--out", "run", str(OWN), "0", "tr", "export")
    job_file = tmp_path / "tr" / "job_trace.json"
    rec = record.load(tmp_path / "run" / "run.json")
    assert [t["path"] for t in rec.torch_traces["traces"]] == [str(job_file.resolve())]  # type: ignore[index]
    analyze(rec)
    merged = json.loads((tmp_path / "run" / "torch_trace.json").read_text())
    check_merged(merged, json.loads(job_file.read_text()), rec, workers=0)
    assert (tmp_path / "tr" / "job_trace.profiler_merged.json").is_file()


def test_export_after_the_block_but_the_window_closed_the_job_first(tmp_path: Path) -> None:
    """--then exit stops the job before its prof.export_chrome_trace(...) after the block: the profiler exports the
    job's stopped profiler into the run folder itself (never where the job would have written) and merges it."""
    _cli(tmp_path, "run", "--no-progress", "--no-plots", "--warmup", "2", "--steps", "6", "--out", "run", str(OWN),
         "1", "tr", "export")
    assert not (tmp_path / "tr" / "job_trace.json").exists()  # the job never got there
    run = tmp_path / "run"
    rec = record.load(run / "run.json")
    listed = rec.torch_traces["traces"]  # type: ignore[index]
    assert [(Path(t["path"]).name, t["by"]) for t in listed] == [("job_profiler0.pt.trace.json", "job_profiler")]
    analyze(rec)
    check_merged(json.loads((run / "torch_trace.json").read_text()),
                 json.loads((run / "job_profiler0.pt.trace.json").read_text()), rec, workers=1)


# --- the profiler's own torch.profiler ------------------------------------------------------------------------------

def test_api_torch_profiler_true_writes_the_merged_trace(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, str(JOBS / "tm_api.py"), "out", "2"], capture_output=True, text=True,
                       cwd=tmp_path, env=repo_env(), timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    out = tmp_path / "out"
    rec = record.load(out / "run.json")
    assert [t["by"] for t in rec.torch_traces["traces"]] == ["profiler"]  # type: ignore[index]
    own = out / torch_profiler_hooks.OWN_TRACE_FILE
    analyze(rec)
    merged = json.loads((out / "torch_trace.json").read_text())
    facts = check_merged(merged, json.loads(own.read_text()), rec, workers=2)
    # The schedule: the warm-up's steps, then the measured ones and one more (the last one's compute).
    assert facts["profiler_steps_in_trace"] == 8 + 1
    assert str(out / "torch_trace.json") in p.stdout


def test_torchrun_pair_with_torch_profiler(tmp_path: Path) -> None:
    """Two ranks, each with --torch-profiler: torch_trace.rank<k>.json in the run folder, each with its rank in
    distributedInfo, loaded by HTA as one job of two ranks."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "-m", "profiler", "run", "--no-progress", "--no-plots", "--torch-profiler", "--warmup", "2", "--steps",
           "6", "--out", "run", str(OWN), "1", "tr", "none"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=repo_env(), timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    folder = tmp_path / "merged"
    folder.mkdir()
    for k in (0, 1):
        path = tmp_path / "run" / f"torch_trace.rank{k}.json"
        merged = json.loads(path.read_text())
        assert merged["distributedInfo"]["rank"] == k
        assert path.read_text().startswith('{"distributedInfo": {')  # first, spaced: HTA's rank regex finds it
        rec = record.load(tmp_path / "run" / f"rank{k}" / "run.json")
        analyze(rec)
        own = tmp_path / "run" / f"rank{k}" / torch_profiler_hooks.OWN_TRACE_FILE
        check_merged(merged, json.loads(own.read_text()), rec, workers=1)
        shutil.copy(path, folder / path.name)
    assert sorted(_hta(folder).t.traces) == [0, 1]


def test_torch_profiler_seam_is_where_the_watch_expects_it() -> None:
    """Fails loudly when a torch release moves _KinetoProfile.export_chrome_trace (the one private detail)."""
    import torch

    assert torch_profiler_hooks.check() == [], f"torch {torch.__version__} moved torch.profiler's export"


def test_merged_trace_of_hand_made_spans_nests_and_clips(tmp_path: Path) -> None:
    """The nesting pass: a child sticking out of its parent is clipped to it, siblings never partly overlap."""
    ev = [{"ph": "X", "name": "p", "ts": 0.0, "dur": 10.0, "pid": 1, "tid": 1},
          {"ph": "X", "name": "c", "ts": 5.0, "dur": 10.0, "pid": 1, "tid": 1},
          {"ph": "X", "name": "d", "ts": 9.0, "dur": 4.0, "pid": 1, "tid": 1}]
    kineto_merge._nest(ev)
    assert not chrome_problems({"traceEvents": ev}) and ev[1]["dur"] == 5.0 and ev[2]["dur"] == 1.0
