"""Which rank of a torchrun job this process is, from the environment torchrun gives every worker.

torchrun (torch.distributed.run) sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
MASTER_PORT, TORCHELASTIC_RUN_ID and TORCHELASTIC_RESTART_COUNT. A process without them (or with WORLD_SIZE 1) is a
single process and profiles exactly as before.

Clocks: ``time.perf_counter_ns`` is CLOCK_MONOTONIC on Linux, shared by every process of one boot of one machine.
The boot id (/proc/sys/kernel/random/boot_id) is recorded per rank: equal boot ids mean the ranks' timelines are on
one clock and can be laid side by side in absolute time; different ones (several machines) are aligned by step
index only, and the merge says so.
"""
from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TypeVar

from ..errors import UserError

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


@dataclass(frozen=True)
class RankEnv:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    group_rank: int
    master_addr: str | None
    master_port: int | None
    run_id: str | None  # TORCHELASTIC_RUN_ID; torchrun's default is the literal "none"
    restart_count: int
    agent_store: bool  # TORCHELASTIC_USE_AGENT_STORE: torchrun's own TCPStore listens at MASTER_ADDR:MASTER_PORT

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def to_dict(self) -> dict:
        return asdict(self)


def _int(env: Mapping[str, str], key: str, default: int | None = None) -> int | None:
    v = env.get(key)
    if v is None or v == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise UserError(f"environment variable {key}={v!r} is not an integer (set by torchrun?)") from None


def detect(environ: Mapping[str, str] | None = None) -> RankEnv | None:
    """The rank this process is, or None for a single process (no torchrun variables, or WORLD_SIZE <= 1)."""
    env = os.environ if environ is None else environ
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return None
    if "TORCHELASTIC_RUN_ID" not in env and "MASTER_ADDR" not in env:
        return None
    world = _int(env, "WORLD_SIZE")
    rank = _int(env, "RANK")
    if world is None or rank is None or world <= 1:
        return None
    if not 0 <= rank < world:
        raise UserError(f"RANK={rank} is outside WORLD_SIZE={world}")
    return RankEnv(rank=rank, local_rank=_int(env, "LOCAL_RANK", rank) or 0, world_size=world,
                   local_world_size=_int(env, "LOCAL_WORLD_SIZE", world) or world,
                   group_rank=_int(env, "GROUP_RANK", 0) or 0, master_addr=env.get("MASTER_ADDR"),
                   master_port=_int(env, "MASTER_PORT"), run_id=env.get("TORCHELASTIC_RUN_ID"),
                   restart_count=_int(env, "TORCHELASTIC_RESTART_COUNT", 0) or 0,
                   agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true")


_Seam = TypeVar("_Seam", bound="RankSeam")


class RankSeam:
    """Base of the objects that do a torchrun rank's steps for a caller that must not test ``if distributed``
    itself (profiler/commands/ranks.py ``RankHook``, profiler/distributed/pipeline.py ``PipelineRanks``): this
    process's rank, or None outside torchrun, where every step does nothing."""

    def __init__(self, denv: RankEnv | None) -> None:
        self.denv = denv

    @classmethod
    def detect(cls: type[_Seam]) -> _Seam:
        """This process's part, from torchrun's environment variables (:func:`detect`)."""
        return cls(detect())

    @property
    def active(self) -> bool:
        return self.denv is not None


def boot_id() -> str | None:
    """This boot of this machine (None where /proc does not say): equal ids share CLOCK_MONOTONIC."""
    try:
        with open(BOOT_ID_PATH, encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def hostname() -> str:
    """Which machine, as a short hash of its host name: enough to tell ranks on one machine from ranks on several,
    without writing the name itself into records that people share."""
    import hashlib

    return "host-" + hashlib.sha1(socket.gethostname().encode()).hexdigest()[:10]


def rank_section(denv: RankEnv, t0_ns: int, backend: str | None, run_folder: str) -> dict:
    """The record's ``distributed`` section (raw): who this rank was and the clock its timeline is on.

    ``t0_monotonic_ns``: the run start every timeline time is relative to, in this machine's CLOCK_MONOTONIC.
    """
    return {"rank": denv.rank, "local_rank": denv.local_rank, "world_size": denv.world_size,
            "local_world_size": denv.local_world_size, "group_rank": denv.group_rank, "backend": backend,
            "hostname": hostname(), "boot_id": boot_id(), "pid": os.getpid(), "clock": "CLOCK_MONOTONIC",
            "t0_monotonic_ns": int(t0_ns), "run_id": denv.run_id, "restart_count": denv.restart_count,
            "run_folder": run_folder}
