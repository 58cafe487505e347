"""The sentence that names the profiled loader (and the others that ran), shared by the terminal and report.html.

A job iterates several loaders; a reader must see first which one the figures are about — dataset class, workers,
batch size, where it was created — and what else ran, before believing a verdict. Works from run.json alone.
"""
from __future__ import annotations

import os
from typing import Any

from ..record import RunRecord
from ..record.read import LoaderView, read
from .units import printable


def _short_class(name: Any) -> str:
    return str(name or "?").rsplit(".", 1)[-1]


def _site(site: Any) -> str:
    """``file:line`` with the file shortened to its name: the full path is in the configuration table."""
    if not isinstance(site, str) or not site:
        return "an unknown line"
    file, _, line = site.rpartition(":")
    return f"{os.path.basename(file) or file}:{line}" if file else site


def _batch(loader: LoaderView, per_step: float | None) -> str:
    bs = loader.batch_size
    if isinstance(bs, int):
        text = f"batch size {bs}"
    else:
        text = "no batch_size (batches made by the dataset or a batch sampler)"
    if per_step and (not isinstance(bs, int) or abs(per_step - bs) > 0.5):
        text += f", {per_step:.4g} sample{'' if per_step == 1 else 's'} per step"
    return text


def loader_lines(rec: RunRecord) -> list[str]:
    """Plain-text lines (no markup): the profiled loader, then the others; empty for the built-in pipeline."""
    r = read(rec)
    job = r.job
    if job.builtin or not isinstance(rec.loader, dict):  # the built-in pipeline, or no loader section
        return []
    loader = job.loader
    steps, samples = r.throughput.steps, r.throughput.samples
    per_step = samples / steps if steps else None
    w = loader.num_workers
    made = _site(loader.created_at)
    lib = loader.created_in
    where = f"created at {made}" + (f" (via {_site(lib)})" if lib else "")
    basis = loader.samples_basis
    again = loader.recreated
    first = (f"Profiled loader: {_short_class(loader.dataset_class)}, {w} worker{'s' if w != 1 else ''}, "
             f"{_batch(loader, per_step)}; {where}; {loader.chosen or 'the first loader the job iterated'}"
             + (f"; made afresh for {again} later epoch{'s' if again != 1 else ''} (the "
                f"same line, dataset and settings: one loader here)" if again else "")
             + (f"; samples counted from the {basis}" if basis and basis not in ("batch",) else "") + ".")
    out = [printable(first)]
    others = job.other_loader_figures
    n = int(job.other_loaders or len(others))
    if n:
        shown = [f"{_short_class(o.dataset_class)} from {_site(o.created_at)}: {o.steps} batches" for o in others[:3]]
        more = f" and {n - len(shown)} more" if n > len(shown) else ""
        out.append(printable(f"{n} other loader{'s' if n != 1 else ''} ran, not profiled: "
                             + "; ".join(shown) + more + "."))
    else:
        out.append("No other loader ran.")
    return out
