"""Hostile input for the pieces that meet it first: the folder scan, run-option bounds, output folders and signals.

Issue 12's adversarial pass found hangs (a FIFO named .jpg), memory blow-ups (a link to /dev/zero), images counted 41
times (a folder link to '.'), tracebacks from out-of-bound numbers, colliding output folders and runs killed by
SIGTERM with nothing written. Each test below recreates one of those with real files, real threads/processes and
real signals, and checks for the promised outcome: skipped and listed, one-line UserError, unique folder, exit 128+N.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from PIL import Image

from profiler import outdir, signals
from profiler.config import MAX_SEED, RunConfig, max_workers
from profiler.errors import UserError
from profiler.harness import data as hdata
from profiler.harness.data import bounded_read, scan_dataset
from profiler.storage.spec import MAX_BYTES_PER_S, ThrottleSpec, parse_throttle, resolve_storage

REPO = Path(__file__).resolve().parents[1]


def _jpeg(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (200, 10, 10)).save(path, format="JPEG")


def _within(seconds: float, fn, *args):
    """Run ``fn`` in a daemon thread; fail (instead of hanging the suite) if it does not return in time."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # handed back to the test thread
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn.__name__} did not return within {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


def _one_line_user_error(fn, *args, **kw) -> str:
    with pytest.raises(UserError) as e:
        fn(*args, **kw)
    msg = str(e.value)
    assert msg and "\n" not in msg
    return msg


# -- files that are not regular files ------------------------------------------------------------------------------

@pytest.fixture
def hostile_tree(tmp_path):
    root = tmp_path / "data"
    _jpeg(root / "cats" / "a.jpg")
    _jpeg(root / "cats" / "b.jpg")
    _jpeg(root / "dogs" / "c.jpg")
    os.mkfifo(root / "cats" / "fifo.jpg")  # opening it for reading blocks until a writer comes: never
    os.symlink("/dev/zero", root / "dogs" / "zero.jpg")  # reads without end
    os.symlink(".", root / "cats" / "again")  # a cycle: cats/again/again/... would count every image many times
    os.symlink("..", root / "dogs" / "up")  # a link to the parent
    os.symlink("nowhere.jpg", root / "dogs" / "broken.jpg")
    os.symlink("self.jpg", root / "dogs" / "self.jpg")  # a link loop with an image name
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "dogs" / "sock.jpg"))
    yield root
    sock.close()


def test_scan_skips_and_lists_special_files_promptly(hostile_tree):
    idx = _within(10, scan_dataset, hostile_tree)
    names = sorted(os.path.relpath(f, hostile_tree) for f in idx.files)
    assert names == ["cats/a.jpg", "cats/b.jpg", "dogs/c.jpg"]  # each image once: the cycles were not followed
    assert idx.classes == ["cats", "dogs"] and idx.labels == [0, 0, 1]
    reasons = {os.path.relpath(p, hostile_tree): why for p, why in idx.skipped}
    assert "FIFO" in reasons["cats/fifo.jpg"]
    assert "character device" in reasons["dogs/zero.jpg"]
    assert "socket" in reasons["dogs/sock.jpg"]
    assert "broken" in reasons["dogs/broken.jpg"]
    assert "loop" in reasons["dogs/self.jpg"]
    assert "already scanned" in reasons["cats/again"] and "already scanned" in reasons["dogs/up"]
    assert idx.total_bytes == sum(os.path.getsize(f) for f in idx.files)


def test_folder_link_to_itself_counts_each_image_once(tmp_path):
    for i in range(3):
        _jpeg(tmp_path / f"{i}.jpg")
    os.symlink(".", tmp_path / "again")
    os.symlink(str(tmp_path), tmp_path / "absolute")
    idx = _within(10, scan_dataset, tmp_path)
    assert idx.layout == "flat" and len(idx.files) == 3
    assert len(idx.skipped) == 2


def test_only_special_files_is_a_user_error_naming_the_skips(tmp_path):
    os.mkfifo(tmp_path / "x.jpg")
    msg = _one_line_user_error(_within, 10, scan_dataset, tmp_path)
    assert "no images" in msg and "skipped 1" in msg


@pytest.mark.parametrize("make, expect", [
    (lambda t: (os.symlink(t / "l2", t / "l1"), os.symlink(t / "l1", t / "l2"), t / "l1")[-1], "loop"),
    (lambda t: Path("/proc/self"), "/proc"),
    (lambda t: Path("/sys"), "/sys"),
    (lambda t: Path("/dev"), "/dev"),
    (lambda t: (os.symlink("/proc/self", t / "p"), t / "p")[-1], "/proc"),  # a link into /proc is refused too
    (lambda t: (os.mkfifo(t / "f"), t / "f")[-1], "not a directory"),
    (lambda t: t / "missing", "no such directory"),
    (lambda t: "", "empty"),
])
def test_unusable_data_paths_are_one_line(tmp_path, make, expect):
    assert expect in _one_line_user_error(_within, 10, scan_dataset, make(tmp_path))


def test_scan_is_bounded(tmp_path, monkeypatch):
    for i in range(12):
        (tmp_path / f"{i}.jpg").write_bytes(b"x")
    monkeypatch.setattr(hdata, "MAX_SCAN_ENTRIES", 10)
    assert "more than 10" in _one_line_user_error(scan_dataset, tmp_path)
    monkeypatch.setattr(hdata, "MAX_SCAN_ENTRIES", 12)
    assert len(scan_dataset(tmp_path).files) == 12


def test_bounded_read(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"0123456789")
    with open(p, "rb") as f:
        assert bounded_read(f, limit=10) == b"0123456789"
    with open(p, "rb") as f:
        with pytest.raises(OSError) as e:
            bounded_read(f, limit=9)
    assert "limit" in e.value.strerror
    with open(p, "rb", buffering=0) as f:  # unbuffered: the same answer
        assert bounded_read(f, limit=100) == b"0123456789"
    (tmp_path / "empty").write_bytes(b"")
    with open(tmp_path / "empty", "rb") as f:
        assert bounded_read(f) == b""
    with open("/dev/zero", "rb") as f:  # a device is refused before a byte is read
        with pytest.raises(OSError) as e:
            _within(10, bounded_read, f)
    assert "device" in e.value.strerror


# -- numbers and strings without bounds ---------------------------------------------------------------------------

@pytest.mark.parametrize("kw, word", [
    ({"seed": -1}, "--seed"),
    ({"seed": 10**22}, "--seed"),
    ({"seed": MAX_SEED + 1}, "--seed"),
    ({"batch_size": 50_000_000}, "--batch-size"),
    ({"batch_size": 0}, "--batch-size"),
    ({"workers": 100_000}, "--workers"),
    ({"workers": -1}, "--workers"),
    ({"image_size": 100_000}, "--image-size"),
    ({"image_size": 8}, "--image-size"),
    ({"steps": 0}, "--steps"),
    ({"steps": 10**12}, "--steps"),
    ({"warmup": -1}, "--warmup"),
    ({"prefetch_factor": 0}, "--prefetch-factor"),
    ({"prefetch_factor": 10**6}, "--prefetch-factor"),
    ({"throttle": "99999999999999999999TB/s"}, "throttle"),
    ({"throttle": "9" * 60 + "iops"}, "throttle"),
    ({"throttle": ""}, "--throttle"),
    ({"storage": ""}, "--storage"),
    ({"data": ""}, "--data"),
    ({"data": "   "}, "--data"),
    ({"out": ""}, "--out"),
    ({"data": "a\0b"}, "NUL"),
    ({"mode": "eval"}, "--mode"),
    ({"cache": "hot"}, "--cache"),
    ({"workers": 2.5}, "--workers"),
    ({"sample_interval_s": float("nan")}, "interval"),
    ({"batch_size": 100_000, "image_size": 8192}, "RAM"),  # 80 TB per batch: refused by the RAM check
])
def test_out_of_bounds_options_are_one_line_user_errors(kw, word):
    assert word in _one_line_user_error(RunConfig(**kw).validate)


def test_bounds_admit_their_edges():
    RunConfig().validate()
    RunConfig(seed=0).validate()
    RunConfig(seed=MAX_SEED).validate()
    RunConfig(workers=0, image_size=16, warmup=0, prefetch_factor=1, batch_size=1).validate()
    RunConfig(workers=max_workers(), batch_size=1, image_size=16).validate()
    RunConfig(throttle="1TB/s,10000kiops").validate()
    RunConfig(storage="hdd", data="some/dir").validate()


def test_throttle_never_reaches_the_kernel_unbounded():
    assert parse_throttle("1TB/s").bytes_per_s == MAX_BYTES_PER_S
    for text in ("1.01TB/s", "2TiB/s", "10000001iops", "99999999999999999999TB/s"):
        _one_line_user_error(parse_throttle, text)
    with pytest.raises(ValueError):
        ThrottleSpec(MAX_BYTES_PER_S + 1, None, "x")  # even a spec built in code cannot carry it
    with pytest.raises(ValueError):
        ThrottleSpec(None, True, "x")
    _one_line_user_error(resolve_storage, "", None)
    _one_line_user_error(resolve_storage, None, " ")
    assert resolve_storage(None, None) is None  # not given at all: no throttle


# -- output folders ------------------------------------------------------------------------------------------------

def test_concurrent_runs_get_distinct_folders_threads(tmp_path):
    base = tmp_path / "reports"
    barrier = threading.Barrier(12)
    got: list[Path] = []

    def make() -> None:
        barrier.wait()
        got.append(outdir.create_run_dir(base, "20250101-120000_tiny_w2_b32"))

    threads = [threading.Thread(target=make) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(got) == 12 and len(set(got)) == 12
    assert all(p.is_dir() and p.parent == base for p in got)
    assert {p.name for p in got} == {"20250101-120000_tiny_w2_b32"} | {f"20250101-120000_tiny_w2_b32-{k}"
                                                                       for k in range(2, 13)}


def _make_in_process(base: str, barrier, out) -> None:
    barrier.wait()
    out.put(str(outdir.create_run_dir(base, "same")))


def test_concurrent_runs_get_distinct_folders_processes(tmp_path):
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_make_in_process, args=(str(tmp_path / "r"), barrier, out)) for _ in range(4)]
    for p in procs:
        p.start()
    paths = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(set(paths)) == 4 and all(os.path.isdir(p) for p in paths)


def test_run_dir_name_cannot_escape_its_base(tmp_path):
    p = outdir.create_run_dir(tmp_path, "../../etc")
    assert p.parent == tmp_path and p.is_dir()
    assert outdir.create_run_dir(tmp_path, "..").parent == tmp_path


def test_out_that_is_a_file_is_a_user_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    assert "not a folder" in _one_line_user_error(outdir.prepare_out, f)
    assert "not a folder" in _one_line_user_error(outdir.create_run_dir, f, "run")
    assert "empty" in _one_line_user_error(outdir.prepare_out, "")
    assert f.read_text() == "x"


def test_folders_of_a_run_that_fails_on_bad_input_are_removed(tmp_path):
    base = tmp_path / "a" / "b"
    out = outdir.create_run_dir(base, "run")
    with pytest.raises(UserError):
        with outdir.removed_if_unused(out):
            raise UserError("--data x: no images found")
    assert not (tmp_path / "a").exists()  # the run made a/, a/b/ and a/b/run: all gone, nothing else touched
    assert tmp_path.is_dir()


def test_folders_with_a_record_or_given_by_the_user_stay(tmp_path):
    out = outdir.create_run_dir(tmp_path / "r", "run")
    with pytest.raises(KeyboardInterrupt):
        with outdir.removed_if_unused(out):
            (out / "run.json").write_text("{}")  # a partial record was written before the interrupt
            raise KeyboardInterrupt
    assert (out / "run.json").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    assert outdir.prepare_out(mine) == mine
    with pytest.raises(UserError):
        with outdir.removed_if_unused(mine):
            raise UserError("bad")
    assert mine.is_dir()  # it existed before the run: not ours to remove
    ok = outdir.create_run_dir(tmp_path / "r", "done")
    with outdir.removed_if_unused(ok):
        pass
    assert not outdir.discard_if_empty(ok) and ok.is_dir()  # a finished run's folder is kept even if empty


# -- signals -------------------------------------------------------------------------------------------------------

def _py(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


_SIGNAL_CHILD = """
import os, signal, sys, time
from profiler import signals
signals.install()
sig = getattr(signal, sys.argv[1])
try:
    os.kill(os.getpid(), sig)
    time.sleep(10)
    print("not interrupted")
except KeyboardInterrupt as e:  # the path every run already has for Ctrl-C
    print(type(e).__name__, signals.signal_number(e))
    sys.exit(signals.exit_status(e))
"""


@pytest.mark.parametrize("name, status, kind", [
    ("SIGTERM", 143, "Terminated"), ("SIGHUP", 129, "Terminated"), ("SIGINT", 130, "KeyboardInterrupt")])
def test_termination_signals_take_the_keyboard_interrupt_path(name, status, kind):
    r = _py(_SIGNAL_CHILD, name)
    assert r.stdout.split() == [kind, str(int(getattr(signal, name)))], r.stderr
    assert r.returncode == status
    assert "Traceback" not in r.stderr


_SECOND_SIGNAL_CHILD = """
import os, signal, sys, time
from profiler import signals
signals.install()
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(10)
except KeyboardInterrupt as e:
    first = e
    os.kill(os.getpid(), signal.SIGTERM)  # again, while the loader shuts down: remembered, not raised
    time.sleep(0.05)
    print("teardown done", flush=True)
    with signals.deferred():  # writing the record
        os.kill(os.getpid(), signal.SIGINT)  # a third would force; this is the third, but held: see below
        time.sleep(0.05)
        print("record written", flush=True)
    sys.exit(signals.exit_status(first))
"""


def test_a_second_signal_does_not_cut_the_saving_short():
    code = _SECOND_SIGNAL_CHILD.replace("os.kill(os.getpid(), signal.SIGINT)  # a third", "pass  # a third")
    r = _py(code)
    assert r.stdout.split("\n")[:2] == ["teardown done", "record written"], r.stderr
    assert r.returncode == 130
    assert "still saving" in r.stderr and "Traceback" not in r.stderr


def test_the_third_signal_forces_the_exit():
    r = _py(_SECOND_SIGNAL_CHILD)
    assert "teardown done" in r.stdout and "record written" not in r.stdout
    assert r.returncode != 0


_SWALLOWED_CHILD = """
import os, signal, sys, time
from profiler import signals
signals.install()
try:  # what C code calling back into Python can do (torch's start-up clears a failed numpy import): drop it
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(10)
except KeyboardInterrupt:
    pass
print("swallowed", flush=True)
try:
    os.kill(os.getpid(), signal.SIGTERM)  # nobody is saving anything: this one must not be held as "still saving"
    time.sleep(10)
    print("held")
except KeyboardInterrupt as e:
    print("raised again", signals.signal_number(e))
    sys.exit(signals.exit_status(e))
"""


def test_an_interrupt_that_nobody_handled_does_not_make_the_next_one_held():
    r = _py(_SWALLOWED_CHILD, timeout=30)
    assert r.stdout.split("\n")[:2] == ["swallowed", "raised again 15"], r.stderr
    assert r.returncode == 143 and "still saving" not in r.stderr


_JOB_ENDED_CHILD = """
import os, signal, sys, time
from profiler import signals
signals.install()
try:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(10)
except KeyboardInterrupt as e:
    signals.job_ended()  # the job is over (as run_session says in its finally): the record is saved after this
    status = signals.exit_status(e)
os.kill(os.getpid(), signal.SIGINT)  # outside any except block now, but the run is stopping: held
time.sleep(0.05)
print("record written", flush=True)
sys.exit(status)
"""


def test_after_the_job_ended_a_second_signal_is_held_outside_the_except_block():
    r = _py(_JOB_ENDED_CHILD, timeout=30)
    assert r.stdout.strip() == "record written", r.stderr
    assert r.returncode == 143 and "still saving" in r.stderr


_HOLDING_CHILD = """
import os, signal, sys, time
from profiler import signals
signals.install()
try:
    with signals.holding():  # e.g. import torch: a signal in there would be cleared by C code
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.05)
        print("import finished", flush=True)
except KeyboardInterrupt as e:
    print("raised after", signals.signal_number(e))
    sys.exit(signals.exit_status(e))
"""


def test_holding_raises_the_signal_after_the_block():
    r = _py(_HOLDING_CHILD, timeout=30)
    assert r.stdout.split("\n")[:2] == ["import finished", f"raised after {int(signal.SIGHUP)}"], r.stderr
    assert r.returncode == 129


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (its SigCgt mask in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(int(ln.split()[1], 16) for ln in status.splitlines() if ln.startswith("SigCgt:"))
    return bool(mask >> (signum - 1) & 1)


@pytest.mark.parametrize("delay", [0.0, 0.5, 1.2, 2.6])
def test_sigterm_during_start_up_is_one_line_at_any_moment(tmp_path, delay):
    """From the first instruction to the first measured step a SIGTERM ends the run with 143 and one line (a record
    only if steps were measured): never a traceback, never a run that goes on (torch's import once swallowed it).
    ``delay`` counts from the moment the process first catches SIGTERM (our first instruction): before it, Python
    itself is still starting and the default disposition ends it (-15), which no code of ours can change; on a loaded
    machine that moment came later than a fixed 0.4 s after the start (CI: -15)."""
    p = subprocess.Popen([sys.executable, "-m", "profiler", "run", "--model", "none", "--steps", "3000",
                          "--no-plots", "--out", str(tmp_path / "out")], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 60
    while not _catches(p.pid, signal.SIGTERM):
        assert p.poll() is None and time.monotonic() < deadline, "the run never installed its SIGTERM handler"
        time.sleep(0.002)
    time.sleep(delay)
    p.send_signal(signal.SIGTERM)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail(f"SIGTERM after {delay} s was lost: the run went on")
    assert p.returncode == 143, err
    assert "Traceback" not in err
    assert "interrupted" in err or "PARTIAL RUN" in out, (out, err)


_DEFERRED_FIRST_CHILD = """
import os, signal, sys, time
from profiler import signals
signals.install()
try:
    with signals.deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        print("section finished", flush=True)
    print("not raised")
except KeyboardInterrupt as e:
    print("raised after", signals.signal_number(e))
    sys.exit(signals.exit_status())
"""


def test_a_signal_inside_a_deferred_section_is_raised_after_it():
    r = _py(_DEFERRED_FIRST_CHILD)
    assert r.stdout.split("\n")[:2] == ["section finished", "raised after 15"], r.stderr
    assert r.returncode == 143


def test_ignored_signals_stay_ignored():
    r = _py("import signal\nfrom profiler import signals\nsignal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
            "taken = signals.install()\nprint(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN, sorted(taken))")
    assert r.stdout.split() == ["True", f"[{int(signal.SIGINT)},", f"{int(signal.SIGTERM)}]"], r.stderr


def test_deferred_without_install_redelivers_to_the_previous_handler():
    got = []
    prev = signal.signal(signal.SIGTERM, lambda n, f: got.append(n))
    try:
        with signals.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert got == []
        assert got == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, prev)


def test_exit_status_convention():
    assert signals.exit_status(signals.Terminated(signal.SIGTERM)) == 143
    assert signals.exit_status(signals.Terminated(signal.SIGHUP)) == 129
    assert signals.exit_status(KeyboardInterrupt()) == 130
    assert signals.exit_status(signal.SIGTERM) == 143
    assert isinstance(signals.Terminated(signal.SIGTERM), KeyboardInterrupt)
    assert signals.describe(signal.SIGINT) == "Ctrl-C" and signals.describe(signal.SIGTERM) == "SIGTERM"


# -- signals with the kernel throttle ------------------------------------------------------------------------------

def _kernel_maj_min(path) -> str:
    from profiler.storage.device import describe_storage
    from profiler.storage.throttle import KernelThrottle

    info = describe_storage(path)
    ok, why = KernelThrottle.available(ThrottleSpec(2_000_000, None, "t"), info.maj_min)
    if not ok:
        pytest.skip(why)
    return info.maj_min


_THROTTLED_CHILD = """
import os, signal, sys, time
from profiler import signals
from profiler.storage.throttle import KernelThrottle, ThrottleSpec
mode = sys.argv[2]
if mode == "cli":
    signals.install()
try:
    if mode == "atexit":
        kt = KernelThrottle(ThrottleSpec(2_000_000, None, "t"), sys.argv[1]).__enter__()  # never left
        print(kt.cgroup_dir, flush=True)
        sys.exit(0)
    with KernelThrottle(ThrottleSpec(2_000_000, None, "t"), sys.argv[1]) as kt:
        print(kt.cgroup_dir, flush=True)
        os.kill(os.getpid(), getattr(signal, sys.argv[3]))
        time.sleep(10)
except KeyboardInterrupt as e:
    print("restored" if signal.getsignal(signal.SIGTERM) is (signals._handler if mode == "cli" else signal.SIG_DFL)
          else "not restored", flush=True)
    sys.exit(signals.exit_status(e))
"""


@pytest.mark.parametrize("mode, sig, status", [
    ("cli", "SIGTERM", 143), ("cli", "SIGHUP", 129), ("library", "SIGTERM", 143), ("cli", "SIGINT", 130),
    ("atexit", "", 0)])
def test_kernel_throttle_cgroup_is_removed_on_signals(tmp_path, mode, sig, status):
    maj_min = _kernel_maj_min(tmp_path)
    r = _py(_THROTTLED_CHILD, maj_min, mode, sig)
    lines = r.stdout.split()
    cg = lines[0] if lines else ""
    assert cg.startswith("/") and "profiler-" in cg, r.stderr
    assert not os.path.exists(cg), f"cgroup {cg} left behind"
    assert r.returncode == status, r.stderr
    if mode != "atexit":
        assert lines[1] == "restored"


# -- secrets in what the user typed ---------------------------------------------------------------------------------

def test_argv_secrets_are_hidden_and_the_rest_kept():
    from profiler.redact import HIDDEN, redact_argv, redact_text

    argv = ["--epochs", "3", "--api-key", "abc", "--token=xyz", "--password", "-", "--data",
            "https://user:pw@host/x", "sk-" + "a" * 30, "AKIA" + "B" * 16, "--run", "resnet50-exp7",
            "/d/" + "ab12" * 10]
    out = redact_argv(argv)
    assert out == ["--epochs", "3", "--api-key", HIDDEN, f"--token={HIDDEN}", "--password", "-", "--data",
                   f"https://user:{HIDDEN}@host/x", HIDDEN, HIDDEN, "--run", "resnet50-exp7", "/d/" + "ab12" * 10]
    assert redact_text("plain words and 0.1 and /a/b/c.jpg") == "plain words and 0.1 and /a/b/c.jpg"


def test_a_script_run_records_its_argv_redacted(tmp_path):
    """Through the whole run: the script gets its secret (its own argv is untouched), the record and report do not."""
    script = tmp_path / "job.py"
    script.write_text("import sys, torch\nfrom torch.utils.data import DataLoader\n"
                      "assert sys.argv[1:] == ['--api-key', 'S3CRETVALUE'], sys.argv\n"
                      "for _ in DataLoader(list(range(64)), batch_size=4):\n    pass\n")
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "profiler", "run", "--steps", "5", "--warmup", "1", "--out", str(out),
                        str(script), "--api-key", "S3CRETVALUE"], capture_output=True, text=True, timeout=300,
                       cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    assert "S3CRETVALUE" not in (out / "run.json").read_text()
    assert "S3CRETVALUE" not in (out / "report.html").read_text() and "S3CRETVALUE" not in r.stdout



_SLOW_WORKERS_JOB = """
import time, torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):  # 10 s per sample: a worker is almost always inside __getitem__, deaf to its parent
    def __len__(self):
        return 10_000
    def __getitem__(self, i):
        time.sleep(10.0 if i >= 4 else 0.0)
        return torch.zeros(4)

for _ in DataLoader(Slow(), batch_size=2, num_workers=2):
    pass
"""


def _gone(procs: list, timeout: float) -> list:
    """The processes of ``procs`` still running (not exited, not a zombie) after ``timeout`` seconds."""
    import psutil

    deadline = time.monotonic() + timeout
    alive = list(procs)
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        still = []
        for w in alive:
            try:
                if w.status() != psutil.STATUS_ZOMBIE:
                    still.append(w)
            except psutil.Error:
                pass
        alive = still
    return alive


def test_workers_die_with_a_killed_main_process(tmp_path):
    """SIGKILL (or the OOM killer) on the profiled main process: its forked workers go with it (PR_SET_PDEATHSIG),
    not after the sample they are busy with and torch's watchdog's next look (seconds later), working meanwhile."""
    import psutil

    script = tmp_path / "slow.py"
    script.write_text(_SLOW_WORKERS_JOB)
    p = subprocess.Popen([sys.executable, "-m", "profiler", "run", "--steps", "1000", "--warmup", "1",
                          "--no-plots", "--out", str(tmp_path / "out"), str(script)], cwd=REPO,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    main = psutil.Process(p.pid)
    workers: list[psutil.Process] = []
    alive: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while len(workers) < 2 and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.2)
            workers = main.children()  # torch names them pt_data_worker
        assert len(workers) >= 2, "the run never started its workers"
        time.sleep(3.0)  # the workers are inside a 10 s __getitem__
        p.kill()
        p.wait(timeout=30)
        alive = _gone(workers, 1.0)
    finally:
        for proc in [main, *workers]:
            try:
                proc.kill()
            except psutil.Error:
                pass
    assert not alive, f"{len(alive)} worker(s) outlived the killed main process by 1 s"
