"""Bring an older run record up to the current schema on load, so every reader sees one shape (schema_version 2).

v1 → v2 (docs/run_json.md, "Older records"):
- ``timeline.steps`` gains ``epoch`` (0: v1 did not count epochs), ``main_cpu`` and ``main_runq`` (0: not measured);
- ``timeline.batches`` gains ``sent`` (= collate_end, the v2 value where unknown), ``collate_cpu``/``collate_runq`` (0);
- ``timeline.sample_spans``: start = read_start, end = augment_end, stages.read = read_end − read_start,
  stages.decode = decode_end − read_end, stages.augment = augment_end − decode_end, items = 1,
  cpu = runq = rchar = read_bytes = 0. The v1 columns stay next to them (readers that predate v2 still use them);
- ``timeline.epochs`` (empty) and ``timeline.accounting`` (nothing measured per thread) are added.

Migration runs before validation, on untrusted input: it never assumes a shape. A v1 column it needs is first checked
with the schema's own column checker (so a damaged one is named as such), and anything else it cannot read is left
for ``validate`` to reject.
"""
from __future__ import annotations

from typing import Any

from . import schema as S
from .validate import compile_type

# A record labelled 2 whose timeline tables have none of their v2 columns was written by the harness of the v1 era
# after RunRecord's version moved on; its tables are upgraded the same way. (Remove once no such record exists.)
_V2_ONLY = {"steps": ("epoch", "main_cpu", "main_runq"), "batches": ("sent", "collate_cpu", "collate_runq"),
            "sample_spans": ("start", "end", "items", "stages", "cpu", "runq")}
_V1_SPANS = ("read_start", "read_end", "decode_end", "augment_end")
_TIME_COLUMN = compile_type(list[S.Time])

V1_ACCOUNTING: S.Accounting = {"cpu_clock": "thread_time", "runqueue": False, "thread_io": False,
                               "absent": {"per-thread accounting": "schema_version 1 record: not measured"}}


def upgrade(d: dict[str, Any]) -> dict[str, Any]:
    """The record ``d`` (schema_version 1 or 2, unvalidated) at schema_version 2; ``d`` itself is not modified."""
    version = d.get("schema_version")
    tl = d.get("timeline")
    if type(tl) is not dict:
        return d
    old = version == 1
    tables: dict[str, Any] = {name: tl.get(name) for name in _V2_ONLY}
    todo = [name for name, t in tables.items()
            if type(t) is dict and (old or not any(k in t for k in _V2_ONLY[name]))]
    if not old and not todo:
        return d
    tl = dict(tl)
    for name in todo:
        tl[name] = _UPGRADE[name](dict(tables[name]))
    if old or todo:
        tl.setdefault("epochs", {"epoch": [], "iter_start": [], "iter_end": [], "first_batch": []})
        tl.setdefault("accounting", {**V1_ACCOUNTING, "absent": dict(V1_ACCOUNTING["absent"])})
    out = dict(d)
    out["timeline"] = tl
    if old:
        out["schema_version"] = 2
    return out


def v2_timeline(timeline: S.Timeline) -> S.Timeline:
    """``timeline`` with its sample spans in the v2 columns (itself when they already are): for a record built in
    memory from v1-shaped spans, which no ``load`` migrated. The conversion is the one ``upgrade`` applies."""
    sp: Any = timeline["sample_spans"]
    if "start" in sp or not all(k in sp for k in _V1_SPANS):
        return timeline
    out: Any = {**timeline, "sample_spans": _spans(dict(sp))}  # the v1 columns ride along, as after ``upgrade``
    return out


def _rows(t: dict[str, Any], *names: str) -> int | None:
    """The table's row count from the first of ``names`` that is a list, else None (left to validation)."""
    for k in names:
        if type(t.get(k)) is list:
            return len(t[k])
    return None


def _steps(t: dict[str, Any]) -> dict[str, Any]:
    n = _rows(t, "wait_start", "step", "batch")
    if n is not None:
        t.setdefault("epoch", [0] * n)
        t.setdefault("main_cpu", [0.0] * n)
        t.setdefault("main_runq", [0.0] * n)
    return t


def _batches(t: dict[str, Any]) -> dict[str, Any]:
    n = _rows(t, "collate_end", "batch")
    if n is not None:
        if type(t.get("collate_end")) is list:
            t.setdefault("sent", list(t["collate_end"]))
        t.setdefault("collate_cpu", [0.0] * n)
        t.setdefault("collate_runq", [0.0] * n)
    return t


def _spans(t: dict[str, Any]) -> dict[str, Any]:
    n = _rows(t, "read_start", "batch")
    if n is None:
        return t
    if all(k in t for k in _V1_SPANS):
        for k in _V1_SPANS:  # damage in a v1 column is named as such, not as the v2 column made from it
            _TIME_COLUMN(t[k], f"timeline.sample_spans.{k}")
        rs, re_, de, ae = (t[k] for k in _V1_SPANS)
        t.setdefault("start", list(rs))
        t.setdefault("end", list(ae))
        t.setdefault("stages", {"read": _diff(rs, re_), "decode": _diff(re_, de), "augment": _diff(de, ae)})
    t.setdefault("items", [1] * n)
    for k in ("cpu", "runq"):
        t.setdefault(k, [0.0] * n)
    for k in ("rchar", "read_bytes"):
        t.setdefault(k, [0] * n)
    return t


def _diff(lo: list[float], hi: list[float]) -> list[float]:
    """hi − lo per row, rounded to the record's µs resolution (lengths may differ: validation names that)."""
    return [round(b - a, 6) for a, b in zip(lo, hi)]


_UPGRADE = {"steps": _steps, "batches": _batches, "sample_spans": _spans}
