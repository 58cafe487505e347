"""Weights & Biases: the job's own active run when it has one, else a run of the monitor's (WANDB_MODE applies)."""
from __future__ import annotations

from typing import Any

from ..changes import ChangePoint
from ..windows import WindowSummary
from . import PREFIX, MissingPackage, change_text, scalars, x_of


class WandbExporter:
    name = "wandb"

    def __init__(self, project: str | None, out_dir: str):
        try:
            import wandb
        except ImportError:
            raise MissingPackage("--wandb needs the wandb package (pip install wandb); not logged") from None
        self.wandb: Any = wandb
        self.project, self.out_dir = project, out_dir
        self.run: Any = None
        self.own = False
        self.changes: list[list[Any]] = []

    def _run(self) -> Any:
        """Opened at the first window, not at start: the job may open its own run first (it is then used)."""
        if self.run is None:
            wb = self.wandb
            self.run = wb.run
            if self.run is None:
                self.run = wb.init(project=self.project or "profiler-monitor", dir=self.out_dir, reinit=True)
                self.own = True
            # Our own x axis: the job's step, without touching the run's own step counter's meaning.
            self.run.define_metric(f"{PREFIX}step")
            self.run.define_metric(f"{PREFIX}*", step_metric=f"{PREFIX}step")
        return self.run

    def window(self, w: WindowSummary) -> None:
        self._run().log({**scalars(w), f"{PREFIX}step": x_of(w)})

    def change(self, c: ChangePoint) -> None:
        self.changes.append([c.step, c.kind, c.before, c.after, c.summary, c.statistic])
        self._run().log({f"{PREFIX}change_point": self.wandb.Html(f"<p>{change_text(c)}</p>"),
                         f"{PREFIX}step": c.step})

    def close(self) -> None:
        if self.run is None:
            return
        if self.changes:
            table = self.wandb.Table(columns=["step", "kind", "before", "after", "summary", "statistic"],
                                     data=self.changes)
            self.run.log({f"{PREFIX}change_points": table})
        if self.own:
            self.run.finish()
