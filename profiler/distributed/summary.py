"""Pure: one rank's analyzed record -> its compact, bounded summary: what the merge needs and nothing more.

Why a summary and not the record: on several nodes without a shared filesystem, rank 0 never sees the other nodes'
files. Each rank sends rank 0 its summary through torchrun's store (profiler/distributed/store.py) and keeps its full
record on its own node; the summary says where (node, host, path). The merge (profiler/distributed/merge.py) works
from summaries alone, so it costs O(ranks x kept steps) whatever the records' sizes.

Bounded: the per-step series keep at most RANK_SUMMARY_MAX_STEPS steps, every 2^k-th step index with the same k on
every rank of a job (``stride_for``), so the kept steps of different ranks meet by step index; ~20 KB of JSON a rank.
"""
from __future__ import annotations

from typing import Any, TypedDict

from ..thresholds import RANK_SUMMARY_MAX_STEPS

SUMMARY_VERSION = 1


class StepSeries(TypedDict):
    """Per kept step, seconds since the rank's run start on its own clock; ``collective`` is None where the rank
    recorded no collective spans (the wait is then derived by the merge)."""
    step: list[int]
    start: list[float]
    got: list[float]
    end: list[float]
    collective: list[float] | None


class RankSummary(TypedDict, total=False):
    summary_version: int
    rank: int
    world_size: int | None
    local_rank: int | None
    group_rank: int | None  # torchrun's node rank (--node-rank): how a person finds the node
    hostname: str | None  # a hash of the host name ("host-..."), never the name itself
    boot_id: str | None
    backend: str | None
    t0_monotonic_ns: int | None
    record_path: str | None  # the rank's full run.json on its own node
    collective_method: str | None
    steps_total: int  # measured steps in the record (the series may keep fewer)
    step_ms: float | None  # means over every measured step of the record (not only the kept ones)
    wait_ms: float | None
    compute_ms: float | None
    input_wait_share: float | None
    stride: int
    series: StepSeries
    samples_per_s: float | None
    stall_fraction: float | None
    stall_s: float | None
    stall_by_cause: dict[str, float]
    stall_share_by_cause: dict[str, float]
    bottleneck: str | None
    verdict: str | None
    partial: bool
    partial_reason: str | None


def stride_for(n_steps: int, max_steps: int = RANK_SUMMARY_MAX_STEPS) -> int:
    """The smallest power of two that keeps at most ``max_steps`` of ``n_steps``: ranks with similar step counts pick
    the same stride, and kept step indices (multiples of it) then coincide across ranks."""
    s = 1
    while n_steps > max_steps * s:
        s *= 2
    return s


def _measured(rec: dict[str, Any]) -> list[tuple[int, float, float, float]]:
    st = (rec.get("timeline") or {}).get("steps") or {}
    cols = [st.get(k) or [] for k in ("step", "wait_start", "wait_end", "compute_end", "measured")]
    out = []
    for step, ws, we, ce, m in zip(*cols):
        if m and ce is not None and we is not None and ws is not None and ce >= we >= ws:
            out.append((int(step), float(ws), float(we), float(ce)))
    return out


def _collective(rec: dict[str, Any], steps: list[tuple[int, float, float, float]]) -> list[float] | None:
    """Seconds inside recorded collectives per step (spans that start within the step's compute), or None."""
    col = (rec.get("distributed") or {}).get("collectives") or None
    if not col or not isinstance(col.get("start"), list):
        return None
    spans = sorted(zip(col.get("start") or [], col.get("end") or []))
    order = sorted(range(len(steps)), key=lambda i: steps[i][2])
    out = [0.0] * len(steps)
    j = 0
    for a, b in spans:
        while j < len(order) and steps[order[j]][3] < a:
            j += 1
        if j < len(order):
            _, _, got, end = steps[order[j]]
            if got <= a <= end:
                out[order[j]] += max(0.0, min(b, end) - a)
    return out


def summarize(rec: dict[str, Any], record_path: str | None = None,
              max_steps: int = RANK_SUMMARY_MAX_STEPS) -> RankSummary:
    """The rank's summary from its analyzed record (a dict, as run.json holds it)."""
    d = rec.get("distributed") or {}
    tp, stall, verdict = rec.get("throughput") or {}, rec.get("stall") or {}, rec.get("verdict") or {}
    steps = _measured(rec)
    coll = _collective(rec, steps)
    stride = stride_for(len(steps), max_steps)
    keep = [i for i, s in enumerate(steps) if s[0] % stride == 0] if stride > 1 else list(range(len(steps)))
    series: StepSeries = {"step": [steps[i][0] for i in keep],
                          "start": [round(steps[i][1], 6) for i in keep],
                          "got": [round(steps[i][2], 6) for i in keep],
                          "end": [round(steps[i][3], 6) for i in keep],
                          "collective": [round(coll[i], 6) for i in keep] if coll is not None else None}
    col = d.get("collectives") or {}
    n = len(steps)
    step_s = sum(e - s for _, s, _, e in steps)
    wait_s = sum(g - s for _, s, g, _ in steps)
    return {
        "summary_version": SUMMARY_VERSION, "rank": int(d.get("rank", 0) or 0), "world_size": d.get("world_size"),
        "local_rank": d.get("local_rank"), "group_rank": d.get("group_rank"), "hostname": d.get("hostname"),
        "boot_id": d.get("boot_id"), "backend": d.get("backend"), "t0_monotonic_ns": d.get("t0_monotonic_ns"),
        "record_path": record_path, "collective_method": col.get("method") if coll is not None else None,
        "steps_total": n, "stride": stride, "series": series,
        "step_ms": round(step_s / n * 1e3, 3) if n else None, "wait_ms": round(wait_s / n * 1e3, 3) if n else None,
        "compute_ms": round((step_s - wait_s) / n * 1e3, 3) if n else None,
        "input_wait_share": round(wait_s / step_s, 4) if step_s > 0 else None,
        "samples_per_s": tp.get("samples_per_s"), "stall_fraction": stall.get("fraction"),
        "stall_s": stall.get("seconds"), "stall_by_cause": dict(stall.get("by_cause") or {}),
        "stall_share_by_cause": dict(stall.get("share_by_cause") or {}),
        "bottleneck": verdict.get("bottleneck"), "verdict": verdict.get("summary"),
        "partial": bool(rec.get("partial")), "partial_reason": rec.get("partial_reason"),
    }


def is_summary(d: Any) -> bool:
    return isinstance(d, dict) and isinstance(d.get("summary_version"), int) and isinstance(d.get("series"), dict)
