"""monitor.json: the record of a monitored job (kind ``monitor``, docs/monitor.md has the fields).

Written whole and atomically (a temp file renamed over it) at cuts, at most every MONITOR_WRITE_EVERY_S, and when
the job ends however it ends: a reader (``profiler report`` on the live folder, an exporter) always finds a complete
file. Bounded: the windows are a WindowLog, the change points at most MONITOR_MAX_CHANGES.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError
from .changes import ChangePoint
from .fold import WindowLog
from .windows import WindowSummary

KIND = "monitor"
SCHEMA = 1
FILE = "monitor.json"


@dataclass
class MonitorRecord:
    job: dict[str, Any] = field(default_factory=dict)  # target, argv, loader facts, how it ended
    config: dict[str, Any] = field(default_factory=dict)  # window, detail, exporters
    log: WindowLog = field(default_factory=WindowLog)
    changes: list[ChangePoint] = field(default_factory=list)
    status: str = "running"  # running | ended | interrupted | failed | exit
    windows_total: int = 0  # base windows cut so far (folded ones included)
    steps_total: int = 0
    started_at: str = ""  # ISO time, UTC
    monitor_cost: dict[str, Any] = field(default_factory=dict)  # the monitor's own time at cuts
    # Each kept window's JSON text, made once (id -> (window, its keep flag, text)): monitor.json is rewritten whole
    # at a cut, and encoding 512 windows afresh each time (asdict, then json) was most of a cut's cost late in a job.
    _texts: dict[int, tuple[WindowSummary, bool, str]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def windows(self) -> list[WindowSummary]:
        return self.log.windows

    def to_dict(self) -> dict[str, Any]:
        return {**self.to_dict_head(), "windows": [w.to_dict() for w in self.log.windows]}

    def to_json(self) -> str:
        """The record as to_dict's JSON (windows last), each window's text reused from the last write."""
        texts: dict[int, tuple[WindowSummary, bool, str]] = {}
        parts = []
        for w in self.log.windows:
            hit = self._texts.get(id(w))
            if hit is None or hit[0] is not w or hit[1] != w.keep:
                hit = (w, w.keep, json.dumps(w.to_dict(), separators=(",", ":")))
            texts[id(w)] = hit
            parts.append(hit[2])
        self._texts = texts  # the windows folded away are dropped
        return json.dumps(self.to_dict_head(), separators=(",", ":"))[:-1] + ',"windows":[' + ",".join(parts) + "]}"

    def to_dict_head(self) -> dict[str, Any]:
        """to_dict without its windows."""
        return {"kind": KIND, "schema": SCHEMA, "status": self.status, "started_at": self.started_at,
                "job": self.job, "config": self.config, "windows_total": self.windows_total,
                "steps_total": self.steps_total, "folds": self.log.folds, "monitor_cost": self.monitor_cost,
                "changes": [c.to_dict() for c in self.changes]}

    def save(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / FILE
        tmp = folder / f".{FILE}.{os.getpid()}.tmp"
        text = self.to_json()
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
        return path

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MonitorRecord:
        problem = validate(d)
        if problem:
            raise UserError(f"monitor record: {problem}")
        rec = cls(job=d.get("job") or {}, config=d.get("config") or {}, status=str(d.get("status", "")),
                  windows_total=int(d.get("windows_total", 0)), steps_total=int(d.get("steps_total", 0)),
                  started_at=str(d.get("started_at", "")), monitor_cost=d.get("monitor_cost") or {})
        rec.log.windows = [WindowSummary.from_dict(w) for w in d["windows"]]
        rec.log.folds = int(d.get("folds", 0))
        rec.changes = [ChangePoint.from_dict(c) for c in d["changes"]]
        return rec


def validate(d: Any) -> str | None:
    """None when ``d`` is a readable monitor record; else what is wrong, in a few words."""
    if not isinstance(d, dict) or d.get("kind") != KIND:
        return "not a monitor record (kind is not 'monitor')"
    if d.get("schema") != SCHEMA:
        return f"schema {d.get('schema')!r}, this profiler reads {SCHEMA}"
    if not isinstance(d.get("windows"), list) or not isinstance(d.get("changes"), list):
        return "windows and changes must be lists"
    need = ("index", "span", "step_first", "step_last", "start_s", "end_s", "steps", "samples", "idle_s",
            "idle_by_cause_s", "bottleneck")
    for i, w in enumerate(d["windows"]):
        if not isinstance(w, dict) or any(k not in w for k in need):
            return f"window {i} lacks one of {', '.join(need)}"
    return None


def find(path: str | Path) -> Path | None:
    """The monitor.json a path names (the file or its folder), or None when it names none."""
    p = Path(path)
    if p.is_dir():
        p = p / FILE
    return p if p.name == FILE and p.is_file() else None


def load(path: str | Path) -> MonitorRecord:
    p = find(path)
    if p is None:
        raise UserError(f"{path}: no {FILE} there")
    try:
        with open(p) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f"{p}: cannot read it ({e})") from None
    return MonitorRecord.from_dict(d)
