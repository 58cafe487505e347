"""The headline and the key figures: what a reader grasps in ten seconds, the same words in the terminal and the page.

Why a function of its own, apart from ``verdict.summary``: the summary is a full sentence with every number behind
it (40 words on a shared-cores run); the headline is the page's ``h1`` and the terminal's first line — the verdict,
the share and the cause in at most ~20 words (HEADLINE_WORDS_MAX), e.g. "Input-bound: the GPU waited 41 % of the
time, mostly for decoding in 4 workers". It is pure: it reads an analyzed record and draws nothing, so every
renderer shows the same words.

The key figures are the 3-5 numbers the page shows as cards and the terminal on one line: throughput, the idle
share, workers x batch size of the profiled loader, the window, and what ran. Each value is a real figure or "—";
never "none" or "?" (a loader with a batch sampler has ``DataLoader.batch_size`` None: its batch size is the
samples per step the record measured).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import vocab
from ..record.read import AttachView, read, view
from ..record.read_docs import SweepBest, SweepPoint, SweepView, comparison_view, ranks_view, sweep_view

if TYPE_CHECKING:  # annotations only
    from ..record import RunRecord

#: The headline's length: a sentence read in one glance (the issue's "at most ~20 words"; the longest real case,
#: "Input-bound: the model (CPU) waited 99 % of the time, mostly for the dataset's own code in the main process.",
#: is 20 words counting "%").
HEADLINE_WORDS_MAX = 20

# What the compute device waited for, as the headline says it (shorter than vocab's in-sentence words, which
# explain; the headline only names).
_WAITED_FOR = {"read": "file reads", "decode": "decoding", "augment": "augmentation",
               "getitem": "the dataset's own code", "collate": "collating", "transfer": "worker-to-main transfer",
               "h2d": "host-to-device copies", "other": "unexplained overhead"}

# A cause as a headline names it: vocab's words explain in brackets ("CPU work (decode, augment, collate, waiting
# for a core)"), which alone would take half of a 20-word headline.
_CAUSE_SHORT = {"io": "storage reads", "cpu": "CPU work", "transfer": "worker-to-main transfer",
                "other": "unexplained overhead"}


def cause_words(cause: str) -> str:
    """A cause in two or three words, for a headline."""
    return _CAUSE_SHORT.get(cause) or (vocab.CAUSE[cause].words if cause in vocab.CAUSE else cause)


class Figure(NamedTuple):
    """One key figure: the value as shown (a number with its unit) and what it is."""
    value: str
    label: str


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %" if x >= 0.1 else f"{x * 100:.1f} %"


def device_words(rec: RunRecord) -> str:
    """The compute device as the subject of a sentence: "the GPU", or "the model (CPU)" on a CPU run (the CPU is the
    compute device there, and the model's thread is what waits; the step chart's legend says "model (CPU)" too)."""
    r = read(rec)
    if r.config.model == "none" and r.job.builtin:
        return "the loop (no model)"  # a loader-only run: nothing computes, the loop itself waits
    if r.device.type == "cpu":
        return "the model (CPU)"
    if r.device.type == "cuda":
        return "the GPU"
    return f"the {r.device.type or 'compute device'}"


def _workers(rec: RunRecord) -> int | None:
    return read(rec).workers


def _in_workers(rec: RunRecord) -> str:
    n = _workers(rec)
    if n is None:
        return ""
    return " in the main process" if n == 0 else f" in {n} worker{'s' if n != 1 else ''}"


def _top(d: dict[str, float], names: tuple[str, ...] | None = None) -> str | None:
    pick = {k: v for k, v in d.items() if v > 0 and (names is None or k in names)}
    return max(pick, key=lambda k: pick[k]) if pick else None


def waited_for(rec: RunRecord, cause: str) -> str:
    """What the wait of the verdict's ``cause`` was mostly for, in a few words: the stage of that cause the awaited
    batches spent most of it in ("decoding in 4 workers"), or, for ``cpu`` where the kernel saw the producing threads
    wait for a core more than run, the contention itself. Consistent with the verdict by construction: only stages
    of its cause are named."""
    st = read(rec).stall
    by_stage = {k: float(v) for k, v in st.by_stage.items()}
    of_cause = tuple(k for k in by_stage if (vocab.STAGE[k].cause if k in vocab.STAGE else
                                             ("other" if k == "other" else "cpu")) == cause)
    if cause == "cpu" and st.by_kind.get("runqueue", 0.0) > st.by_kind.get("on_cpu", 0.0):
        n = _workers(rec)
        return (f"a free core ({n} worker{'s' if n != 1 else ''} oversubscribed)" if n
                else "a free core (oversubscribed)")
    stage = _top(by_stage, of_cause)
    if stage is None:
        return f"{cause_words(cause)}{_in_workers(rec)}"
    where = "" if stage in ("transfer", "h2d", "other") else _in_workers(rec)
    return (_WAITED_FOR.get(stage) or f"the stage {stage}") + where


def headline(rec: RunRecord) -> str:
    """One sentence of at most ~20 words: verdict, share and cause. Reads the analyzed record only."""
    r = read(rec)
    v = r.verdict
    b = v.bottleneck
    frac = r.stall.fraction
    who = device_words(rec)
    if b == "memory":
        bs = batch_size(rec)
        return (f"Does not fit: out of device memory{' at batch size ' + bs if bs != '—' else ''} on "
                f"{r.device.name or 'the device'}.")
    if b == "none" or not rec.window_steps:
        return "No verdict: the run ended before its first measured step."
    if b == "compute":
        if v.binds and v.binds.startswith("cores"):
            n = _workers(rec)
            shared = f"the model and {n} worker{'s' if n != 1 else ''}" if n else "the model and its loading"
            return f"Compute-bound on shared cores: {shared} share the CPU; waiting for input took {_pct(frac)}."
        if r.device.type == "cpu":
            return f"Compute-bound: the model on the CPU sets the pace; it waited only {_pct(frac)} for input."
        return f"Compute-bound: the model sets the pace; {who} waited only {_pct(frac)} for input."
    if b in vocab.CAUSE_NAMES:
        sev = v.severity
        head = "Input-bound" if sev.startswith("highly") or not sev else f"{sev.split()[0].capitalize()} input-bound"
        return f"{head}: {who} waited {_pct(frac)} of the time, mostly for {waited_for(rec, str(b))}."
    return f"{str(b or 'Unknown').capitalize()}: {who} waited {_pct(frac)} of the time."


def batch_size(rec: RunRecord) -> str:
    """The profiled loader's batch size: its ``batch_size``, else the built-in's configured one, else the samples per
    step the record measured (a batch sampler or a batching dataset leaves ``DataLoader.batch_size`` None)."""
    r = read(rec)
    if r.job.loader.batch_size is not None:
        return str(r.job.loader.batch_size)
    if r.job.builtin and r.config.batch_size is not None:
        return str(r.config.batch_size)
    steps, samples = r.throughput.steps, r.throughput.samples
    if steps and samples:
        per = samples / steps
        return str(round(per)) if abs(per - round(per)) < 0.05 else f"≈ {per:.1f}"
    return "—"


#: A card's value is read at a glance: a longer script name keeps its start and its end around an ellipsis (the
#: whole path is in the Configuration section and run.json).
CARD_NAME_MAX = 28


def _short_name(name: str) -> str:
    if len(name) <= CARD_NAME_MAX:
        return name
    tail = (CARD_NAME_MAX - 1) // 2
    return name[:CARD_NAME_MAX - 1 - tail] + "…" + name[-tail:]


def _what_ran(rec: RunRecord) -> Figure:
    r = read(rec)
    job, device = r.job, r.device
    on = "on the CPU" if device.type == "cpu" else f"on {device.name or 'the GPU'}"
    if job.own:
        name = _short_name(os.path.basename(job.target)) if job.target else "your code"
        kind = {"module": "module", "api": "your code (profiler.profile)"}.get(str(job.kind), "script")
        return Figure(name or "your code", f"{kind}, {on}")
    model = r.config.model
    if not model or model == "none":
        return Figure("loader only", f"no model, {on}")
    return Figure(model, f"model, {r.config.mode or 'train'} mode, {on}")


def _secs(s: float) -> str:
    """A window's length with two significant figures at least: a 20-step window of a fast loader lasts 20 ms, which
    "0.0 s" would hide."""
    if s >= 1 or s == 0:
        return f"{s:.1f} s"
    return f"{s:.2f} s" if s >= 0.1 else f"{s * 1000:.0f} ms" if s >= 0.01 else f"{s * 1000:.1f} ms"


def key_figures(rec: RunRecord) -> list[Figure]:
    """The cards: throughput, idle share, workers x batch size, window, what ran. Values are figures or "—"."""
    r = read(rec)
    win, st = r.window, r.stall
    sps = r.throughput.samples_per_s
    n = r.workers
    steps, warm = win.steps, win.warmup_steps
    if not steps:  # nothing measured: "0.0 samples/s" and "0.0 % waiting" would read as measured figures
        return [Figure("—", "throughput: no measured step"), Figure("—", "waiting for input: not measured"),
                Figure(f"{'—' if n is None else n} × {batch_size(rec)}", "workers × batch size"),
                Figure("0 steps", f"window, {warm} warm-up asked"), _what_ran(rec)]
    return [
        Figure(f"{sps:,.1f} samples/s", "throughput, measured window"),  # the record's figure, as the tables give it
        Figure(_pct(st.fraction), f"waiting for input ({st.seconds:.2f} s)"),
        Figure(f"{'—' if n is None else n} × {batch_size(rec)}", "workers × batch size"),
        Figure(_secs(win.seconds), f"window: {steps} steps, {warm} warm-up"),
        _what_ran(rec),
    ]


def no_change(rec: RunRecord) -> str:
    """Why the page's "Do first" box holds no recommendation, in one sentence from the record: a run that waited
    99 % of the time with "nothing points to a change" reads as a bug, while "no setting the what-if tried gains 5 %
    or more (best: workers=4, +1 %); bound by cores: ..." is the answer (a loaded 2-core machine). Advice the
    consistency check dropped is named with its reason when the what-if's best setting would gain more."""
    from ..thresholds import GAIN_CLAIMED_FROM

    r = read(rec)
    v, w = r.verdict, r.whatif
    if not rec.window_steps:
        return "no step was measured, so there is nothing to judge; let the run reach its measured steps."
    preds = [p for p in w.prediction_rows if not p.measured and p.change is not None]
    best = max(preds, key=lambda p: p.change or 0.0, default=None)
    dropped = [a for a in w.rejected if a.action]
    bound = w.binds_words or v.binds or ""
    if v.bottleneck == "compute" and best is None:
        return "the input keeps up: only a faster model or device would make this job faster."
    parts = []
    if best is not None and (best.change or 0.0) < GAIN_CLAIMED_FROM:
        parts.append(f"no setting the what-if tried gains {GAIN_CLAIMED_FROM * 100:.0f} % or more (best: "
                     f"{best.setting}, {(best.change or 0.0) * 100:+.0f} %)")
    elif dropped:
        parts.append(f"“{dropped[0].action.rstrip('.')}” was dropped: {dropped[0].because or 'no gain'}")
    if bound:
        parts.append(f"bound by {bound}")
    return ("; ".join(parts) + ".") if parts else "nothing in this run points to a change worth making."


# --------------------------------------------------------------------------------------------------------------------
# The other pages' answers: attach, compare, ranks, sweep (each page's h1, and the first line of its terminal view).
# --------------------------------------------------------------------------------------------------------------------
def attach_headline(rec: RunRecord) -> str:
    """An attach record: sampled shares, said as such, with the sampled wait's interval."""
    r = read(rec)
    st = r.stall
    b = r.verdict.bottleneck or ""
    frac = st.fraction
    lo, hi = st.fraction_low, st.fraction_high
    iv = f" (95 %: {_pct(lo)}–{_pct(hi)})" if lo is not None and hi is not None else ""
    if b in vocab.CAUSE_NAMES:
        return f"Input-bound (sampled): the main thread waited for batches {_pct(frac)}{iv}, mostly {cause_words(b)}."
    if b == "compute":
        return f"Compute-bound (sampled): the main thread waited for batches only {_pct(frac)}{iv}."
    return f"No verdict from the samples: the main thread waited for batches {_pct(frac)}{iv}."


def compare_headline(comparison: dict[str, Any]) -> str:
    """Which run is faster and why: the comparison's own first sentence (analysis/compare.py story: ratio, rates,
    and where the time moved), without the configuration list that follows it; for 3+ runs, the fastest."""
    c = comparison_view(comparison)
    labels = c.labels
    if len(labels) == 2 and labels[1] in c.sentences:
        s = str(c.sentences[labels[1]])
        for cut in (". Differences:", ". Same configuration.", ". Note:"):
            if cut in s:
                s = s[: s.index(cut)]
        return s.rstrip(".") + "."
    thr = c.metric("throughput")
    if not thr or not labels:
        return "No comparison: the runs have no throughput to compare."
    vals = [float(v) if v else 0.0 for v in thr.values]
    best = max(range(len(vals)), key=lambda i: vals[i])
    base = vals[0] or 1.0
    first = ("workers", "loader_num_workers", "batch_size", "loader_batch_size")  # the usual knobs lead
    found = [d for d in c.diffs(labels[best]) if d.text]
    found.sort(key=lambda d: first.index(d.key) if d.key in first else len(first))
    diffs = [str(d.text) for d in found]
    why = f" ({diffs[0]}{' and more' if len(diffs) > 1 else ''})" if diffs else ""  # what was changed to get there
    return (f"{labels[best]} is the fastest of {len(labels)} runs: {vals[best]:,.0f} samples/s, "
            f"{vals[best] / base:.2f}x {labels[0]}{why}.")


def ranks_headline(merged: dict[str, Any]) -> str:
    """Which rank straggles and why (the merge's first straggler or slow host), or that none does."""
    v = ranks_view(merged)
    n = len(v.present)
    if v.slow_hosts:
        h = v.slow_hosts[0]
        return (f"Host {h.hostname} is slow as a whole: its {len(h.ranks)} ranks held the others "
                f"up ({', '.join(h.causes)}).")
    if v.stragglers:
        s = v.stragglers[0]
        waited = f"the others waited {_pct(s.waiting_share)} of each step for it"
        if s.kind == "input":
            return f"Rank {s.rank} straggles, input-bound on {cause_words(str(s.cause))}: {waited}."
        return (f"Rank {s.rank} straggles, slowest to compute ({s.compute_ms or 0.0:.0f} vs "
                f"{s.others_compute_ms or 0.0:.0f} ms): {waited}.")
    if not n:
        return "No rank left a record: nothing to merge."
    skew = v.skew_ms.mean or 0.0
    return f"No straggler: the {n} ranks keep pace (step-time skew {skew:.1f} ms on average)."


def _sweep_base(sw: SweepView) -> SweepPoint | None:
    """The point the others were predicted from (the first, where the document does not say)."""
    return next((p for p in sw.points if p.index == sw.baseline), sw.points[0] if sw.points else None)


def sweep_headline(doc: dict[str, Any]) -> str:
    """The best measured setting, against the first point, and how well the first point predicted the others."""
    sw = sweep_view(doc)
    best, base = sw.best or SweepBest(), _sweep_base(sw)
    if not best.label or not base or not base.measured_samples_per_s:
        return "No point of the sweep finished: nothing to compare."
    sps = best.samples_per_s or 0.0
    ratio = sps / base.measured_samples_per_s
    err = sw.median_abs_error
    tail = f"; predictions from the first point were off by {err * 100:.0f} % (median)" if err is not None else ""
    if best.label == base.label:
        return f"Best setting: {best.label} (the first point), {sps:,.0f} samples/s{tail}."
    return f"Best setting: {best.label}, {sps:,.0f} samples/s, {ratio:.2f}x {base.label}{tail}."


def ranks_figures(merged: dict[str, Any]) -> list[Figure]:
    """The ranks page's cards: ranks with a record, the straggler (or none), the share of each step the others wait
    for it, the step-time skew, and the ranks' samples/s together. Values are figures or words, never "none"."""
    v = ranks_view(merged)
    present, missing = v.present, v.missing
    out = [Figure(f"{len(present)} of {v.world_size or len(present)}",
                  "ranks with a record" + (f", {len(missing)} missing" if missing else ""))]
    if v.slow_hosts:
        out.append(Figure(f"host {v.slow_hosts[0].hostname}", "slow as a whole"))
    if v.stragglers:
        s = v.stragglers[0]
        why = f"input-bound on {cause_words(str(s.cause))}" if s.kind == "input" else "slowest to compute"
        out.append(Figure(f"rank {s.rank}", f"straggler: {why}"))
        out.append(Figure(_pct(s.waiting_share), "of each step the others wait for it"))
    elif not v.slow_hosts:
        out.append(Figure("no straggler", "the ranks keep pace"))
    if v.skew_ms.mean is not None:
        top = v.skew_ms.max or 0.0
        out.append(Figure(f"{v.skew_ms.mean:.1f} ms", f"step-time skew, mean (max {top:.1f} ms)"))
    rates = [r.samples_per_s for r in v.ranks if r.samples_per_s is not None]
    if rates and len(rates) == len(v.ranks) and len(out) < 5:
        out.append(Figure(f"{sum(rates):,.1f} samples/s", f"all {len(rates)} ranks together"))
    return out[:5]


def attach_figures(rec: RunRecord) -> list[Figure]:
    """An attach page's cards: the sampled wait with its interval, its main cause, the workers found, and how long
    and how densely the job was sampled."""
    r = read(rec)
    st, a = r.stall, view(AttachView, rec.attach)
    lo, hi = st.fraction_low, st.fraction_high
    iv = f" (95 %: {_pct(lo)}–{_pct(hi)})" if lo is not None and hi is not None else ""
    b = r.verdict.bottleneck or ""
    shares = {k: float(x) for k, x in st.share_by_cause.items() if isinstance(x, (int, float))}
    if b in vocab.CAUSE_NAMES:
        cause = Figure(cause_words(b), "what the wait was mostly")
    elif b == "compute":
        cause = Figure("the model", "sets the pace: the input keeps up")
    else:
        top = max(shares, key=lambda k: shares[k]) if any(shares.values()) else None
        cause = Figure(cause_words(top) if top else "—", "largest share of the wait")
    workers = sum(1 for p in a.processes if p.role == "worker")
    sampler = a.sampler
    rate = f"{sampler.rate_hz} Hz" if sampler.rate_hz else "its rate"
    return [Figure(_pct(st.fraction), "main thread waiting for batches" + iv), cause,
            Figure(f"{workers} worker{'s' if workers != 1 else ''}", "DataLoader workers found"),
            Figure(f"{a.seconds or 0.0:.1f} s", f"sampled at {rate} ({sampler.samples or 0:,} stack samples)")]


def sweep_figures(doc: dict[str, Any]) -> list[Figure]:
    """A sweep page's cards: the best setting and its samples/s, the first point's, the prediction error, and the
    points measured."""
    sw = sweep_view(doc)
    best, base = sw.best or SweepBest(), _sweep_base(sw)
    done = [p for p in sw.points if p.measured_samples_per_s]
    out = [Figure(best.label or "—", "best setting measured")]
    if best.samples_per_s:
        out.append(Figure(f"{best.samples_per_s:,.1f} samples/s", "at the best setting"))
    if base and base.measured_samples_per_s:
        out.append(Figure(f"{base.measured_samples_per_s:,.1f} samples/s", f"first point ({base.label}): the baseline"))
    if sw.median_abs_error is not None:
        out.append(Figure(f"{sw.median_abs_error * 100:.0f} %", "median prediction error"))
    out.append(Figure(f"{len(done)} of {len(sw.points)}", "points measured"))
    return out[:5]


