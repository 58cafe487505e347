"""A py-spy piece's file parsed in a short-lived child process, its stacks handed to attach compactly (issue 36).

Why a child: over a long attach, py-spy is rotated (profiler/attach/pyspy.py ``Recording``) and each rotated-out
piece is parsed and merged into attach's stacks. Parsing is the largest allocation attach makes: every line's text
(~1-8 KB), split, matched and turned into ~30 ``Frame`` objects of full paths, before identical frames are shared,
~4 MB at once per 500 lines against ~1-2 MB of everything attach keeps (tracemalloc). Python's heap went back to
the same size after each rotation, but the process's resident memory kept part of each rotation's transient (what
the allocators keep of arenas and heap pages that a few survivors pin): +10 MB at the first 5-minute rotation and
+1-3 MB at each later one. Here the parsing happens in a fresh ``python -S`` that imports only this module and
profiler/attach/rawstacks.py (no torch; ~30 MB, ~0.1 s) and exits after the piece; attach reads back one short
line per distinct frame of the piece and one per stack (the frames as indexes), a chunk at a time, so its own
allocations per rotation are the stacks it keeps, not the text they were parsed from.

The result is the same stacks ``parse_raw`` gives in this process: the child runs ``parse_raw`` on the same chunks
(``FOLD_LINES`` lines each) with the same ``cmdlines`` and thread names. If the child cannot start, dies, or says
something else, the chunks it had not finished are parsed here, as before (nothing is counted twice: a chunk's
stacks are handed on only once the child said the chunk is done).
"""
from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from .rawstacks import Frame, Stack, parse_raw

#: Lines of py-spy's file parsed at once (in the child, or here when it fails). Why 500: a line parsed (its text,
#: then a Stack of ~30 frames with full paths, before they are shared) is ~5-7 KB, so 500 keep a parse's transient
#: at ~3 MB whatever the piece's size; the parse's cost is the same. Also the unit in which a failed child's work is
#: taken over here.
FOLD_LINES = 500
#: The longest a child may take for one piece before it is ended and the rest parsed here. Why 120 s: a 5-minute
#: piece of a job re-forking its workers (~5,000 lines, 6 MB) parses in ~1-2 s on an idle core; 120 s is a machine
#: too loaded to matter, not a slow parse.
CHILD_TIMEOUT_S = 120.0

#: The folder holding the ``profiler`` package: the child imports this module from it (``-S``: no site-packages).
_ROOT = str(Path(__file__).resolve().parents[2])
_CHILD = "import sys; sys.path.insert(0, sys.argv[1]); from profiler.attach.pieces import serve; serve()"


def serve(stdin: IO[str] | None = None, stdout: IO[str] | None = None) -> None:
    """The child: a request (JSON: the file, what attach knows) on stdin; on stdout ``F[name, file, line]`` for each
    frame the first time it is used (numbered from 0 in order), ``S[pids, tid, thread name, [frame numbers],
    count]`` for each stack, ``C`` after each chunk of ``FOLD_LINES`` lines and ``E`` at the end."""
    inp, out = stdin or sys.stdin, stdout or sys.stdout
    req = json.load(inp)
    cmdlines = {int(pid): str(text) for pid, text in req["cmdlines"]}
    threads = {(int(pid), int(tid)): str(name) for pid, tid, name in req["threads"]}
    number: dict[Frame, int] = {}
    with open(req["path"], errors="replace") as f:
        while chunk := list(itertools.islice(f, FOLD_LINES)):
            for st in parse_raw("".join(chunk), cmdlines, threads):
                idx = []
                for fr in st.frames:
                    i = number.get(fr)
                    if i is None:
                        i = number[fr] = len(number)
                        out.write("F" + json.dumps([fr.name, fr.file, fr.line]) + "\n")
                    idx.append(i)
                out.write("S" + json.dumps([list(st.pids), st.tid, st.thread_name, idx, st.count]) + "\n")
            out.write("C\n")
    out.write("E\n")
    out.flush()


def _request(path: Path, cmdlines: dict[int, str], threads: dict[tuple[int, int], str]) -> str:
    return json.dumps({"path": str(path), "cmdlines": list(cmdlines.items()),
                       "threads": [[pid, tid, name] for (pid, tid), name in threads.items()]})


def _from_child(path: Path, cmdlines: dict[int, str], threads: dict[tuple[int, int], str],
                fold: Callable[[list[Stack]], None]) -> tuple[int, bool]:
    """(chunks handed to ``fold``, whether the child finished the file)."""
    done = 0
    try:
        proc = subprocess.Popen([sys.executable, "-S", "-c", _CHILD, _ROOT], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, encoding="utf-8",
                                start_new_session=True)  # a Ctrl-C meant for attach does not end it half-way
    except OSError:
        return 0, False
    timer = threading.Timer(CHILD_TIMEOUT_S, proc.kill)
    timer.daemon = True
    timer.start()
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(_request(path, cmdlines, threads))
        proc.stdin.close()
        table: list[Frame] = []
        batch: list[Stack] = []
        for line in proc.stdout:
            tag = line[:1]
            if tag == "F":
                name, file, lineno = json.loads(line[1:])
                table.append(Frame(str(name), str(file), int(lineno)))
            elif tag == "S":
                pids, tid, tname, idx, count = json.loads(line[1:])
                batch.append(Stack(tuple(int(p) for p in pids), int(tid), str(tname),
                                   tuple(table[i] for i in idx), int(count)))
            elif tag == "C":
                fold(batch)
                batch = []
                done += 1
            elif tag == "E":
                return done, proc.wait() == 0
            else:
                break
        return done, False
    except (OSError, ValueError, TypeError, IndexError):  # a broken pipe, a line cut short: the rest is ours
        return done, False
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def read(path: Path, cmdlines: dict[int, str], threads: dict[tuple[int, int], str],
         fold: Callable[[list[Stack]], None], child: bool = True) -> bool:
    """Parse py-spy's file ``path`` a chunk at a time, handing each chunk's stacks to ``fold``; whether it held
    anything. In a child (see the module's docstring) unless ``child`` is False; what the child did not finish is
    parsed here."""
    if not path.exists():
        return False
    done, finished = _from_child(path, cmdlines, threads, fold) if child else (0, False)
    if finished:
        return done > 0
    with open(path, errors="replace") as f:
        for _ in itertools.islice(f, done * FOLD_LINES):  # the chunks the child already handed on
            pass
        while chunk := list(itertools.islice(f, FOLD_LINES)):
            done += 1
            fold(parse_raw("".join(chunk), cmdlines, threads))
    return done > 0
