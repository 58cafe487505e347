"""RunRecord: the one versioned, serialisable record of a run (run.json).

Collection fills the raw sections (config, environment, timeline, samples, ...); analysis fills the derived ones
(throughput, stages, stall, verdict, ...) and can always recompute them from the raw ones, which is what
``python -m profiler report`` does on another machine. docs/run_json.md documents every field.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import __version__
from .errors import UserError

# 1: first public layout. Readers accept any record whose version they know; bump on incompatible change.
SCHEMA_VERSION = 1
SUPPORTED_VERSIONS = (1,)

# Raw sections every record must have, with their JSON types.
REQUIRED: dict[str, type | tuple[type, ...]] = {
    "schema_version": int,
    "partial": bool,
    "config": dict,
    "environment": dict,
    "compute_device": dict,
    "window": dict,
    "timeline": dict,
    "samples": dict,
}


@dataclass
class RunRecord:
    config: dict[str, Any]
    environment: dict[str, Any]
    compute_device: dict[str, Any]  # {type: cpu|cuda, name, timing: "host clocks"|"cuda events", index}
    window: dict[str, Any]  # {start_s, end_s, seconds, steps, samples, warmup_steps}
    timeline: dict[str, Any]  # {steps: {...columns}, batches: {...}, sample_spans: {...}, detail: {...}}
    samples: dict[str, Any] = field(default_factory=dict)
    dataset: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, Any] = field(default_factory=lambda: {"count": 0, "files": []})
    storage: dict[str, Any] | None = None
    memory: dict[str, Any] | None = None
    job: dict[str, Any] | None = None  # v2: what ran (built-in pipeline or a user's script) and the profiled loader
    partial: bool = False
    partial_reason: str | None = None
    schema_version: int = SCHEMA_VERSION
    tool: dict[str, Any] = field(default_factory=lambda: {"name": "profiler", "version": __version__})
    created_utc: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    # --- derived by profiler.analysis.analyze -----------------------------------------------------------------------
    throughput: dict[str, Any] = field(default_factory=dict)
    stages: dict[str, Any] = field(default_factory=dict)
    stall: dict[str, Any] = field(default_factory=dict)
    verdict: dict[str, Any] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)
    ram: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunRecord":
        validate(d)
        known = {f.name for f in dataclasses.fields(cls)}
        rec = cls(**{k: v for k, v in d.items() if k in known})
        # Unknown top-level keys (a newer minor writer) are kept, not dropped.
        rec.extra.update({k: v for k, v in d.items() if k not in known})
        return rec

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        with open(tmp, "w") as f:
            json.dump(_clean(self.to_dict()), f, separators=(",", ":"), allow_nan=False)
        os.replace(tmp, path)  # atomic: an interrupted write never leaves a half file under the real name
        return path


def _clean(o: Any) -> Any:
    """JSON-safe copy: NaN/inf become null, numpy scalars become Python numbers, tuples lists."""
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if hasattr(o, "item") and callable(o.item):  # numpy scalar
        return _clean(o.item())
    return o


def validate(d: Any) -> None:
    """Raise UserError with one clear line if ``d`` is not a run record we can read."""
    if not isinstance(d, dict):
        raise UserError("not a profiler run record: the top level is not a JSON object")
    if "schema_version" not in d:
        raise UserError("not a profiler run record: no schema_version field")
    v = d["schema_version"]
    if not isinstance(v, int) or v not in SUPPORTED_VERSIONS:
        raise UserError(f"run record schema_version {v!r} is not supported by this profiler "
                        f"(supports {', '.join(map(str, SUPPORTED_VERSIONS))}); upgrade profiler")
    for key, typ in REQUIRED.items():
        if key not in d:
            raise UserError(f"run record is missing the field '{key}'")
        if not isinstance(d[key], typ):
            raise UserError(f"run record field '{key}' has the wrong type ({type(d[key]).__name__})")
    steps = d["timeline"].get("steps")
    if not isinstance(steps, dict) or "wait_start" not in steps:
        raise UserError("run record field 'timeline.steps' is missing or malformed")
    n = len(steps["wait_start"])
    for k, col in steps.items():
        if not isinstance(col, list) or len(col) != n:
            raise UserError(f"run record column 'timeline.steps.{k}' has a different length than the others")


def load(path: str | os.PathLike) -> RunRecord:
    """Load and validate a run.json; UserError (one line) for a missing, unreadable or malformed file."""
    p = Path(path)
    if p.is_dir():
        p = p / "run.json"
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    try:
        return RunRecord.from_dict(d)
    except UserError as e:
        raise UserError(f"{path}: {e}") from None
    except TypeError as e:
        raise UserError(f"{path}: malformed run record ({e})") from None
