"""The Python API: profile the DataLoader a block of your code iterates, without the command line.

    import profiler
    with profiler.profile(out="reports/mine", warmup=5, steps=50) as run:
        for epoch in range(3):
            for x, y in loader:
                ...
    print(run.verdict)          # also: run.record (the RunRecord), run.files (report paths), run.out

The first DataLoader iterated inside the block is profiled for ``warmup + steps`` batches; when that window closes
the record and reports are written and the block goes on unprofiled (``then="continue"``, the default here — the
API never stops your program; ``then="exit"`` raises ``profiler.WindowClosed`` out of the loop instead, which the
``with`` block swallows). Leaving the block earlier writes a record of what was measured, marked partial.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .config import RunConfig
from .instrument.session import WindowClosed
from .instrument.substages import stage

__all__ = ["ProfileRun", "WindowClosed", "profile", "stage"]


class ProfileRun:
    """What ``profile()`` returns: filled in when the window closes or the block ends."""

    def __init__(self, out: str | None, warmup: int, steps: int, then: str, plots: bool, quiet: bool):
        if then not in ("exit", "continue"):
            raise ValueError("then must be 'exit' or 'continue'")
        if steps <= 0 or warmup < 0:
            raise ValueError("steps must be > 0 and warmup >= 0")
        self.warmup, self.steps, self.then, self.plots, self.quiet = warmup, steps, then, plots, quiet
        self._out_arg = out
        self.out: Path | None = None
        self.record: Any = None
        self.files: list[str] = []
        self._run: Any = None

    @property
    def verdict(self) -> dict | None:
        """The verdict section (bottleneck, summary, recommendations), or None before anything was written."""
        return self.record.verdict if self.record is not None else None

    def _write(self, rec: Any) -> None:
        from . import outdir
        from .analysis import analyze
        from .render import write_reports

        if self.out is None:
            from .harness.runner import default_run_name

            self.out = (outdir.prepare_out(self._out_arg) if self._out_arg
                        else outdir.create_run_dir("reports", default_run_name(RunConfig(), "api")))
        from .instrument.torch_hooks import worker_watchdog_paused

        with worker_watchdog_paused():  # a worker dying now must not abort the save (torch_hooks says why)
            rec.save(self.out / "run.json")  # the raw record first: safe before the analysis and the reports
            analyze(rec)
            rec.save(self.out / "run.json")
            self.files = [str(self.out / "run.json")]
            if self.plots:
                self.files += [str(f) for f in write_reports(rec, self.out)]
        self.record = rec
        if not self.quiet:
            from rich.console import Console

            from .render.terminal import print_report

            print_report(rec, Console(stderr=True), self.files)

    def __enter__(self) -> "ProfileRun":
        from .harness.external import ExternalRun
        from .harness.job import JobSpec

        config = {**RunConfig(steps=self.steps, warmup=self.warmup).to_dict(), "workers": None, "batch_size": None,
                  "model": None, "then": self.then}
        self._run = ExternalRun(JobSpec("api", None, [], then=self.then), self.warmup, self.steps, config,
                                on_window_closed=self._write)
        # then='exit' is handled by the block ending (WindowClosed is swallowed in __exit__).
        self._run.sampler.start()
        self._run.session.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        from .harness.job import Outcome, OutOfDeviceMemory

        run = self._run
        run.session.stop()
        if not run.session.samples:
            run.session.samples = run.sampler.stop()
        if self.record is None and (run.session.rows or run.session.loader is not None):
            if exc is None or isinstance(exc, WindowClosed):
                outcome = Outcome("window closed" if run.session.measured_steps >= self.steps else "ended")
            elif isinstance(exc, KeyboardInterrupt):
                outcome = Outcome("interrupted", exc)
            elif isinstance(exc, OutOfDeviceMemory):
                outcome = Outcome("oom", exc, oom={"step": exc.step, "message": str(exc)})
            else:
                outcome = Outcome("failed", exc)
            self._write(run._build(outcome))
        return isinstance(exc, WindowClosed)


def profile(out: str | None = None, warmup: int = 5, steps: int = 30, then: str = "continue", plots: bool = True,
            quiet: bool = False) -> ProfileRun:
    """Profile the first DataLoader iterated inside the ``with`` block (see the module docstring)."""
    return ProfileRun(out, warmup, steps, then, plots, quiet)
