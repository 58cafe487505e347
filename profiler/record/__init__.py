"""RunRecord: the one versioned, serialisable record of a run (run.json).

Collection fills the raw sections (config, environment, timeline, samples, ...); analysis fills the derived ones
(throughput, stages, stall, verdict, ...) and can always recompute them from the raw ones, which is what
``python -m profiler report`` does on another machine. Each section's type is in ``profiler.record.schema``;
docs/run_json.md documents every field (a test checks it names each one).

Loading is the single home of validation: ``load`` bounds the read, decodes strictly, migrates older versions
(``migrate``) and checks every raw field (``validate``), so nothing downstream meets a damaged record.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import UserError
from ..fsutil import atomic_write_bytes
from .migrate import upgrade
from .schema import (
    Attach,
    Ceilings,
    ComputeDevice,
    Config,
    Dataset,
    Distributed,
    Environment,
    Finding,
    Job,
    LoaderInfo,
    MainProcessSamples,
    Memory,
    ModelAlone,
    ProcessSeries,
    Ram,
    Samples,
    Skipped,
    SkippedFile,
    StageStats,
    Stall,
    Storage,
    Throughput,
    Timeline,
    ToolInfo,
    TorchTraces,
    Verdict,
    WhatIf,
    Window,
)
from .validate import RecordError, drop_bad_derived, validate

__all__ = ["SCHEMA_VERSION", "SUPPORTED_VERSIONS", "RecordError", "RunRecord", "json_safe", "load", "validate"]

# 1: first public layout. 2: job section; timeline v2 (sample_spans with stages, epochs, accounting, per-thread CPU).
# Readers accept any record whose version they know and migrate it to this one; bump on incompatible change.
SCHEMA_VERSION = 2
SUPPORTED_VERSIONS = (1, 2)
# Largest run.json `load` reads (report, compare, sweep's points): 32 MiB. Why: a run's record is bounded by what it
# keeps (0.8 MiB at 40,000 steps: the first 2,000 steps in detail, the series halved at 4,000 points), so 40 times
# that is no run's record; a file that size was padded by something else. Below the cap `report` renders within a
# minute (a 46 MiB record padded with 60 MB of argv: 11 s of CPU); above it, it refuses at once with one line
# (before the cap, a 200 MB record ran for more than 8 minutes).
MAX_RECORD_BYTES = 32 * 1024 ** 2


@dataclass
class RunRecord:
    config: Config
    environment: Environment
    compute_device: ComputeDevice
    window: Window
    timeline: Timeline
    samples: Samples = field(default_factory=Samples)
    dataset: Dataset = field(default_factory=Dataset)
    skipped: Skipped = field(default_factory=lambda: Skipped(count=0, files=[]))
    storage: Storage | None = None
    memory: Memory | None = None
    job: Job | None = None
    distributed: Distributed | None = None  # one rank of a torchrun job (profiler/distributed/)
    model_alone: ModelAlone | None = None  # raw ceilings measured after the window (harness/ceiling.py)
    main_process_samples: MainProcessSamples | None = None
    attach: Attach | None = None  # job.kind "attach": sampled from outside (profiler/attach/)
    torch_traces: TorchTraces | None = None  # torch.profiler traces and the clocks to merge them (render/kineto_merge)
    partial: bool = False
    partial_reason: str | None = None
    schema_version: int = SCHEMA_VERSION
    tool: ToolInfo = field(default_factory=lambda: ToolInfo(name="profiler", version=__version__))
    created_utc: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    # --- derived by profiler.analysis.analyze -----------------------------------------------------------------------
    throughput: Throughput = field(default_factory=Throughput)
    stages: dict[str, StageStats] = field(default_factory=dict)
    stall: Stall = field(default_factory=Stall)
    verdict: Verdict = field(default_factory=Verdict)
    findings: list[Finding] = field(default_factory=list)
    ram: Ram = field(default_factory=Ram)
    whatif: WhatIf = field(default_factory=WhatIf)  # analysis/whatif.py
    ceilings: Ceilings = field(default_factory=Ceilings)  # analysis/whatif.py
    # Top-level keys this version does not know (a newer writer's): kept, and written back at the top level.
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The run.json object. Shallow: the sections are already plain JSON-shaped dicts and lists, so no deep copy
        (``dataclasses.asdict`` copied the whole timeline, ~0.4 ms per step)."""
        d = {f.name: getattr(self, f.name) for f in _FIELDS if f.name != "extra"}
        for k, v in self.extra.items():
            d.setdefault(k, v)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> RunRecord:
        """Check the version, migrate to the current one, validate, and build the record (UserError if bad)."""
        check_version(d)
        d = upgrade(d)
        validate(d)
        d = dict(d)
        drop_bad_derived(d)
        known = {f.name for f in _FIELDS} - {"extra"}
        rec = cls(**{k: v for k, v in d.items() if k in known})
        old_extra = d.get("extra")  # records before 2 nested unknown keys under "extra"
        if type(old_extra) is dict:
            rec.extra.update(old_extra)
        rec.extra.update({k: v for k, v in d.items() if k not in known and k != "extra"})
        return rec

    def save(self, path: str | os.PathLike) -> Path:
        """Write run.json atomically (never a half file under the real name; no temporary left on failure, disk full
        included: OSError with a clear message). NaN and infinity are written as null."""
        d = self.to_dict()
        try:
            text = json.dumps(d, separators=(",", ":"), allow_nan=False)
        except (ValueError, TypeError):  # NaN/inf or numpy scalars somewhere: the slower cleaning copy
            text = json.dumps(json_safe(d), separators=(",", ":"), allow_nan=False)
        return atomic_write_bytes(path, text.encode("ascii"))

    # --- typed reads of optional fields, each default stated once ---------------------------------------------------
    # Why here: analysis and several renderers read these; a default written out in each reader drifts apart (one
    # defaulted the timing to "host clocks", another compared it with None), and here the checker sees one type.
    @property
    def job_kind(self) -> str:
        """What was profiled: ``job.kind``, or "builtin" for a record without a job section (the built-in benchmark,
        v1 records)."""
        return self.job["kind"] if self.job else "builtin"

    @property
    def loader(self) -> LoaderInfo | None:
        """The profiled DataLoader's own settings (``job.loader``); None for the built-in benchmark, whose loader
        is described by ``config``."""
        return self.job.get("loader") if self.job else None

    @property
    def timing(self) -> str:
        """How the step times were taken: "cuda events", "sampled stacks" (attach), else "host clocks"."""
        return self.compute_device.get("timing", "host clocks")

    @property
    def device_name(self) -> str:
        """The compute device's name ("" when the record does not say)."""
        return self.compute_device.get("name") or ""

    @property
    def window_steps(self) -> int:
        """Measured steps in the window (0 when the record does not say)."""
        return int(self.window.get("steps", 0))

    @property
    def processes(self) -> list[ProcessSeries]:
        """The sampled processes (main, workers, children); empty when the sampler saw none."""
        return self.samples.get("processes") or []

    @property
    def skipped_files(self) -> list[SkippedFile]:
        """The files the dataset could not read or decode, with why (``skipped.count`` says how many in all)."""
        return self.skipped.get("files") or []

    @property
    def idle_per_step(self) -> dict[str, list[float]]:
        """``stall.per_step``: each cause's idle seconds per measured step; empty before analysis."""
        return self.stall.get("per_step") or {}


_FIELDS = dataclasses.fields(RunRecord)


def json_safe(o: Any) -> Any:
    """JSON-safe copy: NaN/inf become null, numpy scalars and arrays Python numbers and lists, tuples lists."""
    if isinstance(o, dict):
        return {str(k): json_safe(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [json_safe(v) for v in o]
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if hasattr(o, "tolist") and callable(o.tolist):  # numpy scalar or array
        return json_safe(o.tolist())
    return o




def check_version(d: Any) -> None:
    if type(d) is not dict:
        raise RecordError("not a profiler run record: the top level is not a JSON object")
    if "schema_version" not in d:
        raise RecordError("not a profiler run record: no schema_version field")
    v = d["schema_version"]
    if type(v) is not int or v not in SUPPORTED_VERSIONS:
        raise RecordError(f"run record schema_version {v!r} is not supported by this profiler "
                          f"(supports {', '.join(map(str, SUPPORTED_VERSIONS))}); upgrade profiler")


class _NotANumber(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NotANumber(f"{name} is not a number JSON allows")


def load(path: str | os.PathLike) -> RunRecord:
    """Load and validate a run.json (or a folder holding one); UserError (one line) for anything we cannot read."""
    p = Path(path)
    try:
        if p.is_dir():
            p = p / "run.json"
        data = _read_bounded(p)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not a run record: not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                        f"{e.start})") from None
    try:
        d = json.loads(text, parse_constant=_reject_constant)
    except _NotANumber as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except (ValueError, RecursionError) as e:  # 5,000-digit integers; nesting deeper than the parser goes
        raise UserError(f"{path}: not valid JSON ({str(e)[:80] or type(e).__name__})") from None
    try:
        return RunRecord.from_dict(d)
    except UserError as e:
        raise UserError(f"{path}: {e}") from None
    except RecursionError:
        raise UserError(f"{path}: not a run record: nested too deeply") from None


def _read_bounded(p: Path) -> bytes:
    """The file's bytes, refusing before reading anything that is not a regular file or is over MAX_RECORD_BYTES
    (/dev/zero, a FIFO that would block forever, a device)."""
    st = os.stat(p)
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{p}: not a regular file")
    if st.st_size > MAX_RECORD_BYTES:
        raise UserError(f"{p}: {st.st_size / 1024 ** 2:.0f} MiB is larger than any run record "
                        f"(limit {MAX_RECORD_BYTES // 1024 ** 2} MiB)")
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # swapped between the stat and the open
            raise UserError(f"{p}: not a regular file")
        data = f.read(MAX_RECORD_BYTES + 1)
    if len(data) > MAX_RECORD_BYTES:
        raise UserError(f"{p}: larger than any run record (limit {MAX_RECORD_BYTES // 1024 ** 2} MiB)")
    return data
