"""Hostile jobs and hostile use of the commands, tried as a new user would: threads and forks that iterate a loader,
a loader nested in a Dataset, a script that changes directory or prints its own --help, .pyc files and folders run as
``python`` runs them, two runs into one --out, sweeps whose every point fails, signals while the report prints,
``report`` of records it cannot or should not read. Real processes, real signals; no mocks.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler import outdir
from profiler.errors import UserError

from _util import repo_env, write_job

REPO = Path(__file__).resolve().parents[1]
ENV = repo_env()


def _run(tmp_path: Path, *args: str, out: str | None = "out", steps: int = 5, timeout: float = 240,
         cwd: Path | None = None) -> tuple[subprocess.CompletedProcess, dict | None]:
    cmd = [sys.executable, "-m", "profiler", "run", "--no-progress", "--no-plots", "--steps", str(steps),
           "--warmup", "1", *(["--out", out] if out else []), *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd or tmp_path, env=ENV)
    f = (cwd or tmp_path) / out / "run.json" if out else None
    return p, (json.loads(f.read_text()) if f is not None and f.exists() else None)


# -- one process, one record ---------------------------------------------------------------------------------------

def test_a_loader_in_a_thread_is_left_alone_and_the_main_loader_is_profiled(tmp_path):
    s = write_job(tmp_path, """
def t():
    print("thread batches", sum(1 for _ in loader(2)), flush=True)
th = threading.Thread(target=t); th.start(); th.join()
print("main batches", sum(1 for _ in loader(0)))
""")
    p, rec = _run(tmp_path, str(s))
    assert "thread batches 100" in p.stdout, p.stderr  # the thread's loop ran whole: never stopped by our window
    assert "WindowClosed" not in p.stderr and "Traceback" not in p.stderr
    assert p.returncode == 0 and rec is not None and rec["partial"] is False
    assert rec["job"]["loader"]["num_workers"] == 0  # the main thread's loader, not the thread's


def test_a_fork_where_both_iterate_writes_one_record(tmp_path):
    s = write_job(tmp_path, """
pid = os.fork()
n = sum(1 for _ in loader(0))
print("child" if pid == 0 else "parent", n, flush=True)
if pid:
    os.waitpid(pid, 0)
""")
    p, rec = _run(tmp_path, "--then", "continue", str(s))
    assert p.returncode == 0, p.stderr
    assert "child 100" in p.stdout and "parent 100" in p.stdout
    assert p.stdout.count("Wrote") <= 1 and "Traceback" not in p.stderr
    assert rec is not None and rec["partial"] is False
    assert sorted(os.listdir(tmp_path / "out")) == ["run.json"]


def test_a_loader_nested_in_a_dataset_runs_as_without_the_profiler(tmp_path):
    s = write_job(tmp_path, """
class Outer(Dataset):
    def __len__(self): return 24
    def __getitem__(self, i):
        return sum(float(b.sum()) for b in loader(0))
print("outer batches", sum(1 for _ in DataLoader(Outer(), batch_size=4, num_workers=2)))
""")
    p, rec = _run(tmp_path, "--then", "continue", str(s), steps=3)
    assert p.returncode == 0, p.stderr
    assert "outer batches 6" in p.stdout and "WindowClosed" not in p.stderr
    assert rec is not None and rec["partial"] is False and rec["job"]["loader"]["num_workers"] == 2


# -- scripts run as python runs them -------------------------------------------------------------------------------

def test_a_relative_out_survives_the_scripts_chdir(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    s = write_job(tmp_path, f"""
os.chdir({str(tmp_path / "elsewhere")!r})
print(sum(1 for _ in loader()))
""")
    p, rec = _run(tmp_path, str(s), out="rel")
    assert p.returncode == 0, p.stderr
    assert rec is not None and not (tmp_path / "elsewhere" / "rel").exists()


def test_the_scripts_own_help_is_its_status_and_one_line(tmp_path):
    s = tmp_path / "cli.py"
    s.write_text("import argparse\nargparse.ArgumentParser().parse_args()\n")
    p, rec = _run(tmp_path, str(s), "--help")
    assert p.returncode == 0 and rec is None
    assert "usage:" in p.stdout and p.stderr.strip().count("\n") == 0 and "iterated no DataLoader" in p.stderr
    assert not (tmp_path / "out").exists()


def test_a_syntax_error_leaves_no_empty_out_folder(tmp_path):
    s = tmp_path / "bad.py"
    s.write_text("def (\n")
    p, rec = _run(tmp_path, str(s))
    assert p.returncode == 1 and "SyntaxError" in p.stderr
    assert not (tmp_path / "out").exists()


def test_a_pyc_and_a_folder_with_main_run_as_python_runs_them(tmp_path):
    import py_compile

    src = write_job(tmp_path, "print('batches', sum(1 for _ in loader()))\n", name="src.py")
    pyc = tmp_path / "job.pyc"
    py_compile.compile(str(src), cfile=str(pyc), doraise=True)
    p, rec = _run(tmp_path, str(pyc), out="o_pyc")
    assert p.returncode == 0 and rec is not None, p.stderr
    app = tmp_path / "app"
    app.mkdir()
    (app / "__main__.py").write_text(src.read_text())
    p, rec = _run(tmp_path, str(app), out="o_dir")
    assert p.returncode == 0 and rec is not None, p.stderr


def test_then_continue_and_a_later_failure_says_the_record_is_complete(tmp_path):
    s = write_job(tmp_path, "for b in loader():\n    pass\nraise RuntimeError('after the window')\n")
    p, rec = _run(tmp_path, "--then", "continue", str(s))
    assert p.returncode == 1 and "RuntimeError: after the window" in p.stderr
    assert rec is not None and rec["partial"] is False
    assert "partial record" not in p.stderr and "(complete)" in p.stderr


# -- one --out, one writer -----------------------------------------------------------------------------------------

def test_a_claimed_out_is_refused_to_a_second_process_and_freed_when_it_ends(tmp_path):
    out = outdir.prepare_out(tmp_path / "shared")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from profiler import outdir; outdir.claim(Path(sys.argv[1])); print('held', "
                               "flush=True); time.sleep(60)", str(out)], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError) as e:
            outdir.claim(out)
        assert "another profiler run is writing there" in str(e.value) and "\n" not in str(e.value)
    finally:
        holder.kill()
        holder.wait()
    assert outdir.claim(out) == out  # the kernel freed the lock with the process, killed or not
    assert os.listdir(out) == []  # no lock file left behind


# -- sweep ---------------------------------------------------------------------------------------------------------

def test_a_sweep_whose_every_point_fails_exits_1_and_keeps_its_summary(tmp_path):
    s = tmp_path / "raises.py"
    s.write_text("raise SystemExit('no data here')\n")
    p = subprocess.run([sys.executable, "-m", "profiler", "sweep", "--no-progress", "--no-plots", "--workers", "1,2",
                        "--steps", "2", "--warmup", "0", "--out", str(tmp_path / "sw"), str(s)],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path, env=ENV)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "no point succeeded" in p.stderr
    doc = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert len(doc["points"]) == 2 and all(pt.get("failed") for pt in doc["points"])


def test_sigterm_to_a_sweep_is_143_and_keeps_the_finished_points(tmp_path):
    s = write_job(tmp_path, "for b in loader():\n    time.sleep(0.5)\n")
    proc = subprocess.Popen([sys.executable, "-m", "profiler", "sweep", "--no-progress", "--no-plots",
                             "--workers", "0,1", "--steps", "200", "--warmup", "0", "--out", str(tmp_path / "sw"),
                             str(s)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                            env=ENV)
    deadline = time.monotonic() + 120
    while not (tmp_path / "sw" / "point0" / "run.log").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(8)  # the point is measuring (0.5 s a batch, 200 steps: far from its end)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 143, out
    doc = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert doc["interrupted"] is True and doc["points"][0]["failed"] == "interrupted"


# -- signals while the report prints -------------------------------------------------------------------------------

_LATE_SIGNAL = """
import os, signal, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from _records import record_v2
from rich.console import Console
from profiler import signals
from profiler.record import RunRecord
from profiler.saving import save_and_report

class Terminal:
    sent = False
    def write(self, s):
        if not Terminal.sent:  # a scheduler's SIGTERM while the summary is printing
            Terminal.sent = True
            os.kill(os.getpid(), signal.SIGTERM)
        sys.stdout.write(s)
    def flush(self):
        sys.stdout.flush()

signals.install()
signals.job_ended()
out = Path(sys.argv[2])
saved = save_and_report(RunRecord.from_dict(record_v2()), out, plots=False, console=Console(file=Terminal()))
print("saved", saved.run_json.exists(), flush=True)
sys.exit(signals.exit_status(saved.late_signal) if saved.late_signal else 0)
"""


def test_a_signal_while_the_report_prints_ends_with_its_status(tmp_path):
    (tmp_path / "o").mkdir()
    p = subprocess.run([sys.executable, "-c", _LATE_SIGNAL, str(REPO / "tests"), str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120, env=ENV)
    assert p.returncode == 143, p.stdout + p.stderr
    assert "saved True" in p.stdout and "Traceback" not in p.stderr


# -- report --------------------------------------------------------------------------------------------------------

def _report(*args: str) -> subprocess.CompletedProcess:
    """``report ARGS`` in this process (profiler.cli.main, which turns a refusal into one line and 2; an escaping
    exception fails the test): a second Python start and torch import cost more than these refusals."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from profiler.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(["report", *args])
    return subprocess.CompletedProcess(["report", *args], rc, out.getvalue(), err.getvalue())


def test_report_of_a_run_folder_without_a_readable_rank_is_one_line_exit_2(tmp_path):
    for k in (0, 1):
        d = tmp_path / "run" / f"rank{k}"
        d.mkdir(parents=True)
        (d / "rank.json").write_text(json.dumps({"rank": k}))
        (d / "run.json").write_text("{damaged")
    p = _report(str(tmp_path / "run"))
    if p.returncode == 0 and "0 machines" in p.stdout:
        pytest.fail("an empty merged report of no rank")
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.strip().count("\n") == 0 and "Traceback" not in p.stderr


def test_report_refuses_a_record_over_the_cap_at_once(tmp_path):
    from profiler.record import MAX_RECORD_BYTES

    big = tmp_path / "run.json"
    with open(big, "wb") as f:
        f.truncate(MAX_RECORD_BYTES + 1)  # sparse: costs no disk
    t0 = time.monotonic()
    p = _report(str(big))
    assert p.returncode == 2 and "larger than any run record" in p.stderr, p.stderr
    assert p.stderr.strip().count("\n") == 0
    assert time.monotonic() - t0 < 60


def test_report_in_a_read_only_folder_does_not_blame_an_out_never_given(tmp_path):
    from _records import record_v2

    d = tmp_path / "ro"
    d.mkdir()
    (d / "run.json").write_text(json.dumps(record_v2()))
    d.chmod(0o555)
    try:
        if os.access(d, os.W_OK):
            pytest.skip("running as a user the folder's mode does not stop (root)")
        p = _report(str(d / "run.json"))
        assert p.returncode == 2 and "--out" not in p.stderr.split("(")[0], p.stderr
    finally:
        d.chmod(0o755)


# -- data nothing can be measured from, and waits that are not storage ---------------------------------------------

def test_a_folder_where_no_image_decodes_is_exit_2_naming_the_reasons(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for i in range(4):
        (data / f"empty{i}.jpg").write_bytes(b"")
        (data / f"noise{i}.jpg").write_bytes(os.urandom(4000))
    p, rec = _run(tmp_path, "--data", str(data), "--model", "none", "--workers", "1", "--batch-size", "2", steps=3)
    assert p.returncode == 2 and rec is None, p.stdout + p.stderr
    line = p.stderr.strip()
    assert line.count("\n") == 0 and "failed to decode" in line and "empty file (0 bytes)" in line
    assert not (tmp_path / "out").exists()


def test_zero_byte_files_are_listed_as_skipped_by_the_scan(tmp_path):
    from profiler.harness.data import scan_dataset

    from _util import write_jpeg

    write_jpeg(tmp_path / "a.jpg", size=(32, 32))
    (tmp_path / "b.jpg").write_bytes(b"")
    index = scan_dataset(tmp_path)
    assert [Path(f).name for f in index.files] == ["a.jpg"]
    assert [(Path(p).name, why) for p, why in index.skipped] == [("b.jpg", "empty file (0 bytes)")]


def test_sleeping_workers_are_not_called_storage(tmp_path):
    s = write_job(tmp_path, """
class Sleepy(Dataset):
    def __len__(self): return 400
    def __getitem__(self, i):
        time.sleep(0.03)
        return torch.zeros(8)
for b in DataLoader(Sleepy(), batch_size=4, num_workers=1):
    pass
""")
    p, rec = _run(tmp_path, "--then", "exit", str(s), steps=8)
    assert p.returncode == 0 and rec is not None, p.stderr
    v = rec["verdict"]
    if v["bottleneck"] == "io":
        assert "not on the storage device" in v["summary"] and "storage reads" not in v["summary"]
    actions = " ".join(r["action"] for r in v.get("recommendations") or [])
    assert "shards" not in actions and "faster local storage" not in actions and "from RAM" not in actions
