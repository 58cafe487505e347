"""torchrun / DDP: every rank profiled into <run folder>/rank<k>, merged by rank 0, the straggler and its cause named.

Pure tests of the merge on hand-built records first; then real torchrun jobs in a subprocess (gloo, CPU, 2 ranks,
tiny data, few steps): the built-in pipeline balanced, a user's DDP script whose rank 1 does planted CPU work, one
whose rank 1 reads cold data through the kernel throttle, and one whose rank 1 dies mid-run.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler.distributed import detect
from profiler.distributed.layout import agree_run_folder, wait_for_ranks, write_marker
from profiler.distributed.merge import merge
from profiler.thresholds import STRAGGLER_WAIT_SHARE

from _util import free_port, repo_env, torchrun_profiler

DDP_JOB = Path(__file__).parent / "jobs" / "ddp_train.py"


# --- pure -------------------------------------------------------------------------------------------------------

def _rank(rank: int, waits: list[float], computes: list[float], *, boot: str | None = "boot-a", t0: int = 10**9,
          collectives: dict | None = None, by_cause: dict | None = None, world: int = 2, partial: bool = False,
          bottleneck: str = "compute") -> dict:
    """A hand-built rank record: the fields the merge reads (steps, throughput, stall, verdict, distributed)."""
    ws, we, ce, t = [], [], [], 0.5
    for w, c in zip(waits, computes):
        ws.append(t)
        we.append(t + w)
        ce.append(t + w + c)
        t += w + c
    n = len(waits)
    by = by_cause or {"io": 0.0, "cpu": 0.0, "transfer": 0.0, "other": 0.0}
    return {"timeline": {"steps": {"step": list(range(2, 2 + n)), "wait_start": ws, "wait_end": we,
                                   "compute_end": ce, "measured": [True] * n}},
            "throughput": {"samples_per_s": 100.0}, "stall": {"seconds": sum(by.values()), "fraction": 0.5,
                                                             "by_cause": by},
            "verdict": {"bottleneck": bottleneck, "summary": "..."}, "partial": partial,
            "partial_reason": "interrupted" if partial else None,
            "distributed": {"rank": rank, "world_size": world, "boot_id": boot, "hostname": "h" if boot else f"h{rank}",
                            "t0_monotonic_ns": t0, "collectives": collectives, "backend": "gloo"}}


def test_merge_names_the_input_bound_rank_and_its_cause_with_derived_collective_wait():
    fast = _rank(0, [0.002] * 6, [0.150] * 6)  # got its batch at once, then waited in the all-reduce
    slow = _rank(1, [0.140] * 6, [0.012] * 6, by_cause={"io": 0.6, "cpu": 0.2, "transfer": 0.0, "other": 0.04},
                 bottleneck="io")
    v = merge({0: fast, 1: slow})
    assert v["missing"] == [] and v["aligned_steps"] == 6 and not v["collective_measured"]
    assert v["collective_method"].startswith("derived")
    rows = {r["rank"]: r for r in v["ranks"]}
    assert rows[0]["collective_share"] == pytest.approx(0.138 / 0.152, abs=1e-3)
    assert rows[1]["collective_share"] == 0.0
    st = v["straggler"]
    assert st["rank"] == 1 and st["cause"] == "io" and st["waiting_ranks"] == [0]
    assert st["cause_share"] == pytest.approx(0.6 / 0.84, abs=1e-3)
    assert st["sentence"].startswith("rank 1 is io-bound: 71 % of its input stall was storage reads")
    assert "rank 0 waited 91 % of its step in the all-reduce for it" in st["sentence"]
    assert v["clocks"]["shared"] and v["per_step"]["skew_s"] == [pytest.approx(0.0, abs=1e-6)] * 6


def test_merge_measured_collectives_compute_straggler_and_no_shared_clock():
    # Rank 1 computes longer; rank 0 spends the difference inside its recorded all-reduce spans.
    r0 = _rank(0, [0.001] * 4, [0.100] * 4, boot="boot-a")
    steps0 = r0["timeline"]["steps"]
    r0["distributed"]["collectives"] = {"method": "hook", "start": [e - 0.06 for e in steps0["compute_end"]],
                                        "end": [e - 0.005 for e in steps0["compute_end"]]}
    r1 = _rank(1, [0.001] * 4, [0.100] * 4, boot="boot-b")
    steps1 = r1["timeline"]["steps"]
    r1["distributed"]["collectives"] = {"method": "hook", "start": [e - 0.004 for e in steps1["compute_end"]],
                                        "end": [e - 0.003 for e in steps1["compute_end"]]}
    v = merge({0: r0, 1: r1})
    assert v["collective_measured"] and v["collective_method"] == "measured: hook"
    rows = {r["rank"]: r for r in v["ranks"]}
    assert rows[0]["collective_ms"] == pytest.approx(55.0, abs=0.01)
    assert rows[1]["collective_ms"] == pytest.approx(1.0, abs=0.01)
    assert v["straggler"]["rank"] == 1 and v["straggler"]["kind"] == "compute"
    st = v["straggler"]  # compute net of the all-reduce waits: 100 - 1 ms against 100 - 55 ms (never "74 vs 78")
    assert st["compute_ms"] == pytest.approx(99.0, abs=0.5) and st["others_compute_ms"] == pytest.approx(45.0, abs=0.5)
    assert "took 99 ms against 45 ms" in st["sentence"]
    r1["distributed"]["collectives"] = r0["distributed"]["collectives"]  # rank 1 waits as long: computes no longer
    assert merge({0: r0, 1: r1})["straggler"] is None
    assert not v["clocks"]["shared"] and "aligned by step index" in v["clocks"]["note"]
    assert v["per_step"]["start_s"][0][0] == 0.0 and v["per_step"]["start_s"][1][0] == 0.0


def test_merge_balanced_has_no_straggler_and_names_missing_and_partial_ranks():
    a = _rank(0, [0.01] * 5, [0.10] * 5, world=3)
    b = _rank(1, [0.01] * 5, [0.10 + STRAGGLER_WAIT_SHARE * 0.5 * 0.11] * 5, world=3, partial=True)
    v = merge({0: a, 1: b, 2: None}, states={2: "died"})
    assert v["straggler"] is None and v["world_size"] == 3
    assert v["missing"] == [2] and v["partial"] == [1]
    assert "No straggler" in v["summary"] and "rank 2 left no record (rank 2: died)" in v["summary"]
    assert "ranks 0, 1" in v["summary"]
    # Steps only some ranks reached are not aligned: the shorter rank decides.
    c = copy.deepcopy(a)
    for col in c["timeline"]["steps"].values():
        del col[3:]
    assert merge({0: c, 1: b})["aligned_steps"] == 3


def test_merge_of_real_analysed_records():
    """The merge reads records as analysis leaves them (the hand-built schema-2 record of tests/_records)."""
    from _records import record_v2

    from profiler.analysis import analyze
    from profiler.record import RunRecord

    recs = {}
    for r in (0, 1):
        rec = analyze(RunRecord.from_dict(record_v2()))
        d = rec.to_dict()
        d["distributed"] = {"rank": r, "world_size": 2, "boot_id": "x", "t0_monotonic_ns": 5, "collectives": None}
        recs[r] = d
    v = merge(recs)
    assert v["aligned_steps"] == 8 and v["straggler"] is None
    assert v["ranks"][0]["stall_fraction"] == recs[0]["stall"]["fraction"]


def test_save_ranks_keeps_what_the_store_carried_and_merges_again_from_the_folder_alone(tmp_path):
    """The one save path of the merged report (profiler/saving.py save_ranks): rank 0's record is in the folder, rank
    1's summary came through the store only; both are in the merge, and again when merged later from the folder."""
    from _records import record_v2

    from profiler.analysis import analyze
    from profiler.distributed.summary import summarize
    from profiler.distributed.view import SUMMARIES_FILE, read_collected
    from profiler.record import RunRecord
    from profiler.render import RANKS_FILES
    from profiler.saving import Collected, save_ranks

    recs = {}
    for r in (0, 1):
        rec = RunRecord.from_dict(record_v2())
        rec.distributed = {"rank": r, "world_size": 2, "boot_id": "x", "hostname": "h", "t0_monotonic_ns": 5,
                           "collectives": None}
        recs[r] = analyze(rec)
    recs[0].save(write_marker(tmp_path, 0) / "run.json")
    write_marker(tmp_path, 1)  # rank 1's record stayed on its own node
    sent = {1: summarize(recs[1].to_dict(), "/elsewhere/rank1/run.json")}
    note = {"via": "torchrun store", "reports": 1}
    view, files = save_ranks(tmp_path, {1: "record"}, Collected(sent, {1: "record"}, {}, 2, note))
    assert sorted(f.name for f in files) == sorted(RANKS_FILES) and view["present"] == [0, 1]
    assert view["collected"] == note and json.loads((tmp_path / "ranks.json").read_text())["collected"] == note
    saved = read_collected(tmp_path)
    assert saved["world_size"] == 2 and list(saved["summaries"]) == ["1"]
    assert not [f.name for f in tmp_path.iterdir() if f.name.startswith(".")]  # no temporary left
    (tmp_path / "ranks.json").unlink()
    again, files = save_ranks(tmp_path, plots=False)  # `report RUN_FOLDER`: the folder alone
    assert again["present"] == [0, 1] and [f.name for f in files] == ["ranks.json"]
    assert (tmp_path / SUMMARIES_FILE).exists() and "collected" not in again


def test_detect_and_folder_agreement(tmp_path):
    assert detect({}) is None and detect({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "x"}) is None
    env = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1",
           "TORCHELASTIC_RUN_ID": "job 7", "TORCHELASTIC_RESTART_COUNT": "1"}
    d = detect(env)
    assert d is not None and (d.rank, d.local_rank, d.world_size) == (1, 1, 2) and not d.agent_store
    assert agree_run_folder(d, str(tmp_path / "o"), "reports", "x") == tmp_path / "o"
    # No store: the folder comes from the run id (never from the rank's clock), the same on every rank.
    got = agree_run_folder(d, None, str(tmp_path / "reports"), "x")
    assert got == tmp_path / "reports" / "torchrun-job_7-restart1"
    from profiler.errors import UserError
    with pytest.raises(UserError, match="pass --out DIR"):
        agree_run_folder(detect({**env, "TORCHELASTIC_RUN_ID": "none"}), None, str(tmp_path), "x")


def test_pipeline_ranks_change_nothing_for_a_single_process_and_refuse_too_few_images():
    """The built-in pipeline's distributed steps (profiler/distributed/pipeline.py): outside torchrun each hands back
    what it was given; under torchrun the device is one per rank and fewer images than ranks is bad input, said before
    any process group is joined."""
    import torch

    from profiler.distributed.pipeline import MODEL_ALONE_UNDER_TORCHRUN, PipelineRanks
    from profiler.errors import UserError

    model = torch.nn.Linear(2, 2)
    one = PipelineRanks(None)
    one.join(torch.device("cpu"), 0)  # no group to join, no images to share
    assert not one.active and one.device("auto") == "auto" and one.share() == (0, 1)
    assert one.wrap(model, torch.device("cpu"), "train") is model and one.facts(0) is None
    assert one.why_no_model_alone() is None
    one.leave()
    env = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    rank = PipelineRanks(detect(env))
    assert rank.active and rank.share() == (1, 4) and rank.device("cpu") == "cpu"
    assert rank.device("auto") == ("cuda:1" if torch.cuda.device_count() > 1 else "cuda:0"
                                   if torch.cuda.is_available() else "cpu")
    assert rank.why_no_model_alone() == MODEL_ALONE_UNDER_TORCHRUN
    assert rank.wrap(model, torch.device("cpu"), "inference") is model  # no gradients: nothing to all-reduce
    with pytest.raises(UserError, match="3 images cannot be shared among 4 ranks"):
        rank.join(torch.device("cpu"), 3)
    assert rank.backend is None and rank.facts(0) == {"backend": None, "collectives": None}


def test_wait_for_ranks_stops_at_a_dead_rank(tmp_path):
    write_marker(tmp_path, 0)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    d = write_marker(tmp_path, 1)
    info = json.loads((d / "rank.json").read_text())
    info["pid"] = int(dead.stdout)
    (d / "rank.json").write_text(json.dumps(info))
    t = time.monotonic()
    states = wait_for_ranks(tmp_path, 3, 0, timeout_s=3, poll_s=0.05)
    assert states == {0: "record", 1: "died", 2: "never started"}
    assert time.monotonic() - t < 6  # the 3 s timeout for rank 2, and no more (slack for a loaded machine)


# --- torchrun ---------------------------------------------------------------------------------------------------

def torchrun(tmp_path: Path, *args: str, out: str = "run", timeout: int = 300,
             extra_env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    folder = tmp_path / out
    cmd = torchrun_profiler(["--nproc-per-node", "2", "--master-port", str(free_port())], folder, *args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=repo_env(extra_env))
    return p, folder


def _view(folder: Path) -> dict:
    return json.loads((folder / "ranks.json").read_text())


@pytest.fixture(scope="module")
def tiny_images(tmp_path_factory) -> Path:
    from profiler.harness.data import make_sample_dataset

    return make_sample_dataset(tmp_path_factory.mktemp("imgs"), count=64, size=(96, 72))


def test_builtin_pipeline_under_torchrun_balanced(tmp_path, tiny_images, capsys):
    # --augment none: the resize only, so input stays well ahead of the step even where CI's load starves the workers
    # (with the standard recipe, rank 1 once waited 25 % of its step for input there, and was named a cpu straggler)
    p, folder = torchrun(tmp_path, "--data", str(tiny_images), "--workers", "1", "--model", "tiny",
                         "--image-size", "64", "--batch-size", "32", "--augment", "none",
                         "--device", "cpu")  # gloo: the CPU, also on a GPU
    assert p.returncode == 0, p.stderr[-3000:]
    recs = [json.loads((folder / f"rank{r}" / "run.json").read_text()) for r in (0, 1)]
    for r, rec in enumerate(recs):
        d = rec["distributed"]
        assert (d["rank"], d["world_size"], d["backend"]) == (r, 2, "gloo") and not rec["partial"]
        assert d["collectives"]["method"].startswith("DDP communication hook")
        assert len(d["collectives"]["start"]) >= 8  # one bucket per step at least, warm-up included
    # Disjoint shards, DistributedSampler-style: in one epoch (32 images per rank = its first batch of 32) each
    # rank reads its own half of the 64 (checked on the sample spans: which index each dataset call read).
    idx = []
    for rec in recs:
        sp = rec["timeline"]["sample_spans"]
        idx.append({i for i, b in zip(sp["index"], sp["batch"]) if b < 1})
    assert len(idx[0]) == len(idx[1]) == 32 and not idx[0] & idx[1]
    v = _view(folder)
    assert v["present"] == [0, 1] and v["missing"] == [] and v["collective_measured"]
    assert v["clocks"]["shared"] and v["aligned_steps"] == 6
    # Input well ahead of compute on both ranks (batch 32 of tiny images against a CNN step on the CPU): no input
    # straggler. Two ranks sharing two loaded cores can differ in their own compute by scheduling alone (56 against
    # 42 ms was seen), which the rule may name as a compute straggler; an input cause would be a wrong answer.
    assert v["straggler"] is None or v["straggler"]["cause"] == "compute", v["summary"]
    assert (folder / "ranks.png").stat().st_size > 0 and (folder / "report.html").exists()
    trace = json.loads((folder / "trace.json").read_text())
    assert trace["distributedInfo"]["world_size"] == 2
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert any(n.startswith("rank 0:") for n in names) and any(n.startswith("rank 1:") for n in names)
    # Terminal output from rank 0 only: one "Profiling" line, one merged table.
    assert p.stdout.count("Profiling ") == 1 and p.stdout.count("Ranks (2 of 2)") == 1
    # `report RUN_FOLDER` merges again from the records; `report rank1/run.json` still reports one rank. In this
    # process (a Python start and torch import each cost more than the report): outside torchrun, as a user's shell.
    from profiler.cli import main

    capsys.readouterr()
    assert main(["report", str(folder)]) == 0
    out, err = capsys.readouterr()
    assert "Ranks (2 of 2)" in out, err
    assert main(["report", str(folder / "rank1" / "run.json")]) == 0
    out, err = capsys.readouterr()
    assert "-bound" in out and "Ranks" not in out, err


def test_user_ddp_script_rank1_cpu_straggler(tmp_path, raw_files):
    # Planted work strong enough that a loaded 2-core machine cannot hide it (the default 40 matmuls was not, in 1
    # of 3 suite runs; 160 was not once in CI's load, rank 1 waiting 16 % of a step against rank 0's 35 %).
    p, folder = torchrun(tmp_path, "--no-plots", str(DDP_JOB), "cpu", str(raw_files), extra_env={"SLOW_WORK": "320"})
    assert p.returncode == 0, p.stderr[-3000:]
    v = _view(folder)
    assert v["present"] == [0, 1] and not v["collective_measured"]
    st = v["straggler"]
    assert st is not None, v["summary"]
    assert st["rank"] == 1 and st["cause"] == "cpu" and st["waiting_ranks"] == [0], st
    assert st["waiting_share"] >= 0.3
    assert "Rank 1 is cpu-bound" in p.stdout.replace("\n", " ").replace("│", " ") or "Rank 1 is cpu-bound" in \
        v["summary"]


def test_user_ddp_script_rank1_cold_throttled_io_straggler(tmp_path, raw_files, tmp_path_factory):
    from profiler.storage import device as sdev
    from profiler.storage import throttle as thr

    cold = tmp_path_factory.mktemp("cold")
    for i in range(64):
        (cold / f"c{i:03d}.bin").write_bytes(os.urandom(64 * 1024))
    info = sdev.describe_storage(str(cold))
    if info.tmpfs:
        pytest.skip("the temp dir is on tmpfs: its pages cannot be evicted, so cold == warm")
    ok, why = thr.KernelThrottle.available(thr.resolve_storage("4MB/s,200iops", None), info.maj_min)
    if not ok:
        pytest.skip(f"kernel throttle not available here ({why}); a script can only be slowed by the kernel's")
    for f in raw_files.iterdir():  # rank 0's data: warm, read from the page cache (the throttle does not touch it)
        f.read_bytes()
    p, folder = torchrun(tmp_path, "--no-plots", "--data", str(cold), "--cache", "cold", "--throttle",
                         "4MB/s,200iops", "--throttle-mechanism", "kernel", str(DDP_JOB), "io", str(raw_files),
                         str(cold))
    assert p.returncode == 0, p.stderr[-3000:]
    v = _view(folder)
    st = v["straggler"]
    assert st is not None, v["summary"]
    assert st["rank"] == 1 and st["cause"] == "io" and st["waiting_ranks"] == [0], st


def test_rank_killed_mid_run_partial_merge_names_it(tmp_path, raw_files):
    t = time.monotonic()
    p, folder = torchrun(tmp_path, "--no-plots", str(DDP_JOB), "die", str(raw_files))
    took = time.monotonic() - t
    assert p.returncode != 0
    assert not (folder / "rank1" / "run.json").exists() and (folder / "rank1" / "rank.json").exists()
    assert (folder / "rank0" / "run.json").exists(), p.stderr[-3000:]
    rec0 = json.loads((folder / "rank0" / "run.json").read_text())
    assert rec0["partial"], rec0["partial_reason"]
    v = _view(folder)
    assert v["missing"] == [1] and v["present"] == [0] and v["partial"] == [0]
    assert "rank 1" in v["summary"] and "no record" in v["summary"] and "died" in v["states"]["1"]
    assert took < 60, f"rank 0 waited for a dead rank ({took:.0f} s)"
