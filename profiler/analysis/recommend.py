"""Recommendations computed from this run's numbers. Each rule fires only when the numbers support it.

Every recommendation is ``{action, reason, expected_gain}``: what to change, the measured figures that justify it,
and what it should give, estimated from the same figures (a ceiling, stated as such).
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import thresholds as th
from ..record.read import MemoryView, PredictionView, StallView, VerdictView, WhatIfView, view
from ..record.schema import Recommendation
from .context import Context
from .io import fits_in_page_cache
from .verdict import NOTHING_MEASURED

if TYPE_CHECKING:  # annotations only
    from ..record.schema import Memory, Stall, Verdict, WhatIf


def _rec(action: str, reason: str, gain: str, cause: str) -> Recommendation:
    return {"action": action, "reason": reason, "expected_gain": gain, "cause": cause}


def _ceiling_gain(ctx: Context, new_rate_samples: float) -> str:
    now = ctx.samples_per_s
    model_cap = ctx.model_batches_per_s * ctx.batch_size
    target = min(new_rate_samples, model_cap)
    if now <= 0 or not math.isfinite(target):
        return "removes this part of the wait"
    return (f"up to {target:.0f} samples/s ({target / now:.2f}x the measured {now:.0f}); "
            f"the model alone could take {model_cap:.0f} samples/s")


def _cpu_rules(ctx: Context, stall: StallView) -> list[Recommendation]:
    out = []
    idle, util = ctx.idle_cores, ctx.cpu_util  # idle is None exactly when util is
    saturated = util is not None and util >= th.CPU_SATURATED_FROM
    sample_ms = ctx.sample_cpu_ms + ctx.sample_read_ms
    per_worker_sps = 1e3 / sample_ms if sample_ms > 0 else 0
    if ctx.workers == 0:
        out.append(_rec(
            f"Use DataLoader workers: {ctx.knob('workers')} "
            f"{max(1, min(int(ctx.usable_cores) - 1, th.FIRST_WORKERS_AT_MOST))}",
            f"with workers = 0 every batch is made in the main process while the model waits "
            f"({ctx.batch_build_ms:.0f} ms per batch, serial with {ctx.compute_ms:.0f} ms of compute).",
            _ceiling_gain(ctx, per_worker_sps * max(1, int(ctx.usable_cores) - 1)), "cpu"))
    elif idle is not None and util is not None and idle >= th.MIN_IDLE_CORES_FOR_MORE_WORKERS and not saturated:
        need = math.ceil(ctx.model_batches_per_s * ctx.batch_build_ms / 1e3) if math.isfinite(
            ctx.model_batches_per_s) else ctx.workers + int(idle)
        cap = int(ctx.usable_cores * th.MAX_WORKERS_PER_CORE)
        target = max(ctx.workers + 1, min(need, ctx.workers + int(idle), cap))
        out.append(_rec(
            f"Raise {ctx.knob('workers')} from {ctx.workers} to {target}",
            f"one worker makes a batch in {ctx.batch_build_ms:.0f} ms ({per_worker_sps:.0f} samples/s) and the CPU "
            f"was only {util * 100:.0f} % busy: about {idle:.1f} of {ctx.usable_cores:g} cores sat idle.",
            _ceiling_gain(ctx, per_worker_sps * target), "cpu"))
    if ctx.workers > 0 and (saturated or idle is None or idle < th.MIN_IDLE_CORES_FOR_MORE_WORKERS):
        busy = f"{util * 100:.0f} %" if util is not None else "fully"
        by = stall.by_stage
        dec, aug = float(by.get("decode", 0)), float(by.get("augment", 0))
        if aug >= dec and ctx.augment in ("standard", "heavy"):
            lighter = "light" if ctx.augment == "heavy" else "light (eval-style resize + crop)"
            out.append(_rec(
                f"Make augmentation cheaper: --augment {lighter.split()[0]}, or move it to the GPU "
                "(torchvision.transforms.v2 on CUDA tensors, or NVIDIA DALI)",
                f"the cores are saturated ({busy} busy) and augmentation is the largest part of the wait "
                f"({aug:.2f} s; {ctx.sample_cpu_ms:.1f} ms of decode+augment per sample).",
                f"removes up to {aug:.2f} s of the {stall.seconds:.2f} s wait", "cpu"))
        if dec > 0 and ctx.mean_pixels > 0:
            target_px = (ctx.image_size * th.PRE_RESIZE_FACTOR) ** 2 * 4 / 3
            if ctx.mean_pixels > target_px * th.PRE_RESIZE_MIN_PIXEL_RATIO:
                factor = ctx.mean_pixels / target_px
                short = int(ctx.image_size * th.PRE_RESIZE_FACTOR)
                out.append(_rec(
                    f"Pre-resize the images once to a short side of ~{short} px (or use PIL's draft mode)",
                    f"the cores are saturated and decode takes {dec:.2f} s of the wait; the images average "
                    f"{ctx.mean_pixels / 1e6:.2f} MP for a {ctx.image_size} px input"
                    + (" (your model's input size is not known to the profiler: this assumes it)"
                       if ctx.job_kind != "builtin" else "")
                    + ", and JPEG decode cost grows with pixel count.",
                    f"decode roughly {factor:.1f}x cheaper, saving up to {dec * (1 - 1 / factor):.2f} s of the wait",
                    "cpu"))
        if ctx.job_kind != "builtin":
            from .. import vocab

            named = {k: float(v) for k, v in by.items() if k not in ("transfer", "h2d", "other", "collate")}
            if named and max(named.values()) > 0:
                top = max(named, key=lambda k: named[k])
                where = ("your Dataset's own __getitem__ code (wrap its parts in profiler.stage(...) to split it)"
                         if top == "getitem" else vocab.stage(top).words)
                out.append(_rec(
                    f"Make the largest part of a sample cheaper: {where}",
                    f"the cores are saturated ({busy} busy) and '{top}' is the largest part of the wait "
                    f"({named[top]:.2f} s of {stall.seconds:.2f} s); more workers cannot add cores.",
                    f"removes up to {named[top]:.2f} s of the wait", "cpu"))
        if ctx.device_type == "cuda" and dec > 0:
            out.append(_rec(
                "Decode JPEGs on the GPU: torchvision.io.decode_jpeg(device='cuda') or NVIDIA DALI",
                f"decode on saturated CPU cores costs {dec:.2f} s of the wait; the GPU waited meanwhile.",
                f"removes up to {dec:.2f} s of the wait", "cpu"))
    return out


def _io_rules(ctx: Context, stall: StallView) -> list[Recommendation]:
    out = []
    io_s = float(stall.by_cause.get("io", 0))
    if ctx.reads_off_device:  # blocked, no byte from the device: faster storage, RAM or shards change nothing
        return [_rec(
            "Find what the workers wait on in __getitem__: they were blocked, not on the storage device (sleeps, "
            "locks, network)",
            f"{io_s:.2f} s of the wait was workers blocked while the dataset read no bytes from the device; "
            "py-spy dump --pid of a worker shows the call it is blocked in.",
            f"removes up to {io_s:.2f} s of the wait", "io")]
    # The rate as measured: the timed read stage's (built-in pipeline), else the device bytes the kernel counted
    # (read_bytes, memory-mapped page faults included) over the time blocked in the calls that fetched them.
    if ctx.timed_reads and ctx.read_mb_s_per_worker:
        rate = f"{ctx.read_mb_s_per_worker:.1f} MB/s per worker"
    elif ctx.device_mb_s_per_worker:
        rate = (f"{ctx.device_mb_s_per_worker:.1f} MB/s per worker from the device (the kernel's read_bytes over "
                "the time blocked)")
    else:
        rate = "an unmeasured rate"
    ram = ctx.ram_available_bytes
    fits = fits_in_page_cache(ctx.dataset_bytes, ram)
    if fits and ram:  # fits is None without both sizes
        out.append(_rec(
            "Serve the dataset from RAM: it fits (keep it in the page cache by reading it once, or copy it to local "
            "NVMe / tmpfs)",
            f"reads took {io_s:.2f} s of the wait at {rate}; the dataset is {ctx.dataset_bytes / 1e9:.2f} GB and "
            f"{ram / 1e9:.1f} GB of RAM is available.",
            f"removes up to {io_s:.2f} s of the wait after the first epoch", "io"))
    else:
        out.append(_rec(
            "Move the data to faster local storage (NVMe) or cache a pre-processed copy",
            f"reads took {io_s:.2f} s of the wait at {rate}"
            + (f"; the dataset ({ctx.dataset_bytes / 1e9:.1f} GB) is too large to stay in the page cache"
               if fits is False else ""),
            f"removes up to {io_s:.2f} s of the wait", "io"))
    if ctx.workers > 0:
        target = max(ctx.workers * th.IO_WORKERS_GROWTH, ctx.workers + 2)
        out.append(_rec(
            f"Raise {ctx.knob('workers')} from {ctx.workers} to {target} to keep more reads in flight",
            f"a worker blocked on a read uses no CPU; {_blocked_words(ctx)}, so more outstanding reads hide "
            "latency until the device's own bandwidth is reached.",
            _ceiling_gain(ctx, ctx.samples_per_s * target / ctx.workers), "io"))
    if 0 < ctx.mean_file_bytes < th.SMALL_FILE_BYTES:
        out.append(_rec(
            "Pack the small files into large shards (tar / WebDataset, or one memory-mapped array)",
            f"files average {ctx.mean_file_bytes / 1024:.0f} KiB: below {th.SMALL_FILE_BYTES // 1024} KiB, "
            "HDDs and network storage are limited by operations per second, not bandwidth.",
            "sequential reads at the device's bandwidth instead of its IOPS limit", "io"))
    return out


def _bytes(n: float | None) -> str:
    from .io import human_bytes

    return human_bytes(n or 0)


def _transfer_is_scheduling(ctx: Context) -> str | None:
    """Why a batch's way to the main process is a wait for a core, not its bytes (the reason, or None).

    Told apart before advising (thresholds.TRANSFER_*): bytes per batch, where recorded, that shared memory moves
    in a fraction of the measured time cannot be the cause; the main thread's run-queue wait inside next() is a
    direct measure of waiting for a core. A 2 KB batch on 2 busy cores was told to send compact batches because it
    "took 20.7 ms": the main process was waiting for a core."""
    t = ctx.transfer_ms
    if t <= 0:
        return None
    runq = ctx.main_runq_ms or 0.0
    tiny = (ctx.batch_bytes is not None
            and ctx.batch_bytes / th.TRANSFER_BYTES_FLOOR_B_PER_S * 1e3 < th.TRANSFER_BYTES_SHARE * t)
    queued = runq >= th.TRANSFER_RUNQ_SHARE * t
    if not (tiny or queued):
        return None
    busy = (f"; the cores were {ctx.cpu_util * 100:.0f} % busy ({ctx.workers} workers and the main process on "
            f"{ctx.usable_cores:g} cores)" if ctx.cpu_util is not None else "")
    words = f"batches take {t:.1f} ms each to reach the main process, but "
    if tiny:
        words += (f"each is only {_bytes(ctx.batch_bytes)}, which shared memory moves in well under "
                  f"{th.TRANSFER_BYTES_SHARE * t:.1f} ms")
        if ctx.main_runq_ms is not None:
            words += f", and the main thread waited {runq:.1f} ms per step for a core (its run queue)"
    else:
        words += (f"the main thread waited {runq:.1f} ms per step for a core (its run queue, /proc schedstat)"
                  + ("" if ctx.batch_bytes is not None else "; bytes per batch were not recorded"))
    return words + busy + "."


def _main_thread_queued(ctx: Context) -> bool:
    """Whether the main thread's run-queue wait explains the transfer time (thresholds.TRANSFER_RUNQ_SHARE)."""
    return (ctx.main_runq_ms or 0.0) >= th.TRANSFER_RUNQ_SHARE * ctx.transfer_ms


def _blocked_words(ctx: Context) -> str:
    """How much of a sample was spent waiting on reads, as measured: the timed read stage where there is one, else
    the dataset calls' blocked time (a script has no read stage: its 0.0 ms would say reads cost nothing)."""
    if ctx.timed_reads:
        return (f"{ctx.sample_read_ms:.1f} ms per read of its {ctx.sample_read_ms + ctx.sample_cpu_ms:.1f} ms per "
                "sample")
    blocked = ctx.sample_blocked_ms or 0.0
    return f"{blocked:.1f} ms blocked per sample (measured) of its {blocked + ctx.sample_cpu_ms:.1f} ms per sample"


def _transfer_rules(ctx: Context, stall_: Stall | StallView) -> list[Recommendation]:
    stall = stall_ if isinstance(stall_, StallView) else view(StallView, stall_)
    out = []
    tr = float(stall.by_cause.get("transfer", 0))
    if ctx.device_type == "cuda" and not ctx.pin_memory:
        out.append(_rec(f"Turn on {ctx.knob('pin_memory')} and copy with non_blocking=True",
                        f"the H2D copy takes {ctx.h2d_ms:.1f} ms per step from pageable memory, and transfer is "
                        f"{tr:.2f} s of the wait.",
                        "pinned copies run at full PCIe bandwidth (commonly ~2x pageable); they overlap compute only "
                        "when issued ahead of the step or on a separate stream", "transfer"))
    if ctx.job_kind != "builtin":
        sched = _transfer_is_scheduling(ctx)
        if sched and _main_thread_queued(ctx):
            out.append(_rec(
                "Give the main process a core: fewer workers or model threads (torch.set_num_threads), or more cores "
                "(batches are not slow to send; the processes wait for a core)", sched,
                "removes the wait for a core from each batch's way to the main process", "transfer"))
            return out
        if sched:  # a tiny batch and a main thread that had its core: the wait is on the workers' side of the queue
            out.append(_rec(
                "Give the workers' own threads a core and the GIL: fewer workers, or dataset code that lets go of the "
                "GIL (C, numpy or torch ops instead of pure-Python loops); batches are not slow to send", sched
                + " A worker's queue threads pickle each batch and hand its storage over; pure-Python work in the "
                "same worker holds the GIL while they wait (docs/attribution.md, Limits).",
                "removes the workers' wait from each batch's way to the main process", "transfer"))
            return out
        size = (f"each batch is {_bytes(ctx.batch_bytes)} and takes {ctx.transfer_ms:.1f} ms to reach the main "
                "process" if ctx.batch_bytes is not None else
                f"batches take {ctx.transfer_ms:.1f} ms each to reach the main process (bytes per batch not recorded"
                + (f"; the main thread waited {ctx.main_runq_ms:.1f} ms per step for a core, too little to explain it"
                   if ctx.main_runq_ms is not None else "") + ")")
        out.append(_rec(
            "Send compact batches from the workers (uint8 / float16 instead of float32; decode-time tensors, not "
            "Python objects) and convert on the device",
            f"{size} (pickling and shared memory).",
            "fewer bytes per batch through shared memory, pinning and PCIe", "transfer"))
        return out
    bytes_per_batch = ctx.batch_size * 3 * ctx.image_size ** 2 * 4
    out.append(_rec(
        "Send uint8 images from the workers and convert/normalise on the device",
        f"each batch is ~{bytes_per_batch / 1e6:.0f} MB of float32 passing through shared memory "
        f"({ctx.transfer_ms:.1f} ms per batch worker→main).",
        "4x fewer bytes per batch through shared memory, pinning and PCIe", "transfer"))
    return out


def _compute_rules(ctx: Context, memory: MemoryView) -> list[Recommendation]:
    out = []
    if ctx.device_type == "cuda":
        if not ctx.amp:
            out.append(_rec("Use mixed precision (torch.autocast with bfloat16"
                            + (", --amp)" if ctx.job_kind == "builtin" else ")"),
                            f"the input keeps up and compute takes {ctx.compute_ms:.1f} ms per step in fp32.",
                            "tensor-core math: typically 1.5-3x faster convolutions/matmuls on Ampere or newer",
                            "compute"))
        peak, total = memory.device_peak_bytes, memory.device_total_bytes
        if peak and total and peak < th.BATCH_GROWTH_MAX_PEAK_SHARE * total:
            factor = int(th.BATCH_GROWTH_USABLE_SHARE * total // peak)
            if factor >= 2:
                out.append(_rec(f"Raise {ctx.knob('batch_size')} from {ctx.batch_size} to {ctx.batch_size * factor}",
                                f"the step peaked at {peak / 2**30:.1f} GiB of {total / 2**30:.0f} GiB.",
                                "better GPU occupancy per kernel; scale the learning rate with it", "compute"))
        out.append(_rec("Try channels_last memory format and torch.compile",
                        f"compute ({ctx.compute_ms:.1f} ms per step) is the limit; both cut kernel time for convnets.",
                        "commonly 10-30 % on convolutional models", "compute"))
    else:
        out.append(_rec("Run the model on a GPU (this run computed on the CPU)",
                        f"compute takes {ctx.compute_ms:.0f} ms per step on the CPU and the input keeps up.",
                        "GPU compute is typically 10-100x faster; the input pipeline then decides speed", "compute"))
        slack = ctx.ready_ahead_ms >= th.READY_AHEAD_SLACK_OF_COMPUTE * ctx.compute_ms
        if ctx.workers > 1 and slack and ctx.cpu_util is not None and ctx.cpu_util >= th.CPU_SATURATED_FROM:
            out.append(_rec(f"On a CPU-only machine, try fewer workers ({ctx.workers - 1})",
                            f"finished batches waited {ctx.ready_ahead_ms:.0f} ms on average in the queue while the "
                            f"{ctx.workers} workers and the model shared {ctx.usable_cores:g} cores that were "
                            f"{ctx.cpu_util * 100:.0f} % busy: the workers take cores from the model's threads.",
                            f"more of the {ctx.usable_cores:g} cores for the {ctx.compute_ms:.0f} ms per-step compute",
                            "compute"))
    return out


# The rules for each idle cause that has any ("other" has none: nothing to act on).
RULES = {"io": _io_rules, "cpu": _cpu_rules, "transfer": _transfer_rules}


def recommend(verdict: Verdict, stall: Stall, ctx: Context,
              memory: Memory | None = None, whatif: WhatIf | None = None) -> list[Recommendation]:
    b = view(VerdictView, verdict).bottleneck
    mem = view(MemoryView, memory)
    if b == NOTHING_MEASURED:
        return []
    if b == "memory":
        return list(mem.oom_recommendations)
    recs = _compute_rules(ctx, mem) if b == "compute" else _input_rules(b, view(StallView, stall), ctx)
    kept, rejected = check_advice(recs, whatif)
    # the what-if being built: it predicted (a record it could not read has no predictions and gets no list)
    if isinstance(whatif, dict) and "predictions" in whatif and whatif["predictions"] is not None:
        # What the check dropped, and why: a reader of run.json can see the advice its own numbers ruled out.
        whatif["advice_rejected"] = [{"action": r["action"], "because": r["rejected_because"]} for r in rejected]
    return kept


# --- what-if quotes: each recommendation with a prediction says what it predicts, or is dropped -----------------
def _sps(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def _quote(p: PredictionView, label: str, whatif: WhatIfView) -> str:
    """"2 workers: ≈ 212 samples/s (190–240), at least +12 %, then <what binds>": the low end is the claim."""
    assert p.samples_per_s is not None  # check_advice quotes only predicted rows
    iv = p.interval
    low = p.change_low
    pct = ""
    if low is not None:
        pct = f", at least {low * 100:+.0f} %"
    elif p.change is not None:
        pct = f" ({p.change * 100:+.0f} %)"
    then = p.binds_words or p.binds or ""
    if p.binds == "storage":
        from ..storage.spec import format_rate

        rchar = float(whatif.inputs.get("rchar") or 0.0)  # the model's inputs: a dict of the rates it used
        if rchar > 0:  # the device's rate, as a user buys it
            then += f" at {format_rate(p.samples_per_s * rchar)}"
    span = f" ({_sps(iv[0])}–{_sps(iv[1])})" if iv else ""
    return (f"{label}: ≈ {_sps(p.samples_per_s)} samples/s{span}{pct}, then {then} "
            f"(predicted from this run; {p.assumption})")


_WORKERS = re.compile(r"(?:--workers|num_workers) (?:from \d+ to |\()?(\d+)|fewer workers \((\d+)\)")


def _fewest_workers_near_best(action: str, preds: list[dict[str, Any]]) -> str:
    """``action`` with its worker count raised to the fewest workers the what-if predicts within
    ``WORKERS_NEAR_BEST`` of its best worker count, where that is more than the rules chose (they choose from cores
    alone); ``action`` unchanged otherwise, and for advice to use fewer workers."""
    m = _WORKERS.search(action)
    if not m or m.group(1) is None or "fewer" in action.lower():
        return action
    n = int(m.group(1))
    rows = [view(PredictionView, p) for p in preds]
    rates = {int(p.workers): float(p.samples_per_s) for p in rows
             if p.kind == "workers" and p.workers is not None and p.samples_per_s is not None}
    if not rates:
        return action
    cap = max(n, th.FIRST_WORKERS_AT_MOST) if action.startswith("Use DataLoader workers") else max(rates)
    best = max(r for k, r in rates.items() if k <= cap)
    near = min(k for k, r in rates.items() if k <= cap and r >= best * (1 - th.WORKERS_NEAR_BEST))
    if near <= n or rates.get(n, 0.0) >= best * (1 - th.WORKERS_NEAR_BEST):
        return action
    return action[:m.start(1)] + str(near) + action[m.end(1):]


def prediction_for(action: str, preds: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, str]:
    """The what-if prediction a recommendation's action corresponds to, and how to name it."""
    rows = [view(PredictionView, p) for p in preds]

    def first(ok: Callable[[PredictionView], bool]) -> dict[str, Any] | None:
        return next((p for p, v in zip(preds, rows) if ok(v)), None)

    m = _WORKERS.search(action)
    if m:
        n = int(m.group(1) or m.group(2))
        return first(lambda v: v.kind == "workers" and v.workers == n), f"{n} worker{'s' if n != 1 else ''}"
    if "on a GPU" in action:
        return first(lambda v: v.kind == "model" and v.speedup == 10.0), "the model 10x faster"
    if "mixed precision" in action:
        return first(lambda v: v.kind == "model" and v.speedup == 2.0), "the model 2x faster"
    if "pin-memory" in action or "pin_memory" in action:
        return first(lambda v: v.kind == "pin_memory"), "pin_memory on"
    if "faster local storage" in action:
        return first(lambda v: v.storage == "nvme"), "on NVMe"
    if "Serve the dataset from RAM" in action:
        return first(lambda v: v.setting == "cache warm"), "from the page cache"
    return None, ""


# Actions about storage: they only make sense for a job that read files.
_STORAGE_ACTIONS = ("faster local storage", "Serve the dataset from RAM", "Pack the small files")


class RejectedAdvice(Recommendation, total=False):
    """A recommendation the what-if ruled out, with why (``check_advice``); run.json keeps only action and why."""
    rejected_because: str


def check_advice(recs: list[Recommendation], whatif: WhatIf | None
                 ) -> tuple[list[Recommendation], list[RejectedAdvice]]:
    """The one consistency check between advice and the record's own what-if: (kept, rejected).

    Each recommendation a prediction covers is rewritten to quote it (the interval, its low end as the claim);
    it is rejected when the prediction says it would not help (point gain under ``GAIN_CLAIMED_FROM``), when the
    what-if could not predict it at all, or when it is about storage and the job read no files. A prediction whose
    point gain is real but whose low end is within noise is kept without a claim: it says to re-measure. Each
    rejected one carries ``rejected_because``.
    """
    wi = view(WhatIfView, whatif)
    preds = wi.predictions
    kept: list[Recommendation] = []
    rejected: list[RejectedAdvice] = []
    read_nothing = "read no files" in str(wi.storage_note or "")
    for r in recs:
        if read_nothing and any(k in r["action"] for k in _STORAGE_ACTIONS):
            rejected.append({**r, "rejected_because": str(wi.storage_note)})
            continue
        if preds:
            r = {**r, "action": _fewest_workers_near_best(r["action"], preds)}
            if any(k["action"] == r["action"] for k in kept):
                continue  # two rules' worker counts raised to the same one
        row, label = prediction_for(r["action"], preds) if preds else (None, "")
        if row is None:
            kept.append(r)
            continue
        p = view(PredictionView, row)
        if p.samples_per_s is None:
            rejected.append({**r, "rejected_because": f"the what-if cannot predict {label}: {row['assumption']}"})
            continue
        change = p.change
        if change is not None and change < th.GAIN_CLAIMED_FROM:
            rejected.append({**r, "rejected_because": f"the what-if puts {label} at {change * 100:+.0f} % "
                                                     f"(under {th.GAIN_CLAIMED_FROM * 100:.0f} %)"})
            continue
        gain = _quote(p, label, wi)
        low = p.change_low
        if low is not None and low < th.GAIN_CLAIMED_FROM:
            iv = p.interval or [p.samples_per_s] * 2
            remeasure = wi.steadiness.remeasure
            gain = (f"{label}: ≈ {_sps(p.samples_per_s)} samples/s ({_sps(iv[0])}–{_sps(iv[1])}); the low end is "
                    "within noise of this run, so no gain is claimed"
                    + (f" — measure it: {remeasure}" if remeasure else "")
                    + f" (predicted from this run; {row['assumption']})")
        kept.append({**r, "expected_gain": gain})
    return kept, rejected


def quote_predictions(recs: list[Recommendation], whatif: WhatIf | None) -> list[Recommendation]:
    """The recommendations :func:`check_advice` keeps."""
    return check_advice(recs, whatif)[0]
# --- end what-if quotes ----------------------------------------------------------------------------------------------


def _input_rules(b: str | None, stall: StallView, ctx: Context) -> list[Recommendation]:
    recs: list[Recommendation] = []
    total = float(stall.seconds) or 1.0
    by = stall.by_cause
    # Rules for every cause holding a worthwhile share, the verdict's own cause first.
    order = [b] + [c for c in RULES if c != b]
    for cause in order:
        rules = RULES.get(cause) if cause is not None else None
        if cause is None or rules is None:
            continue
        if float(by.get(cause, 0.0)) / total < th.CAUSE_WORTH_ACTING_ON and cause != b:
            continue
        recs += rules(ctx, stall)
    return recs
