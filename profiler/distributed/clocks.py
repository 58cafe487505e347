"""Pure: the ranks' clocks put on one axis. No I/O (the round trips themselves are profiler/distributed/store.py).

Every timeline time of a rank is relative to its run start ``t0_monotonic_ns`` on its machine's CLOCK_MONOTONIC.
Ranks with one boot id share that clock. Ranks on other hosts do not: each such host measures its offset to rank 0's
clock by store round trips, NTP-style. A round: the host reads its clock (t1), asks rank 0 through the store, rank 0
answers with its clock (t2), the host reads its clock on the answer (t4). Then rank 0's clock − the host's is
t2 − (t1 + t4) / 2, within ± (t4 − t1) / 2 whatever the two legs' delays (t2 lies somewhere between t1 and t4 on the
true timeline). Of several rounds the one with the least delay is kept: its bound is the tightest.

The offset is measured at the job's end; CLOCK_MONOTONIC of two hosts drift apart by NTP's slewing (tens of ppm at
most: tens of ms over ten minutes), which the uncertainty does not include.
"""
from __future__ import annotations

from typing import Any, Mapping

Round = tuple[int, int, int]  # (t1 host, t2 rank 0, t4 host), ns


def offset_from_rounds(rounds: list[Round]) -> dict[str, Any] | None:
    """The least-delay round's offset (rank 0's clock − this host's) and its uncertainty, ns; None without rounds."""
    good = [r for r in rounds if r[2] >= r[0]]
    if not good:
        return None
    t1, t2, t4 = min(good, key=lambda r: r[2] - r[0])
    return {"offset_ns": int(t2 - (t1 + t4) // 2), "uncertainty_ns": int((t4 - t1 + 1) // 2),
            "delay_ns": int(t4 - t1), "rounds": len(good), "method": "store round trips to rank 0, least delay"}


def clocks_view(summaries: Mapping[int, Mapping[str, Any]], sync: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The view's ``clocks``: per rank ``offset_s`` (where its run start lies on the common axis), whether instants
    are comparable across ranks, each host's offset and uncertainty, and a note that says what was done."""
    boots = {r: s.get("boot_id") for r, s in summaries.items()}
    t0s = {r: t for r, s in summaries.items() if isinstance(t := s.get("t0_monotonic_ns"), int)}
    hosts = sorted({str(s.get("hostname")) for s in summaries.values()})
    known_t0 = len(t0s) == len(summaries)
    distinct = set(boots.values())
    out: dict[str, Any] = {"hosts": hosts, "host_offsets": {}, "uncertainty_ms": None,
                           "round_trips": {str(v.get("hostname") or b): {
                               "boot_id": b, "offset_ms": round(float(v["offset_ns"]) / 1e6, 3),
                               "uncertainty_ms": round(float(v["uncertainty_ns"]) / 1e6, 3),
                               "rounds": v.get("rounds")} for b, v in sync.items()}}
    if summaries and known_t0 and None not in distinct and len(distinct) == 1:
        base = min(t0s.values())
        out.update(shared=True, comparable=True, method="one clock",
                   offset_s={r: (t0s[r] - base) / 1e9 for r in summaries},
                   note="one machine (one boot id): the ranks share CLOCK_MONOTONIC, timelines are on one clock")
        return out
    ref = boots.get(0) if 0 in summaries else next((b for b in distinct if b not in sync), None)
    offs: dict[str | None, int] = {ref: 0}
    for b in distinct:
        if b is not None and b in sync and b != ref:
            offs[b] = int(sync[b]["offset_ns"])
    synced = [b for b in distinct if b is not None and b != ref and b in sync]
    if summaries and known_t0 and None not in distinct and all(b in offs for b in distinct):
        abs0 = {r: t0s[r] + offs[boots[r]] for r in summaries}
        base = min(abs0.values())
        unc = max((float(sync[b]["uncertainty_ns"]) for b in synced), default=0.0) / 1e6
        host_of = {s.get("boot_id"): str(s.get("hostname")) for s in summaries.values()}
        out.update(shared=False, comparable=True, method="store round trips", uncertainty_ms=round(unc, 3),
                   offset_s={r: (abs0[r] - base) / 1e9 for r in summaries},
                   host_offsets={host_of[b]: {"offset_ms": round(offs[b] / 1e6, 3),
                                              "uncertainty_ms": round(float(sync[str(b)]["uncertainty_ns"]) / 1e6, 3)
                                              if b in synced else 0.0,
                                              "rounds": sync[str(b)].get("rounds") if b in synced else None,
                                              "reference": b == ref} for b in distinct},
                   note=(f"{len(distinct)} machines: each host's CLOCK_MONOTONIC put on rank 0's by store round trips "
                         f"(least-delay round of several), uncertainty up to ±{unc:.2f} ms; measured at the job's "
                         "end, drift over the run not included"))
        return out
    offsets = {}
    for r, s in summaries.items():
        st = s.get("series") or {}
        offsets[r] = -min(st.get("start") or [0.0])
    out.update(shared=False, comparable=False, method="step index", offset_s=offsets,
               note=(f"{len(distinct)} machines (or boots) without measured offsets: ranks are aligned by step index "
                     "(each rank's first kept step drawn at 0); cross-rank instants are not comparable"))
    return out
