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
from dataclasses import replace
from typing import Any

from .. import thresholds as th
from ..storage.spec import STORAGE_PRESETS, format_rate
from .rates import Rates

# Worker counts are predicted up to this many times the usable cores: past 2 per core, a CPU-bound loader only
# time-slices, and an IO-bound one has usually reached the device's queue limit.
MAX_WORKERS_PER_CORE = 2
# A what-if changes the run by less than this (relative) is "no change": within the run-to-run noise of a shared host.
NO_CHANGE_BELOW = 0.05
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


def _bisect(f, hi: float) -> float:
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
            return x * self.kappa, "cores"
        return x * self.kappa, min(b, key=lambda k: b[k])

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


def _row(kind: str, setting: str, x: float, binds: str, now: float, assumption: str, **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "setting": setting, "samples_per_s": round(x, 3), "binds": binds,
            "change": round(x / now - 1, 4) if now > 0 else None, "assumption": assumption, **extra}


def worker_counts(cores: float, measured: int) -> list[int]:
    """0, 1, 2, ... every count up to 8, then doubling, up to 2x the usable cores (and the measured count)."""
    top = max(int(MAX_WORKERS_PER_CORE * cores), 2)
    out = list(range(0, min(top, 8) + 1))
    n = 16
    while n <= top:
        out.append(n)
        n *= 2
    return sorted(set(out + [top, measured]))


def whatif(r: Rates) -> dict[str, Any]:
    """The ``whatif`` section: predictions for other settings from this run alone."""
    m = Model(r)
    now = r.samples_per_s
    preds: list[dict[str, Any]] = []
    core_note = (f"the job keeps the {m.A:.2f} of {m.P:g} cores it had (other load took the rest and is assumed "
                 "to keep it)" if m.others > 0.05 else f"{m.P:g} cores, no other load seen")
    for n in worker_counts(r.cores, r.workers):
        x, b = m.predict(n)
        a = (f"each worker needs {r.cpu_s * 1e3:.1f} ms on a core and {r.blocked_s * 1e3:.1f} ms blocked per sample, "
             f"as measured; {core_note}")
        if r.device_type == "cpu" and r.compute_s > 0:
            a += "; the model's threads share the same cores and slow down as workers take them"
        if n == 0:
            a += "; with 0 workers the main process loads every batch between steps"
            a += (f", at {r.main_sample_cpu_s * 1e3:.1f} ms of CPU per sample (timed in the main process after the "
                  "window)" if r.workers > 0 and r.main_sample_cpu_s else
                  ", at the same CPU per sample (its torch ops then use the main process's threads: not measured)"
                  if r.workers > 0 else "")
        if r.workers == 0 and n > 0:
            a += "; worker->main transfer not measured (0 workers) and taken as free"
        preds.append(_row("workers", f"workers={n}", x, b, now, a, workers=n, measured=n == r.workers))
    # Page cache warm vs cold.
    if r.read_blocked_s > 0 or r.read_bytes > 0:
        x, b = m.predict(blocked=max(r.blocked_s - r.read_blocked_s, 0.0), storage_cap=None)
        preds.append(_row("cache", "cache warm", x, b, now, "every file already in the page cache: the "
                          f"{r.read_blocked_s * 1e3:.1f} ms blocked in reads per sample disappears"))
    cold = _cold_read_s(r)
    if cold is not None and r.rchar > 0:
        per_read, why, spec = cold
        x, b = m.predict(blocked=max(r.blocked_s - r.read_blocked_s, 0.0) + per_read,
                         storage_cap=storage_cap(r.rchar, 1.0, spec) if spec else None)
        preds.append(_row("cache", "cache cold", x, b, now, why))
    # Storage presets: every file read from the device, a single queue shared by the workers.
    for name, spec in STORAGE_PRESETS.items():
        d = {**spec.to_dict(), "mechanism": "userspace"}
        cost = r.rchar / spec.bytes_per_s + 1.0 / spec.iops if r.rchar > 0 else 0.0
        x, b = m.predict(blocked=max(r.blocked_s - r.read_blocked_s, 0.0) + cost,
                         storage_cap=storage_cap(r.rchar, 1.0, d))
        cap = storage_cap(r.rchar, 1.0, d)
        preds.append(_row("storage", f"--storage {name}", x, b, now,
                          f"{spec.describe()} with a cold cache: each {r.rchar / 1e3:.0f} kB sample costs "
                          f"{cost * 1e3:.2f} ms of device time in one shared queue",
                          storage=name, storage_cap_samples_per_s=round(cap, 3) if cap else None))
    # The model k times faster.
    if r.compute_s > 0:
        for k in MODEL_SPEEDUPS:
            x, b = m.predict(compute=m.compute1 / k,
                             C_main=max(m.C_main - (1 - 1 / k) * _model_cpu(m, r), 0.0))
            preds.append(_row("model", f"model {k:g}x faster", x, b, now,
                              f"the step's compute takes 1/{k:g} of the measured {r.compute_s * 1e3:.1f} ms "
                              "(e.g. mixed precision or a GPU); the input pipeline as measured", speedup=k))
    # pin_memory on/off: only a GPU copies from host memory.
    if r.device_type == "cuda" and r.h2d_s > 0:
        h2d = r.h2d_s / PINNED_SPEEDUP if not r.pin_memory else r.h2d_s * PINNED_SPEEDUP
        x, b = m.predict(h2d=h2d)
        preds.append(_row("pin_memory", f"pin_memory={'on' if not r.pin_memory else 'off'}", x, b, now,
                          f"pinned host memory copies ~{PINNED_SPEEDUP:g}x faster than pageable (typical, not measured "
                          f"here); H2D {r.h2d_s * 1e3:.2f} ms -> {h2d * 1e3:.2f} ms per step"))
    best = max((p for p in preds if p["kind"] == "workers"), key=lambda p: p["samples_per_s"])
    return {"measured": {"samples_per_s": round(now, 3), "workers": r.workers},
            "calibration": round(m.kappa, 4), "cores_available": round(m.A, 3),
            "other_load_cores": round(m.others, 3), "core_share": round(m.phi_m, 4),
            "model": "processor-sharing cores + per-worker supply + single-queue storage + model step; calibrated "
                     "to this run (see profiler/analysis/whatif.py)",
            "predictions": preds, "best_workers": best["workers"], "inputs": r.to_dict()}


def _model_cpu(m: Model, r: Rates) -> float:
    """CPU per sample the model's own threads use (a CPU run), part of C_main."""
    if r.device_type != "cpu":
        return 0.0
    return min(r.model_threads, int(math.ceil(m.P))) * m.compute1 / max(r.batch, 1.0)


def _cold_read_s(r: Rates) -> tuple[float, str, dict[str, Any] | None] | None:
    """Device seconds per sample when every file comes from the device, and why we believe it."""
    if r.throttle:
        bw, iops = r.throttle.get("bytes_per_s"), r.throttle.get("iops")
        cost = (r.rchar / bw if bw else 0.0) + (1.0 / iops if iops else 0.0)
        if str(r.throttle.get("mechanism", "")).startswith(("kernel", "cgroup")):
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


def ceilings(r: Rates) -> dict[str, Any]:
    """The ``ceilings`` section: samples/s each stage alone could sustain; the lowest sets the pace."""
    rows: list[dict[str, Any]] = []
    b = max(r.batch, 1.0)

    def add(stage: str, x: float | None, basis: str, how: str, **extra: Any) -> None:
        if x is not None and math.isfinite(x) and x > 0:
            rows.append({"stage": stage, "samples_per_s": round(x, 3), "basis": basis, "how": how, **extra})

    cap = storage_cap(r.read_bytes, r.cold_reads, r.throttle)
    if cap is not None:
        add("storage", cap, "derived", f"throttle {r.throttle.get('bytes_per_s')} B/s, {r.throttle.get('iops')} IOPS "
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
    lowest = min(rows, key=lambda c: c["samples_per_s"])["stage"] if rows else None
    return {"samples_per_s": round(r.samples_per_s, 3), "rows": rows, "lowest": lowest}


def analyse(r: Rates) -> tuple[dict[str, Any], dict[str, Any]]:
    """(whatif, ceilings) of one run; a run without steps gives empty sections."""
    if r.samples_per_s <= 0 or r.batch <= 0:
        return {"predictions": [], "note": "no measured steps: nothing to predict from"}, {"rows": []}
    return whatif(r), ceilings(r)


def with_rates(r: Rates, **change: Any) -> Rates:
    """A copy of ``r`` with fields changed (tests and the sweep build hypothetical runs this way)."""
    return replace(r, **change)


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
        spec = STORAGE_PRESETS[storage]
        d = {**spec.to_dict(), "mechanism": mechanism or "userspace"}
        kernel = str(d["mechanism"]).startswith(("kernel", "cgroup"))
        # A real device (and the userspace emulation) charges every read its service time; the kernel throttle
        # passes reads at the device's own speed until the rate limit, then queues them (the cap below).
        cost = 0.0 if kernel else (r.rchar / spec.bytes_per_s + 1.0 / spec.iops if r.rchar > 0 else 0.0)
        change.update(blocked=warm_blocked + cost, storage_cap=storage_cap(r.rchar, 1.0, d))
        notes.append(f"--storage {storage}: every file from a {spec.describe()} single-queue device"
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
    x, binds = m.predict(workers, **change)
    return {"samples_per_s": round(x, 3), "binds": binds, "assumption": "; ".join(notes),
            "calibration": round(m.kappa * m.storage_kappa, 4)}
