"""The ranks' summaries to rank 0 through torchrun's own store: no shared filesystem, no side channel.

Which channel, and when. The job's process group may be gone (or broken by a dead rank) by the time a rank's window
closes and its record is written, so collectives are no option at the end. torchrun's agent store is: the elastic
agent of node 0 serves a TCPStore at MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True; with the c10d
rendezvous, the store torchrun shares with ``init_process_group``), and it lives as long as that agent, which waits
for rank 0, which waits here. Public torch API only (TCPStore as a client, PrefixStore): nothing private.

Keys live under ``profiler/v1/<run id>/restart<n>/`` (PrefixStore), apart from the job's own keys and from a restarted
attempt's. All values are small; the per-rank summary is bounded (profiler/distributed/summary.py, ~20 KB).

- ``started``: every rank appends ``<rank>,`` when it has its folder (rank 0 tells a silent rank from one that
  never started); ``rank0``: rank 0's boot id and host (so other hosts know whether their clock is rank 0's).
- ``closing``: a rank appends ``<rank>,`` when its window closed (its summary follows once its record and reports
  are written): rank 0 waits for such a rank up to RANK_WAIT_S rather than the scaled wait.
- ``summary/<rank>`` then ``reported`` (``<rank>,`` appended): a rank's summary, at the end of its run.
- ``clock/queue``, ``clock/<rank>/ping<i>``, ``clock/<rank>/pong<i>``, ``clock/<rank>/result``: one rank per host
  other than rank 0's measures its host's offset to rank 0's clock (profiler/distributed/clocks.py); rank 0 answers
  while it waits for the summaries. That rank joins ``clock/queue`` before it appends to ``reported``, and rank 0
  reads the queue after the reports, so the last report's host is never left unserved.

Rank 0's wait is bounded and scaled by what the others reported (thresholds: RANK_WAIT_*): until every rank has
reported, or a local rank's process has died, or the deadline: RANK_WAIT_S while no other rank has reported or while
every rank still missing has said ``closing``; else (latest report) + max(RANK_WAIT_MIN_S, RANK_WAIT_SPREAD_FACTOR x
the spread of the reports so far).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..thresholds import CLOCK_SYNC_ROUNDS, RANK_WAIT_MIN_S, RANK_WAIT_S, RANK_WAIT_SPREAD_FACTOR
from .clocks import Round, offset_from_rounds
from .env import RankEnv, boot_id, hostname
from .summary import RankSummary

PREFIX = "profiler/v1"
FORCE_SYNC_ENV = "PROFILER_CLOCK_SYNC"
POLL_S = 0.05  # rank 0's poll of the ``reported`` key: one small get per poll
ROUND_POLL_S = 0.0002  # a clock round's poll: its delay bounds the offset's uncertainty, so poll tightly
ROUND_TIMEOUT_S = 2.0  # one clock round, once rank 0 serves this host
FIRST_PING_TIMEOUT_S = 10.0  # rank 0 waits this long for a queued host's first ping (it follows that host's publish)


def connect(denv: RankEnv, timeout_s: float = RANK_WAIT_S, prefix: str = PREFIX) -> Any | None:
    """torchrun's agent store as a client under ``prefix`` for this run (and restart), or None where there is none
    to reach. One home for the connection: the summaries use it, and the run folder's name is agreed through it."""
    if not (denv.agent_store and denv.master_addr and denv.master_port):
        return None
    from torch.distributed import PrefixStore, TCPStore

    try:
        tcp = TCPStore(denv.master_addr, denv.master_port, is_master=False,
                       timeout=_dt.timedelta(seconds=timeout_s))
    except (RuntimeError, OSError):
        return None
    return PrefixStore(f"{prefix}/{denv.run_id}/restart{denv.restart_count}", tcp)


def _ranks(store: Any, key: str) -> list[int]:
    if not store.check([key]):
        return []
    return [int(x) for x in store.get(key).decode().split(",") if x.strip().isdigit()]


def _poll(store: Any, key: str, timeout_s: float, every_s: float) -> bool:
    """Wait for ``key`` by polling ``check`` (the store's own blocking wait logs a warning on every timeout)."""
    deadline = time.monotonic() + timeout_s
    while not store.check([key]):
        if time.monotonic() >= deadline:
            return False
        time.sleep(every_s)
    return True


def announce(store: Any, denv: RankEnv) -> None:
    """At the start: this rank exists; rank 0 also says which clock it is on."""
    if denv.is_main:
        store.set("rank0", json.dumps({"boot_id": boot_id(), "hostname": hostname()}))
    store.append("started", f"{denv.rank},")


def closing(store: Any, denv: RankEnv) -> None:
    store.append("closing", f"{denv.rank},")


def publish(store: Any, denv: RankEnv, summary: Mapping[str, Any]) -> None:
    store.set(f"summary/{denv.rank}", json.dumps(summary, separators=(",", ":")))
    store.append("reported", f"{denv.rank},")


def needs_clock_sync(store: Any, denv: RankEnv) -> bool:
    """One rank per host (LOCAL_RANK 0) on a host whose clock is not rank 0's; PROFILER_CLOCK_SYNC=always: on rank
    0's machine too (nodes simulated on one machine: the measured offset must then be 0 within its uncertainty)."""
    if denv.is_main or denv.local_rank != 0 or not store.check(["rank0"]):
        return False
    if os.environ.get(FORCE_SYNC_ENV, "").lower() == "always":
        return True
    ref = json.loads(store.get("rank0").decode())
    return ref.get("boot_id") is None or ref.get("boot_id") != boot_id()


def request_clock_sync(store: Any, denv: RankEnv) -> None:
    """Queue this rank for clock rounds *before* it publishes its summary: rank 0 reads the queue after the reports,
    so a host whose report is the last one is still served (queued after publishing, it could find rank 0's wait
    already over)."""
    store.append("clock/queue", f"{denv.rank},")


def sync_clock(store: Any, denv: RankEnv, first_timeout_s: float = RANK_WAIT_S,
               rounds: int = CLOCK_SYNC_ROUNDS) -> dict[str, Any] | None:
    """Measure this host's offset to rank 0's clock (rank 0 answers while it waits for the summaries; the rank was
    queued by :func:`request_clock_sync`); the result is also left in the store for rank 0. None when rank 0 did not
    answer in time."""
    me = denv.rank
    got: list[Round] = []
    for i in range(rounds):
        t1 = time.perf_counter_ns()
        store.set(f"clock/{me}/ping{i}", str(t1))
        if not _poll(store, f"clock/{me}/pong{i}", first_timeout_s if i == 0 else ROUND_TIMEOUT_S, ROUND_POLL_S):
            break
        t4 = time.perf_counter_ns()
        got.append((t1, int(store.get(f"clock/{me}/pong{i}").decode()), t4))
    res = offset_from_rounds(got)
    if res is not None:
        res["boot_id"] = boot_id()
        res["hostname"] = hostname()
    store.set(f"clock/{me}/result", json.dumps(res))
    return res


def _serve_clock(store: Any, rank: int, rounds: int = CLOCK_SYNC_ROUNDS) -> None:
    for i in range(rounds):
        if not _poll(store, f"clock/{rank}/ping{i}", FIRST_PING_TIMEOUT_S if i == 0 else ROUND_TIMEOUT_S,
                     ROUND_POLL_S):
            return
        store.set(f"clock/{rank}/pong{i}", str(time.perf_counter_ns()))


def _reject(name: str) -> Any:
    raise ValueError(f"{name} in a rank's summary")


@dataclass
class Collected:
    """What rank 0's wait got: the summaries, each rank's state, the hosts' clock offsets, and how long it took."""
    summaries: dict[int, RankSummary] = field(default_factory=dict)
    states: dict[int, str] = field(default_factory=dict)
    clock_sync: dict[str, dict[str, Any]] = field(default_factory=dict)
    waited_s: float = 0.0
    last_report_to_done_s: float | None = None


def collect(store: Any, denv: RankEnv, local_dead: Any = None, timeout_s: float = RANK_WAIT_S,
            min_wait_s: float = RANK_WAIT_MIN_S, spread_factor: float = RANK_WAIT_SPREAD_FACTOR) -> Collected:
    """Rank 0: wait for the other ranks' summaries (bounded, scaled; see the module doc), answering clock rounds
    meanwhile. ``local_dead(rank) -> bool``: whether a rank on this node is known to have died (its marker's pid)."""
    t_start = time.monotonic()
    world, me = denv.world_size, denv.rank
    others = set(range(world)) - {me}
    first: float | None = None
    latest = t_start
    seen: set[int] = set()
    dead: set[int] = set()
    served: set[int] = set()
    while True:
        now = time.monotonic()
        new = set(_ranks(store, "reported")) - seen
        if new:
            first = t_start if first is None else first
            latest = now
            seen |= new
        for r in _ranks(store, "clock/queue"):
            if r not in served:
                served.add(r)
                _serve_clock(store, r)
        if local_dead is not None:
            dead |= {r for r in others - seen - dead if local_dead(r)}
        if others <= seen | dead:
            break
        pending = others - seen - dead
        if first is None or pending <= set(_ranks(store, "closing")):  # silent, or all still writing their reports
            deadline = t_start + timeout_s
        else:
            deadline = min(t_start + timeout_s, latest + max(min_wait_s, spread_factor * (latest - first)))
        if time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    out = Collected(waited_s=time.monotonic() - t_start)
    started = set(_ranks(store, "started"))
    keys = sorted(seen)
    values = store.multi_get([f"summary/{r}" for r in keys]) if keys else []
    for r, v in zip(keys, values):
        try:
            out.summaries[r] = json.loads(v.decode(), parse_constant=_reject)
        except ValueError:
            out.states[r] = "unreadable summary"
    for r in sorted(others - seen):
        out.states[r] = ("died" if r in dead else "timed out (no summary)" if r in started
                         else "never started (not seen by the store)")
    for r in sorted(served):
        if _poll(store, f"clock/{r}/result", ROUND_TIMEOUT_S, POLL_S / 5):
            res = json.loads(store.get(f"clock/{r}/result").decode())
            if isinstance(res, dict) and res.get("boot_id"):
                out.clock_sync[str(res["boot_id"])] = res
    out.last_report_to_done_s = (time.monotonic() - latest) if seen else None
    return out


def read_local(rank_folder: Path) -> dict[str, Any] | None:
    """This rank's saved record (as written, analyzed) from its own folder, or None."""
    try:
        d = json.loads((Path(rank_folder) / "run.json").read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None
