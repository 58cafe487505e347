"""What would help: stage ceilings and what-if predictions from one run (pure: Rates in, JSON-shaped dicts out).

The model (docs in README "What would help?"; every prediction carries the assumption it rests on):

* Cores: the job can use A of the P usable cores. Other load on the host keeps what it took in this run: A = P
  minus the other processes' use (all busy cores in the per-core samples less the job's own processes), which on a
  saturated host is what the job got (its threads then show run-queue time, measured per call in the workers). Why
  fixed: Linux shares CPU fairly between sessions (autogroup) and cgroups first, then between threads inside one, so
  more workers do not win the job a bigger share of a busy host.
  Inside the job, threads share A: each runnable thread gets ``phi = min(1, A / runnable)``.
* A worker makes a sample in ``cpu/phi + blocked`` seconds (on a core, then waiting for IO): N workers supply
  ``N / (cpu/phi + blocked)`` samples/s. With 0 workers the main process does the same work serially with the step.
* On a CPU-only run the model's own threads (torch num_threads) share A with the workers: their CPU per step (threads
  x compute time; idle intra-op threads spin) is part of the job's demand, and the step's compute time grows as 1/phi
  when workers take cores from them. That is why 2 workers on 2 cores can be slower than 1.
* With 0 workers the dataset runs in the main process, whose torch ops use all its intra-op threads (a worker uses
  one): its per-sample CPU there is timed after the window (harness/ceiling.py) when the run had workers.
* Storage is a single queue: a device read costs ``bytes / bandwidth + 1 / IOPS`` (the userspace throttle's model;
  the kernel throttle applies each cap on its own, the larger cost binds), which caps samples/s however many workers.
* Throughput = the largest X consistent with all of the above (the lowest bound binds); it is solved by bisection.
* Calibration: the model evaluated at the measured setting is scaled to the measured samples/s exactly (the factor
  is reported; far from 1 means the model misses something about this job).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict

from .. import thresholds as th
from ..record.read import StorageThrottleView, view
from ..storage.spec import STORAGE_PRESETS, ThrottleSpec, format_rate

# Re-exported: the labels and phrases were written here first (analysis/binds.py holds them now).
from .binds import BINDS_LABEL_MAX as BINDS_LABEL_MAX
from .binds import BINDS_LABELS as BINDS_LABELS
from .binds import MODEL_SHARE_NAMED_FROM as MODEL_SHARE_NAMED_FROM
from .binds import binds_label as binds_label
from .binds import binds_words as binds_words
from .binds import model_shares_cores
from .rates import Rates

if TYPE_CHECKING:  # annotations only
    from ..record.schema import Ceilings, WhatIf

# Worker counts are predicted up to this many times the usable cores: past 2 per core, a CPU-bound loader only
# time-slices, and an IO-bound one has usually reached the device's queue limit.
MAX_WORKERS_PER_CORE = 2
# Pinned host memory copies at roughly twice the bandwidth of pageable memory (pageable copies are staged through a
# pinned bounce buffer by the driver; typical PCIe 3/4 hosts: ~12 vs ~25 GB/s). An assumption, stated as one.
PINNED_SPEEDUP = 2.0
# Model speed-ups shown: 2x (mixed precision, a faster card) and 10x (a CPU run moved to a GPU).
MODEL_SPEEDUPS = (2.0, 10.0)
# The job is "out of cores" when its own CPU demand reaches this share of the usable cores: the rest is the sampler's,
# the kernel's and rounding.
CORES_USED_UP = 0.97
# Softness of the capacity bound in the share formula (phi = (A - demand) / SOFT): small, so the bound is all but
# sharp (it moves no prediction by more than a fraction of a per cent), but it keeps the bisection continuous.
SOFT = 0.02
# When the cores are used up and the model's own step could go at most this much faster, the model sets the pace:
# "then bound by" names it rather than the cores (3 %: within the bisection's softness and a step's jitter).
MODEL_BINDS_WITHIN = 1.03
# The low end of an interval never falls below this share of its prediction before widening: the errors added in
# quadrature are relative errors of a rate, which cannot fall to 0 because of its measurement's spread.
MIN_LOW_SHARE = 0.1


def _bisect(f: Callable[[float], float], hi: float) -> float:
    """Largest X in (0, hi] with f(X) >= X, f decreasing in X."""
    lo = 0.0
    if f(hi) >= hi:
        return hi
    for _ in range(80):
        mid = (lo + hi) / 2
        if f(mid) >= mid:
            lo = mid
        else:
            hi = mid
    return lo


class Model:
    """The throughput model of one run; ``predict`` gives samples/s and the binding stage for a changed setting."""

    def __init__(self, r: Rates):
        self.r = r
        self.P = r.cores
        phi_m = max(min(r.share, 1.0), 1e-3)
        self.phi_m = phi_m
        # Full-speed (phi = 1) times: what the run measured, with its contention taken out.
        self.cpu1 = r.cpu_s  # on-CPU time is already contention-free
        self.compute1 = r.compute_s * (phi_m if r.device_type == "cpu" else 1.0)
        # Main-process CPU per sample beyond the dataset work (receive, loop, and on a CPU run the model's threads).
        x = max(r.samples_per_s, 1e-9)
        dataset_cores = r.cpu_s * x
        self.C_main = max(r.job_cores - dataset_cores, 0.0) / x
        if r.device_type == "cpu":
            # The model's threads spin in their parallel regions: count them as busy for the whole compute.
            threads = min(r.model_threads, int(math.ceil(self.P)))
            self.C_main = max(self.C_main, threads * self.compute1 / max(r.batch, 1.0))
        # Cores the job can have: what the other processes left it (their use = all busy cores less the job's). On a
        # saturated host that is exactly what the job got. Without the per-core samples: what it got if its threads
        # queued for cores, else all of them.
        if r.system_busy_cores is not None:
            others = min(max(r.system_busy_cores - r.job_cores, 0.0), self.P)
            self.A = max(self.P - others, 0.05)
        else:
            self.A = min(max(r.job_cores, 0.05), self.P) if r.share < 1.0 else self.P
        self.others = self.P - self.A
        self.kappa = self.storage_kappa = 1.0
        raw, binds = self._solve(r.workers, self._base())
        k = r.samples_per_s / raw if raw > 0 and r.samples_per_s > 0 else 1.0
        if binds == "storage":  # the device delivered k of its nominal rate: scale what it can serve
            self.storage_kappa = k
        else:
            self.kappa = k

    def _base(self) -> dict[str, Any]:
        r = self.r
        cap = storage_cap(r.read_bytes, r.cold_reads, r.throttle)
        return {"cpu": self.cpu1, "blocked": r.blocked_s, "compute": self.compute1, "h2d": r.h2d_s,
                "storage_cap": cap, "C_main": self.C_main, "batch": max(r.batch, 1.0)}

    def _cpu0(self, p: dict[str, Any], demand: bool = False) -> float:
        """CPU per sample with 0 workers: the dataset then runs in the main process, at its per-sample CPU there
        when the harness timed it (harness/ceiling.py), else the workers'. ``demand``: all the main process's threads
        (what the cores must supply; its intra-op pool spins alongside), else the main thread's (its latency)."""
        r = self.r
        timed = r.main_sample_process_cpu_s if demand and r.main_sample_process_cpu_s else r.main_sample_cpu_s
        cpu0 = timed if r.workers > 0 and timed else self.cpu1
        return cpu0 * (p["cpu"] / self.cpu1 if self.cpu1 > 0 else 1.0)  # scaled by a what-if that changes CPU cost

    def _phi(self, x: float, p: dict[str, Any], cpu: float | None = None) -> float:
        demand = x * ((p["cpu"] if cpu is None else cpu) + p["C_main"])
        return min(1.0, max((self.A - demand) / SOFT, 1e-4))

    def _bounds(self, n: int, x: float, p: dict[str, Any]) -> dict[str, float]:
        cpu0 = self._cpu0(p) if n == 0 else p["cpu"]
        phi = self._phi(x, p, self._cpu0(p, demand=True) if n == 0 else p["cpu"])
        b = p["batch"]
        cpu_scale = 1.0 / phi
        compute = p["compute"] * (cpu_scale if self.r.device_type == "cpu" else 1.0)
        step_main = compute + p["h2d"] + self.r.loop_s
        out: dict[str, float] = {}
        if n == 0:
            per_sample = cpu0 * cpu_scale + p["blocked"] + step_main / b
            out["cpu" if p["cpu"] * cpu_scale >= p["blocked"] else "io"] = 1.0 / per_sample if per_sample > 0 \
                else math.inf
        else:
            per_sample = p["cpu"] * cpu_scale + p["blocked"]
            out["cpu" if p["cpu"] * cpu_scale >= p["blocked"] else "io"] = n / per_sample if per_sample > 0 \
                else math.inf
            out["compute"] = b / step_main if step_main > 0 else math.inf
        if p["storage_cap"] is not None:
            out["storage"] = p["storage_cap"] * self.storage_kappa / self.kappa
        return out

    def _solve(self, n: int, p: dict[str, Any]) -> tuple[float, str]:
        hi = self.A / max((self._cpu0(p, demand=True) if n == 0 else p["cpu"]) + p["C_main"], 1e-9)

        def f(x: float) -> float:
            return min(self._bounds(n, x, p).values())

        x = _bisect(f, hi)
        b = self._bounds(n, x, p)
        # The calibration scales the solved pipeline (storage caps were divided by it above, so they stay nominal).
        if x >= hi * CORES_USED_UP:  # the job's own demand fills the usable cores
            # ... but where the model's own step allows no more either, the model sets the pace: say so. Not on a
            # CPU run: there the model's step is only as fast as its share of the same cores ("cores" names both).
            if self.r.device_type != "cpu" and b.get("compute", math.inf) <= x * MODEL_BINDS_WITHIN:
                return x * self.kappa, "compute"
            return x * self.kappa, "cores"
        return x * self.kappa, min(b, key=lambda k: b[k])

    def with_cores(self, cores: float, n: int | None = None, **change: Any) -> tuple[float, str]:
        """``predict`` had other load left the job ``cores`` instead of what it had (the calibration kept)."""
        kept = self.A
        self.A = min(max(cores, 0.05), self.P)
        try:
            return self.predict(n, **change)
        finally:
            self.A = kept

    def predict(self, n: int | None = None, **change: Any) -> tuple[float, str]:
        p = {**self._base(), **change}
        return self._solve(self.r.workers if n is None else n, p)


def storage_cap(bytes_per_sample: float, reads_per_sample: float, spec: dict[str, Any] | None) -> float | None:
    """Samples/s a throttled device can serve (None: not limited by anything this run knows of)."""
    if not spec or (bytes_per_sample <= 0 and reads_per_sample <= 0):
        return None
    bw, iops = spec.get("bytes_per_s"), spec.get("iops")
    t_bw = bytes_per_sample / bw if bw else 0.0
    t_io = reads_per_sample / iops if iops else 0.0
    # The kernel throttle (cgroup io.max / blkio) applies each limit on its own; the userspace one adds them.
    cost = max(t_bw, t_io) if str(spec.get("mechanism", "")).startswith(("kernel", "cgroup")) else t_bw + t_io
    return 1.0 / cost if cost > 0 else None


def _read_cost(nbytes: float, spec: ThrottleSpec) -> float:
    """Device seconds of one read of ``nbytes`` from a --storage preset: bytes over bandwidth plus one operation
    (the userspace throttle's additive model; a limit the preset does not set costs nothing)."""
    return (nbytes / spec.bytes_per_s if spec.bytes_per_s else 0.0) + (1.0 / spec.iops if spec.iops else 0.0)


def _row(kind: str, setting: str, x: float | None, binds: str, now: float, assumption: str,
         **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "setting": setting, "samples_per_s": None if x is None else round(x, 3), "binds": binds,
            "change": round(x / now - 1, 4) if now > 0 and x is not None else None, "assumption": assumption,
            **extra}


def worker_counts(cores: float, measured: int) -> list[int]:
    """0, 1, 2, ... every count up to 8, then doubling, up to 2x the usable cores (and the measured count)."""
    top = max(int(MAX_WORKERS_PER_CORE * cores), 2)
    out = list(range(0, min(top, 8) + 1))
    n = 16
    while n <= top:
        out.append(n)
        n *= 2
    return sorted(set(out + [top, measured]))


class Steady(TypedDict):
    """What :func:`steadiness` says of the window (every key always written)."""
    steady: bool
    notices: list[str]
    widen: float  # how much each interval widens each way, as a share
    up_to_own_costs: bool  # the run fell short of its own costs: a prediction may reach them
    remeasure: str


def steadiness(r: Rates, m: Model) -> Steady:
    """Was the measured window steady enough to predict from? Notices (each with its figure), how much each widens
    the intervals, and the command that would measure it better."""
    notices: list[str] = []
    widen = 0.0
    up_to_costs = False
    if r.drift is not None and abs(r.drift) >= th.DRIFT_FROM:
        notices.append(f"the rate drifted {r.drift * 100:+.0f} % from the window's first half to its second")
        widen = max(widen, abs(r.drift))
    if r.other_load_spread is not None and r.other_load_spread >= th.OTHER_LOAD_VARIED_FROM:
        half = r.other_load_spread / 2
        notices.append(f"other load came and went: other processes used between {max(m.others - half, 0):.1f} "
                       f"and {min(m.others + half, m.P):.1f} of the {m.P:g} cores during the window")
    if r.warmup_gap is not None and abs(r.warmup_gap) >= th.WARMUP_UNSETTLED_FROM:
        notices.append(f"the warm-up had not settled: the window's first quarter ran {r.warmup_gap * 100:+.0f} % "
                       "from the rest")
        widen = max(widen, abs(r.warmup_gap))
    if m.kappa < th.BELOW_OWN_COSTS_FROM:
        notices.append(f"throughput was {m.kappa * 100:.0f} % of what this run's own per-sample costs allow "
                       "(something the run did not measure took time)")
        up_to_costs = True
    steps = max(r.steps_measured, 1)
    more = max(2 * steps, 60)
    if r.target:
        cmd = f"python -m profiler sweep --workers {r.workers},{max(r.workers + 1, 2)} {r.target}"
    else:
        cmd = (f"python -m profiler run --steps {more} (with this run's other options), or measure the settings "
               f"directly: python -m profiler sweep --workers {r.workers},{max(r.workers + 1, 2)}")
    return {"steady": not notices, "notices": notices, "widen": round(widen, 4), "up_to_own_costs": up_to_costs,
            "remeasure": cmd}


def interval(m: Model, r: Rates, x: float, steady: Steady, measured: bool = False, n: int | None = None,
             extra_residual: float = 0.0, **change: Any) -> list[float]:
    """(low, high) samples/s around a prediction ``x``: the baseline's own spread (block bootstrap over its steps),
    the spread of its per-sample CPU cost, the other load seen (the prediction re-solved with the cores other load
    left at its 10th and 90th percentile), the model's calibration residual, and the window's unsteadiness.
    The measured point is a measurement: its interval is the bootstrap's alone."""
    lo_b = 1.0 - (r.rate_rel_low if r.rate_rel_low is not None else 1.0)
    hi_b = (r.rate_rel_high if r.rate_rel_high is not None else 1.0) - 1.0
    if measured:
        return [round(x * (1 - max(lo_b, 0.0)), 3), round(x * (1 + max(hi_b, 0.0)), 3)]
    down = [lo_b, r.cpu_rel_half or 0.0, th.WHATIF_RESIDUAL, extra_residual]
    up = [hi_b, r.cpu_rel_half or 0.0, th.WHATIF_RESIDUAL, extra_residual]
    spread = r.other_load_spread or 0.0
    if spread > 0.05 and x > 0:
        more = m.with_cores(m.A + spread / 2, n, **change)[0]
        less = m.with_cores(m.A - spread / 2, n, **change)[0]
        up.append(max(more / x - 1, 0.0))
        down.append(max(1 - less / x, 0.0))
    # The unsteadiness widens by a factor each way (a rate that ran 2x faster for a while may as well run 2x slower),
    # so the low end stays above 0 however unsteady the window was.
    w = 1.0 + float(steady["widen"])
    lo = x * max(1.0 - math.sqrt(sum(v * v for v in down)), MIN_LOW_SHARE) / w
    hi = x * (1.0 + math.sqrt(sum(v * v for v in up))) * w
    if steady["up_to_own_costs"] and m.kappa > 0:
        hi = max(hi, x / m.kappa)  # the loss may have been passing: what the run's own costs allow
    return [round(lo, 3), round(hi, 3)]


def _finish(m: Model, r: Rates, row: dict[str, Any], steady: Steady, n: int | None = None,
            extra_residual: float = 0.0, **change: Any) -> dict[str, Any]:
    """A row with its interval, the low end's change, and the binding stage in the shared words."""
    x = row["samples_per_s"]
    row["binds_words"] = binds_words(row["binds"], r, n, m.A)
    if x is None:
        row["interval"], row["change_low"] = None, None
        return row
    iv = interval(m, r, x, steady, bool(row.get("measured")), n, extra_residual, **change)
    row["interval"] = iv
    now = r.samples_per_s
    row["change_low"] = round(iv[0] / now - 1, 4) if now > 0 else None
    return row


def whatif(r: Rates) -> WhatIf:
    """The ``whatif`` section: predictions for other settings from this run alone, each with its interval."""
    m = Model(r)
    steady = steadiness(r, m)
    now = r.samples_per_s
    preds: list[dict[str, Any]] = []
    core_note = (f"the job keeps the {m.A:.2f} of {m.P:g} cores it had (other load took the rest and is assumed "
                 "to keep it)" if m.others > 0.05 else f"{m.P:g} cores, no other load seen")
    for n in worker_counts(r.cores, r.workers):
        a = (f"each worker needs {r.cpu_s * 1e3:.1f} ms on a core and {r.blocked_s * 1e3:.1f} ms blocked per sample, "
             f"as measured; {core_note}")
        if model_shares_cores(r):
            a += "; the model's threads share the same cores and slow down as workers take them"
        extra = 0.0
        if n == 0 and r.workers > 0 and not r.main_sample_cpu_s:
            preds.append(_finish(m, r, _row(
                "workers", "workers=0", None, "unknown", now,
                "cannot be predicted from this run: with 0 workers the dataset runs in the main process, whose "
                "per-sample cost (its torch ops on all its threads, serial with the step) this run did not measure; "
                "measure it: python -m profiler sweep --workers 0," + str(r.workers) + (f" {r.target}" if r.target
                                                                                       else ""),
                workers=0, measured=False, predictable=False), steady, 0))
            continue
        x, b = m.predict(n)
        if n == 0:
            a += "; with 0 workers the main process loads every batch between steps"
            if r.workers > 0 and r.main_sample_cpu_s:
                a += (f", at {r.main_sample_cpu_s * 1e3:.1f} ms of CPU per sample (a few samples timed in the main "
                      "process after the window: a wider interval)")
                extra = th.WORKERS0_RESIDUAL
        if r.workers == 0 and n > 0:
            a += "; worker->main transfer not measured (0 workers) and taken as free"
        preds.append(_finish(m, r, _row("workers", f"workers={n}", x, b, now, a, workers=n, measured=n == r.workers),
                             steady, n, extra))
    # Page cache warm vs cold.
    if r.read_blocked_s > 0 or r.read_bytes > 0:
        ch: dict[str, Any] = {"blocked": max(r.blocked_s - r.read_blocked_s, 0.0), "storage_cap": None}
        x, b = m.predict(**ch)
        preds.append(_finish(m, r, _row("cache", "cache warm", x, b, now, "every file already in the page cache: "
                                        f"the {r.read_blocked_s * 1e3:.1f} ms blocked in reads per sample disappears"),
                             steady, None, 0.0, **ch))
    cold = _cold_read_s(r)
    if cold is not None and r.rchar > 0:
        per_read, why, spec = cold
        ch = {"blocked": max(r.blocked_s - r.read_blocked_s, 0.0) + per_read,
              "storage_cap": storage_cap(r.rchar, 1.0, spec) if spec else None}
        x, b = m.predict(**ch)
        preds.append(_finish(m, r, _row("cache", "cache cold", x, b, now, why), steady, None, 0.0, **ch))
    # Storage presets: every file read from the device, a single queue shared by the workers. Only for a job that
    # read files: a dataset in memory reads nothing from any device, and a row would invent a cost for it.
    storage_note = None
    reads_files = r.read_blocked_s > 0 or r.read_bytes > 0 or r.rchar >= th.READS_FILES_FROM_BYTES
    if reads_files and r.rchar > 0:
        for name, preset in STORAGE_PRESETS.items():
            d = {**preset.to_dict(), "mechanism": "userspace"}
            cost = _read_cost(r.rchar, preset)
            cap = storage_cap(r.rchar, 1.0, d)
            ch = {"blocked": max(r.blocked_s - r.read_blocked_s, 0.0) + cost, "storage_cap": cap}
            x, b = m.predict(**ch)
            preds.append(_finish(m, r, _row(
                "storage", f"--storage {name}", x, b, now,
                f"{preset.describe()} with a cold cache: each {r.rchar / 1e3:.0f} kB sample costs "
                f"{cost * 1e3:.2f} ms of device time in one shared queue",
                storage=name, storage_cap_samples_per_s=round(cap, 3) if cap else None), steady, None, 0.0, **ch))
    elif reads_files:
        storage_note = "no storage rows: this run did not measure the bytes its dataset read per sample"
    elif r.rchar < 1:
        storage_note = ("no storage rows: this job read no files (its data came from memory), so no storage device "
                        "can speed it up or slow it down")
    else:  # e.g. files of a few hundred bytes, opened and read: too little per sample for any device to matter
        storage_note = (f"no storage rows: this job read no files worth a storage device ({r.rchar:.0f} B per "
                        f"sample asked of read(), under {th.READS_FILES_FROM_BYTES // 1024} KiB), so no storage "
                        "device can speed it up or slow it down")
    # The model k times faster.
    if r.compute_s > 0:
        for k in MODEL_SPEEDUPS:
            ch = {"compute": m.compute1 / k, "C_main": max(m.C_main - (1 - 1 / k) * _model_cpu(m, r), 0.0)}
            x, b = m.predict(**ch)
            preds.append(_finish(m, r, _row(
                "model", f"model {k:g}x faster", x, b, now,
                f"the step's compute takes 1/{k:g} of the measured {r.compute_s * 1e3:.1f} ms "
                "(e.g. mixed precision or a GPU); the input pipeline as measured", speedup=k), steady, None, 0.0,
                **ch))
    # pin_memory on/off: only a GPU copies from host memory.
    if r.device_type == "cuda" and r.h2d_s > 0:
        h2d = r.h2d_s / PINNED_SPEEDUP if not r.pin_memory else r.h2d_s * PINNED_SPEEDUP
        x, b = m.predict(h2d=h2d)
        preds.append(_finish(m, r, _row(
            "pin_memory", f"pin_memory={'on' if not r.pin_memory else 'off'}", x, b, now,
            f"pinned host memory copies ~{PINNED_SPEEDUP:g}x faster than pageable (typical, not measured "
            f"here); H2D {r.h2d_s * 1e3:.2f} ms -> {h2d * 1e3:.2f} ms per step"), steady, None, 0.0, h2d=h2d))
    best = max((p for p in preds if p["kind"] == "workers" and p["samples_per_s"] is not None),
               key=lambda p: p["samples_per_s"])
    measured_row = next((p for p in preds if p.get("measured")), None)
    out: WhatIf = {
        "measured": {"samples_per_s": round(now, 3), "workers": r.workers,
                     "interval": measured_row["interval"] if measured_row else None},
        "calibration": round(m.kappa, 4), "cores_available": round(m.A, 3),
        "other_load_cores": round(m.others, 3), "core_share": round(m.phi_m, 4),
        "model": "processor-sharing cores + per-worker supply + single-queue storage + model step; calibrated "
                 "to this run (see profiler/analysis/whatif.py)",
        "binds": measured_row["binds"] if measured_row else None,
        "binds_words": measured_row["binds_words"] if measured_row else None,
        "steadiness": {k: v for k, v in steady.items() if k != "up_to_own_costs"},
        "interval_method": (f"95 % block bootstrap of the window's steps, per-sample CPU spread, other load's 10th-"
                            f"90th percentile re-solved, calibration residual {th.WHATIF_RESIDUAL:g}"
                            + (", widened for an unsteady window" if not steady["steady"] else "")),
        "predictions": preds, "best_workers": best["workers"], "inputs": r.to_dict()}
    if storage_note:
        out["storage_note"] = storage_note
    return out


def _model_cpu(m: Model, r: Rates) -> float:
    """CPU per sample the model's own threads use (a CPU run), part of C_main."""
    if r.device_type != "cpu":
        return 0.0
    return min(r.model_threads, int(math.ceil(m.P))) * m.compute1 / max(r.batch, 1.0)


def _cold_read_s(r: Rates) -> tuple[float, str, dict[str, Any] | None] | None:
    """Device seconds per sample when every file comes from the device, and why we believe it."""
    if r.throttle:
        spec = view(StorageThrottleView, r.throttle)
        bw, iops = spec.bytes_per_s, spec.iops
        cost = (r.rchar / bw if bw else 0.0) + (1.0 / iops if iops else 0.0)
        if (spec.mechanism or "").startswith(("kernel", "cgroup")):
            cost = 0.0  # the kernel throttle delays reads only once the limit is reached (the cap does that)
        return cost, (f"every file from the throttled device ({format_rate(bw) if bw else 'no byte limit'}, "
                      f"{iops or 'no'} IOPS), one queue shared by all workers"), r.throttle
    if _device_rate_measured(r) and r.cold_reads > 0:
        rate = r.read_bytes / r.read_blocked_s
        return r.rchar / rate, (f"every file from the device at this run's measured {format_rate(rate)} per read "
                                "stream; assumes the device serves each worker's reads at that rate"), None
    return None


def _device_rate_measured(r: Rates) -> bool:
    """Did this run read enough from the device to measure its rate (thresholds.DEVICE_RATE_MIN_SHARE says why)?"""
    return (r.read_bytes > 0 and r.read_blocked_s > 0 and r.rchar > 0
            and r.read_bytes / r.rchar >= th.DEVICE_RATE_MIN_SHARE)


def ceilings(r: Rates) -> Ceilings:
    """The ``ceilings`` section: samples/s each stage alone could sustain; the lowest sets the pace."""
    rows: list[dict[str, Any]] = []
    b = max(r.batch, 1.0)

    def add(stage: str, x: float | None, basis: str, how: str, **extra: Any) -> None:
        if x is not None and math.isfinite(x) and x > 0:
            rows.append({"stage": stage, "samples_per_s": round(x, 3), "basis": basis, "how": how, **extra})

    thr = r.throttle
    cap = storage_cap(r.read_bytes, r.cold_reads, thr)
    if thr and cap is not None:  # a cap needs a throttle
        spec = view(StorageThrottleView, thr)
        add("storage", cap, "derived", f"throttle {spec.bytes_per_s} B/s, {spec.iops} IOPS "
            f"at {r.read_bytes / 1e3:.0f} kB from the device per sample")
    elif _device_rate_measured(r):
        rate = r.read_bytes / r.read_blocked_s
        add("storage", rate / r.rchar if r.rchar else None, "measured",
            f"device reads at {format_rate(rate)} per stream (cold files in this run), one stream")
    elif r.rchar > 0 and r.read_blocked_s > 0:
        rate = r.rchar / r.read_blocked_s
        add("storage", r.cores * rate / r.rchar, "measured",
            f"page cache at {format_rate(rate)} per reader (files were cached), {r.cores:g} readers")
    if r.cpu_s > 0:
        main = max(r.job_cores - r.worker_cores, 0.0) if r.workers else 0.0
        cores_left = max(r.cores - main, 0.5)
        add("decode/augment", cores_left / r.cpu_s, "derived",
            f"{r.cpu_s * 1e3:.1f} ms on a core per sample (in-worker clock) on {cores_left:.1f} cores "
            "(the usable ones less the main process's share)", cores=round(cores_left, 2))
    if r.transfer_s > 0:
        add("transfer", b / r.transfer_s, "measured", f"{r.transfer_s * 1e3:.1f} ms per batch worker->main, "
            "one batch at a time")
    if r.h2d_s > 0 and r.device_type == "cuda":
        add("h2d", b / r.h2d_s, "measured", f"{r.h2d_s * 1e3:.2f} ms per batch host->device "
            f"({'pinned' if r.pin_memory else 'pageable'})")
        other = r.h2d_s / PINNED_SPEEDUP if not r.pin_memory else r.h2d_s * PINNED_SPEEDUP
        add("h2d (" + ("pinned" if not r.pin_memory else "pageable") + ")", b / other, "derived",
            f"assumes pinned copies ~{PINNED_SPEEDUP:g}x faster than pageable")
    if r.model_alone_s:
        add("model", b / r.model_alone_s, "measured", f"{r.model_alone_s * 1e3:.1f} ms per step on a batch already "
            "on the device (extra steps after the window)")
    elif r.compute_s > 0:
        add("model", b / r.compute_s, "measured", f"{r.compute_s * 1e3:.1f} ms per step in the window (with the "
            "loader's contention)")
    if r.samples_per_s > 0:
        # The cores everything shares: the job's whole CPU demand per sample (dataset work and the main process's,
        # the model's threads included on a CPU run) against the cores other load left it. On a CPU-only run this,
        # not decode/augment alone, is what the model and the workers run into together.
        m = Model(r)
        demand = (m._cpu0(m._base(), demand=True) if r.workers == 0 else m.cpu1) + m.C_main
        if demand > 0:
            add("cores", m.A / demand * m.kappa, "derived",
                f"{binds_words('cores', r, None, m.A)}: {demand * 1e3:.1f} ms of CPU per sample in all",
                words=binds_words("cores", r, None, m.A))
    low = min(rows, key=lambda c: c["samples_per_s"]) if rows else None
    lowest = low["stage"] if low else None
    out: Ceilings = {"samples_per_s": round(r.samples_per_s, 3), "rows": rows, "lowest": lowest}
    if low and lowest == "cores":
        out["lowest_words"] = low["words"]  # the shared cores in the what-if's words (the row says them)
    return out


def analyze(r: Rates) -> tuple[WhatIf, Ceilings]:
    """(whatif, ceilings) of one run; a run without steps gives empty sections."""
    if r.samples_per_s <= 0 or r.batch <= 0:
        return {"predictions": [], "note": "no measured steps: nothing to predict from"}, {"rows": []}
    return whatif(r), ceilings(r)


def rates_from_dict(d: dict[str, Any]) -> Rates:
    """Rebuild the Rates a ``whatif.inputs`` section was made from (the sweep predicts from a saved first point)."""
    from dataclasses import fields

    names = {f.name for f in fields(Rates)}
    return Rates(**{k: v for k, v in d.items() if k in names})


def predict_setting(r: Rates, workers: int | None = None, batch_size: int | None = None, storage: str | None = None,
                    cache: str | None = None, mechanism: str | None = None) -> dict[str, Any]:
    """Samples/s predicted for one changed setting (any of workers, batch size, a --storage preset, a cache mode),
    with the stage that would bind and the assumptions it rests on. ``mechanism``: how a --storage preset is
    emulated ("userspace" charges each read its service time, like a real device; "cgroup-*"/"kernel-*" only caps)."""
    m = Model(r)
    change: dict[str, Any] = {}
    notes = [f"per-sample costs as measured at workers={r.workers}"]
    warm_blocked = max(r.blocked_s - r.read_blocked_s, 0.0)
    if batch_size is not None and batch_size != round(r.batch):
        k = batch_size / max(r.batch, 1.0)
        change.update(batch=float(batch_size), compute=m.compute1 * k, h2d=r.h2d_s * k)
        notes.append(f"batch {batch_size}: compute and H2D per step scale with the batch (x{k:.2f})")
    if storage not in (None, "", "none"):
        preset = STORAGE_PRESETS[storage]
        d = {**preset.to_dict(), "mechanism": mechanism or "userspace"}
        kernel = str(d["mechanism"]).startswith(("kernel", "cgroup"))
        # A real device (and the userspace emulation) charges every read its service time; the kernel throttle
        # passes reads at the device's own speed until the rate limit, then queues them (the cap below).
        cost = 0.0 if kernel else (_read_cost(r.rchar, preset) if r.rchar > 0 else 0.0)
        change.update(blocked=warm_blocked + cost, storage_cap=storage_cap(r.rchar, 1.0, d))
        notes.append(f"--storage {storage}: every file from a {preset.describe()} single-queue device"
                     + (" (kernel throttle: no per-read delay below the limits)" if kernel else ""))
    elif cache == "warm":
        change.update(blocked=warm_blocked, storage_cap=None)
        notes.append("cache warm: reads cost nothing beyond the page-cache copy")
    elif cache == "cold":
        cold = _cold_read_s(r)
        if cold is not None:
            per_read, why, spec = cold
            change.update(blocked=warm_blocked + per_read, storage_cap=storage_cap(r.rchar, 1.0, spec) if spec
                          else None)
            notes.append("cache cold: " + why)
        else:
            notes.append("cache cold: device rate unknown (this run read from the page cache); predicted as measured")
    steady = steadiness(r, m)
    n = r.workers if workers is None else workers
    if n == 0 and r.workers > 0 and not r.main_sample_cpu_s:
        return {"samples_per_s": None, "binds": "unknown", "interval": None, "predictable": False,
                "assumption": "cannot be predicted from this run: the main process's per-sample cost was not measured",
                "calibration": round(m.kappa * m.storage_kappa, 4), "steady": steady["steady"]}
    x, binds = m.predict(workers, **change)
    extra = th.WORKERS0_RESIDUAL if n == 0 and r.workers > 0 else 0.0
    iv = interval(m, r, x, steady, False, workers, extra, **change)
    return {"samples_per_s": round(x, 3), "binds": binds, "binds_words": binds_words(binds, r, n, m.A),
            "interval": iv, "assumption": "; ".join(notes), "calibration": round(m.kappa * m.storage_kappa, 4),
            "steady": steady["steady"], "notices": steady["notices"]}
