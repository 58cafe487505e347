"""``profiler.profile(monitor=True, ...)``: the block's whole life as windows (what ``python -m profiler monitor``
does for a script). Never raises into the user's code but their own exceptions: a failure of the monitor's own is
one line on stderr and the block runs on unmonitored."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from .. import thresholds as th


def _say(what: str) -> None:
    try:
        print(f"profiler: {what}", file=sys.stderr)
    except (OSError, ValueError):
        pass


class MonitorBlock:
    """What ``profile(monitor=True)`` returns: ``record`` (the MonitorRecord), ``files`` and ``out`` once the block
    has ended (``record`` is also there while it runs, and monitor.json is rewritten as it goes)."""

    def __init__(self, out: str | None, window: int | str | None, detail: int, tensorboard: str | None, wandb: bool,
                 mlflow: bool, plots: bool, quiet: bool, loader: str | None):
        from .runner import parse_window

        # a bad window fails at the call, not inside the block; the default one also lasts MONITOR_MIN_WINDOW_S
        self.steps, self.secs = parse_window(str(window if window is not None else th.MONITOR_WINDOW_STEPS), "window=")
        self.min_s = th.MONITOR_MIN_WINDOW_S if window is None else 0.0
        if detail < 0:
            raise ValueError("detail must be >= 0")
        self.detail, self.tensorboard, self.wandb, self.mlflow = detail, tensorboard, wandb, mlflow
        self.plots, self.quiet, self.loader = plots, quiet, loader
        self._out_arg = out
        self.out: Path | None = None
        self.files: list[str] = []
        self.record: Any = None
        self._mon: Any = None
        self._session: Any = None
        self._premade: list[int] = []  # batches next() gave from iterators made before the block (instrument.premade)
        self._pid = os.getpid()
        self._denv: Any = None  # the torchrun rank this block runs in (distributed.env.RankEnv), if any

    def _folder(self) -> Path:
        """Under torchrun each rank's block writes into ``<folder>/rank<k>`` of one folder for the job, as the
        command does (commands/monitor.py); where the ranks cannot agree on one, api_run_dir's fallback."""
        from datetime import datetime

        from .. import outdir
        from ..distributed.env import detect
        from ..errors import UserError

        name = f"{datetime.now():%Y%m%d-%H%M%S}_monitor_api"
        self._denv = denv = detect()
        if denv is not None:
            from .runner import rank_folder

            try:
                return rank_folder(denv, self._out_arg, name)
            except UserError as e:
                _say(f"rank {denv.rank}: {e}")
        return outdir.api_run_dir(self._out_arg, name, _say)

    def __enter__(self) -> MonitorBlock:
        from ..instrument import substages

        if substages.main_hook is not None:
            _say("profile(monitor=True): this process is being profiled already; this block is left out")
            return self
        try:
            from ..instrument.loaders import LoaderSelector
            from ..instrument.premade import watch_premade
            from ..instrument.session import Session
            from .exporters import make_asked
            from .runner import FOREVER, Monitor, status_printer

            self.out = self._folder()
            rank = self._denv.rank if self._denv is not None else None
            exporters = make_asked(self.tensorboard, (self.wandb, None), (self.mlflow, None), str(self.out), rank,
                                   _say)
            self._mon = Monitor(self.out, window_steps=self.steps, window_s=self.secs, detail=self.detail,
                                exporters=exporters, status=None if self.quiet or rank else status_printer(),
                                job={"kind": "api", "target": "profile(monitor=True)",
                                     **({"rank": rank, "world_size": self._denv.world_size} if rank is not None
                                        else {})}, min_window_s=self.min_s)
            self.record = self._mon.rec
            session = Session(0, FOREVER, then="continue",
                              select=LoaderSelector.parse(self.loader) if self.loader else None)
            self._mon.attach(session)
            session.start()
            self._session = session
            self._premade = watch_premade(session)
        except Exception as e:  # noqa: BLE001 - the user's block runs unmonitored rather than not at all
            _say(f"profile(monitor=True): could not start; the block runs unmonitored ({type(e).__name__}: {e})")
            try:
                if self._session is not None:
                    self._session.stop()
                if self._mon is not None:
                    self._mon.abandon()
            except Exception:  # noqa: BLE001, S110 - said above; the block runs unmonitored
                pass
            self._session = self._mon = None
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        session, self._session = self._session, None
        mon = self._mon
        if session is None or mon is None or os.getpid() != self._pid:
            return False
        try:
            session.stop()
            status = "ended" if exc is None else "interrupted" if isinstance(exc, KeyboardInterrupt) else \
                "exit" if isinstance(exc, SystemExit) else "failed"
            if session.loader is None and not mon.rec.windows_total:
                mon.abandon()  # nothing to write; the process's fetchers back to run's way, the exporters closed
                if self._premade and self._premade[0]:
                    from ..instrument.premade import premade_message

                    _say(premade_message("profile(monitor=True)", self._premade[0]))
                else:
                    _say("profile(monitor=True): no DataLoader was iterated inside the block; nothing recorded")
                return False
            from .. import signals

            with signals.deferred():
                self.files = [str(mon.finish(status, session.loader.to_dict() if session.loader else None))]
                if self.plots and self.out is not None:
                    from ..render.monitor_html import write_monitor

                    self.files += [str(f) for f in write_monitor(mon.rec, self.out)]
                if self._denv is not None and self._denv.is_main and self.out is not None:
                    from .side_by_side import after_the_job

                    self.files += [str(f) for f in after_the_job(self.out.parent, self.plots,
                                                                 (lambda _: None) if self.quiet else print)]
        except KeyboardInterrupt:
            if exc is None:
                raise
        except Exception as e:  # noqa: BLE001 - the profiler must never crash the job it watches
            _say(f"profile(monitor=True): could not finish ({type(e).__name__}: {e})")
        return False


def monitor_block(out: str | None = None, window: int | str | None = None,
                  detail: int = th.MONITOR_DETAIL_STEPS, tensorboard: str | None = None, wandb: bool = False,
                  mlflow: bool = False, plots: bool = True, quiet: bool = False,
                  loader: str | None = None) -> MonitorBlock:
    return MonitorBlock(out, window, detail, tensorboard, wandb, mlflow, plots, quiet, loader)
