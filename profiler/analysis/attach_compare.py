"""Comparing runs when one of them is an attach record: the figures both kinds have, side by side, and in words
what differs — including what one of them could not measure (never compared as a zero).

Why not the ordinary comparison (analysis/compare.py): it bootstraps per-step rows, which an attach record does not
have; an attach record's figures are sampled shares with binomial intervals instead. So this comparison puts the
shares next to each other, says whether a run's figure lies inside the attach record's 95 % interval, and names the
figures present in one record only.
"""
from __future__ import annotations

from typing import Any

from ..record.read import AttachView, JobView, read, view
from .attach import is_attach

CAUSES = ("io", "cpu", "transfer", "other")
#: Two shares further apart than this (percentage points, as a fraction) are called different in words. Why 15: the
#: agreement that attach is checked to keep with `run` on planted cases (tests/test_attach.py); below it, sampling
#: and window differences alone can explain the gap.
SHARE_DIFFERS_FROM = 0.15


def kind(rec: Any) -> str:
    return str(view(JobView, rec.job).kind or "builtin")


def compare_attach(recs: list[Any], names: list[str]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []

    def row(key: str, label: str, values: list[Any]) -> None:
        rows.append({"key": key, "label": label, "values": values})

    rd = [read(r) for r in recs]  # analyzed records
    row("verdict", "verdict", [r.verdict.bottleneck for r in rd])
    row("stall_fraction", "waiting for input (share of the window)", [r.stall.fraction for r in rd])
    for c in CAUSES:  # a cause a record has no share for stays None (never compared as a zero)
        row(f"share_{c}", f"wait that was {c}", [r.stall.share_by_cause.get(c) for r in rd])
    # an attach record has no throughput (its section holds only window_s): None, not 0 samples/s
    row("throughput", "samples/s", [None if is_attach(r) else x.throughput.samples_per_s for r, x in zip(recs, rd)])
    row("window_s", "seconds measured", [r.window.seconds for r in rd])
    differences: list[str] = []
    base, bname = recs[0], names[0]
    for r, x, name in zip(recs[1:], rd[1:], names[1:]):
        pair = f"{name} vs {bname}"
        b, b0 = x.verdict.bottleneck, rd[0].verdict.bottleneck
        if b != b0:
            differences.append(f"{pair}: verdict {b} vs {b0}")
        else:
            differences.append(f"{pair}: same verdict ({b})")
        for key in ["stall_fraction", *(f"share_{c}" for c in CAUSES)]:
            rw = next(x for x in rows if x["key"] == key)
            a, b = rw["values"][0], rw["values"][recs.index(r)]
            if a is not None and b is not None and abs(float(a) - float(b)) > SHARE_DIFFERS_FROM:
                differences.append(f"{pair}: {rw['label']} {float(b) * 100:.0f} % vs {float(a) * 100:.0f} %")
        att = r if is_attach(r) else base if is_attach(base) else None
        other = base if att is r else r
        if att is not None and other is not att:
            ast, ost = read(att).stall, read(other).stall
            lo, hi = ast.fraction_low, ast.fraction_high
            f = ost.fraction
            if lo is not None and hi is not None and f is not None:
                inside = "inside" if lo <= f <= hi else "outside"
                differences.append(f"{pair}: the measured wait share {f * 100:.0f} % is {inside} the attach "
                                   f"record's 95 % interval ({lo * 100:.0f}–{hi * 100:.0f} %)")
            for key, why in view(AttachView, att.attach).absent.items():
                if key in ("throughput", "step_latency_percentiles", "per_sample_times"):
                    differences.append(f"{pair}: {key} only in the {kind(other)} record ({why})")
    return {"kinds": [kind(r) for r in recs], "names": names, "rows": rows, "differences": differences,
            "note": "an attach record's figures are sampled shares (95 % Wilson intervals in its run.json); "
                    "compare.png and compare.html need per-step rows and are not drawn for it"}
