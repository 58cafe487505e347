"""One vocabulary: every stage and every idle cause the profiler knows, as data.

Analysis, comparisons and every renderer iterate these tables instead of spelling names, labels and colors of their
own, so adding a stage is one entry here plus its measurement.

Two orthogonal views of the same time (see docs/attribution.md):

- **Stages** say *where* the time went, by the code's name for it: ``read`` / ``decode`` / ``augment`` (named
  sub-stages inside a sample), ``getitem`` (the rest of the user's ``__getitem__``), ``collate``, ``transfer``, and
  the main loop's ``wait`` / ``h2d`` / ``compute``. A user's own ``profiler.stage("tokenize")`` is a stage too; it is
  not in the table, and :func:`stage` gives it a label and a color of its own.
- **Causes** say *what kind* of time it was, by the kernel's view of the thread that spent it: on a core → ``cpu``;
  waiting for a core → ``cpu`` (contention); blocked off-CPU → ``io``; a finished batch on its way to the main
  process → ``transfer``; none of these → ``other``. ``busy`` is the compute device working (plots only).
"""
from __future__ import annotations

from dataclasses import dataclass

# Seaborn's "deep" palette: distinguishable for the common color-vision deficiencies and in greyscale by lightness.
_DEEP = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b2", "#937860", "#da8bc3", "#8c8c8c", "#ccb974",
         "#64b5cd")


@dataclass(frozen=True)
class Stage:
    """A named span of pipeline time.

    per:   what one observation is — ``sample`` (one ``__getitem__`` / ``__getitems__`` / iterator item), ``batch``,
           ``step`` (one ``next()`` of the profiled loader) or ``epoch`` (one ``iter(loader)``).
    side:  ``worker`` (inside a DataLoader worker, or the main process with ``num_workers=0``) or ``main``.
    cause: the idle cause this stage stands for when no kernel accounting says otherwise (``None``: the main loop's
           own stages, which are not idle time).
    label: the short text in tables and legends; ``words``: the phrase used inside a sentence.
    """
    name: str
    per: str
    side: str
    cause: str | None
    label: str
    color: str
    words: str


@dataclass(frozen=True)
class Cause:
    name: str
    label: str
    color: str
    words: str


# Pipeline order. Worker-side sample stages first (read → decode → augment → the rest of __getitem__), then batch
# stages, then the main loop.
STAGES: tuple[Stage, ...] = (
    Stage("read", "sample", "worker", "io", "read (open + read bytes)", _DEEP[0], "reading files"),
    Stage("decode", "sample", "worker", "cpu", "decode (bytes → image)", _DEEP[1], "decoding"),
    Stage("augment", "sample", "worker", "cpu", "augment (transforms)", _DEEP[4], "augmentation"),
    Stage("getitem", "sample", "worker", "cpu", "your __getitem__ (rest)", _DEEP[9],
          "the dataset's own code (__getitem__ outside named stages)"),
    Stage("collate", "batch", "worker", "cpu", "collate", _DEEP[5], "collating batches"),
    Stage("transfer", "batch", "worker", "transfer", "transfer (worker → main)", _DEEP[8],
          "moving finished batches from the workers to the main process"),
    Stage("ready_ahead", "batch", "worker", None, "ready ahead (queued)", "#b0b0b0",
          "finished batches waiting in the queue (prefetch slack)"),
    Stage("wait", "step", "main", None, "wait for batch (main)", _DEEP[3], "waiting for the next batch"),
    Stage("h2d", "step", "main", "transfer", "H2D copy", _DEEP[6], "copying batches to the device"),
    Stage("compute", "step", "main", None, "compute", _DEEP[2], "the model step"),
    Stage("epoch_start", "epoch", "main", None, "epoch start (iter(loader))", "#4a4a4a",
          "starting an epoch (worker start-up and first prefetch)"),
)
STAGE = {s.name: s for s in STAGES}
# Outside STAGES (per-rank tables and plots only; not a stage of every run): a DDP rank waiting in the step's
# collectives (all-reduce) for the other ranks. See profiler/distributed/merge.py.
COLLECTIVE = Stage("collective", "step", "main", None, "collective wait (all-reduce)", "#8c613c",
                   "waiting in the all-reduce for the other ranks")

# The main loop's per-step stages, in order (the Gantt's main lane and its legend).
MAIN_STAGES = tuple(s.name for s in STAGES if s.side == "main" and s.per == "step")

CAUSES: tuple[Cause, ...] = (
    Cause("io", "idle: io (blocked reading)", _DEEP[0], "storage reads"),
    Cause("cpu", "idle: cpu (decode, augment, collate, contention)", _DEEP[1],
          "CPU work (decode, augment, collate, waiting for a core)"),
    Cause("transfer", "idle: transfer (worker → main)", _DEEP[8],
          "moving batches from the workers to the main process"),
    Cause("other", "idle: other (unexplained)", _DEEP[7], "unexplained overhead (Python, GC, process start)"),
)
CAUSE = {c.name: c for c in CAUSES}
CAUSE_NAMES = tuple(c.name for c in CAUSES)
# The compute device working: not a cause of idle time, but drawn beside the causes.
BUSY = Cause("busy", "compute device busy", _DEEP[2], "the compute device working")

# The kernel's finer view under the causes: what the by-kind split of the stall reports (docs/attribution.md).
KINDS: dict[str, tuple[str, str]] = {
    # kind: (cause, words)
    "on_cpu": ("cpu", "on a core"),
    "runqueue": ("cpu", "waiting for a core (the workers were oversubscribed)"),
    "blocked_device": ("io", "blocked while reading from the block device"),
    "blocked_other": ("io", "blocked without block-device reads (page-cache misses on network storage, sleeps, "
                            "locks, pipes)"),
    "transfer": ("transfer", "on the way from the worker to the main process"),
    "other": ("other", "not explained by any worker span"),
}


# Colors for user-named stages: Tableau's "muted" hues, none of which a registered stage or cause uses, so a user's
# "tokenize" never looks like "wait" or "read".
_USER_COLORS = ("#956cb4", "#d65f5f", "#ee854a", "#6acc64", "#82c6e2", "#d5bb67", "#8c613c", "#dc7ec0")


def stage(name: str) -> Stage:
    """The registered stage, or a user-named one (``profiler.stage("tokenize")``) with a stable color of its own."""
    if name in STAGE:
        return STAGE[name]
    if name == COLLECTIVE.name:
        return COLLECTIVE
    color = _USER_COLORS[sum(name.encode()) % len(_USER_COLORS)]
    return Stage(name, "sample", "worker", "cpu", name, color, f"'{name}'")


def color(name: str) -> str:
    """Color of a stage or cause by name (causes first: ``other`` is a cause and a detail)."""
    if name in CAUSE:
        return CAUSE[name].color
    if name == "busy":
        return BUSY.color
    return stage(name).color


def label(name: str) -> str:
    if name in CAUSE:
        return CAUSE[name].label
    if name == "busy":
        return BUSY.label
    return stage(name).label
