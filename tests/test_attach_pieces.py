"""A rotated-out py-spy piece is parsed in a short-lived child process (profiler/attach/pieces.py, issue 36 item 9):
attach's own memory then holds the stacks it keeps, not each piece's text being parsed. The stacks must be the ones
``parse_raw`` gives in this process, chunk for chunk, also when the child fails half-way (the rest is parsed here,
nothing twice), and the child must not load what attach does not need to parse (torch).

A piece here is py-spy's raw format written out (3 chunks of ``FOLD_LINES`` lines; command lines and thread names
holding py-spy's separators, non-UTF-8 bytes, lines that are not stacks); real pieces are compared the same way in
tests/test_attach_rotation.py.
"""
from __future__ import annotations

import random
import subprocess
import sys
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest

from profiler.attach import pieces, pyspy

ARGV = 'python job.py x";thread (0x1);y'
KNOWN_CMDLINES = {7: ARGV}
KNOWN_THREADS = {(7, 7): "MainThread", (7, 8): "log;ger (x.py:1)"}


def _piece(path: Path, lines: int = 2 * pieces.FOLD_LINES + 300) -> Path:
    """py-spy's raw output for a main process (7) and its re-forked workers, ``lines`` lines."""
    rnd = random.Random(0)
    frames = [f"f{i} (/site-packages/lib{i % 7}/module_{i}.py:{10 + i})" for i in range(60)]
    frames += ["Café.run (/données/x.py:3)", "_worker_loop (/p/torch/utils/data/_utils/worker.py:375)"]
    out = []
    for n in range(lines):
        if n % 97 == 5:
            out.append("not a stack line")
            continue
        stack = ";".join(rnd.choice(frames) for _ in range(rnd.randint(3, 40)))
        which = rnd.random()
        if which < 0.4:
            head = f'process 7:"{ARGV}";thread (7): MainThread'
        elif which < 0.5:
            head = f'process 7:"{ARGV}";thread (8): log;ger (x.py:1)'
        else:
            w = 1000 + rnd.randrange(200)
            head = f'process 7:"{ARGV}";process {w}:"{ARGV}";thread ({w}): MainThread'
        out.append(f"{head};{stack} {rnd.randint(1, 50)}")
    path.write_bytes(("\n".join(out) + "\n").encode() + b'process 7:"\xff\xfe";thread (7);x (y.py:1) 2\n')
    return path


def _folded(path: Path, child: bool) -> tuple[Counter[tuple[object, ...]], int, bool]:
    """(stacks folded by identity, chunks handed on, whether it held anything)."""
    got: Counter[tuple[object, ...]] = Counter()
    calls = [0]

    def fold(stacks: list[pyspy.Stack]) -> None:
        calls[0] += 1
        for st in stacks:
            got[(st.pids, st.tid, st.thread_name, st.frames)] += st.count

    had = pieces.read(path, KNOWN_CMDLINES, KNOWN_THREADS, fold, child=child)
    return got, calls[0], had


def _here(path: Path) -> Counter[tuple[object, ...]]:
    want: Counter[tuple[object, ...]] = Counter()
    for st in pyspy.parse_raw(path.read_text(errors="replace"), KNOWN_CMDLINES, KNOWN_THREADS):
        want[(st.pids, st.tid, st.thread_name, st.frames)] += st.count
    return want


def test_the_child_gives_the_stacks_parse_raw_gives_here(tmp_path: Path) -> None:
    path = _piece(tmp_path / "piece.txt")
    want = _here(path)
    got, calls, had = _folded(path, child=True)
    assert had and calls == 3  # a chunk at a time
    assert got == want
    assert {k[1] for k in got} >= {7, 8} and len({k[0][-1] for k in got}) > 100
    assert any(k[2] == "log;ger (x.py:1)" for k in got)  # a thread name holding ';' and a frame's shape, known
    assert all(k[0][0] == 7 for k in got)  # the argv holding ";thread ( never split a line
    assert _folded(path, child=False)[:2] == (want, 3)


def test_nothing_and_an_empty_file(tmp_path: Path) -> None:
    assert _folded(tmp_path / "missing.txt", child=True) == (Counter(), 0, False)
    (tmp_path / "empty.txt").write_text("")
    assert _folded(tmp_path / "empty.txt", child=True) == (Counter(), 0, False)


CHILD_DIES_AFTER_ONE_CHUNK = (
    "import os, sys; sys.path.insert(0, sys.argv[1]); from profiler.attach import pieces\n"
    "class Out:\n"
    "    def write(self, text):\n"
    "        sys.stdout.write(text)\n"
    "        if text == 'C\\n':\n"
    "            sys.stdout.flush()\n"
    "            os._exit(1)\n"
    "    def flush(self):\n"
    "        sys.stdout.flush()\n"
    "pieces.serve(stdout=Out())\n")


@pytest.mark.parametrize("child", [CHILD_DIES_AFTER_ONE_CHUNK, "print('something else')", "raise SystemExit(3)"],
                         ids=["dies-after-a-chunk", "says-something-else", "fails-at-once"])
def test_a_failing_child_leaves_the_rest_to_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         child: str) -> None:
    path = _piece(tmp_path / "piece.txt")
    monkeypatch.setattr(pieces, "_CHILD", child)
    got, calls, had = _folded(path, child=True)
    assert had and calls == 3  # the chunk the child finished is handed on once, the others are parsed here
    assert got == _here(path)


def test_a_child_that_cannot_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _piece(tmp_path / "piece.txt", lines=40)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    got, calls, had = _folded(path, child=True)
    assert had and calls == 1 and got == _here(path)


def test_the_child_loads_no_torch() -> None:
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import profiler.attach.pieces; "
            "print(sorted(m for m in ('torch', 'numpy', 'profiler.attach.pyspy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-S", "-c", code, pieces._ROOT], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr


def test_parsing_in_the_child_allocates_far_less_here(tmp_path: Path) -> None:
    """What this process allocates at most while a piece is folded: the text and its parse in this process, only
    the stacks in their compact form (a chunk at a time) when the child parses. tracemalloc counts this process's
    Python allocations only, so the figure does not depend on the machine's load."""
    path = _piece(tmp_path / "piece.txt")
    peaks, counts = {}, {}
    for child in (False, True):
        counted: Counter[str] = Counter()

        def fold(stacks: list[pyspy.Stack]) -> None:  # kept nowhere: the peak is the parse's, not what is kept
            counted["stacks"] += len(stacks)
            counted["samples"] += sum(st.count for st in stacks)

        tracemalloc.start()
        try:
            pieces.read(path, KNOWN_CMDLINES, KNOWN_THREADS, fold, child=child)
            peaks[child] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        counts[child] = counted
    assert counts[True] == counts[False] and counts[True]["stacks"] > 1000
    assert peaks[True] < peaks[False] / 2, peaks
