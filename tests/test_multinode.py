"""Several torchrun "nodes" on one machine, each with its own --out folder (no shared filesystem): the ranks'
summaries reach rank 0 through torchrun's store only, and the merged report on rank 0's node names every rank,
where its full record lives, and the planted straggler with its cause.

Two torchrun agents (``--nnodes 2 --rdzv-backend c10d``), 2 ranks each, gloo on the CPU, a user's DDP script
(tests/jobs/ddp_train.py): one rank planted slow; a node whose ranks die mid-run; a node that starts 10 s late. The
c10d rendezvous gives node ranks in join order, so the node holding rank 0 is found from the folders, not assumed.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from profiler.distributed.clocks import clocks_view, offset_from_rounds
from profiler.distributed.merge import merge_summaries
from profiler.distributed.summary import RANK_SUMMARY_MAX_STEPS, SUMMARY_VERSION, stride_for, summarize

from _util import free_port, repo_env, torchrun_profiler

DDP_JOB = Path(__file__).parent / "jobs" / "ddp_train.py"


# --- pure: the rule at scale, the clocks, the summary's bound --------------------------------------------------------

def _summaries(n: int, slow: set[int], steps: int = 40, per_host: int = 8, seed: int = 1,
               boot_per_host: bool = True) -> dict[int, dict]:
    """Synthetic summaries: every rank computes 20 ms a step (3 % noise); the ``slow`` ranks wait 60 ms for input
    (cpu), and the others wait for them in the all-reduce (their compute holds it: the derived method)."""
    rng = np.random.default_rng(seed)
    out = {}
    for r in range(n):
        own = 0.020 * rng.normal(1.0, 0.03, steps)
        if r in slow:
            wait, comp = 0.060 * rng.normal(1.0, 0.05, steps), own
        else:
            wait = rng.uniform(0.001, 0.003, steps)
            comp = own + (0.060 * rng.normal(1.0, 0.02, steps) if slow else 0.0)
        dur = wait + comp
        start = np.concatenate([[0.0], np.cumsum(dur)[:-1]])
        stall = float(wait.sum())
        out[r] = {"summary_version": SUMMARY_VERSION, "rank": r, "world_size": n, "local_rank": r % per_host,
                  "group_rank": r // per_host, "hostname": f"host-{r // per_host}",
                  "boot_id": f"b{r // per_host}" if boot_per_host else "b", "t0_monotonic_ns": 10**9,
                  "record_path": f"/x/rank{r}/run.json", "steps_total": steps, "stride": 1,
                  "series": {"step": list(range(steps)), "start": start.tolist(), "got": (start + wait).tolist(),
                             "end": (start + dur).tolist(), "collective": None},
                  "step_ms": dur.mean() * 1e3, "wait_ms": wait.mean() * 1e3, "compute_ms": comp.mean() * 1e3,
                  "input_wait_share": wait.sum() / dur.sum(), "stall_s": stall,
                  "stall_by_cause": {"io": 0.0, "cpu": stall * (0.9 if r in slow else 0.0), "transfer": 0.0,
                                     "other": stall * (0.1 if r in slow else 1.0)},
                  "partial": False}
    return out


def test_rule_at_scale_no_false_alarm_several_named_and_a_slow_host():
    # 1,024 balanced ranks: the rank that waited least is someone, but no one is beyond the others' spread.
    v = merge_summaries(_summaries(1024, set()), 1024)
    assert v["stragglers"] == [] and v["straggler"] is None and "No straggler" in v["summary"]
    # Three scattered slow ranks: all three named, no host (their host-mates are fast).
    v = merge_summaries(_summaries(256, {17, 100, 201}), 256)
    assert sorted(s["rank"] for s in v["stragglers"]) == [17, 100, 201] and v["slow_hosts"] == []
    assert all(s["cause"] == "cpu" for s in v["stragglers"]) and v["summary"].count("is cpu-bound") == 3
    # A whole host slow (ranks 8..15): one slow node, said as such, before any single rank.
    v = merge_summaries(_summaries(64, set(range(8, 16))), 64)
    assert sorted(s["rank"] for s in v["stragglers"]) == list(range(8, 16))
    (h,) = v["slow_hosts"]
    assert h["hostname"] == "host-1" and h["node"] == 1 and h["ranks"] == list(range(8, 16))
    assert v["summary"].startswith("Host host-1 (node 1; ranks 8, 9, 10, 11, 12, 13, 14, 15) is slow as a whole (cpu)")


def test_clock_offsets_least_delay_round_and_the_uncertainty_against_the_effect():
    # Host clock = rank 0's - 5 ms. Rounds with 4 ms, 0.2 ms and 2 ms round trips (asymmetric legs): the 0.2 ms
    # round is kept; its bound (0.1 ms) holds the true offset.
    true = 5_000_000
    rounds = [(0, 3_000_000 + true, 4_000_000), (10**7, 10**7 + 150_000 + true, 10**7 + 200_000),
              (2 * 10**7, 2 * 10**7 + 500_000 + true, 2 * 10**7 + 2_000_000)]
    o = offset_from_rounds(rounds)
    assert o is not None and o["delay_ns"] == 200_000 and o["uncertainty_ns"] == 100_000
    assert abs(o["offset_ns"] - true) <= o["uncertainty_ns"]
    # Two hosts, host b started 2 ms later on rank 0's clock; its own clock reads 5 ms less.
    s = _summaries(4, set(), per_host=2)
    for r in (1, 2, 3):  # lock-step ranks: the same steps, so the start skew is the run starts' difference alone
        s[r]["series"] = s[0]["series"]
    for r in (2, 3):
        s[r]["t0_monotonic_ns"] = 10**9 + 2_000_000 - true
    c = clocks_view(s, {"b1": {**o, "hostname": "host-1"}})
    assert c["comparable"] and c["method"] == "store round trips" and c["uncertainty_ms"] == 0.1
    assert c["offset_s"][2] == pytest.approx(0.002, abs=1e-4) and c["offset_s"][0] == 0.0
    v = merge_summaries(s, 4, {}, {"b1": o})
    assert v["start_skew_ms"]["mean"] == pytest.approx(2.0, abs=0.2)
    assert "below the mean step-start skew" in v["clocks"]["versus_effect"]
    big = {**o, "uncertainty_ns": 30_000_000}
    assert "at least the mean step-start skew" in merge_summaries(s, 4, {}, {"b1": big})["clocks"]["versus_effect"]
    # No measured offset for a second host: aligned by step index, instants not compared.
    assert not merge_summaries(s, 4)["clocks"]["comparable"] and merge_summaries(s, 4)["start_skew_ms"] is None


def test_summary_is_bounded_and_kept_steps_meet_across_ranks():
    n = 3 * RANK_SUMMARY_MAX_STEPS + 5
    assert stride_for(n) == 4 and stride_for(RANK_SUMMARY_MAX_STEPS) == 1
    rec = {"timeline": {"steps": {"step": list(range(n)), "wait_start": [i * 1.0 for i in range(n)],
                                  "wait_end": [i + 0.1 for i in range(n)], "compute_end": [i + 0.5 for i in range(n)],
                                  "measured": [True] * n}},
           "distributed": {"rank": 1, "world_size": 2, "boot_id": "b", "t0_monotonic_ns": 1}}
    s = summarize(rec, "/x/run.json")
    assert len(s["series"]["step"]) <= RANK_SUMMARY_MAX_STEPS and s["steps_total"] == n
    assert all(k % 4 == 0 for k in s["series"]["step"]) and s["wait_ms"] == pytest.approx(100.0)
    assert len(json.dumps(s)) < 40_000


def test_ranks_view_of_many_ranks_is_bounded(tmp_path):
    from profiler.render import write_ranks
    from profiler.render.ranks_rows import table_rows
    from profiler.thresholds import RANKS_TABLE_MAX

    v = merge_summaries(_summaries(200, {123}), 210)  # 10 ranks never reported
    assert [s["rank"] for s in v["stragglers"]] == [123] and len(v["missing"]) == 10
    rows = table_rows(v)
    assert len(rows) <= RANKS_TABLE_MAX + 1 + 10 and any(r[0] == "123*" for r in rows)
    assert any(r[0].endswith("more)") for r in rows)
    files = {p.name: p for p in write_ranks(v, {}, tmp_path)}
    assert {"ranks.json", "ranks.png", "report.html"} <= set(files)
    page = files["report.html"].read_text()
    assert len(page) < 3e6 and "Rank 123 is cpu-bound" in page and "/x/rank199/run.json" in page
    assert "wait_s" not in json.loads(files["ranks.json"].read_text())["per_step"]  # in rank_summaries.json instead


def _store_ranks(world: int, run_id: str, clients: int | None = None) -> tuple[Any, dict[int, Any], Any]:
    """A real TCPStore (torchrun's kind) and each rank's RankEnv and client on it, one rank per host: (env of a rank,
    the first ``clients`` ranks' stores, the server, which the caller keeps alive)."""
    import datetime

    from torch.distributed import TCPStore

    from profiler.distributed import store as st
    from profiler.distributed.env import RankEnv

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=30))

    def env(rank: int) -> RankEnv:
        return RankEnv(rank=rank, local_rank=0, world_size=world, local_world_size=1, group_rank=rank,
                       master_addr="127.0.0.1", master_port=server.port, run_id=run_id, restart_count=0,
                       agent_store=True)

    return env, {r: st.connect(env(r)) for r in range(world if clients is None else clients)}, server


def test_store_protocol_scaled_wait_and_clock_rounds():
    """Rank 0's collect on a real TCPStore (torchrun's kind), the other ranks as threads with their own clients:
    rank 1 reports and syncs its clock, rank 2 announces but never reports, rank 3 never starts. The wait ends a
    scaled few seconds after rank 1's report, not at the 60 s bound."""
    import threading

    from profiler.distributed import store as st

    env, stores, _server = _store_ranks(4, "t", clients=3)
    st.announce(stores[0], env(0))
    st.announce(stores[2], env(2))
    os.environ[st.FORCE_SYNC_ENV] = "always"
    synced: list[dict | None] = []

    def rank1() -> None:
        time.sleep(0.5)
        st.announce(stores[1], env(1))
        sync = st.needs_clock_sync(stores[1], env(1))
        if sync:
            st.request_clock_sync(stores[1], env(1))
        st.publish(stores[1], env(1), {"summary_version": SUMMARY_VERSION, "rank": 1, "series": {}})
        if sync:
            synced.append(st.sync_clock(stores[1], env(1)))

    try:
        th = threading.Thread(target=rank1)
        th.start()
        t = time.monotonic()
        got = st.collect(stores[0], env(0), timeout_s=60, min_wait_s=2.0)
        took = time.monotonic() - t
        th.join(10)
    finally:
        del os.environ[st.FORCE_SYNC_ENV]
    assert sorted(got.summaries) == [1] and 2.0 <= took < 10, took
    assert got.states == {2: "timed out (no summary)", 3: "never started (not seen by the store)"}
    (res,) = synced
    assert res is not None and res["rounds"] >= 4 and abs(res["offset_ns"]) <= res["uncertainty_ns"] + 50_000
    assert list(got.clock_sync.values())[0]["offset_ns"] == res["offset_ns"]


def test_the_last_report_s_host_still_gets_its_clock_rounds():
    """World of 2: rank 1's report is the last one rank 0 waits for, and its first ping comes 1 s after it (a loaded
    machine). Rank 0's wait ends at that report, yet serves the rounds: the rank was queued before it reported."""
    import threading

    from profiler.distributed import store as st

    env, stores, _server = _store_ranks(2, "last")
    st.announce(stores[0], env(0))
    synced: list[dict | None] = []

    def rank1() -> None:
        st.announce(stores[1], env(1))
        st.request_clock_sync(stores[1], env(1))
        st.publish(stores[1], env(1), {"summary_version": SUMMARY_VERSION, "rank": 1, "series": {}})
        time.sleep(1.0)
        synced.append(st.sync_clock(stores[1], env(1), first_timeout_s=20))

    th = threading.Thread(target=rank1)
    th.start()
    got = st.collect(stores[0], env(0), timeout_s=30, min_wait_s=0.1)
    th.join(30)
    (res,) = synced
    assert sorted(got.summaries) == [1] and res is not None and res["rounds"] >= 4, res
    assert [r["offset_ns"] for r in got.clock_sync.values()] == [res["offset_ns"]]


def two_nodes(tmp_path: Path, *job: str, env_extra: dict[str, str] | None = None, late_s: float = 0.0,
              timeout: int = 400) -> tuple[list[subprocess.CompletedProcess], list[Path], float]:
    """Run the job as two torchrun nodes (node 1 started ``late_s`` after node 0): (results, out folders, seconds)."""
    port = free_port()
    outs = [tmp_path / f"node{k}" for k in (0, 1)]
    env = repo_env(env_extra)
    procs = []
    t0 = time.monotonic()
    for k in (0, 1):
        if k == 1 and late_s:
            time.sleep(late_s)
        cmd = torchrun_profiler(["--nnodes", "2", "--node-rank", str(k), "--nproc-per-node", "2", "--rdzv-backend",
                                 "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"mn{port}"], outs[k],
                                "--no-plots", str(DDP_JOB), *job)
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                                      env=env))
    results = []
    for p in procs:
        try:
            so, se = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
        results.append(subprocess.CompletedProcess(p.args, p.returncode, so, se))
    return results, outs, time.monotonic() - t0


def _merged(outs: list[Path]) -> tuple[Path, dict]:
    """The node folder holding the merged report (rank 0's), and its view; only one node has one."""
    found = [o for o in outs if (o / "ranks.json").exists()]
    assert len(found) == 1, [sorted(p.name for p in o.iterdir()) for o in outs if o.exists()]
    return found[0], json.loads((found[0] / "ranks.json").read_text())


def test_two_nodes_no_shared_folder_names_the_remote_straggler(tmp_path, raw_files, capsys):
    res, outs, _ = two_nodes(tmp_path, "cpu", str(raw_files), env_extra={"SLOW_RANK": "3", "SLOW_WORK": "160",
                                                                         "PROFILER_CLOCK_SYNC": "always"})
    for r in res:
        assert r.returncode == 0, r.stderr[-3000:]
    folder, v = _merged(outs)
    other = outs[1 - outs.index(folder)]
    # Each node's folder has its own two ranks' full records only: nothing was copied across.
    here = sorted(p.name for p in folder.iterdir() if p.name.startswith("rank") and p.is_dir())
    there = sorted(p.name for p in other.iterdir() if p.name.startswith("rank") and p.is_dir())
    assert here == ["rank0", "rank1"] and there == ["rank2", "rank3"]
    assert v["present"] == [0, 1, 2, 3] and v["missing"] == [] and v["world_size"] == 4
    st = v["straggler"]
    assert st is not None, v["summary"]
    assert st["rank"] == 3 and st["cause"] == "cpu" and [s["rank"] for s in v["stragglers"]] == [3], v["summary"]
    # Where each full record lives: node, host and path on that node.
    for r in (0, 1, 2, 3):
        loc = v["records"][str(r)]
        assert loc["path"] == str(((folder if r < 2 else other) / f"rank{r}" / "run.json").resolve()), loc
        assert loc["host"].startswith("host-") and loc["node"] == (0 if r < 2 else 1)
    # The clock round trips ran (forced: one machine) and found what one machine must: offset 0 within uncertainty.
    rt = v["clocks"]["round_trips"]
    assert len(rt) == 1, v["clocks"]
    (only,) = rt.values()
    assert abs(only["offset_ms"]) <= only["uncertainty_ms"] + 0.05 and only["rounds"] >= 4, only
    out = res[outs.index(folder)].stdout
    assert "Ranks (4 of 4)" in out and "Summaries via torchrun store: 4 of 4 ranks" in out, out[-2000:]
    # The merge again later, from the node-0 folder alone (what the store carried was kept: rank_summaries.json).
    # In this process: a second Python start and torch import cost more than the merge.
    from profiler.cli import main

    capsys.readouterr()
    assert main(["report", str(folder)]) == 0
    again_out, again_err = capsys.readouterr()
    assert "Ranks (4 of 4)" in again_out, again_err[-2000:]
    assert json.loads((folder / "ranks.json").read_text())["straggler"]["rank"] == 3
    print("\n" + v["summary"])
    print("clocks:", json.dumps(v["clocks"]["round_trips"]), v["clocks"]["note"])
    print("records:", json.dumps(v["records"]))
    print(out[out.index("Summaries via"):].splitlines()[0])


def test_a_node_whose_ranks_die_mid_run_is_named_missing_without_the_full_wait(tmp_path, raw_files):
    res, outs, took = two_nodes(tmp_path, "dienode", str(raw_files))
    folder, v = _merged(outs)
    assert v["present"] == [0, 1] and v["missing"] == [2, 3], v["summary"]
    assert "ranks 2, 3 left no record" in v["summary"]
    assert all("timed out" in v["states"][k] for k in ("2", "3")), v["states"]
    # Rank 1 reported, so rank 0 waited a few report-spreads (RANK_WAIT_MIN_S), not RANK_WAIT_S (60 s).
    assert v["collected"]["waited_s"] < 40, v["collected"]
    print(f"\nkilled node: waited {v['collected']['waited_s']} s for ranks 2, 3; {v['summary']}")


def test_a_node_starting_10_s_late(tmp_path, raw_files):
    res, outs, _ = two_nodes(tmp_path, "balanced", str(raw_files), late_s=10)
    for r in res:
        assert r.returncode == 0, r.stderr[-3000:]
    folder, v = _merged(outs)
    assert v["present"] == [0, 1, 2, 3] and v["missing"] == [] and v["aligned_steps"] == 6
    out = res[outs.index(folder)].stdout
    print("\nlate node:", out[out.index("Summaries via"):].splitlines()[0], "|", v["summary"])
