"""The trace merge on jobs that start their torch.profiler by hand (render/kineto_merge.py, docs/trace_merge.md).

``prof.start()`` / ``prof.step()`` / ``prof.stop()`` with the window closing the job (``--then exit``) before its
``prof.stop()``: the job's profiler is still recording when the job ends. Kineto left running crashed the
interpreter's exit (a segfault, the job's status 139, no merged trace); the profiler now stops it (without the job's
on_trace_ready), exports it into the run folder and merges it. Real runs in their own interpreters
(tests/jobs/tm_shapes.py): a schedule repeating its cycles through tensorboard_trace_handler(use_gzip=True) with 0
workers, and no schedule at all (no ProfilerStep spans: the time base is checked on kineto's own next() spans) with 2.
And a torchrun pair whose ranks each run their own torch.profiler (tests/jobs/tm_ddp.py; tests/test_trace_merge.py's
pair runs --torch-profiler instead).
"""
from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_trace_merge import _hta, check_merged

from profiler import record
from profiler.analysis import analyze
from profiler.render import kineto_merge

from _util import free_port, repo_env

pytestmark = pytest.mark.slow  # real profiled jobs in subprocesses

JOBS = Path(__file__).parent / "jobs"
SHAPES = JOBS / "tm_shapes.py"


def _run(tmp: Path, workers: int, mode: str) -> tuple[Path, Path]:
    p = subprocess.run([sys.executable, "-m", "profiler", "run", "--no-progress", "--no-plots", "--warmup", "2",
                        "--steps", "8", "--out", "run", str(SHAPES), str(workers), "tr", mode],
                       capture_output=True, text=True, cwd=tmp, env=repo_env(), timeout=240)
    # The job ends with its profiler recording: without the profiler's stop, the interpreter's exit segfaulted (-11).
    assert p.returncode == 0, (p.returncode, p.stdout[-1500:] + p.stderr[-3000:])
    return tmp / "run", tmp / "tr"


def _read(path: Path) -> dict[str, Any]:
    raw = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
    out: dict[str, Any] = json.loads(raw)
    return out


def _source(merged: dict[str, Any], listed: list[dict[str, Any]]) -> dict[str, Any]:
    """The job's trace the run folder's torch_trace.json was made from (its events come first, unchanged)."""
    for t in listed:
        job = _read(Path(t["path"]))
        if merged["traceEvents"][:len(job["traceEvents"])] == job["traceEvents"]:
            return job
    raise AssertionError("torch_trace.json begins with none of the listed traces' events")


def test_start_step_stop_cycles_cut_off_by_the_window(tmp_path: Path) -> None:
    """workers=0, a repeating schedule, gzipped handler, with_stack / profile_memory / record_shapes (memory instant
    events, kineto's Python spans: some partly overlap, the job's own doing): the cycles the job finished are merged
    beside their .gz
    files; the cycle still recording when the window closed the job is stopped and exported by the profiler
    (job_profiler0, in the run folder) without calling the job's handler again."""
    run, tr = _run(tmp_path, 0, "cycles")
    rec = record.load(run / "run.json")
    analyze(rec)
    listed = rec.torch_traces["traces"]  # type: ignore[index]
    by = [(Path(t["path"]).name, t["by"]) for t in listed]
    gz = sorted(tr.glob("*.pt.trace.json.gz"))
    assert len(gz) == 1, by  # one cycle of 6 steps finished in the 10 the window let the job run
    assert by == [(gz[0].name, "job"), ("job_profiler0.pt.trace.json", "job_profiler")]
    assert sorted(p.name for p in tr.iterdir()) == sorted([gz[0].name, kineto_merge.merged_name(gz[0]).name])
    for t in listed:  # each trace merged: beside the job's file, or (the one we exported) checked from the record
        job = _read(Path(t["path"]))
        merged = (json.loads(kineto_merge.merged_name(t["path"]).read_text()) if t["by"] == "job"
                  else kineto_merge.merge(rec, job))
        check_merged(merged, job, rec, workers=0, min_waits=2)
    top = json.loads((run / "torch_trace.json").read_text())
    check_merged(top, _source(top, listed), rec, workers=0, min_waits=2)


def test_start_stop_without_schedule_merged_and_loaded_by_hta(tmp_path: Path) -> None:
    """workers=2, no schedule (no ProfilerStep spans), prof.export_chrome_trace after prof.stop(), which the window
    cut off: the profiler stops and exports the job's profiler; each kineto next() span lies inside our wait for it;
    HTA loads the merged trace with our spans."""
    run, tr = _run(tmp_path, 2, "plain")
    assert not (tr / "plain.json").exists()  # the job never got there
    rec = record.load(run / "run.json")
    analyze(rec)
    listed = rec.torch_traces["traces"]  # type: ignore[index]
    assert [(Path(t["path"]).name, t["by"]) for t in listed] == [("job_profiler0.pt.trace.json", "job_profiler")]
    merged = json.loads((run / "torch_trace.json").read_text())
    facts = check_merged(merged, _read(run / "job_profiler0.pt.trace.json"), rec, workers=2)
    assert facts["profiler_steps_in_trace"] == 0 and facts["steps_added"] >= 8
    # The job's profiler.stage names, each span inside a sample span of its worker's thread.
    spans = [e for e in merged["traceEvents"] if e.get("ph") == "X"]
    samples = [e for e in spans if e.get("cat") == "sample"]
    stages = [e for e in spans if e.get("cat") == "stage"]
    assert {e["name"] for e in stages} == {"read", "decode"} and len(stages) >= len(samples) > 0
    for e in stages:
        assert any(s["pid"] == e["pid"] and s["tid"] == e["tid"] and s["ts"] <= e["ts"]
                   and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1e-3 for s in samples), e
    folder = tmp_path / "hta"
    folder.mkdir()
    shutil.copy(run / "torch_trace.json", folder / "rank0.json")
    analyzer = _hta(folder)
    sym = set(analyzer.t.symbol_table.get_sym_table())
    assert {kineto_merge.WAIT_NAME, "batch", "collate"} <= sym, sorted(sym)[:20]
    df = analyzer.t.get_trace(0)
    waits = [e for e in merged["traceEvents"] if e.get("name") == kineto_merge.WAIT_NAME]
    wait_id = analyzer.t.symbol_table.get_sym_id_map()[kineto_merge.WAIT_NAME]
    assert int((df["name"] == wait_id).sum()) == len(waits)  # HTA read every wait span


def test_torchrun_pair_each_rank_with_its_own_profiler(tmp_path: Path) -> None:
    """torchrun of two ranks, each job's own torch.profiler (tensorboard_trace_handler, 1 worker): each rank's trace
    merged as torch_trace.rank<k>.json in the job's run folder, its distributedInfo the job's own (backend, rank),
    HTA loads the two as one job."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "-m", "profiler", "run", "--no-progress", "--no-plots", "--warmup", "2", "--steps", "10", "--out", "run",
           str(JOBS / "tm_ddp.py"), "1", "tb"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=repo_env(), timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    folder = tmp_path / "hta"
    folder.mkdir()
    for k in (0, 1):
        rec = record.load(tmp_path / "run" / f"rank{k}" / "run.json")
        analyze(rec)
        listed = rec.torch_traces["traces"]  # type: ignore[index]
        assert len(listed) == 1 and listed[0]["by"] == "job" and Path(listed[0]["path"]).parent == tmp_path / "tb"
        path = tmp_path / "run" / f"torch_trace.rank{k}.json"
        merged = json.loads(path.read_text())
        job = _read(Path(listed[0]["path"]))
        assert job["distributedInfo"]["rank"] == k and merged["distributedInfo"] == job["distributedInfo"]
        assert path.read_text().startswith('{"distributedInfo": {')  # first, spaced: HTA's rank regex finds it
        check_merged(merged, job, rec, workers=1)
        assert json.loads(kineto_merge.merged_name(listed[0]["path"]).read_text()) == merged
        shutil.copy(path, folder / path.name)
    analyzer = _hta(folder)
    assert sorted(analyzer.t.traces) == [0, 1] and len(analyzer.get_profiler_steps()) >= 3


def test_legacy_autograd_profiler_cut_off_by_the_window(tmp_path: Path) -> None:
    """workers=0, the older ``with torch.autograd.profiler.profile()`` block, exported after it: the window's close
    stops the job before the export, so the profiler exports the stopped legacy profiler itself and merges it."""
    from profiler.instrument import torch_profiler_hooks

    assert torch_profiler_hooks._legacy_class() is not None  # the public seam is where the watch expects it
    run, tr = _run(tmp_path, 0, "legacy")
    assert not (tr / "legacy.json").exists()
    rec = record.load(run / "run.json")
    analyze(rec)
    listed = rec.torch_traces["traces"]  # type: ignore[index]
    assert [(Path(t["path"]).name, t["by"]) for t in listed] == [("job_profiler0.pt.trace.json", "job_profiler")]
    check_merged(json.loads((run / "torch_trace.json").read_text()), _read(run / "job_profiler0.pt.trace.json"), rec,
                 workers=0)
