"""A window of the monitored job: the steps a long-lived Session recorded since the last cut, summarised.

Why a cut and not a Session per window: the profiled loader's iterator, its workers' instrumentation and its epoch
bookkeeping belong to one Session for the whole job (loaders re-made each epoch, validation loaders, restarts are
followed there, as for ``run``). At each cut the monitor takes out of it the steps that ended since the previous cut
(their StepRows and BatchMetas, and the Tail totals of the steps beyond the window's detail) and leaves the open
step in place; the Session's memory is then one window's, however long the job.

Sampling: the window's detail steps are kept in full (rows, per-sample spans: what attribution splits by cause); the
rest only as the Tail's exact totals. Which steps are detail is chosen in the fetchers (NOTE [ Monitor sampling ],
instrument/batch.py: the Session keeps every row it makes); with sampling off (runner.Monitor's ``sample``) the
first ``detail`` steps of each chunk are (Session.detail_steps is moved forward at every cut). The
window's idle time is exact; its split by cause is the detail's shares applied to the total, the assumption
``run`` states for its own tail (attribution.extend_to_tail). The summary is computed by the same functions as
``run``'s record: collect.timeline, stats.stage_durations (what stage_stats describes, without its percentiles and
histograms: a window needs totals), attribution.attribute + extend_to_tail, verdict.decide.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, cast

from .. import vocab
from .procs import TreeSnapshot

if TYPE_CHECKING:  # (the collection side, which imports torch: a record's reader, `report`, starts without it)
    from ..instrument.session import Session
    from ..instrument.steps import EpochRow, StepRow, Tail
    from ..instrument.worker import BatchMeta

CAUSES = ("io", "cpu", "transfer", "other")


@dataclass
class WindowSummary:
    """One window (or several folded into one: ``span`` base windows). Shares are of the window's seconds."""
    index: int  # first base window it covers
    span: int  # base windows folded into it (1: full resolution)
    step_first: int  # the job's step (the profiled loader's batch index, warm-up included)
    step_last: int
    epoch: int  # the profiled loader's epoch at the window's end
    start_s: float  # since the job started
    end_s: float
    steps: int
    samples: int
    detail_steps: int  # steps seen in full detail (the cause split comes from them)
    idle_s: float  # the compute device waiting for input
    idle_by_cause_s: dict[str, float]
    stage_s: dict[str, float]  # per-sample and per-batch stages: total seconds over the detail steps
    stage_per: dict[str, str]  # "sample" | "batch" | "step": what stage_ms is per
    stage_obs: dict[str, int]  # observations behind stage_s (for per-unit means after folding)
    # Window time outside the profiled loader's work: in no step of it (between epochs, a checkpoint after the loop)
    # or in another loader's loop run inside a step's body (a validation pass within the training loop, as Lightning
    # and HF Trainer run it: that time is also in the step's compute). A checkpoint written inside the loop's body
    # is in no other loader: it stays in its step.
    outside_s: float
    other_loader_s: float  # of it, time inside other loaders' next() (a validation loader waiting for its input)
    workers: int  # the profiled loader's num_workers
    processes: int  # the job's process tree at the cut (main + workers + their children)
    rss_bytes: int
    uss_bytes: int
    rchar: int  # bytes read() asked for in the window (cache hits included), whole tree
    read_bytes: int  # bytes the kernel fetched from the storage device in the window, whole tree
    bottleneck: str  # verdict.decide on the window: compute | io | cpu | transfer
    severity: str
    summary: str
    keep: bool = False  # near a change point: never folded
    # NOTE [ Monitor gaps ] (instrument/gaps.py): steps the hook did not see one by one (their count and samples
    # exact, their wait estimated from probes: timed steps, probe_steps of them)
    estimated_steps: int = 0
    probe_steps: int = 0
    probe_wait_share: float | None = None  # the probes' wait share (Σ wait / Σ length) and its 95 % half-width
    probe_wait_share_pm: float | None = None

    @property
    def seconds(self) -> float:
        return max(0.0, self.end_s - self.start_s)

    @property
    def wait_share(self) -> float:
        return self.idle_s / self.seconds if self.seconds > 0 else 0.0

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    def idle_share(self, cause: str) -> float:
        return self.idle_by_cause_s.get(cause, 0.0) / self.seconds if self.seconds > 0 else 0.0

    def stage_ms(self) -> dict[str, float]:
        """Mean ms per unit (``stage_per``) of each stage over the detail steps."""
        return {k: round(v * 1e3 / self.stage_obs[k], 4) for k, v in self.stage_s.items() if self.stage_obs.get(k)}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(seconds=round(self.seconds, 6), wait_share=round(self.wait_share, 6),
                 samples_per_s=round(self.samples_per_s, 4), stage_ms=self.stage_ms(),
                 idle_share={c: round(self.idle_share(c), 6) for c in CAUSES})
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WindowSummary:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class _View:
    """The attributes collect.timeline reads of a Session, holding one window's steps only."""
    t0_ns: int
    rows: list[StepRow]
    metas: list[BatchMeta]
    epochs: list[EpochRow]
    accounting: dict[str, Any]
    tail: Tail
    detail_steps: int
    tail_skipped: list[Any] = field(default_factory=list)


@dataclass
class Cut:
    """What a cut took out of the Session: the window's ended steps and the totals of its tail steps."""
    view: _View
    start_ns: int
    end_ns: int
    step_first: int
    step_last: int
    epoch: int
    other_wait_ns: int
    other_in_step_ns: int = 0  # other loaders' loops inside the profiled loader's steps (WindowSummary.outside_s)


def take(s: Session, start_ns: int, end_ns: int, detail: int, other_wait_before: int, first_step: int,
         final: bool = False, other_in_step_before: int = 0) -> Cut:
    """Take the steps that ended since the last cut out of ``s`` (the open step stays), and move the Session's detail
    boundary so the next ``detail`` steps are kept in full and the rest only in its Tail's totals. The window holds
    the job's steps ``first_step`` to the one before the open step (to the last step when ``final``: the job ended).

    Called on the main thread from the Session's on_step callback (between two of the job's steps), so nothing
    else touches the Session meanwhile. Uses Session internals that have no public form yet (its flat steps,
    ``_materialize``): the one place that does, kept small."""
    s._materialize()  # flat (FAST_STEPS) steps become rows now, under the detail boundary they were taken with
    open_row = s._open_row
    rows = [r for r in s.rows if r is not open_row and r.compute_end_ns]
    keep = [r for r in s.rows if r is open_row or not r.compute_end_ns]
    metas_all = s.metas
    metas: list[BatchMeta] = []
    for r in rows:
        r.idle_ns = r.wait_end_ns - r.wait_start_ns  # host clocks (the device's, under CUDA, are resolved at close)
        if r.batch >= 0:
            metas.append(metas_all[r.batch])
            r.batch = len(metas) - 1
    kept_metas: list[BatchMeta] = []
    for r in keep:
        if r.batch >= 0:
            kept_metas.append(metas_all[r.batch])
            r.batch = len(kept_metas) - 1
    s.rows, s.metas = keep, kept_metas
    tail, s.tail = s.tail, type(s.tail)()  # a fresh Tail
    n_now = s._n_steps
    if s.sampling is None:  # sampled in the fetchers: the Session keeps every row it makes (runner.Monitor.attach)
        s.detail_steps = max(0, n_now - s.warmup) + detail  # the next window's first detail chunk
    epochs = [e for e in s.epochs if e.iter_start_ns >= start_ns] or s.epochs[-1:]
    last = n_now - 1 if final else n_now - 2
    view = _View(s.t0_ns, rows, metas, epochs, s.accounting, tail, len(rows))
    other = sum(o.wait_ns for o in s.others)
    in_step = sum(o.loop_in_step_ns for o in s.others)
    return Cut(view, start_ns, end_ns, first_step, max(first_step, last), max(0, len(s.epochs) - 1),
               max(0, other - other_wait_before), max(0, in_step - other_in_step_before))


def summarize(cut: Cut, index: int, workers: int, procs: TreeSnapshot, batch_size: int | None,
              cores: float, device_type: str = "cpu") -> WindowSummary:
    """The window's figures by ``run``'s own functions (module docstring)."""
    from ..analysis.attribution import attribute, extend_to_tail, has_kernel_accounting
    from ..analysis.context import Context
    from ..analysis.stats import stage_durations, tables
    from ..analysis.verdict import decide
    from ..instrument import collect
    from ..record.schema import Timeline

    v = cut.view
    window_s = max(0.0, (cut.end_ns - cut.start_ns) / 1e9)
    tl = cast(Timeline, collect.timeline(cast("Session", v)))
    t = tables(tl)
    durations = stage_durations(t)
    stall = attribute(t, window_s, "host clocks", kernel=has_kernel_accounting(tl, t))
    stall = extend_to_tail(stall, t.tail, window_s)
    measured = [r for r in v.rows if r.measured]
    steps = len(measured) + v.tail.steps
    samples = sum(r.n_samples for r in measured) + v.tail.samples
    in_steps = sum(max(0, r.compute_end_ns - r.wait_start_ns) for r in v.rows) + \
        v.tail.wait_ns + v.tail.h2d_ns + v.tail.compute_ns
    stage_s: dict[str, float] = {}
    stage_per: dict[str, str] = {}
    stage_obs: dict[str, int] = {}
    for name, d in durations.items():
        if name in ("wait", "h2d", "compute", "epoch_start", "ready_ahead") or not d.size:
            continue
        stage_s[name] = float(d.sum())
        stage_per[name] = vocab.stage(name).per
        stage_obs[name] = int(d.size)
    tail = v.tail
    for name, extra_s in (("wait", tail.wait_ns / 1e9), ("compute", tail.compute_ns / 1e9)):
        got = durations.get(name)
        n = (int(got.size) if got is not None else 0) + tail.steps  # exact over every step: the tail's totals added
        if n:
            stage_s[name] = (float(got.sum()) if got is not None else 0.0) + extra_s
            stage_per[name], stage_obs[name] = "step", n

    def mean_ms(name: str) -> float:
        return stage_s[name] * 1e3 / stage_obs[name] if stage_obs.get(name) else 0.0

    rchar = procs.rchar
    read_bytes = procs.read_bytes
    ctx = Context(device_type=device_type, device_name="", window_s=window_s, steps=steps, samples=samples,
                  samples_per_s=samples / window_s if window_s > 0 else 0.0, batch_size=batch_size or 1,
                  workers=workers, usable_cores=cores, cpu_util=None,
                  compute_ms=mean_ms("compute"), h2d_ms=0.0, sample_cpu_ms=0.0,
                  sample_read_ms=mean_ms("read"), collate_ms=0.0, transfer_ms=0.0,
                  ready_ahead_ms=0.0, mean_file_bytes=0.0, mean_pixels=0.0, read_mb_s_per_worker=0.0,
                  dataset_bytes=0, ram_available_bytes=None, pin_memory=False, amp=False, augment="",
                  image_size=0, page_cache_hit=(1.0 - read_bytes / rchar) if rchar > 0 else None,
                  bytes_measured=False, timed_reads="read" in stage_s, job_kind="script")
    verdict = decide(stall, ctx)
    by_cause = {c: float(stall["by_cause"].get(c, 0.0)) for c in CAUSES}
    return WindowSummary(
        index=index, span=1, step_first=cut.step_first, step_last=cut.step_last, epoch=cut.epoch,
        start_s=round((cut.start_ns - v.t0_ns) / 1e9, 6), end_s=round((cut.end_ns - v.t0_ns) / 1e9, 6),
        steps=steps, samples=samples, detail_steps=len(measured), idle_s=float(stall["seconds"]),
        idle_by_cause_s=by_cause, stage_s=stage_s, stage_per=stage_per, stage_obs=stage_obs,
        outside_s=round(min(window_s, max(0.0, window_s - in_steps / 1e9) + cut.other_in_step_ns / 1e9), 6),
        other_loader_s=round(cut.other_wait_ns / 1e9, 6),
        workers=workers, processes=procs.processes, rss_bytes=procs.rss_bytes, uss_bytes=procs.uss_bytes,
        rchar=rchar, read_bytes=read_bytes, bottleneck=str(verdict.get("bottleneck", "")),
        severity=str(verdict.get("severity", "")), summary=str(verdict.get("summary", "")))


def label(w: WindowSummary) -> str:
    """The window's regime for change detection: its verdict's bottleneck (compute, io, cpu, transfer)."""
    return w.bottleneck
