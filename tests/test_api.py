"""The Python API (``profiler.profile()``) never raises into the user's code except the user's own exceptions, and
saves through the command line's path: partial flags with their reason, the temp folder when ``out`` cannot be
written, one record per process. Each case runs a real user program (real DataLoader, real worker processes) in its
own interpreter, as a user would run it.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from _util import repo_env, write_job


def _user_program(tmp_path: Path, body: str, timeout: float = 180) -> subprocess.CompletedProcess:
    script = write_job(tmp_path, "import profiler\n" + body, name="user.py")
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path, env=repo_env())


def _record(path: Path) -> dict:
    return json.loads((path / "run.json").read_text())


def test_leaving_the_block_early_writes_a_partial_record_and_keeps_the_users_exception(tmp_path):
    p = _user_program(tmp_path, """
try:
    with profiler.profile(out="out", warmup=1, steps=20, quiet=True, plots=False):
        for i, b in enumerate(loader(1)):
            if i == 6:
                raise ValueError("the user's own bug")
except ValueError as e:
    print("caught:", e)
""")
    assert p.returncode == 0, p.stderr
    assert "caught: the user's own bug" in p.stdout
    rec = _record(tmp_path / "out")
    assert rec["partial"] is True
    assert "ValueError" in rec["partial_reason"] and rec["job"]["ended"] != "window closed"
    assert rec["window"]["steps"] < 20


def test_a_break_out_of_the_loop_is_partial_with_the_steps_it_measured(tmp_path):
    p = _user_program(tmp_path, """
with profiler.profile(out="out", warmup=1, steps=20, quiet=True, plots=False):
    for i, b in enumerate(loader()):
        if i == 5:
            break
print("after")
""")
    assert p.returncode == 0 and "after" in p.stdout, p.stderr
    rec = _record(tmp_path / "out")
    assert rec["partial"] is True and "of 20 measured steps" in rec["partial_reason"]


def test_no_dataloader_in_the_block_is_one_line_and_no_record(tmp_path):
    p = _user_program(tmp_path, """
with profiler.profile(out="out", quiet=True) as run:
    x = sum(range(10))
print("after", run.record)
""")
    assert p.returncode == 0, p.stderr
    assert "after None" in p.stdout
    assert "Traceback" not in p.stderr and p.stderr.strip().count("\n") == 0 and "no DataLoader" in p.stderr
    assert not (tmp_path / "out" / "run.json").exists()


def test_an_unwritable_out_falls_back_to_the_temp_folder_and_the_loop_goes_on(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder should be")
    p = _user_program(tmp_path, f"""
with profiler.profile(out={str(blocker / "out")!r}, warmup=1, steps=5, quiet=True, plots=False) as run:
    n = sum(1 for _ in loader())
print("loop finished", n, run.out)
""")
    assert p.returncode == 0, p.stderr
    assert "loop finished 100" in p.stdout
    assert "Traceback" not in p.stderr and "writing to" in p.stderr
    out = Path(p.stdout.split()[-1])
    try:
        assert _record(out)["partial"] is False
    finally:
        for f in out.iterdir():
            f.unlink()
        out.rmdir()


def test_a_nested_block_is_left_out_and_the_outer_record_is_whole(tmp_path):
    p = _user_program(tmp_path, """
with profiler.profile(out="outer", warmup=1, steps=10, quiet=True, plots=False) as outer:
    with profiler.profile(out="inner", warmup=1, steps=2, quiet=True, plots=False) as inner:
        n = sum(1 for _ in loader())
print("inner", inner.record, "outer partial", outer.record.partial)
""")
    assert p.returncode == 0, p.stderr
    assert "inner None outer partial False" in p.stdout
    assert "left out" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "inner").exists()
    assert _record(tmp_path / "outer")["window"]["steps"] == 10


def test_a_forked_child_that_leaves_the_block_writes_nothing(tmp_path):
    p = _user_program(tmp_path, """
with profiler.profile(out="out", warmup=1, steps=50, quiet=True, plots=False) as run:
    for i, b in enumerate(loader()):
        if i == 3:
            pid = os.fork()
            break
if pid == 0:
    print("child done", run.record is None, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("parent", run.record.partial)
""")
    assert p.returncode == 0, p.stderr
    assert "child done True" in p.stdout and "parent True" in p.stdout
    assert "Traceback" not in p.stderr
