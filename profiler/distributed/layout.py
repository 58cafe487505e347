"""One run folder for all ranks: ``<folder>/rank<k>/run.json``, agreed without a side channel beyond torchrun's own.

How the ranks agree on ``<folder>``:

1. ``--out DIR``: the folder is DIR on every rank (deterministic; creating it is race-free, see outdir).
2. Default out, torchrun's agent store reachable (TORCHELASTIC_USE_AGENT_STORE: torchrun itself serves a TCPStore at
   MASTER_ADDR:MASTER_PORT, the one ``init_process_group`` uses): rank 0 creates the usual unique, time-stamped folder
   (its clock alone) and publishes the path under a key of this run id and restart; the other ranks read it.
3. Otherwise, from TORCHELASTIC_RUN_ID: ``reports/torchrun-<run id>[-restart<n>]``. Not the default route, because
   torchrun's default run id is the literal ``none`` (two runs would share a folder).

Never from each rank's own clock: two ranks started across a second boundary would pick two folders.

Each rank writes ``rank<k>/rank.json`` (pid, host, boot id) as soon as it has its folder; rank 0 uses it to tell a
rank still working (wait for its record) from one that died (stop waiting, name it missing).
"""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from .. import outdir
from ..errors import UserError
from ..fsutil import atomic_write_bytes
from ..thresholds import RANK_WAIT_S
from .env import RankEnv, boot_id, hostname

RANK_DIR_RE = re.compile(r"^rank(\d+)$")
STORE_KEY = "profiler/run_folder"


def rank_dir(folder: Path, rank: int) -> Path:
    return Path(folder) / f"rank{rank}"


def _store(denv: RankEnv, timeout_s: float) -> Any | None:
    """torchrun's agent TCPStore as a client, or None where there is none to reach."""
    from .store import connect

    return connect(denv, timeout_s, prefix=STORE_KEY)


#: The run folder's owner: the job whose ranks write there (see ``claim_for_job``).
JOB_FILE = ".profiler-job"
#: Tries of ``claim_for_job`` while a sibling rank takes the folder over (it holds it exclusively for an instant).
CLAIM_TRIES = 50
CLAIM_PAUSE_S = 0.05
# Run folders this process holds (the descriptor keeps the shared lock until the process ends).
_held: dict[Path, int] = {}


def job_identity(denv: RankEnv) -> str:
    """What every rank of one torchrun job shares and two jobs running at once do not: the rendezvous address (two
    jobs on one host cannot listen on one port) and the run id. The restart count is left out: a restarted job is
    the same job, and its earlier ranks are gone."""
    return f"{denv.master_addr}:{denv.master_port}/{denv.run_id}"


def _read_owner(folder: Path) -> str | None:
    try:
        return (folder / JOB_FILE).read_text().strip() or None
    except OSError:
        return None


def claim_for_job(folder: Path, denv: RankEnv) -> Path:
    """Hold ``folder`` for this torchrun job: every rank of the job shares it, a second job is refused (UserError, one
    line) while a rank of the first is still running.

    Why: two torchrun jobs given one --out (different ports) all exited 0 and left a mixed folder (rank0/rank.json
    from one job, rank0/run.json from the other). ``outdir.claim``'s exclusive lock cannot serve: the ranks of one
    job share the folder. So each rank takes a shared ``flock`` on the folder (the kernel drops it when the rank ends,
    however it ends) and the folder names its job in ``.profiler-job``. A rank finding another job named there takes
    the folder over only if it can lock it exclusively for an instant (no rank of that job is left running); a stale
    name from a finished job is replaced, a live one is refused. Where flock is not supported (some network mounts)
    the folder is used unlocked, as ``outdir.claim`` does."""
    import fcntl

    folder = Path(folder)
    if folder in _held:
        return folder
    mine = job_identity(denv)
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise UserError(f"--out {folder}: cannot open it ({e.strerror or e})") from None
    try:
        for _ in range(CLAIM_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:  # a rank taking it over holds it exclusively for an instant
                time.sleep(CLAIM_PAUSE_S)
                continue
            owner = _read_owner(folder)
            if owner is None:
                try:  # the first rank of the first job names it; O_EXCL: one of two jobs arriving together wins
                    fd2 = os.open(folder / JOB_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                except FileExistsError:
                    continue
                with os.fdopen(fd2, "w") as f:
                    f.write(mine + "\n")
                owner = mine
            if owner == mine:
                _held[folder] = fd
                return folder
            fcntl.flock(fd, fcntl.LOCK_UN)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # held by ranks: of the other job, or of ours that took it over meanwhile
                if _read_owner(folder) == mine:
                    continue
                raise UserError(f"--out {folder}: another torchrun job ({owner}) is writing there now; wait for it "
                                "or give this job another --out") from None
            atomic_write_bytes(folder / JOB_FILE, (mine + "\n").encode())  # the other job's ranks are all gone
            fcntl.flock(fd, fcntl.LOCK_SH)
            _held[folder] = fd
            return folder
    except OSError:
        pass  # a filesystem without flock: run unlocked rather than not at all
    except BaseException:
        os.close(fd)
        raise
    if folder not in _held:
        os.close(fd)
    return folder


def agree_run_folder(denv: RankEnv, out: str | None, base: str, name: str, timeout_s: float = RANK_WAIT_S) -> Path:
    """The run folder every rank of this job uses (created and held for this job: ``claim_for_job``); see the module
    doc for how they agree."""
    return claim_for_job(_agree_run_folder(denv, out, base, name, timeout_s), denv)


def _agree_run_folder(denv: RankEnv, out: str | None, base: str, name: str, timeout_s: float) -> Path:
    if out is not None:
        return outdir.prepare_out(out)
    store = _store(denv, timeout_s)
    if store is not None:
        if denv.is_main:
            folder = outdir.create_run_dir(base, f"{name}_ddp{denv.world_size}")
            store.set("path", str(folder.resolve()))
            return folder
        try:
            path = store.get("path").decode()
        except (RuntimeError, OSError) as e:  # rank 0 never published (it failed first): a timeout
            raise UserError(f"rank {denv.rank}: rank 0 did not name the run folder within {timeout_s:.0f} s "
                            f"({str(e).splitlines()[0] if str(e) else type(e).__name__}); pass --out DIR") from None
        return outdir.prepare_out(path)
    if denv.run_id and denv.run_id != "none":
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", denv.run_id)
        suffix = f"-restart{denv.restart_count}" if denv.restart_count else ""
        return outdir.prepare_out(Path(base) / f"torchrun-{safe}{suffix}")
    raise UserError("under torchrun with the default run id and without torchrun's store, the ranks cannot agree on "
                    "an output folder: pass --out DIR (or torchrun --rdzv-id ID)")


def write_marker(folder: Path, rank: int) -> Path:
    """``rank<k>/rank.json``: this rank exists, and where (so rank 0 can tell a dead rank from a slow one)."""
    d = outdir.prepare_out(rank_dir(folder, rank))
    info = {"rank": rank, "pid": os.getpid(), "hostname": hostname(), "boot_id": boot_id()}
    atomic_write_bytes(d / "rank.json", json.dumps(info).encode())
    return d


def read_marker(folder: Path, rank: int) -> dict | None:
    try:
        d = json.loads((rank_dir(folder, rank) / "rank.json").read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def process_alive(marker: dict) -> bool | None:
    """Is the marker's process still running? None: it is on another machine (or boot), we cannot tell."""
    if marker.get("hostname") != hostname() or marker.get("boot_id") != boot_id() or boot_id() is None:
        return None
    pid = marker.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has ended; torchrun reaps it later


def wait_for_ranks(folder: Path, world_size: int, me: int, timeout_s: float = RANK_WAIT_S,
                   poll_s: float = 0.2) -> dict[int, str]:
    """Wait (no barrier: files only) until every other rank has written run.json, died, or ``timeout_s`` passed.

    Returns {rank: "record" | "died" | "timed out" | "never started"}.
    """
    state: dict[int, str] = {}
    deadline = time.monotonic() + timeout_s
    pending = [r for r in range(world_size) if r != me]
    state[me] = "record"
    while pending:
        for r in list(pending):
            if (rank_dir(folder, r) / "run.json").exists():
                state[r] = "record"
                pending.remove(r)
                continue
            m = read_marker(folder, r)
            if m is not None and process_alive(m) is False:
                time.sleep(poll_s)  # it may have written its record just before it ended
                state[r] = "record" if (rank_dir(folder, r) / "run.json").exists() else "died"
                pending.remove(r)
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    for r in pending:
        state[r] = "timed out" if read_marker(folder, r) is not None else "never started"
    return state


def find_ranks(folder: Path) -> dict[int, Path]:
    """rank -> its rank folder, for every ``rank<k>`` sub-folder of ``folder``."""
    out: dict[int, Path] = {}
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return out
    for p in entries:
        m = RANK_DIR_RE.match(p.name)
        if m and p.is_dir():
            out[int(m.group(1))] = p
    return dict(sorted(out.items()))


def is_ranks_folder(path: Path) -> bool:
    p = Path(path)
    return p.is_dir() and not (p / "run.json").exists() and bool(find_ranks(p))
