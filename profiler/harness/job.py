"""Profile one job — the built-in pipeline or a user's script — through the same instrumentation.

``profile_job(job, ...)`` sets up storage control and the background sampler, starts a Session (hooks into every
DataLoader, see profiler/instrument/), calls ``job()``, and turns whatever happened into one RunRecord:

- the window closed (``then='exit'``: the job was stopped by WindowClosed) → complete record;
- the job returned before the window closed → a record of what it did, partial, "the job ended after N of M steps";
- Ctrl-C / SIGTERM / SIGHUP → partial, "interrupted"; CUDA out of memory → partial, ``memory.oom``;
- the job raised → partial, "failed: ..."; the exception is kept on the outcome so the caller can show it as the
  user's own traceback.
Nothing measured is ever lost on the way: the record is built in a ``finally``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, cast

from .. import signals
from ..errors import UserError
from ..instrument import collect, torch_hooks
from ..instrument.session import Session, StepRow, WindowClosed
from ..record import RunRecord
from ..redact import redact_argv

if TYPE_CHECKING:  # annotations only
    from ..record.schema import (
        ComputeDevice,
        Config,
        Dataset,
        Environment,
        Job,
        Memory,
        Samples,
        Skipped,
        Storage,
        Timeline,
        Window,
    )

# Other loaders listed with their figures in run.json: a job that builds a loader per step must not grow the record.
MAX_OTHER_LOADERS = 50


class OutOfDeviceMemory(Exception):
    """The model step ran out of device memory; the run ends with verdict ``memory``."""

    def __init__(self, step: int, message: str):
        super().__init__(message)
        self.step = step


@dataclass
class Outcome:
    """How the job ended: ``status`` is ``window closed`` | ``ended`` | ``interrupted`` | ``oom`` | ``failed`` |
    ``exit``; ``error`` the exception (for failed / interrupted), ``exit_code`` for a job that called sys.exit."""
    status: str
    error: BaseException | None = None
    exit_code: int | None = None
    oom: dict | None = None


@dataclass
class RunResult:
    """What the harness hands back: the raw record (None when the job iterated no DataLoader) and the facts about the
    run that are not part of the record — how the job ended (the command's exit status), the CLOCK_MONOTONIC origin
    of the record's times (``t0_ns``: the ranks' clocks are aligned on it) and, for the built-in pipeline under
    torchrun, the process group's backend and collective timings (``ddp``)."""
    record: RunRecord | None
    outcome: Outcome
    t0_ns: int
    ddp: dict[str, Any] | None = None


@dataclass
class JobSpec:
    """What the record needs to know about the job beyond the session (see run.json ``job``)."""
    kind: str  # builtin | script | module | api
    target: str | None = None
    argv: list[str] = field(default_factory=list)
    then: str = "exit"


def run_session(job: Callable[[], Any], session: Session, sampler: Any = None,
                throttle_ctx: Any = None) -> Outcome:
    """Run ``job`` under ``session`` (started and stopped here); never raises for the job's own failures."""
    from contextlib import nullcontext

    outcome = Outcome("ended")
    if sampler is not None:
        sampler.start()
    try:
        with throttle_ctx if throttle_ctx is not None else nullcontext():
            session.start()
            try:
                job()
            finally:
                signals.job_ended()  # from here to the saved record a signal is held, not raised
                torch_hooks.pause_worker_watchdog()  # and a dying worker cannot raise into the saving (resumed after)
                session.stop()
    except WindowClosed:
        outcome = Outcome("window closed")
    except OutOfDeviceMemory as e:
        outcome = Outcome("oom", e, oom={"step": e.step, "message": str(e)})
    except KeyboardInterrupt as e:  # signals.Terminated (SIGTERM/SIGHUP) is a KeyboardInterrupt too
        # Drop the frames: they hold the DataLoader iterator, whose workers (signalled too) would otherwise be
        # reported by torch's SIGCHLD handler in the middle of writing the record.
        e.__traceback__ = None
        outcome = Outcome("interrupted", e)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        outcome = Outcome("exit", e, exit_code=code)
    except BaseException as e:  # noqa: BLE001 - the job's own failure: kept, shown to the user as theirs
        if isinstance(e, UserError) and not session.rows:
            raise  # bad input found while starting (e.g. the profiler's own checks): exit 2, not a failed run
        outcome = Outcome("failed", e)
    finally:
        if sampler is not None and not session.samples:  # then='continue' stopped it when the window closed
            session.samples = sampler.stop()
    if outcome.status == "ended" and session.closed and session.measured_steps >= session.steps:
        outcome.status = "window closed"  # then='continue': the window closed and the job finished by itself
    return outcome


def partial_reason(outcome: Outcome, session: Session) -> str | None:
    n, want = session.measured_steps, session.steps
    if outcome.status == "window closed":
        return None
    if outcome.status == "interrupted":
        num = signals.signal_number(outcome.error)
        sig = signals.describe(num) if num is not None else "Ctrl-C"
        return f"interrupted ({sig}) after {n} of {want} measured steps"
    if outcome.status == "oom":
        return f"CUDA out of memory at step {outcome.oom['step'] if outcome.oom else '?'}"
    if outcome.status == "failed":
        e = outcome.error
        return f"failed: {type(e).__name__}: {e}"
    if outcome.status == "exit":
        return f"the job called sys.exit({outcome.exit_code}) after {n} of {want} measured steps"
    return f"the job ended after {n} of {want} measured steps"


def build_record(session: Session, outcome: Outcome, spec: JobSpec, *, config: dict, environment: dict,
                 compute_device: dict, dataset: dict, storage: dict | None, memory: dict | None,
                 extra_skipped: list[tuple[str, str]] | None = None) -> RunRecord:
    """The raw record of a finished session (analysis fills the derived sections)."""
    reason = partial_reason(outcome, session)
    loader = session.loader.to_dict() if session.loader else None
    job = {"kind": spec.kind, "target": spec.target, "argv": redact_argv(spec.argv), "then": spec.then,
           "ended": _ended_words(outcome), "loader": loader, "other_loaders": session.other_loaders,
           "other_loader_figures": [o.to_dict(session.t0_ns) for o in session.others[:MAX_OTHER_LOADERS]],
           "window_restarts": session.restarts,
           "read_from": [{"folder": k, "files_opened": v} for k, v in
                         sorted(session.data_folders().items(), key=lambda kv: -kv[1])[:20]]}
    mem = dict(memory or {})
    mem.setdefault("device_peak_bytes", session.peak_device_memory_bytes)
    mem.setdefault("oom", outcome.oom)
    cd = dict(compute_device)
    cd["timing"] = session.device_timing
    # The one place the raw sections are assembled: the harness builds them as plain dicts, and here they become
    # the record's declared types (what `load` validates them against when the record is read back).
    return RunRecord(
        config=cast("Config", config), environment=cast("Environment", environment),
        compute_device=cast("ComputeDevice", cd), window=cast("Window", collect.window(session)),
        timeline=cast("Timeline", collect.timeline(session)),
        samples=cast("Samples", getattr(session, "samples", {}) or {}), dataset=cast("Dataset", dataset),
        skipped=cast("Skipped", collect.skipped(session, extra_skipped)), storage=cast("Storage | None", storage),
        memory=cast("Memory", mem), job=cast("Job", job), partial=reason is not None, partial_reason=reason)


def compute_device_facts(device_type: str, index: int | None, environment: dict[str, Any]) -> dict[str, Any]:
    """The raw ``compute_device`` section (timing is added by ``build_record``): the device the model ran on, named
    by CUDA, or by the CPU model the environment probe read; the one definition for the built-in run and a script."""
    if device_type == "cuda":
        import torch

        name = torch.cuda.get_device_name(index)
    else:
        name = (environment.get("cpu") or {}).get("model") or "CPU"
    return {"type": device_type, "index": index, "name": name}


def storage_into_environment(environment: dict[str, Any], storage: dict[str, Any]) -> None:
    """The storage facts the environment section repeats (the data's device, residency at the start)."""
    environment["storage"] = storage.get("device")
    environment["residency_start"] = storage.get("residency_start")


def _ended_words(outcome: Outcome) -> str:
    if outcome.status == "failed":
        return f"the job raised {type(outcome.error).__name__}"
    if outcome.status == "exit":
        return f"sys.exit({outcome.exit_code})"
    return {"window closed": "window closed", "ended": "the job ended", "interrupted": "interrupted",
            "oom": "CUDA out of memory"}[outcome.status]


__all__ = ["JobSpec", "Outcome", "OutOfDeviceMemory", "RunResult", "Session", "StepRow", "build_record",
           "partial_reason", "run_session"]
