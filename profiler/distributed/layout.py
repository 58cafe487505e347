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


def agree_run_folder(denv: RankEnv, out: str | None, base: str, name: str, timeout_s: float = RANK_WAIT_S) -> Path:
    """The run folder every rank of this job uses (created); see the module doc for how they agree."""
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
