"""`profiler sweep` end to end on a tiny dataset: real runs in subprocesses, Ctrl-C, bad lists, script overrides."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profiler import cli

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
# The smallest honest run: no model, tiny images, a few batches.
TINY = ["--steps", "4", "--warmup", "1", "--batch-size", "4", "--model", "none", "--augment", "none",
        "--image-size", "32", "--no-progress", "--device", "cpu"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from _util import write_png

    root = tmp_path_factory.mktemp("tiny")
    for c in ("a", "b"):
        (root / c).mkdir()
        for i in range(16):
            write_png(root / c / f"{i}.png", size=(48, 40), seed=i)
    return root


def sweep(args: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profiler", "sweep", *args], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=600, **kw)


def test_sweep_end_to_end(tiny, tmp_path):
    out = tmp_path / "sw"
    # --no-plots: each point's six PNGs were most of this test's time and none is checked here; the sweep's own
    # sweep.png/sweep.html (the default, plots on) are checked in test_ctrl_c_keeps_the_finished_points.
    r = sweep(["--workers", "0,1", "--data", str(tiny), "--out", str(out), "--no-plots", *TINY])
    assert r.returncode == 0, r.stderr + r.stdout
    doc = json.loads((out / "sweep.json").read_text())
    assert [p["setting"] for p in doc["points"]] == [{"--workers": 0}, {"--workers": 1}]
    for p in doc["points"]:
        assert p["measured_samples_per_s"] > 0 and p["predicted_samples_per_s"] > 0
        assert (out / f"point{p['index']}" / "run.json").is_file()
    base, other = doc["points"]
    assert doc["baseline"] == 0 and base["predicted_samples_per_s"] == pytest.approx(base["measured_samples_per_s"],
                                                                                    rel=0.01)
    assert other["error"] == pytest.approx(other["predicted_samples_per_s"] / other["measured_samples_per_s"] - 1,
                                           abs=1e-3)
    assert doc["median_abs_error"] == pytest.approx(abs(other["error"]), abs=1e-4)
    # The prediction carries the what-if's interval, and the summary says how many measured points fell inside.
    lo, hi = other["predicted_interval"]
    assert lo <= other["predicted_samples_per_s"] <= hi
    assert doc["coverage"] == (1.0 if other["inside_interval"] else 0.0)
    assert doc["best"]["label"] in ("workers=0", "workers=1")
    assert not (out / "sweep.png").exists() and not list(out.glob("point*/*.png"))  # --no-plots reaches every run
    assert "Best setting: " + doc["best"]["label"] in r.stdout and "%" in r.stdout
    run1 = json.loads((out / "point1" / "run.json").read_text())
    assert run1["config"]["workers"] == 1 and run1["config"]["batch_size"] == 4  # the single value: every point
    assert run1["whatif"]["predictions"] and run1["ceilings"]["rows"]


def test_ctrl_c_keeps_the_finished_points(tiny, tmp_path):
    out = tmp_path / "sw"
    p = subprocess.Popen([sys.executable, "-m", "profiler", "sweep", "--workers", "0,1,2", "--data", str(tiny),
                          "--out", str(out), *TINY, "--steps", "40"], cwd=ROOT, env=ENV,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (out / "point1" / "run.log").exists() and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.2)
    assert (out / "point0" / "run.json").is_file()
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)  # to the sweep only: it interrupts the running point itself
    stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 130, stderr
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["interrupted"] is True
    assert doc["points"][0]["measured_samples_per_s"] > 0
    assert len(doc["points"]) == 2 and doc["points"][1].get("failed") == "interrupted"
    assert not (out / "point2").exists()
    assert "finished points are kept" in stdout
    # plots on (the default): the finished points' summary is drawn, and each finished run drew its own
    assert (out / "sweep.png").stat().st_size > 1000 and "Best setting" in (out / "sweep.html").read_text()
    assert (out / "point0" / "step_time.png").is_file()


@pytest.mark.parametrize("args, words", [
    (["--workers", "2,x"], "'x' is not a whole number"),
    (["--workers", ""], "comma-separated list"),
    (["--workers", "1,,2"], "comma-separated list"),
    (["--workers", "-1,2"], "out of range"),
    (["--storage", "hdd,floppy"], "'floppy' is not one of"),
    (["--cache", "cold,lukewarm"], "is not one of"),
    (["--workers", "3"], "at least two settings"),
    ([], "needs at least one list"),
    (["--workers", "1,2", "--bogus"], "unknown option --bogus"),
])
def test_bad_lists_are_one_line_and_exit_2(args, words, capsys, tmp_path):
    assert cli.main(["sweep", *args, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("profiler: error:") and words in err, err
    assert "Traceback" not in err


def test_override_changes_the_scripts_loader_and_says_so(tmp_path):
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "profiler", "run", "--steps", "3", "--warmup", "1", "--no-progress",
                        "--no-plots", "--override-workers", "1", "--override-batch-size", "4", "--out", str(out),
                        str(ROOT / "tests" / "jobs" / "workers0.py")], cwd=ROOT, env=ENV, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    loader = json.loads((out / "run.json").read_text())["job"]["loader"]
    assert loader["num_workers"] == 1 and loader["batch_size"] == 4
    assert loader["overridden"] == {"num_workers": [0, 1], "batch_size": [8, 4]}
    rec = json.loads((out / "run.json").read_text())
    assert set(rec["timeline"]["batches"]["worker"]) == {0}  # the batches really came from the one worker
    assert set(rec["timeline"]["steps"]["samples"]) == {4}


def test_override_refused_for_the_builtin_pipeline(capsys):
    assert cli.main(["run", "--override-workers", "2"]) == 2
    assert "--workers/--batch-size" in capsys.readouterr().err
