"""Typed reads of an analyzed record: each section a frozen dataclass with its absent fields' defaults stated once.

Why: the sections are JSON objects (TypedDicts in ``schema``) whose fields may be absent — a raw section from an
older record or another kind of job (an attach record's throughput has only ``window_s``), a derived one that an
early return left short. Read field by field, every reader repeated ``float(_d(rec.stall).get("fraction", 0.0) or
0.0)`` with its own idea of the default. Here each field has one type and one default, and a reader writes
``read(rec).stall.fraction``.

Two kinds of default, on purpose:

- a **measured-or-unknown** field is ``X | None = None``: absent means "not measured / does not apply" and a reader
  must say so (``stall.fraction_low`` is an attach record's interval; ``loader.batch_size`` is None under a batch
  sampler);
- a **derived total** is ``X = 0`` / empty: absent means "nothing of it" (no step: 0 samples/s; no cause: empty
  ``by_cause``), which is what analysis writes on its short paths.

``view`` takes each declared field that the section holds (no per-field lookup code); a field whose type is another
view, or a list of views, is read as one. A test checks every field here is declared in the record's schema
(``schema``'s TypedDicts), so this file cannot invent a field the record does not hold.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, get_args, get_origin, get_type_hints

if TYPE_CHECKING:  # annotations only: record/__init__ imports nothing from here
    from . import RunRecord

V = TypeVar("V")


# Raw sections (collected) ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConfigView:
    """``config``: the run's options; for a user's own job ``job.loader`` holds what its DataLoader used."""
    model: str | None = None
    mode: str | None = None
    workers: int | None = None
    batch_size: int | None = None
    data: str | None = None
    device: str | None = None
    throttle: str | None = None
    storage: str | None = None
    cache: str | None = None
    script: str | None = None


@dataclass(frozen=True)
class LoaderView:
    """``job.loader``: the profiled DataLoader's own settings."""
    num_workers: int | None = None
    batch_size: int | None = None  # None: batch_size=None or a batch sampler (samples per step are measured)
    dataset_class: str | None = None
    created_at: str | None = None
    iterated_at: str | None = None
    pin_memory: bool | None = None
    persistent_workers: bool | None = None
    prefetch_factor: int | None = None
    multiprocessing_context: str | None = None
    chosen: str | None = None
    samples_basis: str | None = None


@dataclass(frozen=True)
class JobView:
    """``job``: what was profiled (None in the record: the built-in pipeline of an older record)."""
    kind: str | None = None  # "builtin" | "script" | "module" | "api" | "attach"
    target: str | None = None
    then: str | None = None
    ended: str | None = None
    loader: LoaderView = field(default_factory=LoaderView)
    other_loaders: int = 0

    @property
    def own(self) -> bool:
        """A user's own code (script, module, ``profiler.profile``), not the built-in pipeline or an attach."""
        return self.kind in ("script", "module", "api")

    @property
    def builtin(self) -> bool:
        """The built-in image pipeline (``kind`` absent in records older than the job section)."""
        return self.kind in (None, "builtin")


@dataclass(frozen=True)
class DeviceView:
    """``compute_device``: what computes ("cpu" or "cuda") and its name."""
    type: str | None = None
    name: str | None = None
    index: int | None = None
    timing: str | None = None


@dataclass(frozen=True)
class WindowView:
    """``window``: the measured window (warm-up excluded)."""
    seconds: float = 0.0
    steps: int = 0
    samples: int = 0
    warmup_steps: int = 0
    start_s: float = 0.0
    end_s: float = 0.0


# Derived sections (analysis output) ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ThroughputView:
    samples_per_s: float = 0.0
    steps_per_s: float = 0.0
    samples: int = 0
    steps: int = 0
    window_s: float = 0.0


@dataclass(frozen=True)
class StallView:
    """``stall``: the compute device's wait for input, net of the profiler's own time, and its split."""
    seconds: float = 0.0
    fraction: float = 0.0
    by_cause: dict[str, float] = field(default_factory=dict)
    share_by_cause: dict[str, float] = field(default_factory=dict)
    by_stage: dict[str, float] = field(default_factory=dict)
    by_kind: dict[str, float] = field(default_factory=dict)
    method: str | None = None
    fraction_low: float | None = None  # attach: the sampled share's 95 % interval
    fraction_high: float | None = None
    main_samples: int | None = None  # attach
    wait_samples: int | None = None  # attach


@dataclass(frozen=True)
class RecommendationView:
    action: str = ""
    reason: str = ""
    expected_gain: str = ""
    cause: str = ""


@dataclass(frozen=True)
class VerdictView:
    """``verdict``: what binds, how badly, the summary sentence and the advice."""
    bottleneck: str | None = None  # a cause name, "compute", "memory" or "none"
    severity: str = ""
    summary: str = ""
    cause_share: float = 0.0
    recommendations: list[RecommendationView] = field(default_factory=list)
    binds: str | None = None  # on shared cores: what binds, in the what-if's words


@dataclass(frozen=True)
class WhatIfView:
    """``whatif``: predicted samples/s at other settings (rows stay plain dicts: their columns vary by kind)."""
    predictions: list[dict[str, Any]] = field(default_factory=list)
    advice_rejected: list[dict[str, str]] = field(default_factory=list)
    best_workers: int | None = None
    binds: str | None = None
    binds_words: str | None = None
    note: str | None = None
    error: str | None = None
    model: str | None = None
    interval_method: str | None = None
    storage_note: str | None = None
    core_share: float | None = None
    cores_available: float | None = None
    other_load_cores: float | None = None


@dataclass(frozen=True)
class CeilingsView:
    """``ceilings``: samples/s each stage alone could sustain; ``lowest`` sets the pace."""
    samples_per_s: float | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    lowest: str | None = None
    lowest_words: str | None = None


@dataclass(frozen=True)
class RamView:
    summary: str | None = None
    workers_at_once: int | None = None
    worker_processes: int | None = None
    shm_peak_bytes: int | None = None
    copy_on_read: dict[str, Any] | None = None
    processes: list[dict[str, Any]] = field(default_factory=list)
    projection: list[dict[str, Any]] = field(default_factory=list)
    projection_error: str | None = None


# The attach section (raw: what `attach PID` sampled) -------------------------------------------------------------
@dataclass(frozen=True)
class AttachThreadView:
    """``attach.threads[i]``: one sampled thread's stack-sample counts and kernel clocks (clocks None: not read)."""
    pid: int = 0
    tid: int = 0
    name: str | None = None
    role: str | None = None  # "main" | "worker" | "worker_feeder" | "pin_memory" | "other"
    worker: int = -1  # workers in start order; -1: the main process (or not said)
    samples: int = 0
    stages: dict[str, int] = field(default_factory=dict)
    wait_stages: dict[str, int] = field(default_factory=dict)
    wall_s: float | None = None
    on_cpu_s: float | None = None
    runq_s: float | None = None
    states: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class AttachProcessView:
    pid: int = 0
    role: str | None = None  # "main" | "worker" | "child" | "forkserver"


@dataclass(frozen=True)
class AttachSamplerView:
    name: str | None = None
    rate_hz: int | None = None
    samples: int | None = None
    errors: int = 0  # samples it could not read (absent: none said)


@dataclass(frozen=True)
class AttachView:
    """``attach``: the sampled window (``view(AttachView, rec.attach)``; not in :class:`Reading`, attach records
    only)."""
    seconds: float | None = None
    sampler: AttachSamplerView = field(default_factory=AttachSamplerView)
    threads: list[AttachThreadView] = field(default_factory=list)
    processes: list[AttachProcessView] = field(default_factory=list)
    workers_at_once: int | None = None  # None: a record older than the figure (count the workers listed)
    cpu_util: float | None = None  # None: the machine's CPU share was not read
    absent: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Reading:
    """The record's sections, typed: what every analysis step after the first and every renderer read."""
    config: ConfigView
    job: JobView
    device: DeviceView
    window: WindowView
    throughput: ThroughputView
    stall: StallView
    verdict: VerdictView
    whatif: WhatIfView
    ceilings: CeilingsView
    ram: RamView

    @property
    def workers(self) -> int | None:
        """The profiled loader's worker count: its own (a user's job), else the built-in's configured one."""
        if self.job.loader.num_workers is not None:
            return self.job.loader.num_workers
        return self.config.workers


@functools.lru_cache(maxsize=None)
def _fields(cls: type) -> tuple[tuple[str, type | None, bool], ...]:
    """Each field's name, the view type it holds (or None), and whether it is a list of that view."""
    hints = get_type_hints(cls)
    out: list[tuple[str, type | None, bool]] = []
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        args = get_args(t)
        if isinstance(t, type) and dataclasses.is_dataclass(t):
            out.append((f.name, t, False))
        elif get_origin(t) is list and args and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
            out.append((f.name, args[0], True))
        else:
            out.append((f.name, None, False))
    return tuple(out)


def view(cls: type[V], section: object) -> V:
    """``section`` (a record section, or None / anything else: all defaults) as the view ``cls``. A field holding
    null takes the view's default, as an absent one does (a nullable field's default is None anyway)."""
    if not isinstance(section, Mapping):
        return cls()
    kw: dict[str, Any] = {}
    for name, sub, many in _fields(cls):  # type: ignore[arg-type]  # a class is hashable
        if name not in section or section[name] is None:
            continue
        v = section[name]
        if sub is None:
            kw[name] = v
        elif many:
            kw[name] = [view(sub, x) for x in v] if isinstance(v, list) else []
        else:
            kw[name] = view(sub, v)
    return cls(**kw)


def read(rec: RunRecord) -> Reading:
    """The record's sections as views (a few µs: built afresh, so a section changed since reads as it is now)."""
    return Reading(config=view(ConfigView, rec.config), job=view(JobView, rec.job),
                   device=view(DeviceView, rec.compute_device), window=view(WindowView, rec.window),
                   throughput=view(ThroughputView, rec.throughput), stall=view(StallView, rec.stall),
                   verdict=view(VerdictView, rec.verdict), whatif=view(WhatIfView, rec.whatif),
                   ceilings=view(CeilingsView, rec.ceilings), ram=view(RamView, rec.ram))
