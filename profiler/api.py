"""The Python API: profile the DataLoader a block of your code iterates, without the command line.

    import profiler
    with profiler.profile(out="reports/mine", warmup=5, steps=50) as run:
        for epoch in range(3):
            for x, y in loader:
                ...
    print(run.verdict)          # also: run.record (the RunRecord), run.files (report paths), run.out

The DataLoader the block trains from is profiled for ``warmup + steps`` batches: the first one iterated, or the next
one when that stops early (a sanity check, a shape probe); ``profile(loader="MyDataset")`` or
``loader="train.py:42"`` (where it was created) names one. When that window closes the record and reports are
written and the block goes on unprofiled (``then="continue"``, the default here — the API never stops your program;
``then="exit"`` raises ``profiler.WindowClosed`` out of the loop instead, which the ``with`` block swallows). Leaving
the block earlier (a ``break``, your own exception) writes a record of what was measured, marked partial with the
reason.

The profiler never raises into your code except your own exceptions: a failure of its own (an ``out`` it cannot
write, a report that cannot be drawn, no DataLoader in the block) is one line on stderr and your program goes on.
It saves through the command line's path (profiler/saving.py): signals held while run.json is written, the temp
folder when ``out`` is not writable. A ``profile()`` block inside another one (or inside ``python -m profiler run``)
is left out with one line: one process, one record. So is a process your code forks: only the one that entered the
block writes.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, overload

from .config import RunConfig
from .instrument.premade import premade_message, watch_premade
from .instrument.session import WindowClosed
from .instrument.substages import stage

if TYPE_CHECKING:
    from .harness.external import ExternalRun
    from .monitor.api import MonitorBlock
    from .record import RunRecord
    from .record.schema import Verdict

__all__ = ["ProfileRun", "WindowClosed", "profile", "stage"]


def _say(what: str, e: BaseException | None = None) -> None:
    """One line on stderr about a failure of the profiler's own; the user's program goes on."""
    detail = f" ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})" if e is not None else ""
    try:
        print(f"profiler: {what}{detail}", file=sys.stderr)
    except (OSError, ValueError):
        pass  # no stderr left: the note is a courtesy only


class ProfileRun:
    """What ``profile()`` returns: filled in when the window closes or the block ends."""

    def __init__(self, out: str | None, warmup: int, steps: int, then: str, plots: bool, quiet: bool,
                 loader: str | None = None, torch_profiler: bool = False):
        if then not in ("exit", "continue"):
            raise ValueError("then must be 'exit' or 'continue'")
        if steps <= 0 or warmup < 0:
            raise ValueError("steps must be > 0 and warmup >= 0")
        self.warmup, self.steps, self.then, self.plots, self.quiet = warmup, steps, then, plots, quiet
        self.loader = loader
        self.torch_profiler = torch_profiler
        if loader is not None:
            from .instrument.loaders import LoaderSelector

            LoaderSelector.parse(loader)  # a malformed selector fails at the call, not inside the block
        self._out_arg = out
        self.out: Path | None = None
        self.record: RunRecord | None = None
        self.files: list[str] = []
        self._run: ExternalRun | None = None
        self._pid = os.getpid()
        self._premade: list[int] = []  # batches next() gave from iterators made before the block (instrument.premade)

    @property
    def verdict(self) -> Verdict | None:
        """The verdict section (bottleneck, summary, recommendations), or None before anything was written."""
        return self.record.verdict if self.record is not None else None

    def _folder(self) -> Path:
        """The output folder: ``out`` (claimed for this run), else a new reports/<time>_api; the temp folder when
        neither can be made, said in one line."""
        from . import outdir
        from .harness.runner import default_run_name

        return outdir.api_run_dir(self._out_arg, default_run_name(RunConfig(), "api"), _say)

    def _write(self, rec: RunRecord) -> None:
        """Save and report ``rec`` (the window closed, or the block ended). Never raises but a held signal."""
        if os.getpid() != self._pid or self.record is not None:
            return  # a forked child of the user's code, or written already: one process, one record
        from .errors import UserError
        from .saving import save_and_report

        self.record = rec
        try:
            if self.out is None:
                self.out = self._folder()
            console = None
            if not self.quiet:
                from rich.console import Console

                console = Console(stderr=True)
            saved = save_and_report(rec, self.out, plots=self.plots, console=console, reraise=True)
            self.files = saved.files
        except KeyboardInterrupt:
            raise  # the user's own Ctrl-C / SIGTERM, held until the record was written
        except UserError as e:
            _say(f"could not save the record: {e}")
        except Exception as e:  # noqa: BLE001 - the profiler must never crash the job it watches
            _say("could not write the record or its reports", e)

    def __enter__(self) -> ProfileRun:
        from .instrument import substages

        if substages.main_hook is not None:
            _say("profile(): this process is being profiled already (an outer profile() block or `python -m "
                 "profiler run`); this block is left out")
            return self
        if self.record is not None or self.out is not None:
            self._again()
        try:
            from .harness.external import ExternalRun, script_config
            from .harness.job import JobSpec

            config = script_config(RunConfig(steps=self.steps, warmup=self.warmup).to_dict(), then=self.then,
                                   loader=self.loader)
            # then='exit' is handled by the block ending (WindowClosed is swallowed in __exit__).
            if self.torch_profiler and self.out is None:
                self.out = self._folder()  # torch.profiler's own trace goes there as it runs
            run = ExternalRun(JobSpec("api", None, [], then=self.then), self.warmup, self.steps, config,
                              on_window_closed=self._write, loader=self.loader,
                              torch_profiler_out=self.out if self.torch_profiler else None)
            _own_thread(run.session)
            self._premade = watch_premade(run.session)
            run.sampler.start()
            run.start_torch_profiler()
            run.session.start()
            self._run = run
        except Exception as e:  # noqa: BLE001 - the user's block runs unprofiled rather than not at all
            _say("profile(): could not start profiling; the block runs unprofiled", e)
            self._stop_quietly()
        return self

    def _again(self) -> None:
        """The same ProfileRun entered again after a block it profiled: a new record, never silently dropped (was:
        the second block's record was not written because the first had been). Into a new folder: the first block's
        record stays where it is; with ``out``, beside it as ``<out>-2`` (said in one line)."""
        from . import outdir
        from .errors import UserError

        first = self.out
        self.record, self.files, self.out = None, [], None
        if self._out_arg and first is not None:
            try:
                self.out = outdir.create_run_dir(first.parent, first.name, flag="out=")
            except UserError as e:
                _say(f"profile(): {e}")
                return
            _say(f"profile(): this ProfileRun already wrote {first / 'run.json'}; this block's record goes to "
                 f"{self.out}")

    def _stop_quietly(self) -> None:
        run, self._run = self._run, None
        if run is None:
            return
        for step in (run.session.stop, run.sampler.stop, run.stop_torch_profiler):
            try:
                step()
            except Exception:  # noqa: BLE001 - tearing down after a failure of our own: nothing more to say
                pass

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        run, self._run = self._run, None
        if run is None or os.getpid() != self._pid:
            return isinstance(exc, WindowClosed)
        try:
            self._finish(run, exc)
        except KeyboardInterrupt:
            if exc is None:
                raise  # a signal held while the record was written: the user's own, delivered now
        except Exception as e:  # noqa: BLE001 - the profiler must never crash the job it watches
            _say("could not finish the profile", e)
        return isinstance(exc, WindowClosed)

    def _finish(self, run: ExternalRun, exc: BaseException | None) -> None:
        session = run.session
        # The block ends: closing the window now is not the window closing by itself, so the callback must not
        # write a complete record of a cut-short run.
        session.on_window_closed = None
        session.stop()
        run.stop_torch_profiler()
        if not session.samples:
            session.samples = run.sampler.stop()
        try:
            self._finish_record(run, exc)
        finally:
            self._torch_traces(run)

    def _torch_traces(self, run: ExternalRun) -> None:
        """The block's torch.profiler traces (its own, or ours with torch_profiler=True) merged with the record."""
        if self.record is None or self.out is None or os.getpid() != self._pid:
            return
        try:
            self.files += [str(p) for p in run.write_torch_traces(self.record, self.out, self.out / "run.json")]
        except Exception as e:  # noqa: BLE001 - the profiler must never crash the job it watches
            _say("could not merge the torch.profiler trace", e)

    def _finish_record(self, run: ExternalRun, exc: BaseException | None) -> None:
        from .harness.job import Outcome, OutOfDeviceMemory

        session = run.session
        if self.record is not None:
            return  # written when the window closed
        if not session.rows and session.loader is None:
            if self._premade and self._premade[0]:
                _say(premade_message("profile()", self._premade[0]))
                return
            _say("profile(): no DataLoader was iterated inside the block; nothing recorded")
            return
        if exc is None or isinstance(exc, WindowClosed):
            outcome = Outcome("window closed" if session.measured_steps >= self.steps else "ended")
        elif isinstance(exc, KeyboardInterrupt):
            outcome = Outcome("interrupted", exc)
        elif isinstance(exc, OutOfDeviceMemory):
            outcome = Outcome("oom", exc, oom={"step": exc.step, "message": str(exc)})
        elif isinstance(exc, SystemExit):
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            outcome = Outcome("exit", exc, exit_code=code)
        else:
            outcome = Outcome("failed", exc)
        self._write(run._build(outcome))


def _own_thread(session: Any) -> None:
    """The block's thread is the one whose loaders are profiled: a session follows the main thread by default (one
    process, one record), so a profile() block in another thread recorded nothing and said no DataLoader was iterated
    though one was. The block's thread owns it instead: its loaders are measured, the main thread's left alone."""
    import threading

    me = threading.current_thread()
    if me is threading.main_thread():
        return
    if hasattr(session, "_owner_thread") and hasattr(session, "_main_thread"):
        session._owner_thread = me.ident
        session._main_thread = me


@overload
def profile(out: str | None = None, warmup: int = 5, steps: int = 30, then: str = "continue", plots: bool = True,
            quiet: bool = False, loader: str | None = None, monitor: Literal[False] = False,
            torch_profiler: bool = False) -> ProfileRun: ...


@overload
def profile(out: str | None = None, warmup: int = 5, steps: int = 30, then: str = "continue", plots: bool = True,
            quiet: bool = False, loader: str | None = None, *, monitor: Literal[True],
            **monitor_options: Any) -> MonitorBlock: ...


def profile(out: str | None = None, warmup: int = 5, steps: int = 30, then: str = "continue", plots: bool = True,
            quiet: bool = False, loader: str | None = None, monitor: bool = False, torch_profiler: bool = False,
            **monitor_options: Any) -> ProfileRun | MonitorBlock:
    """Profile the DataLoader the ``with`` block trains from (see the module docstring); ``loader`` names one
    explicitly: its dataset's class, ``"file:line"`` where it was created, or ``"Class@file:line"``.
    ``torch_profiler=True``: run torch.profiler around the window too and write torch_trace.json, its trace with
    the loader's workers and the wait's causes merged in (a block's own torch.profiler traces are merged anyway).

    ``monitor=True``: watch the block's whole life instead of one window (``python -m profiler monitor``'s API;
    docs/monitor.md): options ``window`` (steps, or "60s"), ``detail``, ``tensorboard`` (a folder), ``wandb``,
    ``mlflow``; ``warmup``, ``steps`` and ``then`` do not apply."""
    if monitor:
        from .monitor.api import monitor_block

        return monitor_block(out=out, plots=plots, quiet=quiet, loader=loader, **monitor_options)
    if monitor_options:
        raise TypeError(f"profile(): {', '.join(monitor_options)} apply with monitor=True only")
    return ProfileRun(out, warmup, steps, then, plots, quiet, loader, torch_profiler)
