"""attach forgets the workers that exited (issue 36 item 9): at each py-spy rotation the exited workers that the record
folds anyway are summed into per-role totals and their stacks, /proc windows, read counters and process entries are
dropped (profiler/attach/fold.py), so attach's memory does not grow with every worker a re-forking loader ever had.

One real attach (in this process: session.sample, the function ``attach`` runs) to tests/jobs/h4_refork.py, whose 2
workers are forked anew every few tenths of a second, with py-spy rotated every ~1.5 s and the row limits small (2
worker processes, 4 main-process threads) so that folding happens within seconds. ``fold_early`` is watched (the real
one runs) to keep what it dropped; the record built with the early folding must equal the record built from the
same samples with everything put back and nothing folded early.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from profiler.analysis import analyze
from profiler.analysis.attach import worker_mix
from profiler.attach import build, discover, fold, procfs, pyspy, session

from _util import running_job

JOBS = Path(__file__).parent / "jobs"


class Dropped:
    """What each early fold forgot (by the real fold_early), to put back for the record without early folding."""

    def __init__(self) -> None:
        self.stacks: dict[tuple[Any, ...], pyspy.Stack] = {}
        self.windows: dict[tuple[int, int], procfs.ThreadWindow] = {}
        self.io_first: dict[int, dict[str, int]] = {}
        self.io_last: dict[int, dict[str, int]] = {}
        self.cmdlines: dict[int, str] = {}
        self.procs: list[discover.Proc] = []
        self.calls = 0


@pytest.fixture
def dropped(monkeypatch: pytest.MonkeyPatch) -> Dropped:
    seen = Dropped()
    real = fold.fold_early

    def watched(target: discover.Target, rec: pyspy.Recording, kernel: procfs.StateSampler, rate_hz: int,
                folded: fold.Folded, piece_started_ns: int) -> None:
        before_stacks = {(st.pids, st.tid, st.thread_name, st.frames): st for st in rec.stacks()}
        with kernel._lock:  # the reader's thread adds windows; hold it still while we look before and after
            before_windows = dict(kernel.windows)
            before_io = dict(kernel.io_first), dict(kernel.io_last), dict(kernel.cmdlines)
        real(target, rec, kernel, rate_hz, folded, piece_started_ns)
        after_stacks = {(st.pids, st.tid, st.thread_name, st.frames) for st in rec.stacks()}
        seen.calls += 1
        seen.stacks.update({k: v for k, v in before_stacks.items() if k not in after_stacks})
        with kernel._lock:
            seen.windows.update({k: v for k, v in before_windows.items() if k not in kernel.windows})
            for mine, was, now in zip((seen.io_first, seen.io_last, seen.cmdlines), before_io,
                                      (kernel.io_first, kernel.io_last, kernel.cmdlines)):
                mine.update({k: v for k, v in was.items() if k not in now})  # type: ignore[attr-defined]
        pids = {p.pid for p in target.processes}
        seen.procs.extend(p for p in procs_before if p.pid not in pids)

    procs_before: list[discover.Proc] = []

    def adopt(target: discover.Target, stacks: Iterable[pyspy.Stack]) -> list[discover.Proc]:
        out = real_adopt(target, stacks)
        procs_before[:] = list(target.processes)  # fold_early adopts first, then folds: what it had to fold from
        return out

    real_adopt = session.adopt_workers
    monkeypatch.setattr(session, "adopt_workers", adopt)
    monkeypatch.setattr(fold, "fold_early", watched)
    return seen


def _close(x: Any, y: Any) -> bool:
    """Equal, numbers to 1e-9 (sums taken in another order differ in the last bits)."""
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_close(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        return len(x) == len(y) and all(_close(a, b) for a, b in zip(x, y))
    if isinstance(x, float) or isinstance(y, float):
        return isinstance(x, (int, float)) and isinstance(y, (int, float)) and math.isclose(x, y, rel_tol=1e-9,
                                                                                           abs_tol=1e-9)
    return bool(x == y)


def _rows(threads: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The thread rows, order aside, seconds to the microsecond (sums in another order differ in the last bit)."""
    return sorted((r["pid"], r["tid"], r["role"], r["worker"], r["samples"], sorted(r["stages"].items()),
                   sorted(r["wait_stages"].items()), sorted(r["states"].items()), r.get("folded"),
                   round(r["wall_s"], 5), round(r["on_cpu_s"], 5), round(r["runq_s"], 5)) for r in threads)


def test_exited_workers_are_folded_and_forgotten_during_the_window(monkeypatch: pytest.MonkeyPatch,
                                                                   dropped: Dropped) -> None:
    monkeypatch.setattr(pyspy, "ROTATE_S", 1.5)
    monkeypatch.setattr(pyspy, "MIN_PIECE_S", 1.0)
    monkeypatch.setattr(fold, "MAX_WORKER_PROCESS_ROWS", 2)
    monkeypatch.setattr(fold, "MAX_MAIN_THREAD_ROWS", 4)
    monkeypatch.delenv(pyspy.ROTATE_ENV, raising=False)
    binary = pyspy.find_binary()
    with running_job([sys.executable, str(JOBS / "h4_refork.py"), "0", "64", "2"]) as p:
        target = discover.find(p.pid, binary)
        s = session.sample([target], binary, 7.0, 20)[0]
    # folded during the window (at least once: on a busy machine a py-spy piece may take seconds to finish writing, so
    # fewer rotations land in 7 s), and forgotten: nothing of a folded worker is left in attach's per-process state
    assert dropped.calls >= 1 and s.folded.workers >= 2, (dropped.calls, s.folded.workers, s.stacks.log)
    gone = {p.pid for p in dropped.procs if p.role == "worker"}
    assert len(gone) == s.folded.workers
    assert not gone & {p.pid for p in s.target.processes}
    assert not gone & {pid for pid, _ in s.kernel.windows}
    assert not gone & (set(s.kernel.io_first) | set(s.kernel.io_last) | set(s.kernel.cmdlines) | set(s.kernel.pids))
    assert not gone & {st.pid for st in s.stacks.stacks}
    assert dropped.windows and all(pid in gone or pid == target.pid for pid, _ in dropped.windows)
    # the record is the one built from the same samples with nothing folded early
    early = build.build(s)
    s.stacks.stacks.extend(dropped.stacks.values())
    s.kernel.windows.update(dropped.windows)
    s.kernel.io_first.update(dropped.io_first)
    s.kernel.io_last.update(dropped.io_last)
    s.target.processes.extend(dropped.procs)
    s.folded = fold.Folded()
    late = build.build(s)
    a, b = early.attach, late.attach
    for k in ("workers_seen", "workers_folded", "workers_at_once"):
        assert a[k] == b[k], k
    assert a["workers_seen"] >= s.folded.workers + 2 and a["workers_folded"] >= s.folded.workers
    assert _rows(a["threads"]) == _rows(b["threads"])
    assert sorted(map(str, a["io"])) == sorted(map(str, b["io"]))
    assert sorted(map(str, a["processes"])) == sorted(map(str, b["processes"]))
    assert early.job["loader"] == late.job["loader"]
    assert len(s.folded.spans.kept) <= 2 * a["workers_at_once"]  # not every folded worker's span is kept
    ra, rb = analyze(early), analyze(late)
    assert ra.verdict["bottleneck"] == rb.verdict["bottleneck"] != "none", ra.verdict.get("summary")
    assert _close(ra.stall, rb.stall)  # the wait, its share and its split by cause
    assert _close(worker_mix(a), worker_mix(b))  # the workers' totals: stages, on a core, waiting for one, blocked
    assert _close(ra.stages, rb.stages)


def test_attach_samples_without_torch(tmp_path: Path) -> None:
    """attach reads the job from outside (py-spy, /proc): while it samples, its process has not loaded torch, which
    was ~470 MB of its ~520 MB (scripts/bench_attach_long.py). Only building the record at the end imports it (the
    record's environment names the host's torch, as a run's does). Watched the whole window: every look while a
    py-spy of this attach is running."""
    with running_job([sys.executable, str(JOBS / "attach_planted.py"), "cpu", "-", "1"]) as job:
        att = subprocess.Popen([sys.executable, "-m", "profiler", "attach", str(job.pid), "--duration", "3",
                                "--no-plots", "--out", str(tmp_path / "att")], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        mapped: list[bool] = []
        while att.poll() is None:
            sampling = any(procfs.comm(c) == "py-spy" for c in procfs.children(att.pid))
            m = procfs.maps_mention(att.pid, "libtorch")
            if sampling and m is not None and any(procfs.comm(c) == "py-spy" for c in procfs.children(att.pid)):
                mapped.append(m)
            time.sleep(0.1)
        _, err = att.communicate()
    assert att.returncode == 0, err
    assert len(mapped) >= 10 and not any(mapped), mapped  # looked at through the window: never mapped
    assert json.loads((tmp_path / "att" / "run.json").read_text())["job"]["kind"] == "attach"
