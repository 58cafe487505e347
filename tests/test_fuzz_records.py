"""Damaged run records end in exit 0 or 2, never a traceback: bad input is one clear line, never a crash.

One real, consistent record (tests/_records.py, schema 2 and its schema-1 twin) is damaged a few hundred seeded ways —
a value replaced by [], NaN, infinity, a wrong type, null, a huge or negative number; a key deleted deep inside; a
column truncated; bytes that are not UTF-8 — and each damaged file goes through what `report` and `compare` do.
Loading is the single home of validation: a record it accepts must then analyze and render without an exception.

Speed: everything runs in-process. Every damaged file is loaded; an accepted one is analyzed, printed (terminal), and
rendered to HTML and a trace, and compared with the intact record. A seeded subset goes through the real command line
(``profiler.cli.main``): rejected files cheaply (exit 2 before any drawing), and a few accepted ones with every plot.
"""
from __future__ import annotations

import copy
import io
import json
import random
import traceback
from pathlib import Path
from typing import Any

import pytest
from _records import record_v1, record_v2
from rich.console import Console

from profiler.analysis import analyze
from profiler.analysis.compare import compare
from profiler.cli import main
from profiler.errors import UserError
from profiler.record import RunRecord, load
from profiler.render import html, trace
from profiler.render.compare_terminal import print_comparison
from profiler.render.terminal import print_report

SEED = 20260412
MUTATIONS_V2, MUTATIONS_V1 = 200, 60
FULL_EVERY = 3  # every 3rd damaged file also renders HTML and a trace and is compared in-process
CLI_EVERY = 10  # every 10th damaged file also goes through `python -m profiler report/compare`
CLI_ACCEPTED_MAX = 1  # an accepted file renders every plot (~10 s on a slow 2-core host): only one
KINDS = ("empty_list", "nan", "infinity", "overflow_literal", "string", "nan_string", "bool", "null", "huge",
         "negative", "delete", "truncate", "nested_list", "object", "non_utf8",
         # plausible damage that a strict loader may accept: the analysis and renderers must cope with it
         "zero", "scale", "swap", "swap", "zero", "scale")

Path_ = tuple[Any, ...]


def _nodes(o: Any, p: Path_ = ()) -> list[Path_]:
    out = []
    if isinstance(o, dict):
        for k, v in o.items():
            out.append(p + (k,))
            out += _nodes(v, p + (k,))
    elif isinstance(o, list):
        for i, v in enumerate(o):
            out.append(p + (i,))
            out += _nodes(v, p + (i,))
    return out


def _get(o: Any, p: Path_) -> Any:
    for k in p:
        o = o[k]
    return o


def _name(p: Path_) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in p).lstrip(".")


def mutate(base: dict[str, Any], rng: random.Random) -> tuple[bytes, str]:
    """One damaged copy of ``base`` as file bytes, and what was done to it."""
    d = copy.deepcopy(base)
    kind = rng.choice(KINDS)
    text_patch = None
    if kind == "non_utf8":
        raw = json.dumps(d).encode()
        at = rng.randrange(len(raw))
        return raw[:at] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80"]) + raw[at:], f"non_utf8 at byte {at}"
    if kind in ("truncate", "swap"):
        lists = [p for p in _nodes(d) if isinstance(_get(d, p), list) and len(_get(d, p)) > 1]
        p = rng.choice(lists)
        col = _get(d, p)
        if kind == "truncate":
            col.pop()
        else:
            a, b = rng.sample(range(len(col)), 2)
            col[a], col[b] = col[b], col[a]
    elif kind in ("zero", "scale"):
        nums = [p for p in _nodes(d) if type(_get(d, p)) in (int, float)]
        p = rng.choice(nums)
        parent = _get(d, p[:-1])
        parent[p[-1]] = 0 if kind == "zero" else parent[p[-1]] * rng.choice([1000, 1e-3, 7])
    else:
        p = rng.choice(_nodes(d))
        parent, key = _get(d, p[:-1]), p[-1]
        old = parent[key]
        if kind == "delete":
            del parent[key]
        else:
            new = {"empty_list": [], "nan": float("nan"), "infinity": float("-inf"), "overflow_literal": "__INF__",
                   "string": "x", "nan_string": "NaN", "bool": True, "null": None, "object": {"a": 1},
                   "huge": rng.choice([1e300, 10 ** 30, 2 ** 63]), "nested_list": [old, old],
                   "negative": -abs(old) - 1 if isinstance(old, (int, float)) and not isinstance(old, bool) else -1,
                   }[kind]
            parent[key] = new
            text_patch = kind == "overflow_literal"
    raw = json.dumps(d, allow_nan=True)
    if text_patch:
        raw = raw.replace('"__INF__"', "1e999")  # parses to infinity without a NaN/Infinity token
    return raw.encode(), f"{kind} at {_name(p)}"


def _in_process(path: Path, intact: RunRecord, full: bool) -> str | None:
    """What `report` and `compare` do, minus the plots; None if it loaded and rendered, else 'rejected: ...'.
    Not ``full``: load, analyze and the terminal report only (HTML, trace and compare cost ~0.2 s more)."""
    try:
        rec = load(path)
    except UserError as e:
        msg = str(e)
        assert "\n" not in msg and msg.startswith(str(path)), msg
        return f"rejected: {msg}"
    analyze(rec)
    print_report(rec, Console(file=io.StringIO(), width=100), [])
    if not full:
        return None
    plan = trace.plan_detail(rec)
    html.render_html(rec, {}, plan)
    json.dumps(trace.build_trace(rec, plan))
    try:
        c = compare([intact, rec], names=["intact", "damaged"], force=True, resamples=20)
    except UserError:
        return None
    print_comparison(c, Console(file=io.StringIO(), width=100), [])
    return None


@pytest.fixture(scope="module")
def intact(tmp_path_factory) -> tuple[Path, RunRecord]:
    p = tmp_path_factory.mktemp("intact") / "run.json"
    p.write_text(json.dumps(record_v2()))
    return p, analyze(load(p))


def test_intact_records_load_and_analyse(intact):
    for d in (record_v2(), record_v1()):
        rec = analyze(RunRecord.from_dict(d))
        assert rec.verdict["bottleneck"] == "cpu" and rec.stall["seconds"] > 0


def test_damaged_records_exit_0_or_2_without_a_traceback(intact, tmp_path, capsys):
    base_path, base = intact
    rng = random.Random(SEED)
    failures: list[str] = []
    outcomes = {"rejected": 0, "accepted": 0}
    cli_accepted = 0
    cases = [("v2", record_v2(), MUTATIONS_V2), ("v1", record_v1(), MUTATIONS_V1)]
    i = 0
    for label, rec, n in cases:
        for _ in range(n):
            i += 1
            data, what = mutate(rec, rng)
            f = tmp_path / f"damaged_{i}.json"
            f.write_bytes(data)
            try:
                res = _in_process(f, base, full=i % FULL_EVERY == 0)
            except Exception as e:  # noqa: BLE001 - every crash is collected and reported below
                tb = traceback.extract_tb(e.__traceback__)[-1]
                failures.append(f"#{i} {label} {what}: {type(e).__name__}: {str(e)[:100]} "
                                f"({Path(tb.filename).name}:{tb.lineno})")
                continue
            outcomes["rejected" if res else "accepted"] += 1
            if res is None:  # accepted: the command line draws every plot, so only the first CLI_ACCEPTED_MAX
                if cli_accepted >= CLI_ACCEPTED_MAX:
                    continue
                cli_accepted += 1
            elif i % CLI_EVERY:
                continue
            capsys.readouterr()
            rcs = (main(["report", str(f), "--out", str(tmp_path / f"out_{i}")]),
                   main(["compare", str(base_path), str(f), "--force", "--out", str(tmp_path / f"cmp_{i}")])
                   if res is None else 2)
            err = capsys.readouterr().err
            if any(rc not in (0, 2) for rc in rcs) or "Traceback" in err:
                failures.append(f"#{i} {label} {what}: CLI exit {rcs}: {err.strip().splitlines()[-1:]}")
    assert outcomes["rejected"] > 100 and outcomes["accepted"] > 10, outcomes  # both paths really exercised
    assert not failures, f"{len(failures)} damaged records crashed after loading:\n" + "\n".join(failures)
