"""attach's py-spy rotation (profiler/attach/pyspy.py ``Recording``, issue 36 item 9): over a long window a fresh
py-spy is started every ``ROTATE_S`` so py-spy's memory and CPU do not grow with every dead worker it has seen.

Here the period is ~2 s, so a ~6 s window has 3 pieces, on a real planted job (tests/jobs/attach_planted.py, cpu
cause, one worker): the pieces' stacks are all in the result, folded (one stack per identity, counts summed), the
samples summed, a rotation is not counted as a failure restart, and attach's verdict is the one it gives unrotated.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from profiler.attach import pieces as pieces_mod
from profiler.attach import pyspy

from _util import running_job

JOBS = Path(__file__).parent / "jobs"


@pytest.fixture(scope="module")
def cpu_job() -> Iterator[subprocess.Popen[str]]:
    """The planted cpu job (one worker doing the work in __getitem__), training until the module ends."""
    with running_job([sys.executable, str(JOBS / "attach_planted.py"), "cpu", "-", "1"]) as p:
        yield p


@pytest.fixture
def pieces(monkeypatch: pytest.MonkeyPatch) -> list[list[pyspy.Stack]]:
    """Each py-spy file as the real parse_raw parses it in this process, read just before attach folds it (which it
    parses in a child process: profiler/attach/pieces.py); an empty file is not counted."""
    seen: list[list[pyspy.Stack]] = []
    real = pieces_mod.read

    def watched(path: Path, cmdlines: dict[int, str], threads: dict[tuple[int, int], str],
                fold: Callable[[list[pyspy.Stack]], None], child: bool = True) -> bool:
        text = path.read_text(errors="replace") if path.exists() else ""
        if text:
            seen.append(pyspy.parse_raw(text, cmdlines, threads))
        return real(path, cmdlines, threads, fold, child)

    monkeypatch.setattr(pieces_mod, "read", watched)
    return seen


def _key(st: pyspy.Stack) -> tuple[object, ...]:
    return st.pids, st.tid, st.thread_name, st.frames


def test_pieces_are_merged_folded_and_summed(cpu_job: subprocess.Popen[str],
                                             pieces: list[list[pyspy.Stack]]) -> None:
    rec = pyspy.Recording(pyspy.find_binary(), cpu_job.pid, 20, 30, rotate_s=2.0)
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 6.5 and rec.running():
            rec.poll()
            time.sleep(0.2)
        rec.stop()
        res = rec.result(target_alive=True)
    finally:
        rec.kill()
    # each piece's file is folded once, an empty one adds nothing
    assert rec.pieces >= 3 and len(pieces) <= rec.pieces, (rec.pieces, len(pieces), res.log)
    assert rec.restarts == 0  # a rotation is no failure restart
    assert sum(1 for p in pieces if p) >= 2, res.log  # more than one piece sampled (under load one may start late)
    # every piece's stacks are in the result, identical ones folded into one with the counts summed
    want: Counter[tuple[object, ...]] = Counter()
    for p in pieces:
        for st in p:
            want[_key(st)] += st.count
    got = Counter({_key(st): st.count for st in res.stacks})
    assert len(got) == len(res.stacks)  # one stack per identity
    assert got == want  # parsed in a child, the stacks are the ones parse_raw gives here
    assert len(want) < sum(len(p) for p in pieces)  # the pieces did share stacks: folding merged some
    # both processes are in the merged stacks, and py-spy's own totals are summed over the pieces
    assert {st.pid for st in res.stacks} >= {cpu_job.pid}
    assert len({st.pid for st in res.stacks}) >= 2
    summaries = [int(n) for n in re.findall(r"Samples: (\d+) Errors", res.log)]
    assert len(summaries) >= 2 and res.samples == sum(summaries) > max(summaries)
    assert res.stopped_by == "signal"


def test_verdict_is_the_same_rotated_or_not(tmp_path: Path, cpu_job: subprocess.Popen[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from profiler.cli import main

    recordings: list[pyspy.Recording] = []
    real_init = pyspy.Recording.__init__

    def watched_init(self: pyspy.Recording, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        recordings.append(self)

    monkeypatch.setattr(pyspy.Recording, "__init__", watched_init)

    def attach(name: str) -> dict:
        out = tmp_path / name
        rc = main(["attach", str(cpu_job.pid), "--duration", "6", "--rate", "20", "--no-plots", "--out", str(out)])
        assert rc == 0
        return json.loads((out / "run.json").read_text())

    plain = attach("plain")
    assert [r.pieces for r in recordings] == [1]
    monkeypatch.setattr(pyspy, "ROTATE_S", 2.0)
    rotated = attach("rotated")
    assert len(recordings) == 2 and recordings[1].pieces >= 3, [r.pieces for r in recordings]
    assert recordings[1].restarts == 0
    assert plain["verdict"]["bottleneck"] == rotated["verdict"]["bottleneck"] == "cpu", \
        (plain["verdict"].get("summary"), rotated["verdict"].get("summary"))
    assert not rotated.get("partial")
