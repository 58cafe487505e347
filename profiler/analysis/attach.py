"""Analysis of an ``attach`` record: sampled shares → the same stall, causes, bands and verdict as ``run``.

Pure: reads ``rec.attach`` (counts and kernel clocks), fills the derived sections. How each figure is estimated:

- **Wait** (the stall): the share of the main thread's stack samples inside the DataLoader's ``__next__``, times the
  window. A binomial share; its 95 % Wilson interval and the sample count go with it. Samples are taken at a fixed
  rate, so neighbouring samples are correlated and the interval is a lower bound on the true uncertainty.
- **What the producing workers were doing**: each worker's main-thread samples give the share of its time producing
  (inside the fetch: getitem, decode, augment, collate, ...), putting a batch on its queue, or idle (waiting for an
  index); its queue-feeder thread's busy samples are the transfer (pickling and sending the batch), as are the
  pin-memory thread's busy samples. The kernel's
  exact per-thread clocks over the window split the producing time: time on a core and time waiting for a core are
  ``cpu`` (an idle worker uses no CPU, so all of its CPU time is counted as producing, up to the producing time);
  the rest of the producing time was blocked, ``io`` — ``blocked_device`` as far as the thread's scheduler-state
  samples show it in D (uninterruptible, a block-device read), ``blocked_other`` otherwise.
- **The stall by cause**: the main thread's samples inside ``__next__`` that were taking a batch in (rebuilding its
  shared-memory tensors, reading and unpickling it: classify ``_receiving``) are ``transfer`` as sampled, except the
  main thread's waits for a core in them, ``cpu`` as ``run`` counts them (see ``main_queued_s``); the rest of
  the wait (polling for a batch) is apportioned by the workers' producing mix (cpu / io / transfer), as ``run``
  apportions each idle gap by what the producing worker was doing; when no worker was seen producing, ``other``.
  With workers = 0 the main thread loads the batch inside ``__next__``: its blocked time (wall minus on-core and
  run-queue) is taken as the blocked part of the wait, the rest is cpu; this assumes the model step itself runs on
  a core (a CPU model), and overstates io for a CUDA job whose main thread blocks in synchronisations.
- **Verdict**: the same bands (profiler/thresholds.py) and causes (profiler/vocab.py) as ``run``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import thresholds as th
from .. import vocab
from ..record.read import AttachThreadView, AttachView, StallView, view
from .verdict import NOTHING_MEASURED, VERDICT_CAUSES, severity

if TYPE_CHECKING:
    from ..record import RunRecord
    from ..record.schema import Finding, Recommendation, StageStats, Stall, Verdict

#: z for a two-sided 95 % interval.
Z95 = 1.959964
IDLE = "idle"
#: A worker whose main thread spent at least this much time on a core in the window was making batches, even when no
#: stack sample caught it (a light loader beside a heavy model makes a batch in a millisecond or two a step). Why
#: 2 ms: a worker idle between epochs wakes every 5 s (torch's status check) for microseconds; one batch is more.
ACTIVE_WORKER_CPU_S = 0.002


def wilson(k: int, n: int) -> tuple[float, float]:
    """95 % Wilson score interval of a binomial share k/n (well-behaved at 0, 1 and small n)."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + Z95 ** 2 / n
    c = (p + Z95 ** 2 / (2 * n)) / d
    h = Z95 * math.sqrt(p * (1 - p) / n + Z95 ** 2 / (4 * n * n)) / d
    return (0.0 if k == 0 else max(0.0, c - h)), (1.0 if k == n else min(1.0, c + h))


def is_attach(rec: RunRecord) -> bool:
    return bool(rec.job_kind == "attach" and rec.attach)


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %" if x >= 0.1 else f"{x * 100:.1f} %"


def _attach(a: AttachView | Mapping[str, Any]) -> AttachView:
    """The attach section as its view (tests and callers may hand the raw section)."""
    return a if isinstance(a, AttachView) else view(AttachView, a)


def _thread(t: AttachThreadView | Mapping[str, Any] | None) -> AttachThreadView | None:
    return t if t is None or isinstance(t, AttachThreadView) else view(AttachThreadView, t)


def _by_role(threads: list[AttachThreadView], role: str) -> list[AttachThreadView]:
    return [t for t in threads if t.role == role]


def worker_mix(a_: AttachView | Mapping[str, Any]) -> dict[str, Any]:
    """Per worker and in all: seconds producing by kind (on_cpu, runqueue, blocked_device, blocked_other,
    transfer), stage samples, and the shares behind them."""
    a = _attach(a_)
    threads = a.threads
    feeders = {t.pid: t for t in _by_role(threads, "worker_feeder")}
    rows = []
    for t in _by_role(threads, "worker"):
        n = t.samples
        if n <= 0:
            rows.extend(_unsampled_worker(t))
            continue
        st = t.stages
        wall = float(t.wall_s or a.seconds or 0.0)
        prod_k = sum(v for k, v in st.items() if k not in (IDLE, "transfer"))
        prod_s = wall * prod_k / n
        put_s = wall * st.get("transfer", 0) / n
        f = feeders.get(t.pid)
        fn = f.samples if f is not None else 0
        feed_s = float(f.wall_s or wall) * f.stages.get("transfer", 0) / fn if f is not None and fn else 0.0
        oncpu, runq = float(t.on_cpu_s or 0.0), float(t.runq_s or 0.0)
        busy = min(prod_s, max(0.0, oncpu + runq - put_s))
        on = busy * (oncpu / (oncpu + runq)) if oncpu + runq > 0 else 0.0
        blocked = max(0.0, prod_s - busy)
        n_states = sum(t.states.values())
        dev = min(blocked, wall * t.states.get("D", 0) / n_states) if n_states else 0.0
        rows.append({"pid": t.pid, "worker": t.worker, "samples": n, "wall_s": wall,
                     "producing_share": prod_k / n, "idle_share": st.get(IDLE, 0) / n, "unsampled": False,
                     "kinds": {"on_cpu": on, "runqueue": busy - on, "blocked_device": dev,
                               "blocked_other": blocked - dev, "transfer": put_s + feed_s},
                     "stages": dict(st)})
    kinds = {k: sum(r["kinds"][k] for r in rows) for k in ("on_cpu", "runqueue", "blocked_device", "blocked_other",
                                                            "transfer")}
    for t in _by_role(threads, "pin_memory"):  # pinning a batch before the main thread may take it: transfer
        if t.samples:
            kinds["transfer"] += float(t.wall_s or a.seconds or 0.0) * t.stages.get("transfer", 0) / t.samples
    return {"workers": rows, "kinds": kinds, "total_s": sum(kinds.values())}


def _unsampled_worker(t: AttachThreadView) -> list[dict[str, Any]]:
    """A worker with kernel clocks but no stack samples: its whole window is taken as producing (idle cannot be told
    apart without stacks), split by the clocks alone; ``unsampled`` marks the row, and the verdict says so."""
    wall = float(t.wall_s or 0.0)
    if wall <= 0:
        return []
    oncpu, runq = float(t.on_cpu_s or 0.0), float(t.runq_s or 0.0)
    blocked = max(0.0, wall - oncpu - runq)
    n_states = sum(t.states.values())
    dev = min(blocked, wall * t.states.get("D", 0) / n_states) if n_states else 0.0
    return [{"pid": t.pid, "worker": t.worker, "samples": 0, "wall_s": wall, "producing_share": 1.0,
             "idle_share": 0.0, "unsampled": True,
             "kinds": {"on_cpu": oncpu, "runqueue": runq, "blocked_device": dev, "blocked_other": blocked - dev,
                       "transfer": 0.0}, "stages": {}}]


def main_thread(a_: AttachView | Mapping[str, Any]) -> AttachThreadView | None:
    a = _attach(a_)
    mains = [t for t in _by_role(a.threads, "main") if t.tid == t.pid] or _by_role(a.threads, "main")
    return max(mains, key=lambda t: t.samples) if mains else None


def main_queued_s(m_: AttachThreadView | Mapping[str, Any] | None, recv_s: float, k_recv: int, k_wait: int,
                  n_main: int) -> float:
    """Seconds of the main thread's taking-in (``recv_s``, ``k_recv`` samples) that it spent waiting for a core: its
    run-queue time over the window, apportioned over the samples in which it had work to run (taking a batch in, and
    everything outside the DataLoader) — polling for a batch it is blocked and queues for no core — at most
    ``recv_s``.

    Why: ``run`` counts the main thread's run-queue delay during each step's wait as cpu contention, not transfer
    (profiler/analysis/attribution.py), and it is right to: a main thread that waits for a core while it rebuilds a
    batch's tensors is slowed by the cores being busy, not by the batch's size, and the fix is a core for the main
    process. attach has the window's run-queue total only, not one per step. Without this, on
    tests/jobs/h4_transfer.py beside two busy loops pinned to each core attach kept all of the taking-in as transfer
    (100 % of the wait) where ``run``, on the same execution, measured 35 % of it as the main thread waiting for a core
    (now attach: 37 %); in a CI run under load the two named different causes (issue 36 item 5)."""
    m = _thread(m_)
    if m is None or recv_s <= 0 or k_recv <= 0:
        return 0.0
    runq = float(m.runq_s or 0.0)
    busy = k_recv + max(0, n_main - k_wait)
    return min(recv_s, runq * k_recv / busy)


def _main_queued_of(stall: StallView, a: AttachView) -> float:
    """``main_queued_s`` again from the record and its stall (for the recommendations)."""
    m = main_thread(a)
    k_wait, n_main = stall.wait_samples or 0, stall.main_samples or 0
    k_recv = min(int(m.wait_stages.get("transfer", 0)) if m is not None else 0, k_wait)
    recv_s = float(stall.seconds) * k_recv / k_wait if k_wait else 0.0
    return main_queued_s(m, recv_s, k_recv, k_wait, n_main)


def _main_load_kinds(m: AttachThreadView, wait_s: float, window_s: float) -> dict[str, float]:
    """workers = 0: the wait split by the main thread's own kernel clocks (see the module docstring)."""
    wall = float(m.wall_s or window_s)
    oncpu, runq = float(m.on_cpu_s or 0.0), float(m.runq_s or 0.0)
    blocked = min(wait_s, max(0.0, wall - oncpu - runq))
    busy = wait_s - blocked
    n = sum(m.states.values())
    dev = min(blocked, wall * m.states.get("D", 0) / n) if n else 0.0
    on = busy * oncpu / (oncpu + runq) if oncpu + runq > 0 else busy
    return {"on_cpu": on, "runqueue": busy - on, "blocked_device": dev, "blocked_other": blocked - dev,
            "transfer": 0.0}


def stage_table(a: AttachView, m: AttachThreadView | None) -> dict[str, StageStats]:
    """Stages as shares of sampled time: worker stages of the workers' sampled time (with workers = 0, of the main
    thread's), main-loop stages of the main thread's; each with its samples and 95 % interval."""
    out: dict[str, StageStats] = {}
    workers = _by_role(a.threads, "worker")
    n_w = sum(t.samples for t in workers)
    wall_w = sum(float(t.wall_s or 0.0) for t in workers)
    counts: dict[str, int] = {}
    for t in workers:
        for k, v in t.stages.items():
            counts[k] = counts.get(k, 0) + int(v)

    def row(name: str, k: int, n: int, seconds: float, per: str) -> StageStats:
        lo, hi = wilson(k, n)
        return {"per": per, "basis": "sampled", "count": k, "share": round(k / n, 4) if n else 0.0,
                "share_low": round(lo, 4), "share_high": round(hi, 4), "total_s": round(seconds * k / n, 6) if n
                else 0.0}

    for k, v in sorted(counts.items(), key=lambda kv: -kv[1]):
        out[k] = row(k, v, n_w, wall_w, "worker")
    if m is not None:
        n = m.samples
        wall = float(m.wall_s or a.seconds or 0.0)
        for k, v in m.stages.items():
            out[k] = row(k, int(v), n, wall, "main")
        for k, v in m.wait_stages.items():  # workers = 0: the loading inside the wait
            if k not in out:
                out[k] = row(k, int(v), n, wall, "main (inside wait)")
    return out


def analyze_attach(rec: RunRecord) -> RunRecord:
    a = view(AttachView, rec.attach)
    window_s = float(a.seconds or rec.window["seconds"] or 0.0)
    m = main_thread(a)
    n_main = m.samples if m is not None else 0
    k_wait = int(m.stages.get("wait", 0)) if m is not None else 0
    frac = k_wait / n_main if n_main else 0.0
    lo, hi = wilson(k_wait, n_main)
    wait_s = frac * window_s
    mix = worker_mix(a)
    # the most workers alive at once (a loader re-forking its workers each epoch is still num_workers workers);
    # records written before that figure: the workers listed
    at_once = a.workers_at_once
    workers = int(at_once) if at_once is not None else len([p for p in a.processes if p.role == "worker"])
    # The part of the wait the main thread spent taking a worker's batch in (rebuilding its tensors, unpickling it:
    # classify._receiving) is transfer as sampled; only the rest, waiting for a batch, is split by the workers' mix.
    k_recv = int(m.wait_stages.get("transfer", 0)) if m is not None and workers else 0
    recv_s = wait_s * min(k_recv, k_wait) / k_wait if k_wait else 0.0
    queued_s = main_queued_s(m, recv_s, min(k_recv, k_wait), k_wait, n_main)
    if workers == 0 and m is not None:
        kinds = _main_load_kinds(m, wait_s, window_s)
        total = sum(kinds.values())
    else:
        kinds, total = mix["kinds"], mix["total_s"]
    rest_s = wait_s - recv_s
    by_kind = {k: (rest_s * v / total if total > 0 else 0.0) for k, v in kinds.items()}
    # Taking the batch in is transfer, except the main thread's waits for a core in it: cpu contention, as ``run``
    # counts them per step (analysis/attribution.py; see ``main_queued_s``)
    by_kind["transfer"] = by_kind.get("transfer", 0.0) + recv_s - queued_s
    by_kind["runqueue"] = by_kind.get("runqueue", 0.0) + queued_s
    by_cause = {c: 0.0 for c in vocab.CAUSE_NAMES}
    for k, v in by_kind.items():
        by_cause[vocab.KINDS[k][0]] += v
    if total <= 0:
        by_cause["other"] = rest_s
    by_kind["other"] = by_cause["other"]
    stall: Stall = {
        "seconds": round(wait_s, 6), "fraction": round(frac, 4), "fraction_low": round(lo, 4),
        "fraction_high": round(hi, 4), "main_samples": n_main, "wait_samples": k_wait,
        "by_cause": {k: round(v, 6) for k, v in by_cause.items()},
        "share_by_cause": {k: round(v / wait_s, 4) if wait_s > 0 else 0.0 for k, v in by_cause.items()},
        "by_kind": {k: round(v, 6) for k, v in by_kind.items()},
        "method": ("sampled: the main thread's share of stack samples inside DataLoader.__next__; those taking a "
                   f"batch in ({min(k_recv, k_wait)} of {k_wait}) are transfer but for the main thread's waits "
                   f"for a core ({queued_s:.3f} s, cpu), the rest split by the producing workers' sampled stages and "
                   "kernel clocks (profiler/analysis/attach.py)"),
    }
    rec.stall = stall
    rec.stages = stage_table(a, m)
    rec.verdict = verdict(a, stall, mix, m, workers, window_s)
    rec.throughput = {"window_s": round(window_s, 6)}
    rec.whatif = {"error": "an attach record has no per-sample timings to predict other settings from"}
    rec.ceilings = {}
    rec.ram = {}
    findings: list[Finding] = []
    if rec.partial:
        findings.append({"kind": "partial", "message": f"Partial attach: {rec.partial_reason}. Figures cover the "
                                                       f"{window_s:.1f} s sampled."})
    errs = int(a.sampler.errors)
    if errs:
        findings.append({"kind": "sampler_errors", "message": f"{errs} stack samples could not be read "
                                                              "(a process exiting or a torn non-blocking read)."})
    for key, why in a.absent.items():
        findings.append({"kind": "absent", "message": f"Not measured from outside — {key}: {why}."})
    rec.findings = findings
    return rec


def _cores(rec_cores: float | None) -> str:
    return f"{rec_cores:g}" if rec_cores else "?"


def verdict(a_: AttachView | Mapping[str, Any], stall: Stall, mix: dict[str, Any],
            m_: AttachThreadView | Mapping[str, Any] | None, workers: int, window_s: float) -> Verdict:
    a, m, sv = _attach(a_), _thread(m_), view(StallView, stall)
    n_main = sv.main_samples or 0
    # a job between epochs (validating, checkpointing) has workers, idle ones: activity is a wait or a worker making
    # a batch, not the workers' existence
    any_dl = bool(sv.wait_samples or 0) or bool(m is not None and m.wait_stages) or any(
        r["producing_share"] > 0 for r in mix["workers"]) or any(
        float(t.on_cpu_s or 0.0) >= ACTIVE_WORKER_CPU_S for t in _by_role(a.threads, "worker"))
    if n_main == 0 or not any_dl:
        why = "no samples of the main thread" if n_main == 0 else "no DataLoader activity seen"
        return {"bottleneck": NOTHING_MEASURED, "severity": "nothing measured",
                "summary": f"No verdict: {why} in {window_s:.1f} s (the job may be between epochs, validating or "
                           "checkpointing); attach again while it trains.",
                "recommendations": []}
    frac = float(stall["fraction"])
    band = f"{_pct(frac)} (95 % interval {_pct(stall['fraction_low'])}–{_pct(stall['fraction_high'])}, " \
           f"{stall['wait_samples']} of {n_main} main-thread samples)"
    sev = severity(frac)
    who = f"{workers} worker{'s' if workers != 1 else ''}" if workers else "the main process (workers = 0)"
    total = float(sv.seconds)
    if frac < th.NOT_INPUT_BOUND_BELOW or total <= 0:
        return {"bottleneck": "compute", "severity": sev,
                "summary": f"Compute-bound: the input pipeline keeps up; the main thread waited for the next batch "
                           f"{band} of {window_s:.1f} s sampled.",
                "recommendations": recommendations("compute", sv, mix, workers, a)}
    by = stall["by_cause"]
    causes = {c: float(by.get(c, 0.0)) for c in VERDICT_CAUSES}
    cause = max(causes, key=lambda c: causes[c])
    share = causes[cause] / total if total > 0 else 0.0
    summary = (f"Input-bound ({sev.split()[0]}): the main thread waited for the next batch {band}; "
               f"{_pct(share)} of that wait was {vocab.CAUSE[cause].words} in {who}.")
    other = float(by.get("other", 0.0)) / total if total > 0 else 0.0
    if other >= th.OTHER_SHARE_WARN:
        summary += f" Note: {_pct(other)} of the wait could not be tied to what the workers were doing (other)."
        if causes[cause] <= 0:
            cause = "other"
    unsampled = [r for r in mix["workers"] if r["unsampled"]]
    if unsampled:
        summary += (f" {len(unsampled)} worker{'s' if len(unsampled) != 1 else ''} could not be stack-sampled: "
                    "judged by the kernel's clocks alone (all of its time taken as producing).")
    out: Verdict = {"bottleneck": cause if cause != "other" else "other", "severity": sev,
                    "summary": summary, "cause_share": round(share, 4)}
    out["recommendations"] = recommendations(cause, sv, mix, workers, a)
    return out


def recommendations(cause: str, stall: StallView, mix: dict[str, Any], workers: int,
                    a: AttachView) -> list[Recommendation]:
    """A few rules on the sampled numbers, each quoting them; the exact what-if needs a ``run``."""
    out: list[Recommendation] = []
    rows = mix["workers"]
    busy = sum(r["producing_share"] for r in rows) / len(rows) if rows else 0.0
    util = a.cpu_util
    kinds = stall.by_kind
    wait = float(stall.seconds)

    def rec(action: str, reason: str, gain: str, c: str) -> None:
        out.append({"action": action, "reason": reason, "expected_gain": gain, "cause": c})

    if cause == "cpu":
        runq = float(kinds.get("runqueue", 0.0))
        queued = _main_queued_of(stall, a) if workers else 0.0
        if queued > 0 and queued >= 0.5 * runq:
            rec("Give the main process a core: fewer workers or model threads (torch.set_num_threads), or more cores",
                f"{_pct(queued / wait) if wait > 0 else '0 %'} of the wait was the main thread waiting for a core "
                f"while it took a batch in (the machine's CPU was {_pct(util) if util is not None else 'fully'} "
                "busy): batches are not slow to send, the processes wait for a core",
                "removes the wait for a core from each batch's way to the main process", "cpu")
        elif workers == 0:
            rec("Use DataLoader workers: num_workers 2 or more",
                f"with workers = 0 the main thread loads every batch itself: {_pct(stall.fraction)} of its "
                "samples were inside the DataLoader", "overlaps loading with the model step", "cpu")
        elif util is not None and util < th.CPU_SATURATED_FROM and runq < 0.25 * wait:
            rec(f"Raise num_workers from {workers} to {workers + max(1, workers // 2)}",
                f"the workers were producing {_pct(busy)} of their sampled time and the machine's CPU was only "
                f"{_pct(util)} busy", "more batches in flight; measure with `profiler run` or `sweep`", "cpu")
        else:
            rec("Make each sample cheaper (lighter augmentation, pre-resized or pre-decoded data)",
                f"the CPU was {_pct(util) if util is not None else 'fully'} busy and "
                f"{_pct(runq / wait) if wait > 0 else '0 %'} of the wait was workers waiting for a core: more "
                "workers would only share the same cores", "less CPU per sample", "cpu")
    elif cause == "io":
        dev = float(kinds.get("blocked_device", 0.0))
        rec(f"More reads in flight: num_workers {max(workers * th.IO_WORKERS_GROWTH, workers + 2)}",
            f"the workers were blocked {_pct((dev + float(kinds.get('blocked_other', 0.0))) / wait) if wait else '0 %'}"
            " of the wait (blocked readers use no CPU)", "overlaps more reads", "io")
        rec("Faster or local storage, or keep the dataset in the page cache / RAM",
            f"{_pct(dev / wait) if wait else '0 %'} of the wait was a worker in a block-device read",
            "removes the device wait", "io")
    elif cause == "transfer":
        rec("pin_memory=True and smaller batches on the wire (uint8 images, normalised on the device)",
            f"{_pct(float(kinds.get('transfer', 0.0)) / wait) if wait else '0 %'} of the wait was batches being "
            "pickled and sent from the workers", "less time moving batches", "transfer")
    rec("For per-batch latencies, exact per-sample times and what-if predictions, profile a run under "
        "`python -m profiler run`", "attach sees shares of sampled time only (see the absent figures)",
        "the exact figures", "other")
    return out
