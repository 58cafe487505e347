"""Exporters: renderers of the monitor's windows into the tools people already watch long jobs in.

Each takes a finished WindowSummary (from the record, after the cut: never on the job's per-step path) and writes
one point per window at x = the job's step, under the tag prefix ``profiler/``; change points go as text. A package
that is not installed is one clear line (``MissingPackage``), never an import error.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol

from ..changes import ChangePoint
from ..windows import CAUSES, WindowSummary

PREFIX = "profiler/"


class MissingPackage(Exception):
    """The exporter's package is not installed: its message is the one line to show."""


class Exporter(Protocol):
    name: str

    def window(self, w: WindowSummary) -> None: ...

    def change(self, c: ChangePoint) -> None: ...

    def close(self) -> None: ...


def scalars(w: WindowSummary) -> dict[str, float]:
    """The scalars of one window, by tag (the same set for every exporter)."""
    out = {f"{PREFIX}wait_share": round(w.wait_share, 6), f"{PREFIX}samples_per_s": round(w.samples_per_s, 4)}
    for c in CAUSES:
        out[f"{PREFIX}idle_{c}"] = round(w.idle_share(c), 6)
    for name, ms in w.stage_ms().items():
        out[f"{PREFIX}stage_ms/{name}"] = ms
    secs = w.seconds
    out[f"{PREFIX}outside_share"] = round(w.outside_s / secs, 6) if secs > 0 else 0.0
    out[f"{PREFIX}rss_mb"] = round(w.rss_bytes / 1e6, 3)
    out[f"{PREFIX}uss_mb"] = round(w.uss_bytes / 1e6, 3)
    out[f"{PREFIX}device_read_mb_s"] = round(w.read_bytes / 1e6 / secs, 4) if secs > 0 else 0.0
    out[f"{PREFIX}read_call_mb_s"] = round(w.rchar / 1e6 / secs, 4) if secs > 0 else 0.0
    return out


def x_of(w: WindowSummary) -> int:
    """The job's step a window is plotted at: its last step."""
    return int(w.step_last)


def change_text(c: ChangePoint) -> str:
    return f"**{c.kind} change at step {c.step:,}**: {c.summary}  \n_statistic_: {c.statistic}"


def make(name: str, arg: str | None, out_dir: str) -> Exporter:
    """The exporter named ``name`` (tensorboard | wandb | mlflow); MissingPackage when its package is absent."""
    if name == "tensorboard":
        from .tensorboard import TensorBoardExporter

        return TensorBoardExporter(arg or f"{out_dir}/tensorboard")
    if name == "wandb":
        from .wandb import WandbExporter

        return WandbExporter(arg, out_dir)
    if name == "mlflow":
        from .mlflow import MlflowExporter

        return MlflowExporter(arg)
    raise ValueError(name)


def make_asked(tensorboard: str | None, wandb: tuple[bool, str | None], mlflow: tuple[bool, str | None],
               out_dir: str, rank: int | None, say: Callable[[str], None]) -> list[Exporter]:
    """The exporters a monitor was asked for (``wandb`` / ``mlflow``: asked, and the project / tracking URI); a
    missing package is one line through ``say``. Under torchrun (``rank`` given) TensorBoard gets every rank's windows,
    each in ``DIR/rank<k>`` (a run of its own in TensorBoard's list: the ranks side by side), and W&B and MLflow rank
    0's only: a job logs there from rank 0, and a run of the monitor's own per rank would litter the project."""
    tb = tensorboard if tensorboard is None or rank is None else str(Path(tensorboard) / f"rank{rank}")
    made: list[Exporter] = []
    for name, on, arg in (("tensorboard", tb is not None, tb), ("wandb", wandb[0] and not rank, wandb[1]),
                          ("mlflow", mlflow[0] and not rank, mlflow[1])):
        if on:
            try:
                made.append(make(name, arg, out_dir))
            except MissingPackage as e:
                say(str(e))
    return made
