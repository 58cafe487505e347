"""`attach PID`: real jobs started in the background (tests/jobs/attach_planted.py), attached to from outside for a
few seconds, judged like `run` judges the same job; and every way an attach can fail or be cut short.

Each planted cause is strong (a worker doing 30 matmuls per sample, reads throttled to 1 MB/s, a 60-layer model), so
the verdicts cannot flip on a loaded 2-core machine; shares are compared with `run`'s within 15 points.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from profiler.attach import classify, pyspy
from profiler.attach.pyspy import Frame

from _util import repo_env, running_job

JOBS = Path(__file__).parent / "jobs"
ATTACH_S = "3"
RATE = "50"  # shares compared within 15 points need samples: 3 s at 50 Hz is 150 of the main thread (20 Hz: 60)


@contextmanager
def job(*argv: str, prefix: tuple[str, ...] = ()) -> Iterator[subprocess.Popen]:
    """A planted job running until the block ends; yields once its first batch arrived."""
    with running_job([*prefix, sys.executable, str(JOBS / "attach_planted.py"), *argv]) as p:
        yield p


def _pid_of_job(p: subprocess.Popen, prefix: tuple[str, ...]) -> int:
    """The training process: the job itself, or the child of the throttle launcher."""
    if not prefix:
        return p.pid
    from profiler.attach import procfs

    return procfs.children(p.pid)[0]


def attach(tmp_path: Path, *args: str, name: str = "att", timeout: int = 90) -> tuple[subprocess.CompletedProcess,
                                                                                   dict | None]:
    out = tmp_path / name
    p = subprocess.run([sys.executable, "-m", "profiler", "attach", *args, "--out", str(out)], capture_output=True,
                       text=True, timeout=timeout)
    rec = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else None
    return p, rec


def attach_here(tmp_path: Path, *args: str, name: str = "att") -> tuple[int, dict | None]:
    """attach in this process: the CLI's imports (torch, matplotlib) are paid once per test session, not per attach,
    so a loaded machine's start-up time does not eat the window of a job that runs for a fixed time."""
    from profiler.cli import main

    out = tmp_path / name
    rc = main(["attach", *args, "--out", str(out)])
    rec = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else None
    return rc, rec


def run(tmp_path: Path, *args: str, steps: int = 8) -> dict:
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "profiler", "run", "--no-progress", "--no-plots", "--steps", str(steps),
                        "--warmup", "1", "--out", str(out), *args], capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    return json.loads((out / "run.json").read_text())


@pytest.fixture(scope="module")
def cold_files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cold")
    for i in range(64):
        with open(d / f"f{i:03d}.bin", "wb") as f:
            f.write(os.urandom(256 * 1024))
            # written back now: the job's fadvise(DONTNEED) cannot evict dirty pages, and a first epoch read from the
            # page cache ends in a second or two, so an attach window can fall between two epochs
            f.flush()
            os.fsync(f.fileno())
    return d


def _throttle_or_skip(d: Path) -> tuple[str, ...]:
    from profiler.storage import device as sdev
    from profiler.storage import throttle as thr

    ok, why = thr.KernelThrottle.available(thr.parse_throttle("1MB/s,30iops"), sdev.describe_storage(str(d)).maj_min)
    if not ok:
        pytest.skip(f"kernel throttle unavailable: {why}")
    return (sys.executable, str(JOBS / "throttled.py"), str(d), "1MB/s,30iops")


# The most each planted job runs under `run` after its first batch; attach samples ~3 s of it from then, and the job
# ends when the attach is done (a stop file): the two windows are nearly the same span (as in test_hardening4's pairs).
# Not the io job: its first second after READY consumes the batches its workers made ahead during start-up (no wait),
# which the attach, starting a second later, does not see; a run window of that second and the attach's 3 s had a
# wait fraction of 0.78 against 1.0, the whole JOB_S dilutes it.
JOB_S = 10


def attach_under_run(tmp_path: Path, kind: str, workers: str, files: Path) -> dict:
    """One execution of a planted job under `run` (to the job's end), attached to from outside for a few seconds of
    the same window (the job stops at the attach's end). Returns both records, the attach's exit status, the job's PID
    and the time to a verdict."""
    data = str(files) if kind == "io" else "-"
    if kind == "io":
        _throttle_or_skip(files)
    extra = ("--throttle", "1MB/s,30iops", "--data", str(files)) if kind == "io" else ()
    out = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "profiler", "run", "--no-progress", "--no-plots", "--steps", "100000",
                          "--warmup", "1", "--out", str(out), *extra, str(JOBS / "attach_planted.py"), kind, data,
                          workers, str(JOB_S)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=repo_env({"H4_STOP_FILE": str(tmp_path / "stop")} if kind != "io" else None))
    try:
        assert p.stdout is not None
        lines = [p.stdout.readline()]
        while "READY" not in lines[-1] and lines[-1] and len(lines) < 50:  # the profiler's own lines come first
            lines.append(p.stdout.readline())
        assert "READY" in lines[-1], lines
        t0 = time.monotonic()
        rc, rec = attach_here(tmp_path, str(p.pid), "--duration", ATTACH_S, "--rate", RATE)
        to_verdict = time.monotonic() - t0
        alive = p.poll() is None  # the job was not stopped or killed by being attached to
        (tmp_path / "stop").touch()
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert alive and p.returncode == 0, err
    return {"run": json.loads((out / "run.json").read_text()), "attach": rec, "rc": rc, "pid": p.pid,
            "to_verdict": to_verdict, "run_dir": out, "attach_dir": tmp_path / "att"}


@pytest.fixture(scope="module")
def cpu_pair(tmp_path_factory, cold_files) -> dict:
    """The cpu job with one worker, under run and attach: used by the agreement test and by report/compare."""
    return attach_under_run(tmp_path_factory.mktemp("cpu_pair"), "cpu", "1", cold_files)


@pytest.mark.parametrize("kind, workers", [("cpu", "1"), ("io", "1"), ("model", "1"), ("cpu", "0")])
def test_attach_agrees_with_run(request, tmp_path, cold_files, kind, workers):
    """The same verdict from inside and outside, io/cpu shares of the wait within 15 points."""
    pair = request.getfixturevalue("cpu_pair") if (kind, workers) == ("cpu", "1") else \
        attach_under_run(tmp_path, kind, workers, cold_files)
    r, rec = pair["run"], pair["attach"]
    assert pair["rc"] == 0
    assert rec is not None and rec["job"]["kind"] == "attach" and not rec["partial"]
    assert pair["to_verdict"] < 30
    at = rec["attach"]
    assert at["target"]["pid"] == pair["pid"] and at["sampler"]["samples"] > 0
    assert at["workers_at_once"] == int(workers)
    assert len([q for q in at["processes"] if q["role"] == "worker"]) >= int(workers)
    expected = {"cpu": "cpu", "io": "io", "model": "compute"}[kind]
    assert r["verdict"]["bottleneck"] == expected, r["verdict"]["summary"]
    assert rec["verdict"]["bottleneck"] == r["verdict"]["bottleneck"], rec["verdict"]["summary"]
    for cause in ("io", "cpu"):
        if kind != "model":
            assert abs(rec["stall"]["share_by_cause"][cause] - r["stall"]["share_by_cause"][cause]) <= 0.15, cause
    assert abs(rec["stall"]["fraction"] - r["stall"]["fraction"]) <= 0.15
    # every figure carries its samples and interval; the figures attach cannot have are listed, not zeroed
    for st in rec["stages"].values():
        assert st["basis"] == "sampled" and st["share_low"] <= st["share"] <= st["share_high"]
    assert {"throughput", "step_latency_percentiles", "per_sample_times"} <= set(at["absent"])
    assert "samples_per_s" not in rec["throughput"]


def test_workers_forked_after_discovery_are_sampled_and_counted_once(tmp_path):
    """A loader without persistent workers over a tiny dataset re-forks its 2 workers every epoch (a few tenths of a
    second): the workers the stacks show are adopted (found while sampling), get kernel clocks, and the loader is
    still said to have 2 workers, not one per process seen."""
    few = tmp_path / "few"
    few.mkdir()
    # 256 samples of ~1.4 ms of CPU each per epoch (the planted cpu cause; the files only set the length): each
    # epoch's workers live ~0.2 s on a quiet machine, several readings of the kernel clocks at 20 Hz. Cold file reads
    # instead let a quiet machine's epoch end in 20-40 ms: one reading or none per worker.
    for i in range(256):
        (few / f"f{i:03d}").write_bytes(b"x")
    with job("cpu", str(few), "2") as p:
        rc, rec = attach_here(tmp_path, str(p.pid), "--duration", "3", "--rate", RATE, "--no-plots")
    assert rc == 0 and rec is not None
    at = rec["attach"]
    workers = [q for q in at["processes"] if q["role"] == "worker"]
    # more than one epoch's workers as a rule; on a loaded machine one epoch's pair may fill the window
    assert len(workers) >= 2 and any(q["found"] == "sampling" for q in workers), at["processes"]
    assert at["workers_at_once"] == 2 and "in 2 workers" in rec["verdict"]["summary"], rec["verdict"]["summary"]
    clocked = [t for t in at["threads"] if t["role"] == "worker" and t["on_cpu_s"] > 0]
    assert len(clocked) >= 2 and any(t["pid"] in {q["pid"] for q in workers if q["found"] == "sampling"}
                                     for t in clocked)  # the later workers' kernel clocks were read too


def test_report_and_compare_work_on_an_attach_record(tmp_path, cpu_pair):
    att = cpu_pair["attach_dir"]
    for f in ("run.json", "shares.png", "report.html"):
        assert (att / f).exists()
    html = (att / "report.html").read_text()
    assert "trace.json" in html and "Not measured from outside" in html  # says what it cannot draw, and why
    rep = subprocess.run([sys.executable, "-m", "profiler", "report", str(att / "run.json"), "--out",
                          str(tmp_path / "rep")], capture_output=True, text=True, timeout=60)
    assert rep.returncode == 0, rep.stderr
    assert (tmp_path / "rep" / "report.html").exists() and cpu_pair["attach"]["verdict"]["bottleneck"] in rep.stdout
    cmp = subprocess.run([sys.executable, "-m", "profiler", "compare", str(cpu_pair["run_dir"]), str(att),
                          "--out", str(tmp_path / "cmp")], capture_output=True, text=True, timeout=60)
    assert cmp.returncode == 0, cmp.stderr
    doc = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert doc["kinds"] == ["script", "attach"] and any("same verdict (cpu)" in d for d in doc["differences"])
    assert any("throughput" in d for d in doc["differences"])  # what attach cannot see is said, not compared as 0


def _one_line_2(p: subprocess.CompletedProcess, needle: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert needle in p.stderr and "Traceback" not in p.stderr and p.stderr.strip().count("\n") == 0, p.stderr


def _one_line_2_here(tmp_path: Path, capsys, needle: str, *args: str) -> None:
    """The same check in this process (no interpreter start-up per case): exit 2, one line, no traceback."""
    rc, _ = attach_here(tmp_path, *args)
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err and err.strip().count("\n") == 0, err


def test_pids_that_cannot_be_attached_to_are_one_line_exit_2(tmp_path, capsys):
    _one_line_2(attach(tmp_path, "999999999")[0], "no process with PID 999999999")  # the real CLI, once
    sleeper = subprocess.Popen(["sleep", "60"])
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.5)
        _one_line_2_here(tmp_path, capsys, "not a Python process", str(sleeper.pid))
        _one_line_2_here(tmp_path, capsys, "has not imported torch", str(plain.pid))
    finally:
        for q in (sleeper, plain):
            q.kill()
            q.wait()
    _one_line_2_here(tmp_path, capsys, "--duration 0", "1", "--duration", "0")
    assert not (tmp_path / "att").exists()  # nothing written for a refused attach


@pytest.fixture(scope="module")
def cpu_job() -> Iterator[subprocess.Popen]:
    """One planted cpu job running for the module: the tests that only need a job to attach to (and leave it
    running) share it instead of each paying its start."""
    with job("cpu", "-", "1") as p:
        yield p


def test_permission_refused_says_how_to_grant_it(cpu_job):
    """As another user (nobody) attach may not read root's job: one line naming ptrace and CAP_SYS_PTRACE. The
    attaching process imports everything as root, then drops to nobody (who cannot read root's Python install) and
    finds py-spy on PATH, copied where nobody may run it."""
    import shutil
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root to switch to another user")
    bin_dir = tempfile.mkdtemp(prefix="attach-bin-")
    try:
        os.chmod(bin_dir, 0o755)
        shutil.copy(pyspy.find_binary(), os.path.join(bin_dir, "py-spy"))
        os.chmod(os.path.join(bin_dir, "py-spy"), 0o755)
        p = cpu_job
        code = ("import sys, os; from profiler.cli import main; import profiler.commands.attach, "
                "profiler.attach.discover, profiler.attach.session, profiler.attach.build, rich.console, "
                "rich.table, profiler.render, profiler.render.attach_terminal, profiler.analysis, profiler.outdir; "
                "os.setgid(65534); os.setuid(65534); "
                f"sys.exit(main(['attach', '{p.pid}', '--duration', '1', '--out', '/tmp/never-{p.pid}']))")
        q = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90,
                           env={**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}, cwd="/tmp")
    finally:
        shutil.rmtree(bin_dir, ignore_errors=True)
    _one_line_2(q, "CAP_SYS_PTRACE")
    assert "not allowed to read process" in q.stderr


def test_target_exiting_mid_attach_gives_a_partial_record(tmp_path):
    with job("cpu", "-", "1", "10") as p:
        rc, rec = attach_here(tmp_path, str(p.pid), "--duration", "20")
    assert rc == 0
    assert rec is not None and rec["partial"] and "exited" in rec["partial_reason"]
    # The job loops 10 s from its first batch (later than attach's start on a loaded machine): attach stops when it
    # exits, well before its own 20 s.
    assert rec["attach"]["stopped_by"] == "target exited" and rec["attach"]["seconds"] < 18
    assert rec["verdict"]["bottleneck"] == "cpu"


def test_sigterm_of_attach_reports_and_exits_143_leaving_nothing_running(tmp_path, cpu_job):
    p = cpu_job
    out = tmp_path / "att"
    a = subprocess.Popen([sys.executable, "-m", "profiler", "attach", str(p.pid), "--duration", "30", "--rate", RATE,
                          "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    from profiler.attach import procfs

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any("py-spy" in " ".join(procfs.cmdline(c)) and "record" in
                                                  procfs.cmdline(c) for c in procfs.children(a.pid)):
        time.sleep(0.1)
    # py-spy finds the job's worker a moment after it starts, later on a loaded machine (CI once gave it too few worker
    # samples in 3 s, and the verdict was "other"): leave it samples of both.
    time.sleep(6)
    spies = procfs.children(a.pid)
    a.send_signal(signal.SIGTERM)
    stdout, stderr = a.communicate(timeout=60)
    assert p.poll() is None  # the job goes on
    assert a.returncode == 143, stderr
    rec = json.loads((out / "run.json").read_text())
    assert rec["partial"] and "SIGTERM" in rec["partial_reason"] and rec["attach"]["stopped_by"] == "interrupted"
    assert rec["verdict"]["bottleneck"] == "cpu" and "cpu" in stdout, (rec["verdict"]["summary"],
                                                                        rec["attach"]["processes"])
    assert spies and not any(procfs.exists(s) for s in spies)  # py-spy is gone


def test_py_spy_raw_output_is_parsed_into_threads_and_frames():
    text = ('process 7:"python a.py";process 9:"python a.py";thread (11): MainThread;<module> (/x/a.py:3);'
            '_worker_loop (/p/torch/utils/data/_utils/worker.py:375);_MapDatasetFetcher.fetch '
            '(/p/torch/utils/data/_utils/fetch.py:54);Planted.__getitem__ (/x/a.py:21);'
            'Image.open (/p/PIL/Image.py:3300) 134\n'
            'process 7:"python a; b";thread (0x1f): QueueFeederThread;Queue._feed (/l/multiprocessing/queues.py:231);'
            'Condition.wait (/l/threading.py:327) 148\n')
    a, b = pyspy.parse_raw(text)
    assert a.pids == (7, 9) and a.tid == 11 and a.count == 134
    assert a.frames[-1] == Frame("Image.open", "/p/PIL/Image.py", 3300)
    assert classify.role(a.frames, a.thread_name, True) == classify.WORKER
    assert classify.worker_stage(a.frames) == "decode"
    assert b.pids == (7,) and b.tid == 0x1F and classify.feeder_stage(b.frames) == classify.IDLE


def test_a_worker_inside_the_profilers_own_fetch_is_producing_samples():
    """A job attached to while it runs under ``profiler run`` fetches through the profiler's written-out map fetch
    (instrument/worker.py), not torch's fetch.py: its samples are the same stages, not transfer or other."""
    text = ('process 9:"python a.py";thread (11): MainThread;_worker_loop (/p/torch/utils/data/_utils/worker.py:375);'
            'inline_map_fetch.<locals>.fetch (/w/profiler/instrument/worker.py:620);Planted.__getitem__ (/x/a.py:21);'
            'Image.open (/p/PIL/Image.py:3300) 5\n')
    (a,) = pyspy.parse_raw(text)
    assert classify.worker_stage(a.frames) == "decode"


def test_a_thread_role_comes_from_all_its_stacks_not_the_first_listed():
    """py-spy's folded output lists a thread's stacks in no set order, and a non-blocking sample can be torn (here a
    lone selector frame). Seen on an idle machine: the worker's main thread's first listed stack was such a sample,
    the whole thread was taken for an unnamed one, and a cpu-bound job's verdict was "other"."""
    from profiler.attach import build, discover, procfs, session

    worker = ('process 7:"python a.py";process 9:"python a.py";thread (9): MainThread;<module> (/x/a.py:3);'
              '_worker_loop (/p/torch/utils/data/_utils/worker.py:375);_MapDatasetFetcher.fetch '
              '(/p/torch/utils/data/_utils/fetch.py:54);Planted.__getitem__ (/x/a.py:21) 40\n')
    text = ('process 7:"python a.py";process 9:"python a.py";thread (9): MainThread;_PollLikeSelector.select '
            '(/l/selectors.py:415) 1\n' + worker +
            'process 7:"python a.py";thread (7): MainThread;<module> (/x/a.py:3);_BaseDataLoaderIter.__next__ '
            '(/p/torch/utils/data/dataloader.py:631) 41\n')
    procs = [discover.Proc(7, "main", ["python", "a.py"]), discover.Proc(9, "worker", ["python", "a.py"], "fork")]
    target = discover.Target(7, 7, ["python", "a.py"], None, None, None, True, procs, None, False, {}, [], [], None)
    s = session.Sampled(target, "py-spy", None, 20, 2.0, 2.0, pyspy.RecordingResult(stacks=pyspy.parse_raw(text)),
                        procfs.StateSampler([], [], 20))
    rows = {(r["pid"], r["tid"]): r for r in build.thread_rows(s)}
    assert rows[(9, 9)]["role"] == classify.WORKER and rows[(9, 9)]["samples"] == 41
    assert rows[(9, 9)]["stages"] == {"getitem": 40, classify.IDLE: 1}
    assert rows[(7, 7)]["role"] == classify.MAIN and rows[(7, 7)]["stages"] == {"wait": 41}


def test_wilson_interval_brackets_the_share():
    from profiler.analysis.attach import wilson

    lo, hi = wilson(50, 100)
    assert lo < 0.5 < hi and hi - lo < 0.2
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == 1.0


def test_rank_of_attaches_to_every_rank_and_names_the_straggler(tmp_path):
    """A 2-rank gloo DDP job under torchrun whose rank 1 loads with the planted cpu cause: --rank-of rank 0's PID
    finds the agent's other rank, writes one record per rank (each naming its rank and its sibling) and one merged
    ranks.json (profiler/distributed's merge over the attach records) that names rank 1 the straggler, cpu-bound,
    with rank 0 waiting for it in the all-reduce."""
    p = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "--master-port", "29517", str(JOBS / "attach_planted.py"), "ddp", "-", "1", "40"],
                         stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert p.stdout is not None
        seen = 0
        while seen < 2:
            line = p.stdout.readline()
            assert line, "torchrun job did not start"
            seen += "READY" in line
        from profiler.attach import discover, procfs

        ranks = sorted(c for c in procfs.children(p.pid) if "attach_planted.py" in " ".join(procfs.cmdline(c)))
        assert len(ranks) == 2 and discover.agent_of(ranks[0]) == p.pid
        rank0 = next(c for c in ranks if procfs.environ_value(c, ("RANK",)).get("RANK") == "0")
        # 5 s, not ATTACH_S: two ranks and their workers on 2 cores beside CI's other tests once left 3 s with too
        # few worker samples to tie rank 1's wait to its cpu ("other").
        rc, _ = attach_here(tmp_path, "--rank-of", str(rank0), "--duration", "5", "--rate", RATE)
        assert p.poll() is None
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=60)
    assert rc == 0
    recs = {k: json.loads((tmp_path / "att" / f"attach-rank{k}" / "run.json").read_text()) for k in (0, 1)}
    for k, rec in recs.items():
        assert rec["attach"]["ranks"]["rank"] == k and rec["attach"]["ranks"]["world_size"] == 2
        assert [s["rank"] for s in rec["attach"]["siblings"]] == [1 - k]
    assert recs[1]["verdict"]["bottleneck"] == "cpu", recs[1]["verdict"]["summary"]
    view = json.loads((tmp_path / "att" / "ranks.json").read_text())
    assert view["kind"] == "attach" and view["present"] == [0, 1]
    assert view["straggler"] is not None and view["straggler"]["rank"] == 1, view["summary"]
    assert view["straggler"]["cause"] == "cpu" and view["straggler"]["waiting_ranks"] == [0]
    assert view["summary"].startswith("Rank 1 is cpu-bound") and "rank 0 spent" in view["summary"]
    # the torchrun job's merged page, from the same view: the straggler sentence, the table, each rank's own page
    html = (tmp_path / "att" / "report.html").read_text()
    assert view["summary"][:40] in html and "Attached from outside" in html and "Merged trace" not in html
    assert all(f'href="attach-rank{k}/report.html"' in html for k in (0, 1))
    assert (tmp_path / "att" / "ranks.png").stat().st_size > 0 and not (tmp_path / "att" / "trace.json").exists()


@pytest.mark.gpu
def test_gpu_of_a_cuda_job_is_found_and_sampled(tmp_path):
    """NVML's processes-on-device names the GPU the job uses, and its utilisation is read during the window."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    code = ("import torch, time\nfrom torch.utils.data import DataLoader\n"
            "dl = DataLoader([torch.randn(256) for _ in range(4096)], batch_size=64, num_workers=1)\n"
            "m = torch.nn.Linear(256, 256).cuda()\nprint('READY', flush=True)\nt0 = time.monotonic()\n"
            "while time.monotonic() - t0 < 20:\n    for x in dl:\n        m(x.cuda()).sum().item()\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert p.stdout is not None and "READY" in p.stdout.readline()
        time.sleep(2)
        rc, rec = attach_here(tmp_path, str(p.pid), "--duration", "3")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=60)
    assert rc == 0 and rec is not None
    gpus = rec["attach"]["gpus"]
    assert gpus and gpus[0]["util_samples"] > 0 and rec["compute_device"]["type"] == "cuda"


def test_no_dataloader_activity_is_a_record_of_verdict_none_and_exit_2(tmp_path, capsys):
    """A job between epochs (here: torch imported, no loader iterating): the record says so; exit 2, one line."""
    p = subprocess.Popen([sys.executable, "-c", "import torch, time; print('READY', flush=True); time.sleep(60)"],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and "READY" in p.stdout.readline()
        rc, rec = attach_here(tmp_path, str(p.pid), "--duration", "1")
    finally:
        p.kill()
        p.wait()
    assert rc == 2 and rec is not None
    assert rec["verdict"]["bottleneck"] == "none" and "no DataLoader activity seen" in rec["verdict"]["summary"]
    err = capsys.readouterr().err
    assert "no DataLoader activity seen" in err and err.strip().count("\n") == 0
    # and what the window did see, so a quiet loader is told from a sampler that saw little
    assert " waiting for a batch; 0 worker threads 0.000 s on a core" in err and "main-thread samples" in err, err


def test_a_worker_py_spy_could_not_read_is_judged_by_its_kernel_clocks():
    """py-spy sometimes gives up on a child it meets mid-read; its /proc clocks still say it was blocked on the
    device, so the wait is io (not 'other'), and the summary says how it was judged."""
    from profiler.analysis.attach import verdict, worker_mix

    a = {"seconds": 3.0, "processes": [{"pid": 1, "role": "main"}, {"pid": 2, "role": "worker"}],
         "threads": [{"pid": 1, "tid": 1, "role": "main", "samples": 150, "stages": {"wait": 150}, "wall_s": 3.0},
                     {"pid": 2, "tid": 2, "role": "worker", "samples": 0, "stages": {}, "wall_s": 3.0,
                      "on_cpu_s": 0.02, "runq_s": 0.01, "states": {"D": 140, "R": 2}}]}
    mix = worker_mix(a)
    assert mix["workers"][0]["unsampled"] and mix["kinds"]["blocked_device"] > 2.5
    stall = {"fraction": 1.0, "fraction_low": 0.97, "fraction_high": 1.0, "seconds": 3.0, "main_samples": 150,
             "wait_samples": 150, "by_cause": {"io": 2.97, "cpu": 0.03, "transfer": 0.0, "other": 0.0},
             "by_kind": {}}
    v = verdict(a, stall, mix, a["threads"][0], 1, 3.0)
    assert v["bottleneck"] == "io" and "kernel's clocks alone" in v["summary"]


def test_the_main_threads_wait_for_a_core_while_taking_a_batch_in_is_cpu_not_transfer():
    """``run`` counts the main thread's run-queue delay in each step's wait as cpu contention; attach, with only the
    window's run-queue total, apportions it over the samples in which the main thread had work to run (taking a batch
    in, or outside the DataLoader), at most all of the taking-in (issue 36 item 5; the pair on one execution under
    contention: tests/test_hardening4.py)."""
    from profiler.analysis.attach import main_queued_s

    m = {"samples": 168, "stages": {"wait": 157, "compute": 11}, "wait_stages": {"transfer": 150}, "wall_s": 4.07,
         "on_cpu_s": 0.27, "runq_s": 1.52}  # a main thread beside 2 busy loops per core (measured)
    assert main_queued_s(m, 3.6, 150, 157, 168) == pytest.approx(1.52 * 150 / (150 + 11))
    assert main_queued_s(m, 0.5, 150, 157, 168) == 0.5  # never more than the taking-in
    # most of its run-queue time outside the DataLoader (computing): little of it on the taking-in
    assert main_queued_s(m, 0.3, 14, 42, 171) == pytest.approx(1.52 * 14 / (14 + 129))
    assert main_queued_s({**m, "runq_s": 0.0}, 3.6, 150, 157, 168) == 0.0  # a main thread that had its core
    assert main_queued_s(m, 0.0, 0, 157, 168) == 0.0 and main_queued_s(None, 3.6, 150, 157, 168) == 0.0
