"""Merge + ranks view at scale: N synthetic rank summaries -> the merged view, ranks.json, ranks.png, report.html.

Usage: python scripts/bench_merge.py [N ...]   (default 8 64 512 1024)

Each N runs in a fresh subprocess (its own peak RSS, getrusage ru_maxrss). The summaries are what ranks send through
torchrun's store: RANK_SUMMARY_MAX_STEPS steps each (the bound, so the worst case), 8 ranks per host, collective wait
derived (a user's script), per-step noise on every rank; one planted straggler (input-bound, cpu) that every other
rank waits for. Asserts that the straggler rule finds exactly the planted rank at every N and that the HTML stays
under a few MB. Prints per N: rank 0's store read (multi_get + parse, local TCPStore), merge s, render s,
ranks.json / report.html MB, peak RSS MB; the last line
``merge_s_1024: <store read + merge + view seconds>`` (goal: <= 10 s on 2 cores, peak RSS <= 2 GB).
"""
from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RANKS_PER_HOST = 8
HTML_MAX_MB = 5.0


def synthetic(n: int, slow: int, steps: int, seed: int = 0) -> tuple[dict[int, Any], dict[str, Any]]:
    import numpy as np

    from profiler.distributed.summary import SUMMARY_VERSION

    rng = np.random.default_rng(seed)
    compute = 0.020  # own compute per step, s
    slow_wait = 0.060  # the straggler's input wait per step: the others wait for it in the all-reduce
    out = {}
    for r in range(n):
        base_wait = rng.uniform(0.001, 0.003, steps)
        own = compute * rng.normal(1.0, 0.03, steps)
        if r == slow:
            wait = slow_wait * rng.normal(1.0, 0.05, steps)
            comp = own
        else:
            wait = base_wait
            comp = own + slow_wait * rng.normal(1.0, 0.02, steps)  # the all-reduce wait for the straggler
        dur = wait + comp
        start = 0.5 + np.concatenate([[0.0], np.cumsum(dur)[:-1]])
        got = start + wait
        end = got + comp
        stall = float(wait.sum())
        by = ({"io": 0.05 * stall, "cpu": 0.9 * stall, "transfer": 0.0, "other": 0.05 * stall} if r == slow
              else {"io": 0.0, "cpu": 0.0, "transfer": 0.0, "other": stall})
        n_s = steps
        out[r] = {
            "summary_version": SUMMARY_VERSION, "rank": r, "world_size": n, "local_rank": r % RANKS_PER_HOST,
            "group_rank": r // RANKS_PER_HOST, "hostname": f"host-{r // RANKS_PER_HOST:06d}",
            "boot_id": f"boot-{r // RANKS_PER_HOST}", "backend": "nccl", "t0_monotonic_ns": 10**12 + r * 1000,
            "record_path": f"/local/out/rank{r}/run.json", "collective_method": None, "steps_total": n_s,
            "stride": 1, "series": {"step": list(range(2, 2 + n_s)), "start": np.round(start, 6).tolist(),
                                    "got": np.round(got, 6).tolist(), "end": np.round(end, 6).tolist(),
                                    "collective": None},
            "step_ms": float(dur.mean() * 1e3), "wait_ms": float(wait.mean() * 1e3),
            "compute_ms": float(comp.mean() * 1e3), "input_wait_share": float(wait.sum() / dur.sum()),
            "samples_per_s": 256 / float(dur.mean()), "stall_fraction": float(wait.sum() / dur.sum()),
            "stall_s": stall, "stall_by_cause": by, "stall_share_by_cause": {}, "bottleneck": "cpu" if r == slow
            else "compute", "verdict": "...", "partial": False, "partial_reason": None,
        }
    sync = {f"boot-{h}": {"offset_ns": 1000 * h, "uncertainty_ns": 150_000, "rounds": 8}
            for h in range(1, (n + RANKS_PER_HOST - 1) // RANKS_PER_HOST)}
    return out, sync


def _through_store(summaries: dict[int, Any]) -> float:
    """Rank 0's side of the transport on a local TCPStore: every summary set (one client here, as many in a job),
    then rank 0's one multi_get and parsing: the part of the merge's wall time the store adds."""
    import datetime

    from torch.distributed import PrefixStore, TCPStore

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=60))
    store = PrefixStore("profiler/v1/bench/restart0", server)
    for r, s in summaries.items():
        store.set(f"summary/{r}", json.dumps(s, separators=(",", ":")))
        store.append("reported", f"{r},")
    t = time.perf_counter()
    ranks = [int(x) for x in store.get("reported").decode().split(",") if x]
    got = [json.loads(v.decode()) for v in store.multi_get([f"summary/{r}" for r in ranks])]
    assert len(got) == len(summaries)
    return time.perf_counter() - t


def one(n: int) -> dict:
    from profiler.distributed.merge import merge_summaries
    from profiler.distributed.view import SUMMARIES_FILE, collected_doc
    from profiler.fsutil import atomic_write_bytes
    from profiler.render import write_ranks
    from profiler.thresholds import RANK_SUMMARY_MAX_STEPS

    slow = (n * 7) // 11
    summaries, sync = synthetic(n, slow, RANK_SUMMARY_MAX_STEPS)
    wire = sum(len(json.dumps(s, separators=(",", ":"))) for s in summaries.values())
    store_s = _through_store(summaries)
    summaries = {r: json.loads(json.dumps(s)) for r, s in summaries.items()}  # as received: parsed JSON
    t = time.perf_counter()
    view = merge_summaries(summaries, n, {}, sync)
    t_merge = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        # rank 0 keeps what the store carried (as profiler/saving.py save_ranks does; the merge is timed above)
        atomic_write_bytes(Path(d) / SUMMARIES_FILE, collected_doc(summaries, {}, sync, n))
        write_ranks(view, {}, d, plots=True)
        t_render = time.perf_counter() - t
        sizes = {p.name: p.stat().st_size / 1e6 for p in Path(d).iterdir()}
    found = [s["rank"] for s in view["stragglers"]]
    assert found == [slow], f"N={n}: planted straggler {slow}, found {found}: {view['summary'][:300]}"
    assert sizes["report.html"] <= HTML_MAX_MB, sizes
    return {"n": n, "merge_s": t_merge, "store_s": store_s, "render_s": t_render, "wire_mb": wire / 1e6,
            "ranks_json_mb": sizes.get("ranks.json"), "html_mb": sizes["report.html"],
            "png_mb": sizes.get("ranks.png"), "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "straggler": found}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--one"]:
        print(json.dumps(one(int(argv[1]))))
        return 0
    ns = [int(x) for x in argv] or [8, 64, 512, 1024]
    last = None
    for n in ns:
        p = subprocess.run([sys.executable, __file__, "--one", str(n)], capture_output=True, text=True)
        if p.returncode != 0:
            print(p.stderr[-3000:], file=sys.stderr)
            return 1
        res = json.loads(p.stdout.strip().splitlines()[-1])
        print(f"N={n:5d}: store get+parse {res['store_s']:.2f} s, merge {res['merge_s']:.2f} s, "
              f"view (rank_summaries.json+ranks.json+png+html) "
              f"{res['render_s']:.2f} s, "
              f"summaries {res['wire_mb']:.1f} MB, ranks.json {res['ranks_json_mb']:.1f} MB, report.html "
              f"{res['html_mb']:.2f} MB, peak RSS {res['peak_rss_mb']:.0f} MB, straggler found: {res['straggler']}")
        last = res
    if last is not None:
        print(f"merge_s_{last['n']}: {last['store_s'] + last['merge_s'] + last['render_s']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
