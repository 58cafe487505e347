"""Profile a user's own job: ``run train.py``, ``run -m pkg.train`` and the ``profiler.profile()`` API.

The job runs in this process, unchanged, as ``__main__`` (``runpy``: ``sys.argv`` and ``sys.path[0]`` as Python
sets them, so classes defined in the script pickle for spawn/forkserver workers exactly as under ``python
train.py``). The Session (profiler/instrument/) profiles the loader the job trains from (session.py says how it is
chosen; ``--loader`` names one). When the window
closes, the record is written and the job is stopped (``then='exit'``) or left to finish unprofiled
(``then='continue'``).
"""
from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

from ..errors import UserError
from ..instrument.loaders import LoaderSelector
from ..instrument.session import Session
from ..record import RunRecord
from .job import JobSpec, Outcome, RunResult, build_record, compute_device_facts, run_session, storage_into_environment

if TYPE_CHECKING:
    from ..record.schema import TorchTraces

# A --data folder for a script is listed (for cache control and residency) up to this many files: beyond, the
# scan itself would cost minutes on network storage, and residency samples a few thousand files anyway.
MAX_LISTED_FILES = 2_000_000


def list_files(root: str) -> list[str]:
    """Regular files under ``root`` (any kind: a script's data is not only images), sorted, bounded."""
    p = Path(root)
    if not p.is_dir():
        raise UserError(f"--data {root}: no such directory")
    out: list[str] = []
    seen: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(p, followlinks=True):
        st = os.stat(dirpath)
        if (st.st_dev, st.st_ino) in seen:
            dirnames[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirnames.sort()
        for name in sorted(filenames):
            f = os.path.join(dirpath, name)
            if os.path.isfile(f):
                out.append(f)
                if len(out) >= MAX_LISTED_FILES:
                    return out
    return out


# The options of `run` that apply to a user's own job (the rest configure the built-in pipeline: its model, images,
# augmentation, workers and batch size, which a script decides itself and job.loader records as it ran).
SCRIPT_OPTIONS = ("data", "steps", "warmup", "cache", "throttle", "storage", "throttle_mechanism", "out",
                  "sample_interval_s")


def script_config(options: dict[str, Any], *, then: str, script: str | None = None, argv: list[str] | None = None,
                  loader: str | None = None) -> dict[str, Any]:
    """run.json ``config`` for a script, a module or an API block: what applies to it and nothing of the built-in
    pipeline's; options left at nothing (no --data, no throttle) are left out rather than shown as null."""
    from ..redact import redact_argv

    out = {k: options[k] for k in SCRIPT_OPTIONS if options.get(k) is not None}
    if not out.get("throttle") and not out.get("storage"):
        out.pop("throttle_mechanism", None)
    out["then"] = then
    if script is not None:
        out["script"] = script
        out["argv"] = redact_argv(list(argv or []))
    if loader:
        out["loader"] = loader
    return out


def resolve_target(target: str, is_module: bool) -> str:
    """Check the script or module exists before anything starts (exit 2 otherwise); returns its path."""
    if is_module:
        import importlib.util

        try:
            spec = importlib.util.find_spec(target)
        except (ImportError, ValueError) as e:
            raise UserError(f"-m {target}: cannot import it ({e})") from None
        if spec is None:
            raise UserError(f"-m {target}: no module of that name (is its package on the path?)")
        return spec.origin or target
    p = Path(target)
    if p.is_dir():  # `python DIR` runs DIR/__main__.py with DIR first on sys.path
        if not (p / "__main__.py").is_file():
            raise UserError(f"{target}: a folder without __main__.py (python runs a folder through its __main__.py)")
        return str(p.resolve())
    if not p.is_file():
        raise UserError(f"{target}: no such script")
    return str(p.resolve())


def _script_code(path: str, shown: str) -> tuple[Any, str]:
    """(code object, __file__) of what ``python PATH`` runs: a source file, a compiled ``.pyc`` (as python runs one)
    or a folder's ``__main__.py``."""
    import importlib.util
    import marshal

    if os.path.isdir(path):
        path = os.path.join(path, "__main__.py")
        shown = os.path.join(shown, "__main__.py")
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] == importlib.util.MAGIC_NUMBER:  # compiled by this Python: header of 16 bytes, then the code
        return marshal.loads(data[16:]), path
    return compile(data, shown, "exec"), shown


def script_job(target: str, args: list[str], is_module: bool) -> Callable[[], Any]:
    """A callable that runs the script (or module) as ``__main__``, as ``python SCRIPT`` / ``python -m`` would.

    The code runs in a fresh module registered as both ``__main__`` and ``__mp_main__`` while it runs: classes it
    defines then pickle by reference for spawn/forkserver workers and unpickle in this process (multiprocessing
    aliased ``__mp_main__`` to the profiler's own ``__main__`` when it was first imported).
    """
    def job() -> None:
        import builtins
        import importlib.util
        import types

        saved_argv, saved_mods = sys.argv[:], {k: sys.modules.get(k) for k in ("__main__", "__mp_main__")}
        mod = types.ModuleType("__main__")
        mod.__dict__["__builtins__"] = builtins
        if is_module:
            spec = importlib.util.find_spec(target)
            if spec is not None and spec.submodule_search_locations is not None:  # a package: run its __main__
                spec = importlib.util.find_spec(f"{target}.__main__")
            get_code = getattr(spec.loader, "get_code", None) if spec is not None else None  # an InspectLoader's
            if spec is None or spec.loader is None or get_code is None:
                raise UserError(f"-m {target}: cannot run it")
            code = get_code(spec.name)
            mod.__file__, mod.__spec__, mod.__loader__ = spec.origin, spec, spec.loader
            mod.__package__ = spec.parent
            sys.argv = [spec.origin or target, *args]
            sys.path.insert(0, os.getcwd())
        else:
            path = os.path.abspath(target)
            code, shown = _script_code(path, target)
            mod.__file__, mod.__spec__, mod.__loader__, mod.__package__ = shown, None, None, None
            sys.argv = [target, *args]
            sys.path.insert(0, path if os.path.isdir(path) else os.path.dirname(path))
        sys.modules["__main__"] = sys.modules["__mp_main__"] = mod
        try:
            exec(code, mod.__dict__)
        finally:
            sys.argv = saved_argv
            sys.path.pop(0)
            for k, v in saved_mods.items():
                if v is not None:
                    sys.modules[k] = v

    return job


def print_user_traceback(e: BaseException, file: Any = None) -> None:
    """The job's exception as Python would show it for ``python train.py``: without the profiler's own frames."""
    tb = e.__traceback__
    ours = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runpy.py", "<frozen runpy>")
    while tb is not None and (tb.tb_frame.f_code.co_filename.startswith(ours[0])
                              or tb.tb_frame.f_code.co_filename.endswith(ours[1:])):
        tb = tb.tb_next
    traceback.print_exception(type(e), e, tb, file=file or sys.stderr)


class ExternalRun:
    """Everything around a Session for a job we did not write: sampler, environment, storage facts, the record."""

    def __init__(self, spec: JobSpec, warmup: int, steps: int, config: dict, data: str | None = None,
                 storage: tuple[dict, Any] | None = None, sample_interval_s: float = 0.1,
                 on_step: Callable | None = None, on_window_closed: Callable[[RunRecord], None] | None = None,
                 loader: str | None = None, torch_profiler_out: Path | None = None):
        from ..instrument.torch_profiler_hooks import OwnProfiler, TraceWatch, chain
        from ..samplers.background import Sampler

        self.spec, self.config, self.data = spec, config, data
        self.t0 = time.perf_counter_ns()
        # torch.profiler traces the job exports while profiled (and ours, torch_profiler_out: run --torch-profiler)
        self.watch = TraceWatch(self.t0)
        self.own_profiler = (OwnProfiler(warmup, steps, torch_profiler_out, self.watch)
                             if torch_profiler_out is not None else None)
        on_step = chain(self.own_profiler.on_step if self.own_profiler else None, on_step)
        self.storage: dict[str, Any] | None
        self.throttle_ctx: Any
        self.storage, self.throttle_ctx = storage if storage else (None, None)
        disk = ((self.storage or {}).get("device") or {}).get("disk")
        self.sampler = Sampler(t0_ns=self.t0, interval_s=sample_interval_s, disk=disk)
        self.on_window_closed = on_window_closed
        self.session = Session(warmup, steps, then=spec.then, t0_ns=self.t0, on_step=on_step,
                               on_first_pid=lambda pid, w: self.sampler.label_pid(pid, "worker", w) if w >= 0 else None,
                               on_window_closed=self._window_closed if spec.then == "continue" else None,
                               select=LoaderSelector.parse(loader) if loader else None, on_tail=self.sampler.slow_down)
        self.record: RunRecord | None = None

    def _window_closed(self, session: Session) -> None:
        """then='continue': write the record now; the job goes on unprofiled.

        Only when the window closed by itself: closed by ``stop()`` (the job ended, failed or was interrupted first)
        the run's outcome decides the record, partial with its reason, not "window closed"."""
        if session.measured_steps < session.steps:
            return
        if self.own_profiler is not None:
            self.own_profiler.stop()  # its trace is exported now, noted in the record built next
        self.session.samples = self.sampler.stop()
        self.record = self._build(Outcome("window closed"))
        if self.on_window_closed is not None:
            self.on_window_closed(self.record)

    def run(self, job: Callable[[], Any]) -> RunResult:
        """Run ``job`` profiled; the record is None when it iterated no DataLoader."""
        self.start_torch_profiler()
        try:
            outcome = run_session(job, self.session, self.sampler if not self.record else None, self.throttle_ctx)
        finally:
            self.stop_torch_profiler()
        if self.record is not None:  # already written when the window closed
            return RunResult(self.record, outcome, self.t0)
        if not self.session.rows and self.session.loader is None:
            return RunResult(None, outcome, self.t0)
        self.session.samples = getattr(self.session, "samples", None) or {}
        return RunResult(self._build(outcome), outcome, self.t0)

    def start_torch_profiler(self) -> None:
        """Watch torch.profiler's exports for the job's run (and start our own for --torch-profiler)."""
        self.watch.install()
        if self.own_profiler is not None:
            self.own_profiler.start()

    def stop_torch_profiler(self) -> None:
        """The job ended: stop our torch.profiler (exporting its trace), stop watching. A then='continue' record,
        built at the window's close, learns of the job's later exports in ``write_torch_traces``."""
        if self.own_profiler is not None:
            self.own_profiler.stop()
        self.watch.uninstall()

    def torch_traces_into(self, rec: RunRecord) -> None:
        sec = self.watch.section()
        if self.own_profiler is not None and self.own_profiler.error:
            sec["error"] = self.own_profiler.error
        rec.torch_traces = cast("TorchTraces", sec)

    def write_torch_traces(self, rec: RunRecord, out: Path, run_json: Path | None,
                           export_pending: bool = False) -> list[Path]:
        """After the record was saved and analyzed: note the traces exported since (then='continue': the job's
        profiler exported after the window closed), save run.json again when they changed, and write the merged
        traces (render/kineto_merge.py). ``export_pending`` (the job has ended): the job's torch.profilers that were
        stopped before they exported are exported into ``out`` first (TraceWatch.export_pending)."""
        before = rec.torch_traces
        if export_pending:
            self.watch.export_pending(out)
        self.torch_traces_into(rec)
        if run_json is not None and rec.torch_traces != before:
            from ..saving import save_record

            save_record(rec, run_json)
        if not (rec.torch_traces or {}).get("traces"):
            return []
        from ..render import write_torch_trace

        return write_torch_trace(rec, out)

    def _build(self, outcome: Outcome) -> RunRecord:
        from ..samplers.environment import probe_environment

        env = probe_environment(gpu_index=None)
        storage = dict(self.storage) if self.storage else None
        folders = self.session.data_folders()
        if storage is None and folders:
            # No --data: describe the storage of the folder the workers opened most files in, learned as they ran.
            from ..storage.device import describe_storage

            top = max(folders, key=lambda k: folders[k])
            try:
                storage = {"device": describe_storage(top).to_dict(), "cache_mode": "as-is",
                           "learned_from": f"files the workers opened ({top})"}
            except Exception:  # noqa: BLE001 - a fact for the report, never worth failing the run
                storage = None
        if storage is not None:
            storage_into_environment(env, storage)
        import torch

        cuda = self.session.device_timing == "cuda events"
        dev = compute_device_facts("cuda" if cuda else "cpu", torch.cuda.current_device() if cuda else None, env)
        dataset: dict[str, Any] = {"root": self.data, "sample": False}
        if self.storage and self.storage.get("files"):
            dataset.update(files=self.storage["files"], total_bytes=self.storage.get("total_bytes", 0))
        if self.session.loader is not None:
            dataset["class"] = self.session.loader.dataset_class
        rec = build_record(self.session, outcome, self.spec, config=self.config, environment=env,
                           compute_device=dev, dataset=dataset, storage=storage, memory=None)
        if self.own_profiler is not None:
            self.own_profiler.stop()  # the window is over: its trace exported before the section is read
        self.torch_traces_into(rec)
        return rec
