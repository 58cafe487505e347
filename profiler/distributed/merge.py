"""Pure: the ranks' records → one merged ``ranks`` view. No I/O, no drawing.

Per rank: throughput, step time, input wait, stall and its causes, collective wait, verdict.
Across ranks, steps aligned by step index (every rank runs the same steps: DDP meets in every all-reduce):
- step-time skew per step (slowest − fastest rank's step);
- collective wait per rank and step: *measured* where the rank recorded all-reduce spans (the built-in pipeline's
  DDP hook on gloo: time inside the all-reduce, waiting for the others included), else *derived*: the rank's compute
  time (batch in hand → next ``next()``; it contains the backward's all-reduce) minus the fastest rank's compute time
  at that step. The view names the method.
- the straggler: the rank the others waited for (its own collective wait is the smallest while the others' is at
  least STRAGGLER_WAIT_SHARE of their step), with its own cause: input-bound (its stall's leading cause: io, cpu,
  transfer) or compute-bound (its compute beyond the others').
- clocks: ranks with one boot id share CLOCK_MONOTONIC and are laid out on one time axis (``offset_s``); otherwise
  each rank's first measured step is put at 0 and the view says the alignment is by step index.
- missing ranks (no record) and partial ones are named.
"""
from __future__ import annotations

from typing import Any

from .. import vocab
from ..thresholds import STRAGGLER_CONSISTENT_FROM, STRAGGLER_WAIT_SHARE


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %"


def _ranks_words(ranks: list[int]) -> str:
    if not ranks:
        return "no rank"
    nums = ", ".join(str(r) for r in ranks)
    return f"rank {nums}" if len(ranks) == 1 else f"ranks {nums}"


def _measured_steps(rec: dict) -> dict[int, dict[str, float]]:
    """step index → {start, got, end} (s since the rank's run start) for measured, completed steps."""
    st = (rec.get("timeline") or {}).get("steps") or {}
    out: dict[int, dict[str, float]] = {}
    cols = [st.get(k) or [] for k in ("step", "wait_start", "wait_end", "compute_end", "measured")]
    for step, ws, we, ce, m in zip(*cols):
        if m and ce and ce >= we >= ws:
            out[int(step)] = {"start": float(ws), "got": float(we), "end": float(ce)}
    return out


def _collective_per_step(rec: dict, steps: dict[int, dict[str, float]]) -> dict[int, float] | None:
    """Seconds inside recorded collectives per step (spans that start within the step's compute), or None."""
    col = ((rec.get("distributed") or {}).get("collectives")) or None
    if not col or not isinstance(col.get("start"), list):
        return None
    spans = sorted(zip(col.get("start") or [], col.get("end") or []))
    out = {k: 0.0 for k in steps}
    order = sorted(steps.items(), key=lambda kv: kv[1]["got"])
    j = 0
    for a, b in spans:
        while j < len(order) and order[j][1]["end"] < a:
            j += 1
        if j < len(order) and order[j][1]["got"] <= a <= order[j][1]["end"]:
            k, s = order[j]
            out[k] += max(0.0, min(b, s["end"]) - a)
    return out


def _rank_row(rank: int, rec: dict, steps: dict[int, dict[str, float]]) -> dict[str, Any]:
    d = rec.get("distributed") or {}
    tp, stall, verdict = rec.get("throughput") or {}, rec.get("stall") or {}, rec.get("verdict") or {}
    n = len(steps)
    step_s = sum(s["end"] - s["start"] for s in steps.values())
    wait_s = sum(s["got"] - s["start"] for s in steps.values())
    return {
        "rank": rank, "hostname": d.get("hostname"), "local_rank": d.get("local_rank"), "backend": d.get("backend"),
        "samples_per_s": tp.get("samples_per_s"), "steps": n,
        "step_ms": round(step_s / n * 1e3, 3) if n else None,
        "wait_ms": round(wait_s / n * 1e3, 3) if n else None,
        "compute_ms": round((step_s - wait_s) / n * 1e3, 3) if n else None,
        "input_wait_share": round(wait_s / step_s, 4) if step_s > 0 else None,
        "stall_fraction": stall.get("fraction"), "stall_by_cause": stall.get("by_cause") or {},
        "stall_share_by_cause": stall.get("share_by_cause") or {}, "stall_s": stall.get("seconds"),
        "bottleneck": verdict.get("bottleneck"), "verdict": verdict.get("summary"),
        "partial": bool(rec.get("partial")), "partial_reason": rec.get("partial_reason"),
    }


def _clocks(recs: dict[int, dict]) -> dict[str, Any]:
    boots = {r: (rec.get("distributed") or {}).get("boot_id") for r, rec in recs.items()}
    t0s = {r: (rec.get("distributed") or {}).get("t0_monotonic_ns") for r, rec in recs.items()}
    hosts = sorted({str((rec.get("distributed") or {}).get("hostname")) for rec in recs.values()})
    shared = (len(set(boots.values())) == 1 and None not in boots.values()
              and all(isinstance(t, int) for t in t0s.values()))
    if shared and recs:
        base = min(t0s.values())
        offsets = {r: (t0s[r] - base) / 1e9 for r in recs}
        return {"shared": True, "offset_s": offsets, "hosts": hosts,
                "note": "one machine (one boot id): the ranks share CLOCK_MONOTONIC, timelines are on one clock"}
    offsets = {}
    for r, rec in recs.items():
        steps = _measured_steps(rec)
        offsets[r] = -min((s["start"] for s in steps.values()), default=0.0)
    return {"shared": False, "offset_s": offsets, "hosts": hosts,
            "note": (f"{len(hosts)} machines (or boots): no shared clock, so ranks are aligned by step index (each "
                     "rank's first measured step drawn at 0); cross-rank instants are not comparable")}


def merge(records: dict[int, dict | None], world_size: int | None = None,
          states: dict[int, str] | None = None) -> dict[str, Any]:
    """``records``: rank → its analysed run.json dict (None: no record). Returns the merged ``ranks`` view."""
    states = dict(states or {})
    present = {r: rec for r, rec in records.items() if rec}
    sizes = [(rec.get("distributed") or {}).get("world_size") for rec in present.values()]
    world = max([world_size or 0, *[s for s in sizes if isinstance(s, int)], *(r + 1 for r in records)] or [0])
    missing = [r for r in range(world) if r not in present]
    for r in missing:
        states.setdefault(r, "no record")
    steps = {r: _measured_steps(rec) for r, rec in present.items()}
    rows = [_rank_row(r, present[r], steps[r]) for r in sorted(present)]
    common = sorted(set.intersection(*(set(s) for s in steps.values()))) if steps else []
    measured_col = {r: _collective_per_step(present[r], steps[r]) for r in present}
    method = "measured" if present and all(v is not None for v in measured_col.values()) else "derived"
    per_step: dict[str, Any] = {"step": common, "step_s": {}, "wait_s": {}, "compute_s": {}, "collective_s": {}}
    for r in present:
        s = steps[r]
        per_step["step_s"][r] = [round(s[k]["end"] - s[k]["start"], 6) for k in common]
        per_step["wait_s"][r] = [round(s[k]["got"] - s[k]["start"], 6) for k in common]
        per_step["compute_s"][r] = [round(s[k]["end"] - s[k]["got"], 6) for k in common]
    fastest = [min(per_step["compute_s"][r][i] for r in present) for i in range(len(common))]
    for r in present:
        if method == "measured":
            per_step["collective_s"][r] = [round(measured_col[r][k], 6) for k in common]  # type: ignore[index]
        else:
            per_step["collective_s"][r] = [round(c - f, 6) for c, f in zip(per_step["compute_s"][r], fastest)]
    per_step["skew_s"] = [round(max(per_step["step_s"][r][i] for r in present)
                                - min(per_step["step_s"][r][i] for r in present), 6) for i in range(len(common))]
    for row in rows:
        r = row["rank"]
        tot_step = sum(per_step["step_s"][r])
        tot_col = sum(per_step["collective_s"][r])
        row["collective_ms"] = round(tot_col / len(common) * 1e3, 3) if common else None
        row["collective_share"] = round(tot_col / tot_step, 4) if tot_step > 0 else None
    clocks = _clocks(present)
    per_step["start_s"] = {r: [round(clocks["offset_s"][r] + steps[r][k]["start"], 6) for k in common]
                           for r in present}
    skew = per_step["skew_s"]
    view: dict[str, Any] = {
        "world_size": world, "present": sorted(present), "missing": missing, "states": states,
        "partial": [r["rank"] for r in rows if r["partial"]],
        "collective_method": _method_words(method, present),
        "collective_measured": method == "measured",
        "aligned_steps": len(common), "clocks": clocks, "ranks": rows, "per_step": per_step,
        "skew_ms": {"mean": round(sum(skew) / len(skew) * 1e3, 3) if skew else None,
                    "max": round(max(skew) * 1e3, 3) if skew else None},
    }
    n = len(common)
    least = [min(present, key=lambda r: per_step["collective_s"][r][i]) for i in range(n)]
    for row in rows:  # in how many aligned steps this rank waited least in collectives (the others waited for it)
        row["least_waiting_steps"] = sum(1 for x in least if x == row["rank"])
    view["straggler"] = straggler(rows, n)
    view["summary"] = summary(view)
    return view


def _method_words(method: str, present: dict[int, dict]) -> str:
    if method == "measured":
        m = {((rec.get("distributed") or {}).get("collectives") or {}).get("method") for rec in present.values()}
        return "measured: " + "; ".join(sorted(str(x) for x in m))
    return ("derived: a rank's compute time (batch in hand to the next next(), which holds the backward's all-reduce) "
            "minus the fastest rank's at the same step")


def straggler(rows: list[dict], aligned: int) -> dict[str, Any] | None:
    """The rank the others waited for, and why; None when no rank waited a meaningful share for another, or not
    consistently (the rank that waited least in collectives must be so in STRAGGLER_CONSISTENT_FROM of the steps)."""
    rows = [r for r in rows if r.get("collective_share") is not None and r.get("steps")]
    if len(rows) < 2 or aligned <= 0:
        return None
    s = min(rows, key=lambda r: (r["collective_share"], -(r.get("input_wait_share") or 0.0)))
    if s.get("least_waiting_steps", aligned) < STRAGGLER_CONSISTENT_FROM * aligned:
        return None
    others = [r for r in rows if r is not s]
    waiting = [r for r in others if r["collective_share"] >= STRAGGLER_WAIT_SHARE]
    if not waiting or min(r["collective_share"] for r in waiting) - s["collective_share"] < STRAGGLER_WAIT_SHARE:
        return None
    mean_other_wait = sum(r.get("input_wait_share") or 0.0 for r in others) / len(others)
    input_excess = (s.get("input_wait_share") or 0.0) - mean_other_wait
    by = {k: float(v) for k, v in (s.get("stall_by_cause") or {}).items() if k != "other"}
    total = float(s.get("stall_s") or 0.0)
    out: dict[str, Any] = {"rank": s["rank"], "waiting_ranks": [r["rank"] for r in waiting],
                           "consistent_steps": f"{s.get('least_waiting_steps', aligned)} of {aligned}",
                           "waiting_share": round(sum(r["collective_share"] for r in waiting) / len(waiting), 4)}
    if input_excess >= STRAGGLER_WAIT_SHARE and total > 0 and by and max(by.values()) > 0:
        cause = max(by, key=by.get)
        out.update(kind="input", cause=cause, cause_share=round(by[cause] / total, 4),
                   input_wait_share=s.get("input_wait_share"))
    else:
        # compute_ms holds the all-reduce waits too (the waiting ranks' are longer by exactly what they waited), so
        # compare compute net of them: a rank that waited least but did not compute longer is no straggler.
        own_net = _net_compute(s)
        others_net = sum(_net_compute(r) for r in others) / len(others)
        if own_net <= others_net:
            return None
        out.update(kind="compute", cause="compute", compute_ms=round(own_net, 3),
                   others_compute_ms=round(others_net, 3))
    out["sentence"] = straggler_sentence(out)
    return out


def _net_compute(row: dict) -> float:
    """A rank's compute per step without its waits in collectives (ms)."""
    return (row.get("compute_ms") or 0.0) - (row.get("collective_share") or 0.0) * (row.get("step_ms") or 0.0)


def straggler_sentence(st: dict[str, Any]) -> str:
    waiting = _ranks_words(st["waiting_ranks"])
    their = "its" if len(st["waiting_ranks"]) == 1 else "their"
    tail = f"{waiting} waited {_pct(st['waiting_share'])} of {their} step in the all-reduce for it"
    if st["kind"] == "input":
        cause = st["cause"]
        words = vocab.CAUSE[cause].words if cause in vocab.CAUSE else cause
        return (f"rank {st['rank']} is {cause}-bound: {_pct(st['cause_share'])} of its input stall was {words} "
                f"(it waited for input {_pct(st.get('input_wait_share') or 0.0)} of its step); {tail}.")
    return (f"rank {st['rank']} is the slowest to compute: its step's own compute (waits in collectives excluded) "
            f"took {st['compute_ms']:.0f} ms against {st['others_compute_ms']:.0f} ms on the others; {tail}.")


def summary(view: dict[str, Any]) -> str:
    parts = []
    st = view.get("straggler")
    if st:
        parts.append(st["sentence"][0].upper() + st["sentence"][1:])
    elif view["present"]:
        waits = ", ".join(f"rank {r['rank']} {_pct(r['collective_share'] or 0.0)}" for r in view["ranks"])
        parts.append(f"No straggler: no rank waited in collectives {_pct(STRAGGLER_WAIT_SHARE)} of a step or more "
                     f"beyond the rank that waited least ({waits}); step-time skew "
                     f"{view['skew_ms']['mean'] or 0:.1f} ms on average.")
    if view["missing"]:
        why = "; ".join(f"rank {r}: {view['states'].get(r, 'no record')}" for r in view["missing"])
        parts.append(f"Missing: {_ranks_words(view['missing'])} left no record ({why}); figures cover "
                     f"{_ranks_words(view['present'])}.")
    if view["partial"]:
        parts.append(f"Partial: {_ranks_words(view['partial'])} ended early (see their records).")
    return " ".join(parts)
