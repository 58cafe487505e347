"""Compare runs: records in, a comparison dict out (no I/O, no drawing). The first run is the baseline.

For each metric we report every run's value, the ratio to the baseline, and whether the difference is beyond
run-to-run noise. "Noise" here is the step-to-step (sample-to-sample) spread *inside* each run: we bootstrap the
per-observation distributions the metric is made of (per-step wall time and idle, per-step stall by cause, per-sample
read/decode/augment, per-batch collate/transfer, per-step wait/h2d/compute) and take a percentile 95 % interval of
B's statistic over A's (ratio) or minus A's (difference). A difference is "significant" when that interval excludes
1.0 (ratio) or 0 (difference). docs/compare.md has the long form and the limits of the test.

The records must have been through ``profiler.analysis.analyze`` (stall.per_step is read from there).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .. import vocab
from ..errors import UserError
from ..record.read import Reading, read
from ..thresholds import (  # judgment thresholds, with their reasons
    CONFIDENCE,
    CPU_STAGE_NAMED_FROM,
    INTERVAL_MIN_DEFINED_SHARE,
    MOSTLY_FROM,
    RESAMPLES,
    RESIDENCY_DIFFERS_FROM,
    WAIT_EXPLAINS_FROM,
    WORTH_MORE_STEPS_OUTSIDE,
)
from .stats import stage_durations, tables

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord

SEED = 0
# Beyond this many observations (a long run's per-sample spans) the interval is computed on a seeded random subsample:
# it bounds the work to ~20 M resampled values per metric and run (well under a second); fewer observations only make
# the interval wider (conservative), never narrower.
MAX_OBS = 10_000
# Matrix elements per bootstrap chunk (~64 MB of float64): bounds memory whatever n is.
CHUNK_ELEMENTS = 8_000_000
# Runs that differ in these measure different work; comparing their speed says nothing about the input pipeline.
MUST_MATCH = ("model", "batch_size", "mode")
# Config keys never worth a mention (where output went, the sampler's rate, forward-compatible leftovers).
IGNORED_CONFIG = ("out", "extra", "sample_interval_s")
STAGE_STATS = ("mean", "p95", "p99")


def _comparable(name: str) -> bool:
    """A stage worth a per-stage metric: a cost (it stands for an idle cause) or a main-loop step stage. Not the
    queue's prefetch slack (``ready_ahead``, whose growth is good news) nor the few per-epoch observations."""
    s = vocab.stage(name)
    return s.per != "epoch" and (s.cause is not None or s.side == "main")


# Registry stages compared in every comparison (a metric each, empty where a run did not measure it), in pipeline
# order; user-named stages (``profiler.stage("tokenize")``) follow when a run measured them.
STAGES = tuple(s.name for s in vocab.STAGES if _comparable(s.name))


def compared_stages(stage_names: list[list[str]]) -> list[str]:
    """The stages to compare: the registry's, then user-named stages in the order first met."""
    out = list(STAGES)
    for names in stage_names:
        out += [n for n in names if n not in vocab.STAGE and n not in out and _comparable(n)]
    return out


def cause_of(key: str) -> str:
    """The idle cause a ``stall.per_step`` key counts towards (a cause's own name, or a stage's cause)."""
    return key if key in vocab.CAUSE else (vocab.stage(key).cause or "other")


@dataclass
class Observations:
    """The raw per-observation arrays (seconds) of one run that every compared metric is a statistic of."""
    wall: np.ndarray  # per measured step: compute_end[i] - compute_end[i-1] (the first from the window start)
    samples: np.ndarray  # per measured step
    idle: np.ndarray  # per measured step: compute device idle
    by_cause: dict[str, np.ndarray]  # per measured step, stall seconds by cause
    by_stage: dict[str, np.ndarray]  # per measured step, stall seconds by detail stage (read, decode, ...)
    stages: dict[str, np.ndarray]  # per sample / batch / step durations, measured window only


def observations(rec: RunRecord) -> Observations:
    t = tables(rec.timeline)
    st = t.steps
    n = int(st["wait_start"].size) if "wait_start" in st else 0
    ce = st["compute_end"].astype(float) if n else np.zeros(0)
    start = float(rec.window["start_s"])
    wall = np.diff(np.concatenate([[start], ce])) if n else np.zeros(0)
    per_step = rec.idle_per_step
    by_stage = {k: np.asarray(v, dtype=float) for k, v in per_step.items() if len(v) == n}
    by_cause = {c: np.zeros(n) for c in vocab.CAUSE_NAMES}
    for k, v in by_stage.items():
        by_cause[cause_of(k)] += v
    stages = {k: np.asarray(v, dtype=float) for k, v in stage_durations(t).items() if _comparable(k)}
    for k in STAGES:
        stages.setdefault(k, np.zeros(0))
    return Observations(wall=wall, samples=st["samples"].astype(float) if n else np.zeros(0),
                        idle=st["idle"].astype(float) if n else np.zeros(0), by_cause=by_cause, by_stage=by_stage,
                        stages=stages)


# --- bootstrap -----------------------------------------------------------------------------------------------------
Stat = Callable[[list[np.ndarray]], np.ndarray]  # columns resampled to (R, n) each -> (R,) statistic


def _ratio_of_sums(cols: list[np.ndarray]) -> np.ndarray:
    num, den = cols[0].sum(axis=-1), cols[1].sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


STATS: dict[str, Stat] = {
    "mean": lambda c: c[0].mean(axis=-1),
    "p95": lambda c: np.percentile(c[0], 95, axis=-1),
    "p99": lambda c: np.percentile(c[0], 99, axis=-1),
    "ratio_of_sums": _ratio_of_sums,  # throughput (samples / wall), stall fraction (idle / wall)
}


QUANTILES = {"p95": 95, "p99": 99}


def bootstrap(cols: list[np.ndarray], stats: list[str], rng: np.random.Generator,
              resamples: int = RESAMPLES) -> dict[str, np.ndarray] | None:
    """Each statistic over ``resamples`` resamples of the paired columns (same step indices for all); None if n < 2."""
    n = int(cols[0].size)
    if n < 2:
        return None
    if n > MAX_OBS:
        keep = rng.choice(n, MAX_OBS, replace=False)
        cols, n = [c[keep] for c in cols], MAX_OBS
    out: dict[str, list[np.ndarray]] = {s: [] for s in stats}
    per_chunk = max(1, CHUNK_ELEMENTS // n)
    done = 0
    while done < resamples:
        r = min(per_chunk, resamples - done)
        idx = rng.integers(0, n, size=(r, n))
        res = [c[idx] for c in cols]
        qs = [s for s in stats if s in QUANTILES]
        if qs:  # one partial sort serves every quantile asked for
            for s, q in zip(qs, np.percentile(res[0], [QUANTILES[s] for s in qs], axis=-1)):
                out[s].append(q)
        for s in stats:
            if s not in QUANTILES:
                out[s].append(STATS[s](res))
        done += r
    return {s: np.concatenate(v) for s, v in out.items()}


def _interval(a: np.ndarray) -> list[float] | None:
    ok = a[np.isfinite(a)]
    if ok.size < INTERVAL_MIN_DEFINED_SHARE * a.size or ok.size == 0:  # too many undefined resamples
        return None
    lo, hi = np.percentile(ok, [50 * (1 - CONFIDENCE), 100 - 50 * (1 - CONFIDENCE)])
    return [float(lo), float(hi)]


def versus(base: float | None, val: float | None, bb: np.ndarray | None, bv: np.ndarray | None,
           test: str, scale: float = 1.0) -> dict[str, Any]:
    """Ratio and difference of ``val`` to ``base`` with the bootstrap interval of the ``test`` ('ratio'|'difference').

    A ratio test falls back to a difference test when the baseline is 0 in the data or in some resamples (the ratio
    is then undefined). ``scale`` multiplies differences (e.g. per-step seconds → seconds over the baseline's steps).
    """
    out: dict[str, Any] = {"ratio": None, "difference": None, "test": None, "ci": None, "significant": None}
    if base is None or val is None:
        return out
    out["difference"] = (val - base) * scale
    if base:
        out["ratio"] = val / base
    if bb is None or bv is None:
        return out
    if test == "ratio" and base > 0 and np.all(bb > 0):
        ci = _interval(bv / bb)
        out.update(test="ratio", ci=ci, significant=None if ci is None else bool(ci[0] > 1.0 or ci[1] < 1.0))
    else:
        ci = _interval((bv - bb) * scale)
        out.update(test="difference", ci=ci,
                   significant=None if ci is None else bool(ci[0] > 0.0 or ci[1] < 0.0))
    return out


# --- metrics -------------------------------------------------------------------------------------------------------
def _metric(key: str, label: str, unit: str, group: str, values: list, higher_is_better: bool | None = None,
            **kw: Any) -> dict[str, Any]:
    return {"key": key, "label": label, "unit": unit, "group": group, "values": values,
            "higher_is_better": higher_is_better, "ci_self": [None] * len(values), "vs_baseline": [None] * len(values),
            **kw}


def _fill(m: dict[str, Any], boots: list[dict[str, np.ndarray] | None], stat: str, test: str,
          scales: list[float] | None = None, point_scale: list[float] | None = None) -> None:
    """Set ci_self and vs_baseline of metric ``m`` from per-run bootstrap draws of ``stat``."""
    vals = m["values"]
    ps = point_scale or [1.0] * len(vals)
    b0 = boots[0][stat] if boots[0] else None
    for i, b in enumerate(boots):
        draws = b[stat] if b else None
        if draws is not None:
            m["ci_self"][i] = _interval(draws * ps[i])
        if i:
            # Tests run on per-step/per-observation statistics; displayed values may be totals (point_scale).
            base = None if vals[0] is None else vals[0] / ps[0]
            val = None if vals[i] is None else vals[i] / ps[i]
            m["vs_baseline"][i] = versus(base, val, b0, draws, test, scale=(scales or [1.0] * len(vals))[i])


def build_metrics(recs: list[Any], obs: list[Observations], seed: int, resamples: int) -> list[dict[str, Any]]:
    metrics: list[dict[str, Any]] = []
    nsteps = [max(1, o.wall.size) for o in obs]

    def rng(*k: int) -> np.random.Generator:
        return np.random.default_rng([seed, *k])

    # Throughput and stall fraction: ratios of per-step sums, resampled over steps (paired columns).
    rd = [read(r) for r in recs]  # analyzed records (not attach ones): their derived sections are complete
    step_boot = [bootstrap([o.samples, o.wall], ["ratio_of_sums"], rng(0, i), resamples) for i, o in enumerate(obs)]
    m = _metric("throughput", "throughput", "samples/s", "throughput",
                [r.throughput.samples_per_s for r in rd], higher_is_better=True)
    _fill(m, step_boot, "ratio_of_sums", "ratio")
    metrics.append(m)
    idle_boot = [bootstrap([o.idle, o.wall], ["ratio_of_sums"], rng(1, i), resamples) for i, o in enumerate(obs)]
    m = _metric("stall_fraction", "stall fraction", "fraction", "stall",
                [r.stall.fraction for r in rd], higher_is_better=False)
    _fill(m, idle_boot, "ratio_of_sums", "difference")
    metrics.append(m)
    # Stall seconds: totals shown; tested as per-step means, differences scaled to the baseline's step count so that
    # runs of different length compare fairly ("seconds over a run as long as A").
    scales = [float(nsteps[0])] * len(obs)
    pts = [float(n) for n in nsteps]
    for j, part in enumerate(("seconds",) + vocab.CAUSE_NAMES):
        arrs = [o.idle if part == "seconds" else o.by_cause[part] for o in obs]
        totals = [r.stall.seconds if part == "seconds" else r.stall.by_cause.get(part) for r in rd]
        boots = [bootstrap([a], ["mean"], rng(2, j, i), resamples) for i, a in enumerate(arrs)]
        m = _metric(f"stall_{part}", f"stall {part}", "s", "stall", totals, higher_is_better=False)
        _fill(m, boots, "mean", "difference", scales=scales, point_scale=pts)
        metrics.append(m)
    for j, s in enumerate(compared_stages([list(o.stages) for o in obs])):
        arrs = [o.stages.get(s, np.zeros(0)) for o in obs]
        boots = [bootstrap([a], list(STAGE_STATS), rng(3, j, i), resamples) for i, a in enumerate(arrs)]
        for stat in STAGE_STATS:
            vals = [float(STATS[stat]([a])) * 1e3 if a.size else None for a in arrs]
            m = _metric(f"{s}_{stat}", f"{s} {stat}", "ms", "stages", vals, higher_is_better=False,
                        stage=s, stat=stat, count=[int(a.size) for a in arrs])
            _fill(m, [{k: v * 1e3 for k, v in b.items()} if b else None for b in boots], stat, "ratio")
            metrics.append(m)
    # Storage totals: one number per run, no per-observation distribution, so no noise test.
    m = _metric("bytes_from_device", "bytes from device", "bytes", "storage",
                [r.storage.bytes_from_device for r in rd], higher_is_better=None)
    _fill(m, [None] * len(recs), "mean", "ratio")
    metrics.append(m)
    m = _metric("page_cache_hit", "page-cache hit", "fraction", "storage",
                [r.storage.page_cache_hit_fraction for r in rd], higher_is_better=True, show="difference")
    _fill(m, [None] * len(recs), "mean", "difference")
    metrics.append(m)
    verdicts = [r.verdict.bottleneck for r in rd]
    m = _metric("verdict", "verdict", "", "verdict", verdicts)
    m["vs_baseline"] = [None] + [{"changed": v != verdicts[0]} for v in verdicts[1:]]
    metrics.append(m)
    return metrics


# --- what changed: config differences and the one-sentence story ----------------------------------------------
def _show(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v)


def _loader(r: Reading) -> dict[str, Any]:
    """The profiled loader's workers and batch size (job.loader: a script's live there); None where not said."""
    return {"num_workers": r.job.loader.num_workers, "batch_size": r.job.loader.batch_size}


def config_diffs(a: RunRecord, b: RunRecord) -> list[dict[str, Any]]:
    """Settings that differ between two runs, each with a short text such as ``workers 2 → 8``."""
    out: list[dict[str, Any]] = []

    def add(key: str, va: Any, vb: Any, name: str | None = None) -> None:
        out.append({"key": key, "a": va, "b": vb, "text": f"{name or key} {_show(va)} → {_show(vb)}"})

    # Every config key either run holds (the section's keys as written: a key one run lacks differs from a value)
    ca, cb = dict(a.config or {}), dict(b.config or {})
    for k in [k for k in ca if k not in IGNORED_CONFIG] + [k for k in cb if k not in ca and k not in IGNORED_CONFIG]:
        va, vb = ca.get(k), cb.get(k)
        if va != vb:
            add(k, va, vb, k.replace("_", " "))
    ra_, rb_ = read(a), read(b)
    # A script's run keeps its loader's settings in job.loader (its config has no workers or batch size): runs of
    # one script with --override-workers 0 and 2 are not "the same configuration".
    la, lb = _loader(ra_), _loader(rb_)
    for key, cfg_a, cfg_b, name in (("num_workers", ra_.config.workers, rb_.config.workers, "workers"),
                                    ("batch_size", ra_.config.batch_size, rb_.config.batch_size, "batch size")):
        if cfg_a is None and cfg_b is None and la[key] != lb[key]:
            add(f"loader_{key}", la[key], lb[key], name)
    sa, sb = ra_.storage, rb_.storage
    ta, tb = sa.throttle_spec, sb.throttle_spec
    if sa.throttle and sb.throttle and ta is not None and tb is not None and ta.mechanism != tb.mechanism:
        add("throttle_mechanism", ta.mechanism, tb.mechanism, "throttle mechanism")
    ra = sa.residency_start.fraction if sa.residency_start is not None else None
    rb = sb.residency_start.fraction if sb.residency_start is not None else None
    # Cold vs warm without --cache: the page cache at start is what differed.
    if (ra is not None and rb is not None and abs(ra - rb) >= RESIDENCY_DIFFERS_FROM
            and ra_.config.cache == rb_.config.cache):
        out.append({"key": "residency_start", "a": ra, "b": rb,
                    "text": f"data in page cache at start {ra * 100:.0f} % → {rb * 100:.0f} %"})
    da, db = ra_.device, rb_.device
    if (da.type, da.name) != (db.type, db.name):
        add("compute_device", f"{da.type} ({da.name})", f"{db.type} ({db.name})", "compute device")
    cpa, cpb = ra_.environment.cpu, rb_.environment.cpu
    if cpa.model != cpb.model:
        add("cpu_model", cpa.model, cpb.model, "CPU")
    if cpa.usable_cores != cpb.usable_cores:
        add("usable_cores", cpa.usable_cores, cpb.usable_cores, "usable cores")
    pa, pb = ra_.environment.packages, rb_.environment.packages  # package name -> version
    if pa.get("torch") != pb.get("torch"):
        add("torch", pa.get("torch"), pb.get("torch"))
    return out


def mismatches(recs: list[Any], labels: list[str]) -> list[str]:
    """Texts like ``model (A: tiny, B: resnet18)`` for MUST_MATCH settings that differ from the baseline's."""
    out = []
    for key in MUST_MATCH:
        vals = [getattr(read(r).config, key) for r in recs]  # MUST_MATCH names ConfigView fields
        if any(v != vals[0] for v in vals[1:]):
            out.append(f"{key.replace('_', ' ')} (" + ", ".join(f"{lab}: {_show(v)}" for lab, v in zip(labels, vals))
                       + ")")
    return out


def fmt_rate(v: float) -> str:
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def fmt_ms(v: float) -> str:
    return f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def fmt_s(v: float) -> str:
    v = abs(v)
    return f"{v:.0f} s" if v >= 10 else f"{v:.1f} s" if v >= 1 else f"{v:.2f} s" if v >= 0.01 else f"{v * 1e3:.1f} ms"


def _cause_words(cause: str, stage_delta: dict[str, float]) -> str:
    """'storage reads (io)'; for the cpu cause, the stages that moved: 'CPU work (decode+augment)'."""
    words = vocab.CAUSE[cause].words.split(" (")[0]  # the phrase without its own parenthesis
    if cause != "cpu":
        return f"{words} ({cause})"
    parts = [k for k in stage_delta if k not in vocab.CAUSE and cause_of(k) == "cpu"]
    tot = sum(stage_delta[k] for k in parts)
    named = [k for k in parts if tot and stage_delta[k] / tot >= CPU_STAGE_NAMED_FROM] or parts
    return f"{words} ({'+'.join(named)})"


def _blame(delta: dict[str, float], stage_delta: dict[str, float], sign: float) -> tuple[float | None, str]:
    """Which causes moved the wait in direction ``sign`` (+1 added, -1 fell): (share, words) when one cause holds
    MOSTLY_FROM of the change, else (None, 'io 45 % and cpu (decode) 40 %')."""
    moved = {c: sign * v for c, v in delta.items() if sign * v > 0}
    tot = sum(moved.values())
    if tot <= 0:
        return None, "spread over every cause"
    ranked = sorted(moved, key=lambda c: moved[c], reverse=True)
    share = moved[ranked[0]] / tot
    sd = {k: sign * v for k, v in stage_delta.items()}
    if share >= MOSTLY_FROM or len(ranked) == 1:
        return share, _cause_words(ranked[0], sd)
    second = ranked[1]
    return None, (f"{_cause_words(ranked[0], sd)} {share * 100:.0f} % and {_cause_words(second, sd)} "
                  f"{moved[second] / tot * 100:.0f} %")


def story(lab_a: str, lab_b: str, a: Any, b: Any, oa: Observations, ob: Observations,
          thr: dict[str, Any] | None, diffs: list[dict[str, Any]]) -> str:
    """One sentence of what changed from ``a`` to ``b`` and why, plus the configuration differences found."""
    tpa = read(a).throughput.samples_per_s or 0.0
    tpb = read(b).throughput.samples_per_s or 0.0
    cfg = ("Differences: " + "; ".join(d["text"] for d in diffs) + ".") if diffs else "Same configuration."
    notes = "".join(f" Note: {lab} is a partial run ({r.partial_reason})." for lab, r in ((lab_a, a), (lab_b, b))
                    if r.partial)
    if not tpa or not tpb or not oa.wall.size or not ob.wall.size:
        return f"{lab_b} cannot be compared with {lab_a}: one of them has no measured steps. {cfg}{notes}"
    na = oa.wall.size
    rate = f"{fmt_rate(tpa)} → {fmt_rate(tpb)} samples/s"
    r = tpb / tpa
    sig = (thr or {}).get("significant")
    ci = (thr or {}).get("ci")
    if sig is False and ci:
        head = (f"{lab_b} is not reliably faster or slower than {lab_a}: {rate} ({r:.2f}x) is within run-to-run "
                f"noise (95 % interval of the ratio {ci[0]:.2f}–{ci[1]:.2f}x")
        lo, hi = WORTH_MORE_STEPS_OUTSIDE
        head += f"; more than {min(na, ob.wall.size)} steps would narrow it)" if r < lo or r > hi else ")"
        return f"{head}. {cfg}{notes}"
    slower = r < 1
    x = 1 / r if slower else r
    head = f"{lab_b} is {x:.2f}x" if x < 1.1 else f"{lab_b} is {x:.1f}x"
    head += f" {'slower' if slower else 'faster'} ({rate})"
    if sig is None:
        head += " (too few steps to test against noise)"
    d_step = float(ob.wall.mean() - oa.wall.mean())
    d_wait = float(ob.idle.mean() - oa.idle.mean())
    delta = {c: float(ob.by_cause[c].mean() - oa.by_cause[c].mean()) for c in vocab.CAUSE_NAMES}
    keys = list(oa.by_stage) + [k for k in ob.by_stage if k not in oa.by_stage]
    stage_delta = {k: float(ob.by_stage.get(k, np.zeros(1)).mean() - oa.by_stage.get(k, np.zeros(1)).mean())
                   for k in keys}
    sign = 1.0 if slower else -1.0
    comp_a = float((oa.stages["h2d"].mean() if oa.stages["h2d"].size else 0) + oa.stages["compute"].mean()) * 1e3
    comp_b = float((ob.stages["h2d"].mean() if ob.stages["h2d"].size else 0) + ob.stages["compute"].mean()) * 1e3
    if sign * d_wait > 0 and sign * d_wait >= WAIT_EXPLAINS_FROM * sign * d_step:
        share, what = _blame(delta, stage_delta, sign)
        if slower:
            why = (f"{share * 100:.0f} % of the added wait is {what}" if share is not None
                   else f"the added wait is {what}")
        else:
            why = f"the wait fell by {fmt_s(d_wait * na)}, " + (f"mostly {what}" if share is not None else what)
    else:  # the wait moved less than the step time (or the other way): the model's own time changed
        why = (f"compute per step {'rose' if comp_b > comp_a else 'fell'} {fmt_ms(comp_a)} → {fmt_ms(comp_b)} ms "
               f"while the wait for input went {fmt_ms(oa.idle.mean() * 1e3)} → {fmt_ms(ob.idle.mean() * 1e3)} ms "
               "per step")
    return f"{head}; {why}. {cfg}{notes}"


# --- entry point ---------------------------------------------------------------------------------------------------
def _storage_text(r: RunRecord) -> str:
    """'cold, throttle 2MB/s,50iops (userspace)': the storage conditions a reader needs next to each run."""
    rd = read(r)
    st, cfg = rd.storage, rd.config
    thr = cfg.throttle or cfg.storage
    mech = st.throttle_spec.mechanism if st.throttle_spec is not None else None
    text = f"cache {st.cache_mode or cfg.cache or '?'}"
    return text + (f", throttle {thr}" + (f" ({mech})" if mech else "") if thr else "")


def run_labels(n: int) -> list[str]:
    return [chr(ord("A") + i) if i < 26 else f"R{i + 1}" for i in range(n)]


def compare(records: list[Any], names: list[str] | None = None, force: bool = False, seed: int = SEED,
            resamples: int = RESAMPLES) -> dict[str, Any]:
    """Compare analyzed records; the first is the baseline. UserError for < 2 runs or incomparable runs (no force)."""
    if len(records) < 2:
        raise UserError(f"compare needs at least two runs (got {len(records)})")
    labels = run_labels(len(records))
    names = names or labels
    bad = mismatches(records, labels)
    if bad and not force:
        raise UserError(f"the runs differ in {' and '.join(bad)}: they measure different work, not the input "
                        "pipeline; pass --force to compare them anyway")
    obs = [observations(r) for r in records]
    metrics = build_metrics(records, obs, seed, resamples)
    stages = compared_stages([list(o.stages) for o in obs])
    thr = next(m for m in metrics if m["key"] == "throughput")
    diffs = {labels[i]: config_diffs(records[0], r) for i, r in enumerate(records) if i}
    sentences = {labels[i]: story(labels[0], labels[i], records[0], r, obs[0], obs[i], thr["vs_baseline"][i],
                                  diffs[labels[i]]) for i, r in enumerate(records) if i}
    runs = [{"label": lab, "name": nm, "created_utc": r.created_utc, "partial": r.partial,
             "partial_reason": r.partial_reason, "steps": int(o.wall.size),
             "samples": int(o.samples.sum()), "window_s": rd.window.seconds,
             "compute_device": rd.device.type,
             "config": {k: v for k, v in (r.config or {}).items() if k not in IGNORED_CONFIG},
             "loader": _loader(rd), "target": rd.job.target,
             "throttle": rd.storage.throttle, "cache_mode": rd.storage.cache_mode,
             "storage_text": _storage_text(r),
             "verdict": rd.verdict.bottleneck, "summary": rd.verdict.summary}
            for lab, nm, r, o, rd in zip(labels, names, records, obs, [read(x) for x in records])]
    return {
        "baseline": labels[0], "labels": labels, "runs": runs, "metrics": metrics, "config_diffs": diffs,
        "sentences": sentences, "forced": bad, "stages": stages,
        "noise_test": {"method": "percentile bootstrap of per-step / per-sample observations, each run resampled "
                                 "independently", "resamples": resamples, "confidence": CONFIDENCE, "seed": seed,
                       "max_observations": MAX_OBS},
    }
