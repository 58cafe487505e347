"""What binds, in words: the phrases and short labels the verdict, the ceilings, the what-if and the renderers use
for the stage that sets the pace (pure: a stage name and Rates in, text out).

Split from analysis/whatif.py (which re-exports these names) because they are words, not the throughput model:
renderers need ``binds_label`` for a what-if row's label without the model, and the verdict and the ceilings say
``binds_words`` the same way the what-if does.
"""
from __future__ import annotations

import math

from .rates import Rates

# The model is named among those sharing the cores when its threads take at least this share of the job's CPU per
# sample: below, it is a rounding error next to the loading (a loader-only run's empty step).
MODEL_SHARE_NAMED_FROM = 0.1


def binds_words(binds: str, r: Rates, n: int | None = None, available: float | None = None) -> str:
    """What binds, in the words the verdict, the ceilings and the what-if all use (one phrase per stage).
    ``available``: the cores other load left the job, said when it took a visible part of them."""
    n = r.workers if n is None else n
    cores = f"{r.cores:g} core{'s' if r.cores != 1 else ''}"
    if available is not None and available < r.cores - 0.05:
        cores = f"the {available:.2f} of {r.cores:g} cores other load left"
    who = f"{n} worker{'s' if n != 1 else ''}" if n > 0 else "the main process's loading"
    if binds == "cores":
        if model_shares_cores(r):
            return f"cores: the model and {who} share {cores}"
        if n == 0:
            return f"cores: the main process loads and steps on {cores}"
        return f"cores: {who} and the main process share {cores}"
    return {"compute": "the model sets the pace", "cpu": f"CPU work per sample in {who}",
            "io": f"blocked reads in {who}", "storage": "the storage device", "unknown": "not predicted"
            }.get(binds, binds)


# The binding stage as a table cell says it (at most ~30 characters: the "short labels"); the full phrase,
# with the cores and workers it is about, is binds_words, said once under the table.
BINDS_LABELS = {"cores": "cores", "compute": "model", "cpu": "CPU per sample", "io": "blocked reads",
                "storage": "storage", "transfer": "transfer", "h2d": "host-to-device copy", "unknown": "not predicted"}
BINDS_LABEL_MAX = 30


def binds_label(binds: str) -> str:
    """The short label of a binding stage ("cores", "storage", "model"); an unknown name cut to BINDS_LABEL_MAX."""
    text = BINDS_LABELS.get(binds, binds)
    return text if len(text) <= BINDS_LABEL_MAX else text[: BINDS_LABEL_MAX - 1] + "…"


def model_shares_cores(r: Rates) -> bool:
    """Does the model take a real part of the cores (a CPU run whose model's threads use at least a tenth of the
    job's CPU per sample)? A loader-only run (``--model none``) has a step of microseconds: its cores are the
    workers' and the main process's."""
    if r.device_type != "cpu" or r.compute_s <= 0:
        return False
    model = min(r.model_threads, max(int(math.ceil(r.cores)), 1)) * r.compute_s / max(r.batch, 1.0)
    return model >= MODEL_SHARE_NAMED_FROM * (model + r.cpu_s)
