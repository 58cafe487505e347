"""``python -m profiler sweep``: several full profiled runs over a list of settings, measured against what the first
run predicted for the others.

Why subprocesses: each point is an ordinary ``python -m profiler run ... --out DIR/pointN``, so a point that crashes,
runs out of memory or is interrupted cannot take the finished points with it, and every point's folder is a normal
run that ``report`` and ``compare`` read. Ctrl-C: the running point is interrupted (it writes its partial record),
then sweep.json/png/html are written from the points that finished, and the sweep exits 128 + the signal (130 for
Ctrl-C, 143 for SIGTERM). A sweep in which no point succeeded exits 1.

Its own argv: the list options are sweep's, everything else is passed to each ``run`` unchanged, so cli.py hands
:func:`main` the raw tokens (``args.argv``) and the ``run`` parser (``args.run_parser``, to tell an option that takes
a value from a flag) instead of parsing them. Orchestration only: the figures are profiler/analysis/sweep.py, the
files the registry's ``SWEEP`` and the terminal view profiler/render/sweep_terminal.py.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .. import signals
from ..config import CACHE_MODES
from ..errors import UserError
from ..storage.spec import STORAGE_PRESETS

# The list options of sweep (the rest of the command line is passed to each ``run`` unchanged).
LIST_OPTIONS = ("--workers", "--batch-size", "--storage", "--cache")
# sweep's own flags without a value.
FLAGS = ("--no-progress", "--no-plots")
# Most points one sweep may run: each is a full profiled run (minutes); a longer list is surely a typo.
MAX_POINTS = 64

SWEEP_EPILOG = """examples:
  python -m profiler sweep --workers 0,1,2,4 --data ./imgs
  python -m profiler sweep --workers 1,2 --batch-size 32,64 --model resnet18
  python -m profiler sweep --storage hdd,nvme --cache cold --workers 2,4
  python -m profiler sweep --workers 1,2,4 train.py --epochs 1    # your script: its loader's num_workers overridden

Every other option is passed to each `run` unchanged (--steps, --warmup, --data, --model, --augment, ...).
The first point is the baseline: the others are predicted from it and the prediction error is printed per point.
"""


def parse_list(flag: str, text: str) -> list[Any]:
    """``"0,1,2"`` -> [0, 1, 2] for one list option; UserError (one line) for anything else."""
    items = [t.strip() for t in str(text).split(",")]
    if not text or not text.strip() or any(t == "" for t in items):
        raise UserError(f"{flag} {text!r}: give a comma-separated list, e.g. {flag} {_example(flag)}")
    out: list[Any] = []
    for t in items:
        if flag in ("--workers", "--batch-size"):
            try:
                v = int(t)
            except ValueError:
                raise UserError(f"{flag} {text!r}: {t!r} is not a whole number") from None
            low = 0 if flag == "--workers" else 1
            if v < low or v > 1024:
                raise UserError(f"{flag} {text!r}: {v} is out of range ({low}..1024)")
            out.append(v)
        elif flag == "--storage":
            if t not in STORAGE_PRESETS and t != "none":
                raise UserError(f"--storage {text!r}: {t!r} is not one of none, {', '.join(STORAGE_PRESETS)}")
            out.append(t)
        else:
            if t not in CACHE_MODES:
                raise UserError(f"--cache {text!r}: {t!r} is not one of {', '.join(CACHE_MODES)}")
            out.append(t)
    if len(set(out)) != len(out):
        raise UserError(f"{flag} {text!r}: a value is repeated")
    return out


def _example(flag: str) -> str:
    return {"--workers": "0,1,2,4", "--batch-size": "32,64", "--storage": "hdd,nvme", "--cache": "cold,warm"}[flag]


def split_sweep_argv(tokens: list[str], run_parser: Any) -> tuple[dict[str, list[Any]], dict[str, Any], list[str],
                                                                  list[str]]:
    """sweep's tokens -> (lists, own options, options passed to every run, target and its args)."""
    takes_value = {opt: a.nargs != 0 for a in run_parser._actions for opt in a.option_strings}
    lists: dict[str, list[Any]] = {}
    own: dict[str, Any] = {"out": None, "no_progress": False, "no_plots": False}
    fwd: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        name, eq, val = tok.partition("=")
        if name in LIST_OPTIONS or name == "--out":
            if not eq:
                if i + 1 >= len(tokens):
                    raise UserError(f"{name} needs a value")
                val, i = tokens[i + 1], i + 1
            if name == "--out":
                own["out"] = val
            else:
                lists[name] = parse_list(name, val)
            i += 1
            continue
        if tok in FLAGS:
            own[tok[2:].replace("-", "_")] = True
            i += 1
            continue
        if tok in ("-h", "--help"):
            raise _Help()
        if tok == "-m" or tok == "--" or not tok.startswith("-") or tok == "-":
            return lists, own, fwd, tokens[i:]
        n = 2 if takes_value.get(name, False) and not eq else 1
        if name not in takes_value:
            raise UserError(f"sweep: unknown option {name} (see python -m profiler sweep --help)")
        fwd += tokens[i:i + n]
        i += n
    return lists, own, fwd, []


class _Help(Exception):
    pass


def points_of(lists: dict[str, list[Any]]) -> list[dict[str, Any]]:
    keys = [k for k in LIST_OPTIONS if k in lists]
    if not keys:
        raise UserError("sweep needs at least one list: --workers, --batch-size, --storage or --cache "
                        "(e.g. --workers 0,1,2,4)")
    pts = [dict(zip(keys, combo)) for combo in itertools.product(*(lists[k] for k in keys))]
    if len(pts) < 2:
        raise UserError("sweep needs at least two settings to compare (e.g. --workers 1,2)")
    if len(pts) > MAX_POINTS:
        raise UserError(f"sweep: {len(pts)} points is more than {MAX_POINTS}; give shorter lists")
    return pts


def label(pt: dict[str, Any]) -> str:
    return " ".join(f"{k[2:]}={v}" for k, v in pt.items())


def run_args(pt: dict[str, Any], script: bool) -> list[str]:
    """The ``run`` options of one point. For a script, workers and batch size override its loader's."""
    out: list[str] = []
    for k, v in pt.items():
        if k == "--storage":
            if v != "none":
                out += ["--storage", v]
        elif k in ("--workers", "--batch-size") and script:
            out += [f"--override-{k[2:]}", str(v)]
        else:
            out += [k, str(v)]
    return out


def _load_point(out: Path) -> Any | None:
    """The point's run.json as the run wrote it (analyzed already), or None if there is none or it is not JSON.

    Read as plain JSON rather than through ``record.load``: the sweep needs only the run's own derived figures, and a
    record that today's validator rejects for an unrelated field must not cost the sweep a finished point.
    """
    from types import SimpleNamespace

    p = out / "run.json"
    try:
        d = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if type(d) is not dict or type(d.get("timeline")) is not dict:
        return None
    return SimpleNamespace(**{k: d.get(k) for k in ("partial", "throughput", "timeline", "whatif", "verdict",
                                                    "storage")})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Nothing: sweep splits its own argv (:func:`split_sweep_argv`); its parser only lists it in ``--help``."""


def main(args: argparse.Namespace) -> int:
    """``args.argv``: the tokens after ``sweep``; ``args.run_parser``: the ``run`` sub-command's parser."""
    from rich.console import Console

    from .. import outdir
    from ..analysis.sweep import measured_interval, summarise
    from ..render import write_sweep
    from ..render.sweep_terminal import print_sweep

    try:
        lists, own, fwd, target = split_sweep_argv(list(args.argv), args.run_parser)
    except _Help:
        print("usage: python -m profiler sweep [--workers LIST] [--batch-size LIST] [--storage LIST] [--cache LIST]"
              " [--out DIR] [run options] [SCRIPT args | -m MODULE args]\n\n" + SWEEP_EPILOG)
        return 0
    script = bool(target)
    if lists and all(len(v) == 1 for v in lists.values()):
        raise UserError("sweep needs at least two settings to compare (e.g. --workers 1,2)")
    for k in [k for k, v in lists.items() if len(v) == 1]:  # one value: the same for every point, not a list
        fwd += run_args({k: lists.pop(k)[0]}, script)
    pts = points_of(lists)
    console = Console()
    if own["out"]:
        out = outdir.claim(outdir.prepare_out(own["out"]))
    else:
        out = outdir.create_run_dir("reports", "sweep-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S"))
    points: list[dict[str, Any]] = []
    status = 0
    show = not own["no_progress"] and console.is_terminal
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                        TimeElapsedColumn(), console=console, disable=not show)
    with progress:
        task = progress.add_task("sweep", total=len(pts))
        for i, pt in enumerate(pts):
            pdir = out / f"point{i}"
            cmd = [sys.executable, "-m", "profiler", "run", "--no-progress", "--out", str(pdir),
                   *(["--no-plots"] if own["no_plots"] else []), *fwd, *run_args(pt, script), *target]
            progress.update(task, description=f"point {i + 1}/{len(pts)}: {label(pt)}")
            if not show:
                console.print(f"point {i + 1}/{len(pts)}: {label(pt)} ...", markup=False)
            entry: dict[str, Any] = {"index": i, "setting": pt, "label": label(pt), "out": str(pdir),
                                     "command": cmd[1:]}
            t0 = time.monotonic()
            rc, interrupted = _run_point(cmd, pdir)
            if interrupted is not None:
                status = signals.exit_status(interrupted)
            entry.update(exit_status=rc, seconds=round(time.monotonic() - t0, 2))
            rec = _load_point(pdir)
            if rec is not None and not rec.partial and rc == 0:
                entry["measured_samples_per_s"] = float(rec.throughput.get("samples_per_s") or 0.0) or None
                iv = measured_interval(rec)
                entry["interval"] = [round(iv[0], 3), round(iv[1], 3)] if iv else None
                entry["inputs"] = (rec.whatif or {}).get("inputs")
                entry["bottleneck"] = (rec.verdict or {}).get("bottleneck")
                # Other load on the cores during this point (whatif's calibration): a prediction cannot know that
                # the host got busier between points, so a large change here explains a large error.
                entry["cores_available"] = (rec.whatif or {}).get("cores_available")
                entry["core_share"] = (rec.whatif or {}).get("core_share")
                # How this point's --storage was emulated (a setting of the run, not a measurement of its speed).
                entry["throttle_mechanism"] = ((rec.storage or {}).get("throttle") or {}).get("mechanism")
            else:
                entry["failed"] = ("interrupted" if interrupted is not None
                                   else "no record (the job iterated no DataLoader)" if rc == 0 and rec is None
                                   else f"exit status {rc}" + ("" if rec is None else " (partial record)"))
            points.append(entry)
            progress.advance(task)
            if interrupted is not None:
                break
            if entry.get("failed"):
                console.print(f"point {i + 1} failed ({entry['failed']}); see {pdir}/run.log", markup=False)
    summary = summarise(points)
    doc = {"kind": "profiler sweep", "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "lists": {k[2:]: v for k, v in lists.items()}, "target": target or None, "run_options": fwd,
           "points": points, "interrupted": status != 0, **summary}
    with signals.deferred():  # the finished points' summary is written even when a second signal comes now
        files = [str(f) for f in write_sweep(doc, out, plots=not own["no_plots"])]
    print_sweep(doc, console, files)
    if status:
        return status
    late = signals.pending()
    if late is not None:
        return signals.exit_status(late)
    if not any(p.get("measured_samples_per_s") is not None or not p.get("failed") for p in points):
        print(f"profiler: sweep: no point succeeded (the first: {points[0].get('failed')}; see "
              f"{points[0]['out']}/run.log)", file=sys.stderr)
        return 1
    return 0


def _run_point(cmd: list[str], pdir: Path) -> tuple[int, KeyboardInterrupt | None]:
    """Run one point; on Ctrl-C / SIGTERM / SIGHUP, pass the same signal on to it (it writes its partial record) and
    return the interruption (the sweep's exit status is 128 + its signal)."""
    pdir.mkdir(parents=True, exist_ok=True)
    with open(pdir / "run.log", "wb") as log:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            return proc.wait(), None
        except KeyboardInterrupt as e:
            try:
                proc.send_signal(signals.signal_number(e) or signal.SIGINT)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=60)
            except (subprocess.TimeoutExpired, KeyboardInterrupt):
                proc.kill()
                proc.wait()
            return proc.returncode, e
