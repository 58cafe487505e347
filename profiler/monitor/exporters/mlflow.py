"""MLflow: the job's own active run when it has one, else a run of the monitor's, at the tracking URI given (or
MLflow's own default: MLFLOW_TRACKING_URI, else ./mlruns)."""
from __future__ import annotations

from typing import Any

from ..changes import ChangePoint
from ..windows import WindowSummary
from . import MissingPackage, change_text, scalars, x_of


class MlflowExporter:
    name = "mlflow"

    def __init__(self, uri: str | None):
        try:
            import mlflow
        except ImportError:
            raise MissingPackage("--mlflow needs the mlflow package (pip install mlflow); not logged") from None
        self.mlflow: Any = mlflow
        self.uri = uri
        self.run: Any = None
        self.own = False
        self.text: list[str] = []

    def _run(self) -> Any:
        if self.run is None:
            ml = self.mlflow
            if self.uri:
                ml.set_tracking_uri(self.uri)
            self.run = ml.active_run()
            if self.run is None:
                self.run = ml.start_run(run_name="profiler-monitor")
                self.own = True
        return self.run

    def window(self, w: WindowSummary) -> None:
        run = self._run()
        # MLflow metric names may hold '/', but not every store takes every character: stage names are the user's.
        ok = {k: v for k, v in scalars(w).items() if all(ch.isalnum() or ch in "_-./ " for ch in k)}
        self.mlflow.log_metrics(ok, step=x_of(w), run_id=run.info.run_id)

    def change(self, c: ChangePoint) -> None:
        run = self._run()
        self.text.append(change_text(c))
        self.mlflow.log_text("\n\n".join(self.text), "profiler/change_points.md", run_id=run.info.run_id)

    def close(self) -> None:
        if self.run is not None and self.own:
            self.mlflow.end_run()
