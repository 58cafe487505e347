"""Hardening, round 4 (issue 36): attach, the API and sample counting at their edges. Real jobs (tests/jobs/h4_*.py,
attach_planted.py), real signals, a real full filesystem (a tmpfs, when it can be mounted); nothing mocked."""
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

from profiler.attach import procfs, pyspy

from _util import running_job

JOBS = Path(__file__).parent / "jobs"


@contextmanager
def job(script: str, *argv: str) -> Iterator[subprocess.Popen]:
    """A job running until the block ends; yields once it printed READY."""
    with running_job([sys.executable, str(JOBS / script), *argv]) as p:
        yield p


@pytest.fixture(scope="module")
def cpu_job() -> Iterator[subprocess.Popen]:
    """One cpu-bound job whose argv holds the text that broke py-spy's output parsing (item 7), for the module."""
    with job("h4_cpu.py", "0", 'x";thread (0x1);y', 'z";process 5:"w') as p:
        yield p


def attach_here(out: Path, *args: str) -> tuple[int, dict | None]:
    """attach in this process (its imports paid once per session, not per attach)."""
    from profiler.cli import main

    rc = main(["attach", *args, "--out", str(out)])
    rec = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else None
    return rc, rec


def attach_proc(pid: int, out: Path, *args: str) -> subprocess.Popen:
    """attach as its own process; returns once it prints that it samples (so a signal reaches the window)."""
    a = subprocess.Popen([sys.executable, "-m", "profiler", "attach", str(pid), "--out", str(out), *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert a.stdout is not None
    lines = []
    while not lines or "sampling" not in lines[-1]:
        lines.append(a.stdout.readline())
        assert lines[-1], ("attach ended before sampling", lines, a.communicate())
    return a


# -- 1. signals: what was sampled is written, whatever their timing ------------------------------------------------

@pytest.mark.parametrize("when", ["inside", "at_end"])
def test_two_signals_close_together_still_write_the_record(tmp_path, cpu_job, when):
    """Two SIGINTs 0.05 s apart, inside the window or as it ends: the record of what was sampled is written (was: an
    empty --out and "interrupted before anything was measured" in 4 of 5 runs), exit 130."""
    out = tmp_path / "att"
    a = attach_proc(cpu_job.pid, out, "--duration", "4" if when == "at_end" else "30", "--no-plots")
    # at_end: the window's 4 s from about the "sampling" line; inside: 3 s in, so that py-spy (which starts sampling
    # a while after that line on a loaded machine) has samples to write
    time.sleep(4.0 if when == "at_end" else 3.0)
    a.send_signal(signal.SIGINT)
    time.sleep(0.05)
    a.send_signal(signal.SIGINT)
    _, err = a.communicate(timeout=120)
    assert "interrupted before anything was measured" not in err
    assert a.returncode == 130, err
    rec = json.loads((out / "run.json").read_text())
    assert rec["attach"]["sampler"]["samples"] > 0
    if rec["partial"]:  # the window was cut short: the record says so
        assert "Ctrl-C" in rec["partial_reason"]


# -- 2. --out is claimed ---------------------------------------------------------------------------------------

def test_attach_into_an_out_another_run_holds_is_one_line_exit_2(tmp_path, cpu_job, capsys):
    out = tmp_path / "busy"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; from profiler "
                               "import outdir; outdir.claim(Path(sys.argv[1])); print('HELD', flush=True); "
                               "time.sleep(120)", str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and "HELD" in holder.stdout.readline()
        capsys.readouterr()
        rc, _ = attach_here(out, str(cpu_job.pid), "--duration", "1")
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert rc == 2 and "another profiler run is writing there" in err, err
    assert len(err.strip().splitlines()) == 1 and not list(out.iterdir())


# -- 7. py-spy's output is parsed by structure ---------------------------------------------------------------------

def test_raw_lines_are_split_by_known_command_lines_not_by_their_text():
    argv = 'python job.py x";thread (0x1);y'
    text = (f'process 7:"{argv}";process 9:"{argv}";thread (9): MainThread;<module> (/x/job.py:3);'
            '_worker_loop (/p/torch/utils/data/_utils/worker.py:375) 40\n'
            f'process 7:"{argv}";thread (7): MainThread;<module> (/x/job.py:3);_BaseDataLoaderIter.__next__ '
            '(/p/torch/utils/data/dataloader.py:631) 41\n'
            f'process 7:"{argv}";thread (8): log;ger (x.py:1);Thread.run (/l/threading.py:982) 3\n')
    known = {7: argv, 9: argv}
    for kw in ({"cmdlines": known}, {"threads": {(7, 7): "", (9, 9): "", (7, 8): ""}}, {}):
        a, b, c = pyspy.parse_raw(text, **kw)
        assert (a.pids, a.tid, a.count) == ((7, 9), 9, 40), kw
        assert (b.pids, b.tid, b.thread_name, b.count) == ((7,), 7, "MainThread", 41), kw
        assert b.frames[-1].name == "_BaseDataLoaderIter.__next__"
        assert c.tid == 8 and c.frames[-1].name == "Thread.run", kw
    # the thread's name, known, is skipped whole, even when it looks like a frame
    (c,) = pyspy.parse_raw(text.splitlines()[2] + "\n", known, {(7, 8): "log;ger (x.py:1)"})
    assert c.thread_name == "log;ger (x.py:1)" and [f.name for f in c.frames] == ["Thread.run"]


def test_a_job_whose_argv_holds_pyspy_separators_is_sampled_right(tmp_path, cpu_job):
    """The job's argv holds ``";thread (`` and ``";process N:"``: the main thread has its samples, no thread more
    wall time than the window, and the verdict is the job's (cpu), not none."""
    rc, rec = attach_here(tmp_path / "att", str(cpu_job.pid), "--duration", "3", "--rate", "50", "--no-plots")
    assert rc == 0 and rec is not None
    threads = rec["attach"]["threads"]
    main = [t for t in threads if t["role"] == "main"]
    assert main and main[0]["samples"] > 0 and main[0]["pid"] == cpu_job.pid
    window = rec["attach"]["seconds"]
    assert all(t["samples"] / 50 <= window + 1.0 for t in threads), [(t["tid"], t["samples"]) for t in threads]
    assert rec["verdict"]["bottleneck"] == "cpu", rec["verdict"]["summary"]


# -- 9. a job that re-forks its workers: forget what exited --------------------------------------------------------

def test_the_proc_reader_stops_reading_threads_that_exited():
    from profiler.attach import procfs as pf

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.6)"])
    try:
        k = pf.StateSampler([(child.pid, child.pid)], [child.pid], 50)
        k.start()
        assert k.live == 1
        child.wait(timeout=30)
        deadline = time.monotonic() + 10
        while k.live and time.monotonic() < deadline:
            time.sleep(0.05)
        ticks = k.ticks
        time.sleep(0.2)
        k.stop()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert k.live == 0 and k.ended == 1 and k.ticks > ticks  # still ticking, reading nothing that exited
    w = k.windows[(child.pid, child.pid)]
    assert w.first is not None and w.last is not None  # its window keeps its last reading


def test_a_reforking_job_keeps_the_record_flat(tmp_path, monkeypatch):
    """Workers forked anew every epoch (~0.2 s): the exited ones beyond the row limit (2 here) are folded into one
    row per role, the processes list stays short, and every sample is still counted."""
    from profiler.attach import fold

    monkeypatch.setattr(fold, "MAX_WORKER_PROCESS_ROWS", 2)
    monkeypatch.setattr(fold, "MAX_MAIN_THREAD_ROWS", 4)
    with job("h4_refork.py", "0", "64", "2") as p:
        # 6 s, not 4: on a loaded machine (the suite beside two CPU hogs) an epoch's fork took up to ~2 s, and 4 s saw
        # only 3-4 workers
        rc, rec = attach_here(tmp_path / "att", str(p.pid), "--duration", "6", "--rate", "50", "--no-plots")
    assert rec is not None and rc in (0, 2)
    a = rec["attach"]
    assert a["workers_seen"] > 4 and a["workers_folded"] >= a["workers_seen"] - 2
    assert len([p for p in a["processes"] if p["role"] == "worker"]) <= 2
    folded = [t for t in a["threads"] if t["pid"] == -1]
    assert folded and sum(t["folded"] for t in folded) >= a["workers_folded"]
    assert len(a["threads"]) <= 2 * 3 + 4 + 4  # live workers' threads, the main process's, one per folded role
    assert rec["verdict"]["bottleneck"] != "none", rec["verdict"]["summary"]


# -- 10. a full disk --------------------------------------------------------------------------------------------

@pytest.fixture
def full_disk(tmp_path) -> Iterator[Path]:
    mnt = tmp_path / "full"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        fd = os.open(mnt / "fill", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_attach_onto_a_full_disk_saves_the_record_in_the_temp_folder(full_disk, cpu_job):
    a = subprocess.run([sys.executable, "-m", "profiler", "attach", str(cpu_job.pid), "--duration", "2",
                        "--out", str(full_disk / "att")], capture_output=True, text=True, timeout=180)
    assert a.returncode == 0, a.stderr
    assert "Traceback" not in a.stderr and "internal error" not in a.stderr
    line = next(ln for ln in a.stderr.splitlines() if "the record is in" in ln)
    saved = Path(line.rsplit("the record is in ", 1)[1].strip())
    try:
        rec = json.loads(saved.read_text())
        assert rec["job"]["kind"] == "attach" and rec["attach"]["sampler"]["samples"] > 0
    finally:
        saved.unlink(missing_ok=True)


# -- 8. samples per step that cannot be trusted ------------------------------------------------------------------

def test_per_sample_tensor_lists_and_impossible_shapes_are_counted_right():
    import torch

    from profiler.instrument.loaders import BASIS_BATCH, BASIS_LENGTH, count_samples

    class Batch:
        def __init__(self, items):
            self.items = items

    class Neg:
        shape = (-1, 8)

    per_sample = [torch.zeros(8) for _ in range(16)]
    assert count_samples(Batch(per_sample), 16) == (16, BASIS_BATCH)  # was 8
    assert count_samples(tuple(per_sample), 16) == (16, BASIS_LENGTH)
    assert count_samples(Neg(), 16) is None and count_samples({"x": Neg(), "y": Neg()}, 16) is None  # was -1
    assert count_samples(torch.zeros(0, 3), 4) is None
    # unchanged: a collated pair, multi-crop views, a pair of 2 samples
    assert count_samples((torch.zeros(16, 3), torch.zeros(16)), 2) == (16, BASIS_BATCH)
    assert count_samples(Batch([torch.zeros(4, 3, 8, 8) for _ in range(2)]), 4) == (4, BASIS_BATCH)
    assert count_samples(Batch([torch.zeros(4, 3) for _ in range(16)]), None) == (4, BASIS_BATCH)


@pytest.mark.parametrize("kind, basis", [pytest.param("list", "batch", marks=pytest.mark.slow),
                                         ("negshape", "dataset calls")])
def test_a_run_of_hard_to_count_batches_says_its_basis_and_reports(tmp_path, kind, basis):
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "profiler", "run", "--no-progress", "--no-plots", "--warmup", "1",
                        "--steps", "10", "--out", str(out), str(JOBS / "h4_batches.py"), kind], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rec = json.loads((out / "run.json").read_text())
    assert rec["throughput"]["samples"] == 160 and rec["throughput"]["samples_per_s"] > 0
    assert rec["job"]["loader"]["samples_basis"] == basis
    if kind != "negshape":
        return
    from profiler.cli import main  # in this process: a second Python start and torch import cost more than the report

    assert main(["report", str(out / "run.json"), "--out", str(tmp_path / "rep")]) == 0
    assert "samples counted from the dataset calls" in (tmp_path / "rep" / "report.html").read_text()


# -- 3. two torchrun jobs, one --out -----------------------------------------------------------------------------

_CLAIMER = ("import os, sys, time; from pathlib import Path; from profiler.distributed import env, layout; "
            "from profiler.errors import UserError\n"
            "try:\n"
            "    layout.claim_for_job(Path(sys.argv[1]), env.detect())\n"
            "except UserError as e:\n"
            "    print('REFUSED', e, flush=True); sys.exit(2)\n"
            "print('HELD', flush=True); time.sleep(float(sys.argv[2]))\n")


def _rank(folder: Path, port: int, rank: int, hold_s: float = 60.0) -> subprocess.Popen:
    """A process with the environment torchrun gives rank ``rank`` of a 2-rank job at ``port``, claiming ``folder``."""
    env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "TORCHELASTIC_RUN_ID": "none"}
    return subprocess.Popen([sys.executable, "-c", _CLAIMER, str(folder), str(hold_s)], stdout=subprocess.PIPE,
                            text=True, env=env)


def test_a_second_torchrun_job_into_the_same_out_is_refused_while_the_first_runs(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    procs = []
    try:
        a0 = _rank(folder, 29601, 0)
        procs.append(a0)
        assert "HELD" in a0.stdout.readline()
        a1 = _rank(folder, 29601, 1)  # the same job's other rank shares the folder
        procs.append(a1)
        assert "HELD" in a1.stdout.readline()
        b0 = _rank(folder, 29602, 0, 0)  # another job (another port): refused, one line
        procs.append(b0)
        out, _ = b0.communicate(timeout=60)
        assert b0.returncode == 2 and "another torchrun job (127.0.0.1:29601/none) is writing there" in out, out
        a0.kill()
        a1.kill()
        a0.wait()
        a1.wait()
        b1 = _rank(folder, 29602, 1, 0)  # the first job is gone: its name is stale, the folder is taken over
        procs.append(b1)
        out, _ = b1.communicate(timeout=60)
        assert b1.returncode == 0 and "HELD" in out
        assert (folder / ".profiler-job").read_text().strip() == "127.0.0.1:29602/none"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.slow
def test_two_real_torchrun_jobs_into_one_out_do_not_mix(tmp_path):
    """Two `profiler run` torchrun jobs (different ports) into one --out at once: one writes its ranks, the other
    fails with one line naming the folder; no rank folder holds files of both."""
    sys.path.insert(0, str(Path(__file__).parent))
    from _util import free_port, repo_env, torchrun_profiler

    folder = tmp_path / "run"
    job_script = JOBS / "h4_cpu.py"
    # (the records are what is read: no plots.) The first job runs until the second has ended (a stop file), and the
    # second starts once the first's ranks hold the folder: they overlap for sure. (Started together, on a fast CI
    # machine one short job ended before the other's ranks claimed the folder, which then takes it over, as it should:
    # both 0; a first job of a fixed 20 s ended, in a loaded suite, before the second's ranks had started.)
    from profiler.distributed.layout import JOB_FILE

    stop = tmp_path / "stop"
    env = repo_env({"H4_STOP_FILE": str(stop), "H4_IDLE": "1"})  # (a job holding the folder; its cores the suite's)
    cmds = [torchrun_profiler(["--nproc-per-node", "2", "--master-port", str(free_port())], folder, "--steps",
                              "100000", "--no-plots", str(job_script), "600") for _ in range(2)]
    ps = [subprocess.Popen(cmds[0], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                           env=env)]
    try:
        deadline = time.monotonic() + 120
        while not (folder / JOB_FILE).exists():
            assert ps[0].poll() is None and time.monotonic() < deadline, "the first job never claimed the folder"
            time.sleep(0.05)
        ps.append(subprocess.Popen(cmds[1], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                                   env=env))
        second = ps[1].communicate(timeout=300)
        stop.touch()  # the first job's script ends at its next step
        res = [ps[0].communicate(timeout=300), second]
    finally:
        stop.touch()
        for p in ps:
            if p.poll() is None:
                p.kill()
                p.wait()
    codes = sorted(p.returncode for p in ps)
    assert codes[0] == 0 and codes[1] != 0, [r[1][-2000:] for r in res]
    loser = res[[p.returncode for p in ps].index(codes[1])][1]
    assert "another torchrun job" in loser
    pids = {json.loads((folder / f"rank{r}" / "rank.json").read_text())["pid"] for r in (0, 1)}
    recs = [json.loads((folder / f"rank{r}" / "run.json").read_text()) for r in (0, 1)]
    # whole records, each of one rank of the winner (its window ends with its script: partial for that reason only)
    assert len(pids) == 2 and all(not r["partial"] or "ended" in (r["partial_reason"] or "") for r in recs), \
        [r["partial_reason"] for r in recs]


# -- 4. the API at its edges ---------------------------------------------------------------------------------------

def _loader(workers: int = 0):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    return DataLoader(TensorDataset(torch.randn(256, 8)), batch_size=8, num_workers=workers)


def test_profile_in_a_thread_profiles_that_threads_loader(tmp_path):
    import threading

    import profiler

    got = {}

    def body():
        with profiler.profile(out=str(tmp_path / "t"), warmup=1, steps=5, plots=False, quiet=True) as run:
            for _ in _loader(1):
                pass
        got["run"] = run

    t = threading.Thread(target=body)
    t.start()
    t.join(timeout=300)
    run = got["run"]
    assert run.record is not None and run.files, "a profile() block in a thread recorded nothing"
    rec = json.loads((tmp_path / "t" / "run.json").read_text())
    assert rec["throughput"]["steps"] == 5 and rec["throughput"]["samples"] == 40


def test_the_same_profile_run_entered_twice_writes_two_records(tmp_path, capsys):
    import profiler

    run = profiler.profile(out=str(tmp_path / "a"), warmup=1, steps=3, plots=False, quiet=True)
    with run:
        for _ in _loader():
            pass
    first = Path(run.files[0])
    with run:
        for _ in _loader():
            pass
    second = Path(run.files[0])
    assert first == tmp_path / "a" / "run.json" and second == tmp_path / "a-2" / "run.json"
    assert json.loads(second.read_text())["throughput"]["steps"] == 3 and first.exists()
    assert "already wrote" in capsys.readouterr().err


def test_an_iterator_made_before_the_block_is_named_not_called_no_loader(capsys):
    import profiler

    it = iter(_loader(1))
    with profiler.profile(warmup=1, steps=3, plots=False, quiet=True) as run:
        for _ in range(6):
            next(it)
    err = capsys.readouterr().err
    assert run.record is None
    assert "iterator made before it (6 batches" in err and "no DataLoader was iterated" not in err
    assert len(err.strip().splitlines()) == 1


# -- 6 and 11. --rank-of from a worker's PID or from torchrun's agent; the agent itself -----------------------------

@pytest.mark.slow
def test_rank_of_a_worker_or_the_agent_samples_every_rank_and_the_agent_alone_is_refused(tmp_path, capsys):
    sys.path.insert(0, str(Path(__file__).parent))
    from _util import free_port

    p = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                          str(free_port()), str(JOBS / "attach_planted.py"), "ddp", "-", "1", "60"],
                         stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert p.stdout is not None
        seen = 0
        while seen < 2:
            line = p.stdout.readline()
            assert line, "torchrun job did not start"
            seen += "READY" in line
        ranks = [c for c in procfs.children(p.pid) if "attach_planted.py" in " ".join(procfs.cmdline(c))]
        worker = next(w for r in ranks for w in procfs.children(r))
        # 11: the agent's PID, plain: one line, exit 2, nothing written
        capsys.readouterr()
        rc, rec = attach_here(tmp_path / "agent", str(p.pid), "--duration", "1")
        err = capsys.readouterr().err
        assert rc == 2 and "torchrun's agent" in err and f"--rank-of {p.pid}" in err, err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "agent").exists()
        # 11: --rank-of the agent, and 6: --rank-of a DataLoader worker's PID: every rank, merged
        for name, pid in (("of_agent", p.pid), ("of_worker", worker)):
            rc, _ = attach_here(tmp_path / name, "--rank-of", str(pid), "--duration", "2", "--no-plots")
            assert rc == 0, (name, capsys.readouterr().err)
            view = json.loads((tmp_path / name / "ranks.json").read_text())
            assert view["present"] == [0, 1], (name, view.get("present"))
            assert all((tmp_path / name / f"attach-rank{k}" / "run.json").exists() for k in (0, 1))
        assert p.poll() is None
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=60)


# -- 5. run and attach agree on one execution ----------------------------------------------------------------------

def test_the_main_threads_receiving_of_a_batch_is_transfer_its_polling_is_waiting():
    from profiler.attach import classify
    from profiler.attach.pyspy import Frame

    head = (Frame("<module>", "/x/job.py", 3),
            Frame("_BaseDataLoaderIter.__next__", "/p/torch/utils/data/dataloader.py", 733),
            Frame("Queue.get", "/l/multiprocessing/queues.py", 122))
    receiving = head + (Frame("rebuild_storage_fd", "/p/torch/multiprocessing/reductions.py", 538),
                        Frame("DupFd.detach", "/l/multiprocessing/resource_sharer.py", 58))
    polling = head[:2] + (Frame("Queue.get", "/l/multiprocessing/queues.py", 113),
                          Frame("Connection._poll", "/l/multiprocessing/connection.py", 440))
    assert classify.main_stage(receiving) == ("wait", "transfer")
    assert classify.main_stage(polling) == ("wait", None)
    # a worker under `profiler run` fetches through the profiler's own fetch (moved to instrument/fetch.py and
    # inline_fetch.py): producing, not idle
    w = (Frame("_worker_loop", "/p/torch/utils/data/_utils/worker.py", 375),
         Frame("instrumented_parts.<locals>.fetch", "/w/profiler/instrument/fetch.py", 190),
         Frame("Many.__getitem__", "/x/job.py", 20))
    assert classify.worker_stage(w) == "getitem"


def _pair(tmp_path: Path, job_argv: list[str]) -> tuple[dict, dict]:
    """One execution of a job under `profiler run`, attached to from outside for 4 s of the same window. The job ends
    when the attach is done (a stop file; its own seconds are a cap): the two windows are then nearly the same span,
    where a job that ran on for its seconds gave `run` a window 3-4 times the attach's, and on a loaded suite the
    machine's load moves the split between the two (CI, 2026-12-07: run transfer 0.55, attach cpu 0.69)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from profiler.cli import main

    from _util import repo_env

    stop = tmp_path / "stop"
    p = subprocess.Popen([sys.executable, "-m", "profiler", "run", "--no-progress", "--no-plots", "--steps",
                          "100000", "--warmup", "1", "--out", str(tmp_path / "run"), *job_argv],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=repo_env({"H4_STOP_FILE": str(stop)}))
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        while line and "READY" not in line:
            line = p.stdout.readline()
        assert "READY" in line
        rc = main(["attach", str(p.pid), "--duration", "4", "--rate", "50", "--out", str(tmp_path / "att"),
                   "--no-plots"])
        stop.touch()
        _, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert rc == 0 and p.returncode == 0, err[-2000:]
    return (json.loads((tmp_path / "run" / "run.json").read_text()),
            json.loads((tmp_path / "att" / "run.json").read_text()))


@contextmanager
def _hogs(per_core: int) -> Iterator[None]:
    """``per_core`` busy loops pinned to each core of this machine while the block runs (then killed)."""
    cores = sorted(os.sched_getaffinity(0))
    procs = [subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{c}}})\nwhile True: pass"])
             for c in cores for _ in range(per_core)]
    try:
        yield
    finally:
        for h in procs:
            h.kill()
            h.wait()


@pytest.mark.slow
@pytest.mark.parametrize("job_argv,hogs", [([str(JOBS / "h4_transfer.py"), "15", "150"], 0),
                                           ([str(JOBS / "attach_planted.py"), "cpu", "-", "1", "12"], 0),
                                           ([str(JOBS / "h4_transfer.py"), "20", "150"], 2)],
                         ids=["transfer", "planted-cpu", "transfer-beside-hogs"])
def test_run_and_attach_agree_on_one_execution(tmp_path, job_argv, hogs):
    """The issue's job: batches of 256 small tensors (each rebuilt from its own shared-memory fd in the main process)
    made by workers idle about half the time. `run` measured transfer; attach split the whole wait by the workers'
    mix and said cpu (85 %). The main thread's receiving samples are transfer now; and the planted cpu case still
    agrees (under `run`, its workers fetch through the profiler's own fetch, which attach must see as producing).
    Beside two busy loops pinned to each core the main thread waits for a core much of its taking-in: `run` counts
    that cpu per step, attach from the window's run-queue total (analysis/attach.py ``main_queued_s``); it kept it
    all transfer (100 % where run had 35 % cpu) and, in a CI run under load, the two named different causes.
    Agreeing is the same verdict, or shares of the wait within NEAR of each other cause by cause: on a loaded suite
    the transfer job's workers wait for cores and its split nears even, where the two tools' verdicts can fall
    either side (CI, 2026-12-07: run cpu 0.60 / transfer 0.40, attach 0.48 / 0.52); the bug this guards against
    was 0.85 against 0.35."""
    NEAR = 0.15
    with _hogs(hogs):
        run, att = _pair(tmp_path, job_argv)
    shares = run["stall"]["share_by_cause"], att["stall"]["share_by_cause"]
    assert run["verdict"]["bottleneck"] == att["verdict"]["bottleneck"] \
        or max(abs(shares[0][k] - shares[1].get(k, 0.0)) for k in shares[0]) <= NEAR, shares
    if hogs:
        assert abs(shares[0]["cpu"] - shares[1]["cpu"]) <= 0.2, shares


# -- py-spy that fails its first read of a busy target (CI, beside other tests): started again ----------------------

def test_a_py_spy_record_that_fails_before_its_first_sample_is_started_again(tmp_path, cpu_job):
    """The first ``record`` exits 1 with nothing written (as py-spy did under load: 'no reason given'); the window
    is sampled by the restart, and a target that can never be read still fails after RECORD_RESTARTS."""
    from profiler.attach import discover, session

    real = pyspy.find_binary()
    flaky = tmp_path / "py-spy"
    flaky.write_text(f'#!/bin/sh\nif [ "$1" = record ] && [ ! -e "{tmp_path}/failed" ]; then\n'
                     f'  touch "{tmp_path}/failed"; exit 1\nfi\nexec "{real}" "$@"\n')
    flaky.chmod(0o755)
    target = discover.find(cpu_job.pid, str(flaky))
    (got,) = session.sample([target], str(flaky), 3.0, 20)
    assert (tmp_path / "failed").exists()  # the first start did fail
    assert got.stacks.stacks and got.stacks.samples > 0, got.stacks.log

    RECORD_TRIES = pyspy.RECORD_RESTARTS + 2  # one more than it may take, so a missing limit fails the test
    never = tmp_path / "never"
    never.write_text("#!/bin/sh\nexit 1\n")
    never.chmod(0o755)
    rec = pyspy.Recording(str(never), cpu_job.pid, 20, 2.0)
    try:
        for _ in range(RECORD_TRIES):
            while rec.running():
                time.sleep(0.05)
            assert rec.failed_before_first_sample()
            if not rec.restart(2.0):
                break
        assert rec.restarts == pyspy.RECORD_RESTARTS
        with pytest.raises(pyspy.SamplerError):
            rec.result(target_alive=True)
    finally:
        rec.kill()


def test_the_monitor_names_an_iterator_made_before_its_block_too(tmp_path, capsys):
    import profiler

    it = iter(_loader(1))
    with profiler.profile(out=str(tmp_path / "m"), monitor=True, plots=False, quiet=True) as block:
        for _ in range(6):
            next(it)
    err = capsys.readouterr().err
    assert not block.files
    assert "profile(monitor=True): the block iterated a DataLoader iterator made before it (6 batches" in err
    assert "no DataLoader was iterated" not in err and len(err.strip().splitlines()) == 1


def test_a_monitor_block_that_recorded_nothing_leaves_run_as_it_was(tmp_path):
    """A profile(monitor=True) block that iterated no loader of its own writes nothing, but must leave the process as
    its normal end does: a `profile()` after it in the same process still times every batch in its workers."""
    import profiler

    with profiler.profile(out=str(tmp_path / "m"), monitor=True, plots=False, quiet=True):
        pass
    with profiler.profile(out=str(tmp_path / "r"), warmup=1, steps=4, plots=False, quiet=True) as run:
        for _ in _loader(2):
            pass
    rec = run.record
    assert rec is not None
    # every batch timed in its worker, as in a process that never ran a monitor (was: no batch, the sampling left on)
    assert set(rec.timeline["batches"]["worker"]) == {0, 1}, rec.timeline["batches"]["worker"]
    assert len(rec.timeline["sample_spans"]["start"]) >= 4 * 8
