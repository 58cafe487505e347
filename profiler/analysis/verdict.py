"""The verdict: which one thing limits the job, in one sentence a person reads first."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .. import thresholds as th
from .. import vocab
from ..record.read import CeilingRowView, CeilingsView, OutOfMemoryView, StallView, VerdictView, WhatIfView, view
from .context import Context
from .io import human_bytes

if TYPE_CHECKING:  # annotations only
    from ..record.schema import Ceilings, Stall, Verdict, WhatIf

# The causes a verdict can name: every idle cause the registry has except "other", which explains nothing.
VERDICT_CAUSES = tuple(c for c in vocab.CAUSE_NAMES if c != "other")

#: The verdict of a record with no measured step (a run stopped during warm-up): no judgement from nothing.
NOTHING_MEASURED = "none"


def severity(fraction: float) -> str:
    if fraction < th.NOT_INPUT_BOUND_BELOW:
        return "not input-bound"
    if fraction < th.HIGHLY_INPUT_BOUND_FROM:
        return "moderately input-bound"
    return "highly input-bound"


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %" if x >= 0.1 else f"{x * 100:.1f} %"


def io_measured(ctx: Context) -> str:
    """What was measured of the reads, per sample: a timed read stage's mean where there is one (the built-in
    pipeline times its file reads), else the dataset calls' blocked time; and the bytes the kernel fetched from the
    device for them (read_bytes: page faults on memory-mapped files count, which rchar never sees). Never a stage that
    was not timed: a script has no read stage, and its mean of 0.0 ms read as "reads cost nothing"."""
    if ctx.timed_reads:
        words = f"{ctx.sample_read_ms:.1f} ms per file read"
    elif ctx.sample_blocked_ms is not None:
        words = f"{ctx.sample_blocked_ms:.1f} ms blocked per sample"
    else:
        words = "blocked time per sample not measured"
    if ctx.sample_device_bytes is not None:
        words += f", {human_bytes(ctx.sample_device_bytes)} per sample from the device (kernel's read_bytes)"
    elif ctx.page_cache_hit is not None:
        words += f", {_pct(1 - ctx.page_cache_hit)} of bytes from the device"
    return words


def decide(stall_: Stall, ctx: Context, oom: OutOfMemoryView | None = None) -> Verdict:
    """``verdict`` section: bottleneck, severity, summary, the numbers behind it. ``oom``: ``memory.oom`` (None:
    the run did not run out of device memory)."""
    if oom is not None:
        return {
            "bottleneck": "memory", "severity": "does not fit",
            "summary": (f"Out of device memory at step {oom.step}: the model at batch size {ctx.batch_size} "
                        f"does not fit in {ctx.device_name or 'the device'}; see the memory recommendations."),
        }
    if ctx.steps <= 0:
        return {"bottleneck": NOTHING_MEASURED, "severity": "nothing measured",
                "summary": "No verdict: the run ended before its first measured step, so nothing was measured to "
                           "judge. Run it again and let it reach the measured steps (after --warmup)."}
    stall = view(StallView, stall_)
    frac = float(stall.fraction)
    sev = severity(frac)
    by = stall.by_cause
    total = float(stall.seconds)
    dev = "the GPU" if ctx.device_type == "cuda" else "the CPU"
    workers = (f"{ctx.workers} worker{'s' if ctx.workers != 1 else ''}" if ctx.workers > 0
               else "the main process (workers = 0)")
    cores = f"{ctx.usable_cores:g} core{'s' if ctx.usable_cores != 1 else ''}"
    if frac < th.NOT_INPUT_BOUND_BELOW or total <= 0:
        step_ms = ctx.compute_ms + ctx.h2d_ms
        summary = (f"Compute-bound: the input pipeline keeps up ({dev} waited only {_pct(frac)} of the time); "
                   f"the model's {step_ms:.0f} ms per step on {dev} sets the pace at "
                   f"{ctx.samples_per_s:.0f} samples/s.")
        if ctx.device_type == "cpu":
            summary += " The model ran on the CPU: no GPU was used."
        return {"bottleneck": "compute", "severity": sev, "summary": summary}
    causes = {k: float(by.get(k, 0.0)) for k in VERDICT_CAUSES}
    cause = max(causes, key=lambda c: causes[c])
    share = causes[cause] / total if total > 0 else 0.0
    detail = f"{_pct(share)} of that wait was {vocab.CAUSE[cause].words}"
    if cause == "cpu":
        detail += f" in {workers} that had {cores} between them" if ctx.workers > 0 else f" in {workers}, with {cores}"
    elif cause == "io" and ctx.reads_off_device:
        # Blocked while reading nothing: not storage. What blocks a worker without bytes is a sleep, a lock or the
        # network (docs/attribution.md), and storage advice would mislead.
        detail = (f"{_pct(share)} of that wait was {workers} blocked, not on the storage device: sleeps, locks, "
                  "network (no byte came from the device, by the kernel's read_bytes)")
    elif cause == "io":
        detail += f" in {workers}, {io_measured(ctx)}"
    summary = (f"Input-bound ({sev.split()[0]}): {dev} waited {_pct(frac)} of the measured time "
               f"({total:.2f} s of {ctx.window_s:.2f} s); {detail}.")
    other_share = float(by.get("other", 0.0)) / total if total > 0 else 0.0
    if other_share >= th.OTHER_SHARE_WARN:
        summary += f" Note: {_pct(other_share)} of the wait could not be tied to a stage (other)."
    return {"bottleneck": cause, "severity": sev, "summary": summary, "cause_share": round(share, 4)}


def agree_on_shared_cores(verdict: Verdict, whatif: WhatIf, ceilings: Ceilings) -> None:
    """On a run whose model and workers share the cores (a CPU-only run), say what binds in the what-if's words.

    Why: the verdict (from the wait), the ceilings (each stage alone) and the what-if (the whole job on its cores)
    otherwise give three answers to one question: "compute-bound" beside a decode/augment ceiling beside "bound by
    cores". When the what-if finds the measured setting bound by the shared cores, the verdict's summary says so in
    the same words and the ceilings' lowest row is the shared cores; the bottleneck field keeps its cause (it is
    what the wait was for), and ``verdict.binds`` carries the shared answer."""
    wi, v = view(WhatIfView, whatif), view(VerdictView, verdict)
    words = wi.binds_words
    if wi.binds != "cores" or not words or v.bottleneck in (NOTHING_MEASURED, "memory"):
        return
    verdict["binds"] = words
    head = "Compute-bound:"
    if v.summary.startswith(head):
        verdict["summary"] = f"Compute-bound on shared cores ({words}):" + verdict["summary"][len(head):]
    else:
        verdict["summary"] += f" What binds: {words}."
    verdict["summary"] += " More of one takes cores from the other."
    rows = view(CeilingsView, ceilings).rows  # the ceilings being built (a failed what-if left them empty)
    cores = next((r for r in rows if view(CeilingRowView, r).stage == "cores"), None)
    # The shared cores are the ceiling when they are the lowest (to within the model's softness, 3 %).
    if cores and cores["samples_per_s"] <= 1.03 * min(r["samples_per_s"] for r in rows):
        ceilings["lowest"] = "cores"
        ceilings["lowest_words"] = words
