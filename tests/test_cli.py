"""The command line as a user meets it: bad input → one line and exit 2; Ctrl-C → partial record; report re-renders."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler.cli import main

from _util import repo_env, write_png

REPO = Path(__file__).resolve().parents[1]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("profiler: error:")
    return err


@pytest.fixture()
def images(tmp_path) -> Path:
    d = tmp_path / "imgs"
    d.mkdir()
    for i in range(16):
        write_png(d / f"{i:02d}.png", size=(32, 32), seed=i)
    return d


@pytest.mark.parametrize("argv_tail, needle", [
    (["--data", "/nonexistent/dir"], "no such directory"),
    (["--workers", "-1"], "--workers"),
    (["--batch-size", "0"], "--batch-size"),
    (["--model", "no_such_net"], "unknown model"),
    (["--steps", "0"], "--steps"),
    (["--workers", "two"], "invalid int"),
    (["--augment", "extreme"], "invalid choice"),
    (["--throttle", "fast"], "throttle"),
    (["--device", "cuda:7"], "cuda"),
    (["--model", "vit_b_16", "--image-size", "64"], "cannot take --image-size 64"),
])
def test_bad_run_input(argv_tail, needle, capsys, tmp_path, images):
    argv = ["run", "--out", str(tmp_path / "out"), "--no-plots"]
    if "--data" not in argv_tail:
        argv += ["--data", str(images)]
    rc = main(argv + argv_tail)
    assert rc == 2
    err = _one_line_error(capsys)
    assert needle.lower() in err.lower()


def test_empty_and_imageless_data(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["run", "--data", str(empty), "--out", str(tmp_path / "o")]) == 2
    assert "no images" in _one_line_error(capsys)
    txt = tmp_path / "txt"
    (txt / "cls").mkdir(parents=True)
    (txt / "cls" / "readme.txt").write_text("not an image")
    assert main(["run", "--data", str(txt), "--out", str(tmp_path / "o")]) == 2
    assert "no images" in _one_line_error(capsys)
    afile = tmp_path / "file.png"
    afile.write_bytes(b"x")
    assert main(["run", "--data", str(afile), "--out", str(tmp_path / "o")]) == 2
    assert "not a directory" in _one_line_error(capsys)


def test_out_that_cannot_be_created(tmp_path, images, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder should go")
    assert main(["run", "--data", str(images), "--out", str(blocker / "sub")]) == 2
    assert "--out" in _one_line_error(capsys)


def test_run_then_report_from_saved_record(tmp_path, images, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # the short view is one screen at 80 columns
    out = tmp_path / "run"
    rc = main(["run", "--data", str(images), "--workers", "1", "--batch-size", "4", "--steps", "4", "--warmup", "1",
               "--model", "tiny", "--image-size", "32", "--device", "cpu", "--out", str(out), "--no-progress",
               "--no-plots"])  # the two reports below draw this record's PNGs
    assert rc == 0 and not list(out.glob("*.png"))
    d = json.loads((out / "run.json").read_text())
    for key in ("schema_version", "config", "environment", "throughput", "stages", "stall", "verdict", "samples",
                "partial"):
        assert key in d
    assert d["partial"] is False
    # the terminal shows the headline first and fits one screen; --details shows the saved verdict: its title, and
    # the whole summary (rich wraps it inside a box; drop the box-drawing characters and compare the words)
    from profiler.analysis import analyze
    from profiler.analysis.headline import headline
    from profiler.record import load

    printed = capsys.readouterr().out
    head = headline(analyze(load(out / "run.json")))
    assert " ".join(head.split()) in " ".join(printed.split())
    # A path longer than the terminal (pytest-xdist's tmp folders are) is one word: it may run past 80, nothing else
    assert len(printed.splitlines()) <= 45, printed
    assert max(len(ln) for ln in printed.splitlines() if " " in ln.strip()) <= 80, printed
    assert "Verdict:" not in printed and "┏" not in printed  # no banner, no table: those are --details
    assert main(["report", str(out / "run.json"), "--out", str(tmp_path / "detailed"), "--details"]) == 0
    assert (tmp_path / "detailed" / "step_time.png").stat().st_size > 1000
    printed = capsys.readouterr().out
    flat = " ".join(re.sub(r"[│╭╮╰╯─]", " ", printed).split())
    assert f"Verdict: {d['verdict']['bottleneck']} ({d['verdict']['severity']})" in flat
    assert " ".join(d["verdict"]["summary"].split()) in flat
    assert "Stages (measured window" in flat and "Idle compute device by cause" in flat
    assert d["compute_device"]["type"] == "cpu"
    # re-render on "another machine": only the record is needed
    out2 = tmp_path / "rerender"
    assert main(["report", str(out / "run.json"), "--out", str(out2)]) == 0
    assert (out2 / "run.json").exists()
    d2 = json.loads((out2 / "run.json").read_text())
    assert d2["verdict"]["bottleneck"] == d["verdict"]["bottleneck"]
    assert d2["stall"]["seconds"] == pytest.approx(d["stall"]["seconds"])
    # ... and without torch: report and compare read records only, so a process of their own never imports it
    code = ("import sys; from profiler.cli import main; "
            f"rc = [main(['report', {str(out)!r}, '--out', {str(tmp_path / 'child')!r}]), "
            f"main(['compare', {str(out)!r}, {str(out2)!r}, '--out', {str(tmp_path / 'cmp')!r}])]; "
            "print('RESULT', rc, 'torch' in sys.modules)")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=repo_env(), timeout=120)
    assert child.stdout.splitlines()[-1] == "RESULT [0, 0] False", child.stdout[-2000:] + child.stderr[-2000:]
    assert (tmp_path / "child" / "report.html").is_file() and (tmp_path / "cmp" / "compare.html").is_file()


@pytest.mark.parametrize("content, needle", [
    (None, "no such file"),
    ("{not json", "not valid JSON"),
    ('{"schema_version": 99}', "schema_version"),
    ('{"schema_version": 1, "config": {}}', "missing"),
    ("[1, 2]", "not a profiler run record"),
])
def test_report_bad_record(tmp_path, capsys, content, needle):
    p = tmp_path / "run.json"
    if content is not None:
        p.write_text(content)
    assert main(["report", str(p)]) == 2
    assert needle.lower() in _one_line_error(capsys).lower()


def _interrupt_builtin_run(out: Path, images: Path, blocks_wanted: int) -> tuple[subprocess.Popen, bytes]:
    """Start the built-in pipeline (2 workers), wait until its workers made batches past warm-up, send SIGINT to the
    process group (as a terminal does); returns the finished process and its stderr."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "profiler", "run", "--data", str(images), "--workers", "2", "--batch-size", "4",
         "--steps", "100000", "--warmup", "1", "--model", "tiny", "--image-size", "32", "--device", "cpu",
         "--out", str(out), "--no-progress", "--no-plots"],
        cwd=out.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        import psutil

        # Past warm-up by what the workers did, not by a guess of how long that takes on a loaded machine. Once its
        # prefetch is full, a worker makes a batch only after the loop took one, and blocks on its index queue after
        # each: `blocks_wanted` blocks of the two workers beyond the first seen are about as many batches. On a busy
        # machine a worker also blocks on the GIL its own queue thread holds, so blocks can run ahead of batches.
        main, deadline, first = psutil.Process(proc.pid), time.time() + 120, None
        while time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
            try:
                workers = main.children()
                blocks = sum(w.num_ctx_switches().voluntary for w in workers)
            except psutil.Error:
                continue
            if len(workers) < 2:
                continue
            first = blocks if first is None else first
            if blocks - first >= blocks_wanted:
                break
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc, stderr


def test_ctrl_c_writes_partial_record(tmp_path, images):
    """A real SIGINT to the process group (as a terminal sends it) mid-run: exit 130, run.json marked partial, the
    measured steps kept. A signal that landed before the first measured step (the workers' blocks ran ahead of their
    batches: GIL waits on a busy machine) is a record of 0 steps, rightly: that try is made again, waiting longer."""
    for k, blocks_wanted in enumerate((12, 40, 120)):
        out = tmp_path / f"out{k}"
        proc, stderr = _interrupt_builtin_run(out, images, blocks_wanted)
        assert proc.returncode == 130, stderr.decode()[-2000:]
        assert b"Traceback" not in stderr
        d = json.loads((out / "run.json").read_text())
        assert d["partial"] is True
        assert "interrupted" in d["partial_reason"]
        assert d["verdict"]["summary"]
        if d["window"]["steps"] > 0 or "after 0 of" not in d["partial_reason"]:
            break
    assert d["window"]["steps"] > 0, (d["window"], d["partial_reason"], len(d["timeline"]["steps"]["step"]))


def test_help_has_examples(capsys):
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "--data" in out and "--augment" in out
