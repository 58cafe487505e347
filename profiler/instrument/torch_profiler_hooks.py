"""torch.profiler (kineto) traces at collection time: where the job's traces go, and our own for ``--torch-profiler``.

Two things happen here, nothing else (the merge itself is render/kineto_merge.py, a pure function of the record):

1. **Where the job's traces go.** ``tensorboard_trace_handler``, a job's own ``on_trace_ready`` and a direct
   ``prof.export_chrome_trace(path)`` all end in one method, ``torch.profiler.profiler._KinetoProfile
   .export_chrome_trace``; :class:`TraceWatch` wraps it while the job runs, calls the original first with the job's
   own arguments and only then notes the path (absolute: the job may ``chdir`` later). The older
   ``torch.autograd.profiler.profile(...).export_chrome_trace(path)`` (public, kineto's JSON too) is noted the same
   way. The job's file is never read or changed here. The class is private torch detail: :func:`check` says when a
   torch release moves it (tests/test_trace_merge.py fails loudly), and the watch is then left out with one line
   rather than guessing.
2. **The clocks.** Our times are ``time.perf_counter_ns`` (CLOCK_MONOTONIC) relative to the run's ``t0``; kineto's are
   CLOCK_REALTIME (its events are ``baseTimeNanoseconds + ts µs``: checked empirically on torch 2.14, a
   ``ProfilerStep#N`` starts inside the ``prof.step()`` call that opened it). The watch reads the two clocks side by
   side (the tightest of a few bracketed reads, ~1 µs) when it starts and at each export, so the merge can move our
   spans onto the trace's time base from the record alone, and say how far the offset drifted.

:class:`OwnProfiler` is ``run --torch-profiler`` / ``profile(torch_profiler=True)``: torch.profiler around the measured
window itself (CPU, and CUDA when available), stepped at each batch the profiled loader hands over, with a schedule
of the run's warm-up then its measured steps (+1, so the last measured step's compute is inside the trace), exported
into the run's folder when the window closes.
"""
from __future__ import annotations

import functools
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

# What ``OwnProfiler`` writes into the run's folder: kineto's own trace (kept as it came, like a job's) beside the
# merged torch_trace.json.
OWN_TRACE_FILE = "torch_profiler.pt.trace.json"
# At most this many exported traces are noted (a job exporting every few steps must not grow the record).
MAX_TRACES = 64
# At most this many of the job's torch.profilers are held until the run's end, for export_pending.
MAX_HELD_PROFILERS = 4
_CLOCK_READS = 7
# Per thread: inside the watched _KinetoProfile export (its nested legacy export is not noted again).
_inside = threading.local()


def clock_offset_ns() -> tuple[int, int]:
    """(CLOCK_REALTIME - CLOCK_MONOTONIC in ns, the bracket's width in ns): the tightest of a few reads."""
    best: tuple[int, int] | None = None
    for _ in range(_CLOCK_READS):
        a = time.perf_counter_ns()
        r = time.time_ns()
        b = time.perf_counter_ns()
        if best is None or b - a < best[1]:
            best = (r - (a + b) // 2, b - a)
    assert best is not None
    return best


def _kineto_class() -> Any:
    from torch.profiler import profiler as _p

    return getattr(_p, "_KinetoProfile", None)


def _legacy_class() -> Any:
    """``torch.autograd.profiler.profile`` (the older, still public API; kineto's JSON too): its
    ``export_chrome_trace(path)`` is watched beside ``_KinetoProfile``'s (which calls it inside)."""
    import torch.autograd.profiler as _a

    cls = getattr(_a, "profile", None)
    fn = getattr(cls, "__dict__", {}).get("export_chrome_trace")
    return cls if callable(fn) else None


def check() -> list[str]:
    """What this torch lacks of the seam above (empty when torch.profiler exports where the watch expects)."""
    import inspect

    import torch.profiler

    problems: list[str] = []
    cls = _kineto_class()
    if cls is None:
        return ["torch.profiler.profiler._KinetoProfile is missing"]
    for name in ("prepare_trace", "start_trace"):  # every start goes through prepare_trace (schedule or not)
        if not callable(cls.__dict__.get(name)):
            problems.append(f"_KinetoProfile.{name} is missing")
    fn = cls.__dict__.get("export_chrome_trace")
    if not callable(fn):
        problems.append("_KinetoProfile.export_chrome_trace is missing")
    else:
        params = list(inspect.signature(fn).parameters)
        if params[:2] != ["self", "path"]:
            problems.append(f"_KinetoProfile.export_chrome_trace's parameters changed: {params[:3]}")
    if not issubclass(torch.profiler.profile, cls):
        problems.append("torch.profiler.profile no longer derives from _KinetoProfile")
    elif "export_chrome_trace" in torch.profiler.profile.__dict__:
        problems.append("torch.profiler.profile overrides export_chrome_trace")
    return problems


class TraceWatch:
    """Notes every chrome trace torch.profiler exports in this process while installed (see the module docstring).

    ``section()`` is the record's ``torch_traces`` section: the traces (path, who wrote it, when, relative to the
    run's ``t0``) and the clock pair that places our spans on their time base."""

    def __init__(self, t0_ns: int):
        self.t0_ns = t0_ns
        self.traces: list[dict[str, Any]] = []
        self.offsets: list[int] = []
        self.bracket_ns = 0
        self._orig: Callable[..., Any] | None = None
        self._orig_prepare: Callable[..., Any] | None = None
        self._orig_legacy: Callable[..., Any] | None = None
        self._orig_enter: Callable[..., Any] | None = None
        # Called with a torch.profiler about to start (OwnProfiler.step_aside): two cannot run at once (kineto
        # cancels the first, and stopping it then crashed the process: a segfault on torch 2.14).
        self.before_start: Callable[[Any], None] | None = None
        self._own: set[str] = set()
        self.own_profiler: Any = None  # OwnProfiler's torch.profiler object: not the job's
        # The job's torch.profilers started and not yet exported, held for export_pending (at most
        # MAX_HELD_PROFILERS: one the job never exports, e.g. read through key_averages(), stays held to the end).
        self.started: list[Any] = []
        self._exported: set[int] = set()
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self.note_clock()

    def note_clock(self) -> None:
        off, width = clock_offset_ns()
        self.offsets.append(off)
        self.bracket_ns = max(self.bracket_ns, width)

    def install(self) -> bool:
        """Wrap the export; False (with one line) when torch moved it: the job then runs without the merge."""
        if self._orig is not None:
            return True
        try:
            problems = check()
        except Exception as e:  # noqa: BLE001 - torch.profiler not importable: no traces to merge, the job unchanged
            problems = [f"{type(e).__name__}: {e}"]
        if problems:
            print(f"profiler: torch.profiler traces will not be merged ({problems[0]})", file=sys.stderr)
            return False
        cls = _kineto_class()
        orig = cls.__dict__["export_chrome_trace"]
        watch = self

        @functools.wraps(orig)
        def export_chrome_trace(prof: Any, path: str, *args: Any, **kwargs: Any) -> Any:
            outer = getattr(_inside, "kineto", False)
            _inside.kineto = True  # the legacy export it calls inside is not a trace of its own
            try:
                result = orig(prof, path, *args, **kwargs)  # the job's call, first and unchanged
            finally:
                _inside.kineto = outer
            watch._after_export(prof, path)
            return result

        orig_prepare = cls.__dict__["prepare_trace"]

        @functools.wraps(orig_prepare)
        def prepare_trace(prof: Any, *args: Any, **kwargs: Any) -> Any:
            hook = watch.before_start
            try:
                if hook is not None:
                    hook(prof)
                watch._hold(prof)
            except Exception:  # noqa: BLE001 - stepping aside must never fail the job's own start
                pass
            return orig_prepare(prof, *args, **kwargs)

        self._orig, self._orig_prepare = orig, orig_prepare
        cls.export_chrome_trace = export_chrome_trace
        cls.prepare_trace = prepare_trace
        self._install_legacy()
        return True

    def _after_export(self, prof: Any, path: Any) -> None:
        """A job's profiler exported ``path``: note it, and hold that profiler no longer (it is exported)."""
        try:
            self._exported.add(id(prof))
            self.started = [p for p in self.started if p is not prof]
            self._noted(path)
        except Exception:  # noqa: BLE001 - noting a path must never fail the job's export
            pass

    def _hold(self, prof: Any) -> None:
        """Hold a job's profiler that starts (for export_pending), at most MAX_HELD_PROFILERS."""
        if (prof is not self.own_profiler and os.getpid() == self._pid
                and len(self.started) < MAX_HELD_PROFILERS and all(p is not prof for p in self.started)):
            self.started.append(prof)

    def _install_legacy(self) -> None:
        """Also note ``torch.autograd.profiler.profile(...).export_chrome_trace(path)``, unless it runs inside the
        watched ``_KinetoProfile`` export (which calls it, with a temporary file for ``.gz``)."""
        legacy = _legacy_class()
        if legacy is None:
            return
        orig_legacy = legacy.__dict__["export_chrome_trace"]
        watch = self

        @functools.wraps(orig_legacy)
        def export_chrome_trace(prof: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
            result = orig_legacy(prof, path, *args, **kwargs)  # the job's call, first and unchanged
            if not getattr(_inside, "kineto", False):
                watch._after_export(prof, path)
            return result

        orig_enter = legacy.__dict__["__enter__"]

        @functools.wraps(orig_enter)
        def __enter__(prof: Any) -> Any:
            result = orig_enter(prof)  # a `with torch.autograd.profiler.profile()` block of the job's
            try:
                watch._hold(prof)
            except Exception:  # noqa: BLE001
                pass
            return result

        self._orig_legacy, self._orig_enter = orig_legacy, orig_enter
        legacy.export_chrome_trace = export_chrome_trace
        legacy.__enter__ = __enter__

    def uninstall(self) -> None:
        if self._orig is None:
            return
        cls = _kineto_class()
        if cls is not None:
            cls.export_chrome_trace = self._orig
            if self._orig_prepare is not None:
                cls.prepare_trace = self._orig_prepare
        legacy = _legacy_class()
        if legacy is not None and self._orig_legacy is not None:
            legacy.export_chrome_trace = self._orig_legacy
            legacy.__enter__ = self._orig_enter
        self._orig = self._orig_prepare = self._orig_legacy = self._orig_enter = None

    def export_pending(self, folder: Path) -> list[Path]:
        """The job's torch.profilers that stopped without exporting (``--then exit`` stopped the job before its
        ``prof.export_chrome_trace(...)`` after the block), exported into the run's ``folder`` (never where the job
        would have written) as ``job_profiler<k>.pt.trace.json``, noted with ``by: "job_profiler"``. Only once the
        job has ended; one of its profilers still recording then (``prof.start()`` whose ``prof.stop()`` never ran)
        is stopped first, without its ``on_trace_ready`` (:func:`_stop_left_running`). Releases the profilers held."""
        import torch

        held, self.started = self.started, []
        out: list[Path] = []
        stopped: set[int] = set()  # stopped here: exported even when an earlier cycle of it was
        try:
            if torch._C._autograd._profiler_enabled():
                # The job ended with one of its profilers still recording (prof.start() whose prof.stop() the
                # window's close cut off, or a job that never stops it): kineto left running crashes the
                # interpreter's exit (a segfault on torch 2.14, with or without the profiler). The job is over:
                # stop it here, without its on_trace_ready (the job's code, and it would write where the job
                # writes), and export it into the run's folder like any stopped one.
                stopped = {id(prof) for prof in reversed(held) if _stop_left_running(prof)}
            if torch._C._autograd._profiler_enabled():
                return out  # still one we did not see start: not ours to stop or export
        except Exception:  # noqa: BLE001
            return out
        legacy = _legacy_class()
        for k, prof in enumerate(held):
            old = legacy is not None and isinstance(prof, legacy)  # torch.autograd.profiler.profile
            if (id(prof) in self._exported and id(prof) not in stopped) or \
                    (getattr(prof, "kineto_results", None) is None if old else getattr(prof, "profiler", None) is None):
                continue
            path = Path(folder) / f"job_profiler{k}.pt.trace.json"
            try:
                if old:
                    (self._orig_legacy or legacy.__dict__["export_chrome_trace"])(prof, str(path))
                else:
                    self._orig_export(prof, str(path))
            except Exception:  # noqa: BLE001 - nothing recorded, or a torch that cannot export it: no merge
                continue
            if path.is_file():
                self._noted(path, by="job_profiler")
                out.append(path)
        return out

    def _orig_export(self, prof: Any, path: str) -> None:
        fn = self._orig or _kineto_class().__dict__["export_chrome_trace"]
        outer = getattr(_inside, "kineto", False)
        _inside.kineto = True  # noted by the caller, with its own ``by``
        try:
            fn(prof, path)
        finally:
            _inside.kineto = outer

    def own(self, path: str | os.PathLike[str]) -> None:
        """``path`` is the profiler's own export (``--torch-profiler``), not the job's."""
        self._own.add(os.path.abspath(os.fspath(path)))

    def _noted(self, path: Any, by: str | None = None) -> None:
        if os.getpid() != self._pid:
            return  # a process the job forked: its traces are its own
        p = os.path.abspath(os.fspath(path))
        self.note_clock()
        with self._lock:
            # One path exported again (a fixed name written each cycle) is one trace: the file holds the last.
            self.traces = [t for t in self.traces if t["path"] != p]
            if len(self.traces) >= MAX_TRACES:
                return
            self.traces.append({"path": p, "by": by or ("profiler" if p in self._own else "job"),
                                "exported_s": round((time.perf_counter_ns() - self.t0_ns) / 1e9, 6)})

    def section(self) -> dict[str, Any]:
        """The record's ``torch_traces`` section: the clock pair always (``report --torch-trace`` can merge a trace
        taken during this run later), the traces when any was exported."""
        offs = sorted(self.offsets)
        return {"traces": list(self.traces), "clock": {
            "ours": "CLOCK_MONOTONIC", "theirs": "CLOCK_REALTIME", "t0_monotonic_ns": int(self.t0_ns),
            "realtime_minus_monotonic_us": int(round(offs[len(offs) // 2] / 1e3)),
            "drift_ns": int(offs[-1] - offs[0]), "read_bracket_ns": int(self.bracket_ns)}}


def _stop_left_running(prof: Any) -> bool:
    """Stop a job's torch.profiler that is still recording, with its ``on_trace_ready`` left out (see
    ``TraceWatch.export_pending``); True when it was recording. Its events stay in it for the export."""
    legacy = _legacy_class()
    old = legacy is not None and isinstance(prof, legacy)  # torch.autograd.profiler.profile: it is the inner one
    inner = prof if old else getattr(prof, "profiler", None)
    # autograd.profiler.profile sets kineto_results when it stops: None while a cycle records.
    if inner is None or not getattr(inner, "entered", False) or getattr(inner, "kineto_results", None) is not None:
        return False
    ready = prof.__dict__.get("on_trace_ready", None) if hasattr(prof, "__dict__") else None
    try:
        if ready is not None:
            prof.on_trace_ready = None
        if old:
            prof.__exit__(None, None, None)
        else:
            prof.stop()
    except Exception:  # noqa: BLE001 - a profiler that cannot stop: left as it was
        return False
    finally:
        if ready is not None:
            prof.on_trace_ready = ready
    return True


class OwnProfiler:
    """torch.profiler around the measured window (``--torch-profiler``): started with the session, stepped at each
    batch handed over (so ``ProfilerStep#k`` holds the wait for batch k and the compute of batch k - 1), stopped when
    the window closes; kineto's trace goes to ``out/torch_profiler.pt.trace.json`` through the watched export."""

    def __init__(self, warmup: int, steps: int, out_dir: Path, watch: TraceWatch):
        self.warmup, self.steps, self.out_dir, self.watch = warmup, steps, Path(out_dir), watch
        self.prof: Any = None
        self.error: str | None = None
        self._stepped = 0

    @property
    def path(self) -> Path:
        return self.out_dir / OWN_TRACE_FILE

    def start(self) -> None:
        try:
            import torch
            from torch.profiler import ProfilerActivity, profile, schedule

            if torch._C._autograd._profiler_enabled():  # the job's own is running (around a profile() block)
                self.error = "a torch.profiler was running already: the profiler did not start its own"
                print(f"profiler: {self.error} (its traces are merged instead)", file=sys.stderr)
                return
            self.watch.before_start = self.step_aside
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
            self.watch.own(self.path)
            self.out_dir.mkdir(parents=True, exist_ok=True)
            sched = schedule(wait=0, warmup=self.warmup, active=self.steps + 1, repeat=1)
            self.prof = profile(activities=acts, schedule=sched,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(self.path)))
            self.watch.own_profiler = self.prof
            self.prof.start()
        except Exception as e:  # noqa: BLE001 - the run goes on without the torch trace, said in one line
            self.error = f"{type(e).__name__}: {e}"
            self.prof = None
            print(f"profiler: could not start torch.profiler ({self.error})", file=sys.stderr)

    def step_aside(self, prof: Any) -> None:
        """The job starts its own torch.profiler: ours stops first (its trace so far is exported and merged), so the
        job's runs as it would without the profiler."""
        if self.prof is None or prof is self.prof:
            return
        self.watch.before_start = None
        self.stop()
        self.error = "the job started its own torch.profiler: the profiler's stopped there (two cannot run at once)"
        print(f"profiler: {self.error}; the job's traces are merged too", file=sys.stderr)

    def on_step(self, measured: bool, wait_start_ns: int, wait_end_ns: int, n_samples: int) -> None:
        """Session.on_step: a batch was handed over; one kineto step per batch of the window."""
        if self.prof is None or self._stepped > self.warmup + self.steps:
            return
        self._stepped += 1
        try:
            self.prof.step()
        except Exception as e:  # noqa: BLE001
            self.error = f"{type(e).__name__}: {e}"
            self.prof = None

    def stop(self) -> None:
        """Stop (and so export) once; idempotent: the window's close and the run's end may both call it."""
        prof, self.prof = self.prof, None
        self.watch.before_start = None
        if prof is None:
            return
        try:
            prof.stop()
        except Exception as e:  # noqa: BLE001
            self.error = f"{type(e).__name__}: {e}"
            print(f"profiler: torch.profiler did not stop cleanly ({self.error})", file=sys.stderr)


def chain(*fns: Callable[..., None] | None) -> Callable[..., None] | None:
    """One ``on_step`` callback that calls each given one in order (None where none is given)."""
    given = [f for f in fns if f is not None]
    if not given:
        return None
    if len(given) == 1:
        return given[0]

    def both(*args: Any) -> None:
        for f in given:
            f(*args)
    return both
