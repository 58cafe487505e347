"""Pure: the ranks' summaries (or records) -> one merged ``ranks`` view. No I/O, no drawing.

Input: per rank, its compact summary (profiler/distributed/summary.py; a full record is summarised first), so the
merge is O(ranks x kept steps) in time and memory whatever the records' sizes (scripts/bench_merge.py: 1,024 ranks).

Per rank: throughput, step time, input wait, stall and its causes, collective wait, verdict, where its full record is.
Across ranks, steps aligned by step index (every rank runs the same steps: DDP meets in every all-reduce):
- step-time skew per step (slowest − fastest rank's step);
- collective wait per rank and step: *measured* where the rank recorded all-reduce spans (the built-in pipeline's
  DDP hook on gloo: time inside the all-reduce, waiting for the others included), else *derived*: the rank's compute
  time (batch in hand → next ``next()``; it contains the backward's all-reduce) minus the fastest rank's compute time
  at that step. The view names the method.
- the stragglers, their causes, and slow hosts (profiler/distributed/straggler.py: the rule).
- clocks (profiler/distributed/clocks.py): one boot id → one CLOCK_MONOTONIC; several hosts → each host's offset to
  rank 0 from store round trips with its uncertainty; neither → aligned by step index.
- missing ranks (no summary) and partial ones are named.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..thresholds import RANKS_LANES_MAX, STRAGGLER_WAIT_SHARE
from . import straggler as rule
from .clocks import clocks_view
from .summary import RankSummary, is_summary, summarize

VIEW_ROUND = 6  # seconds to the microsecond in the view's per-step series


def _row(s: RankSummary) -> dict[str, Any]:
    return {
        "rank": s["rank"], "hostname": s.get("hostname"), "group_rank": s.get("group_rank"),
        "local_rank": s.get("local_rank"), "backend": s.get("backend"), "samples_per_s": s.get("samples_per_s"),
        "steps": s.get("steps_total", 0), "step_ms": s.get("step_ms"), "wait_ms": s.get("wait_ms"),
        "compute_ms": s.get("compute_ms"), "input_wait_share": s.get("input_wait_share"),
        "stall_fraction": s.get("stall_fraction"), "stall_by_cause": s.get("stall_by_cause") or {},
        "stall_share_by_cause": s.get("stall_share_by_cause") or {}, "stall_s": s.get("stall_s"),
        "bottleneck": s.get("bottleneck"), "verdict": s.get("verdict"), "partial": bool(s.get("partial")),
        "partial_reason": s.get("partial_reason"), "record": s.get("record_path"),
    }


def merge(records: dict[int, Any], world_size: int | None = None, states: dict[int, str] | None = None,
          clock_sync: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """``records``: rank → its summary or its analyzed run.json dict (None: nothing from it). ``clock_sync``: boot id →
    that host's measured offset to rank 0's clock (profiler/distributed/clocks.py). Returns the merged view."""
    summaries: dict[int, RankSummary] = {}
    for r, rec in records.items():
        if rec:
            summaries[r] = rec if is_summary(rec) else summarize(rec)
    return merge_summaries(summaries, world_size, states, clock_sync)


def merge_summaries(summaries: dict[int, RankSummary], world_size: int | None = None,
                    states: dict[int, str] | None = None,
                    clock_sync: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    states = {int(k): v for k, v in (states or {}).items()}
    present = sorted(summaries)
    sizes = [s.get("world_size") for s in summaries.values()]
    world = max([world_size or 0, *[x for x in sizes if isinstance(x, int)], *(r + 1 for r in present),
                 *(r + 1 for r in states)] or [0])
    missing = [r for r in range(world) if r not in summaries]
    for r in missing:
        states.setdefault(r, "no record")
    rows = [_row(summaries[r]) for r in present]
    by_rank = {row["rank"]: row for row in rows}

    # Aligned steps: the step indices every rank kept (one pass per rank; a set intersection, O(ranks x steps)).
    common_set: set[int] | None = None
    for r in present:
        ks = set(summaries[r]["series"]["step"])
        common_set = ks if common_set is None else common_set & ks
    common = sorted(common_set or ())
    n_r, n_s = len(present), len(common)
    start, got, end = (np.zeros((n_r, n_s)) for _ in range(3))
    measured_col = np.zeros((n_r, n_s))
    all_measured = bool(present)
    for i, r in enumerate(present):
        ser = summaries[r]["series"]
        pos = {k: j for j, k in enumerate(ser["step"])}
        idx = [pos[k] for k in common]
        start[i] = np.asarray(ser["start"], dtype=float)[idx] if idx else []
        got[i] = np.asarray(ser["got"], dtype=float)[idx] if idx else []
        end[i] = np.asarray(ser["end"], dtype=float)[idx] if idx else []
        if ser.get("collective") is None:
            all_measured = False
        elif idx:
            measured_col[i] = np.asarray(ser["collective"], dtype=float)[idx]
    step, wait, compute = end - start, got - start, end - got
    if all_measured:
        coll = measured_col
    else:
        coll = compute - (compute.min(axis=0, keepdims=True) if n_r else 0.0)
    tot_step = step.sum(axis=1) if n_s else np.zeros(n_r)
    tot_col = coll.sum(axis=1) if n_s else np.zeros(n_r)
    shares = np.where(tot_step > 0, tot_col / np.where(tot_step > 0, tot_step, 1.0), 0.0)
    for i, row in enumerate(rows):
        row["collective_ms"] = round(float(tot_col[i]) / n_s * 1e3, 3) if n_s else None
        row["collective_share"] = round(float(shares[i]), 4) if n_s and tot_step[i] > 0 else None
    if n_s and n_r:
        least = np.argmin(coll, axis=0)
        counts = np.bincount(least, minlength=n_r)
        for i, row in enumerate(rows):  # steps in which it waited least in collectives
            row["least_waiting_steps"] = int(counts[i])

    clocks = clocks_view(summaries, clock_sync or {})
    off = np.asarray([clocks["offset_s"][r] for r in present], dtype=float).reshape(n_r, 1)
    abs_start = start + off
    skew = (step.max(axis=0) - step.min(axis=0)) if n_r and n_s else np.zeros(0)
    start_skew = (abs_start.max(axis=0) - abs_start.min(axis=0)) if n_r and n_s and clocks["comparable"] \
        else None

    def series(a: np.ndarray) -> dict[int, list[float]]:
        return {r: np.round(a[i], VIEW_ROUND).tolist() for i, r in enumerate(present)}

    per_step: dict[str, Any] = {"step": common, "step_s": series(step), "collective_s": series(coll),
                                "skew_s": np.round(skew, VIEW_ROUND).tolist(),
                                "start_skew_s": (np.round(start_skew, VIEW_ROUND).tolist()
                                                 if start_skew is not None else None)}
    if n_r <= RANKS_LANES_MAX:  # the lanes drawing's input; beyond it the heatmap needs step and collective only,
        # and each rank's full series stay in rank_summaries.json (ranks x steps numbers would triple ranks.json)
        per_step.update(wait_s=series(wait), compute_s=series(compute), start_s=series(abs_start))
    else:
        per_step["detail"] = "wait_s, compute_s and start_s per rank: each rank's series in rank_summaries.json"
    stragglers = rule.find(present, shares, coll, step, by_rank) if n_r >= 2 and n_s else []
    hosts = rule.slow_hosts(stragglers, rows)
    view: dict[str, Any] = {
        "world_size": world, "present": present, "missing": missing, "states": states,
        "partial": [r["rank"] for r in rows if r["partial"]],
        "collective_method": _method_words(all_measured, summaries),
        "collective_measured": all_measured,
        "aligned_steps": n_s, "clocks": clocks, "ranks": rows, "per_step": per_step,
        "skew_ms": {"mean": round(float(skew.mean()) * 1e3, 3) if n_s else None,
                    "max": round(float(skew.max()) * 1e3, 3) if n_s else None},
        "start_skew_ms": ({"mean": round(float(start_skew.mean()) * 1e3, 3),
                           "max": round(float(start_skew.max()) * 1e3, 3)} if start_skew is not None and n_s
                          else None),
        "stragglers": stragglers, "straggler": stragglers[0] if stragglers else None, "slow_hosts": hosts,
        "records": {r: {"node": summaries[r].get("group_rank"), "host": summaries[r].get("hostname"),
                        "path": summaries[r].get("record_path")} for r in present},
    }
    view["clocks"]["versus_effect"] = _clock_vs_effect(view)
    view["summary"] = summary(view)
    return view


def _method_words(measured: bool, summaries: dict[int, RankSummary]) -> str:
    if measured:
        m = {s.get("collective_method") for s in summaries.values()}
        return "measured: " + "; ".join(sorted(str(x) for x in m))
    return ("derived: a rank's compute time (batch in hand to the next next(), which holds the backward's all-reduce) "
            "minus the fastest rank's at the same step")


def _clock_vs_effect(view: dict[str, Any]) -> str | None:
    """Whether the clocks' uncertainty is larger than the cross-rank instants shown (the start skew)."""
    unc = view["clocks"].get("uncertainty_ms")
    ss = view.get("start_skew_ms")
    if unc is None or ss is None:
        return None
    if unc >= (ss["mean"] or 0.0):
        return (f"the clock uncertainty across hosts (±{unc:.2f} ms) is at least the mean step-start skew shown "
                f"({ss['mean']:.2f} ms): which rank started a step first is not known at that scale; step durations "
                "and collective waits (one clock each) are unaffected")
    return (f"the clock uncertainty across hosts (±{unc:.2f} ms) is below the mean step-start skew "
            f"({ss['mean']:.2f} ms): the cross-host timeline can be read at that scale")


def summary(view: dict[str, Any]) -> str:
    parts = []
    sts = view.get("stragglers") or []
    hosts = view.get("slow_hosts") or []
    in_hosts = {r for h in hosts for r in h["ranks"]}
    for h in hosts:
        parts.append(h["sentence"][0].upper() + h["sentence"][1:] + ".")
    shown = [s for s in sts if s["rank"] not in in_hosts]
    if len(shown) > rule.NAMED_MAX:
        parts.append(f"{len(shown)} stragglers, the worst {rule.NAMED_MAX} named:")
    for s in shown[:rule.NAMED_MAX]:
        parts.append(s["sentence"][0].upper() + s["sentence"][1:])
    if in_hosts and not shown:
        parts.append(f"Worst: {sts[0]['sentence']}")
    if not sts and view["present"]:
        rows = view["ranks"]
        if len(rows) <= rule.NAMED_MAX:
            waits = ", ".join(f"rank {r['rank']} {rule.pct(r['collective_share'] or 0.0)}" for r in rows)
        else:
            sh = sorted(r["collective_share"] or 0.0 for r in rows)
            waits = f"from {rule.pct(sh[0])} to {rule.pct(sh[-1])} over {len(rows)} ranks"
        parts.append(f"No straggler: no rank waited in collectives {rule.pct(STRAGGLER_WAIT_SHARE)} of a step or "
                     f"more less than the others, beyond their spread and consistently ({waits}); step-time skew "
                     f"{view['skew_ms']['mean'] or 0:.1f} ms on average.")
    if view["missing"]:
        miss = view["missing"]
        why = "; ".join(f"rank {r}: {view['states'].get(r, 'no record')}" for r in miss[:rule.NAMED_MAX])
        more = f"; {len(miss) - rule.NAMED_MAX} more" if len(miss) > rule.NAMED_MAX else ""
        parts.append(f"Missing: {rule.ranks_words(miss)} left no record ({why}{more}); figures cover "
                     f"{rule.ranks_words(view['present'])}.")
    if view["partial"]:
        parts.append(f"Partial: {rule.ranks_words(view['partial'])} ended early (see their records).")
    return " ".join(parts)
