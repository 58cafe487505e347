"""Find the parts of a running job from one PID, before sampling, and name them.

- The main process: the PID given, or its parent when the PID is a DataLoader worker.
- Its DataLoader workers: child processes (fork, spawn, or under the forkserver's server process) whose main thread
  runs torch's ``_worker_loop`` — told apart by their frames from other children (torch.compile's compile workers,
  a tokenizer pool, a logger), which are listed as such.
- The pin-memory thread: the main process's thread in ``_pin_memory_loop``.
- torchrun: the main process's parent is the elastic agent (``torchrun`` / ``torch.distributed.run``); its other
  Python children are the sibling ranks (their RANK / LOCAL_RANK read from their environment, nothing else kept).
- The GPUs the job uses: NVML's processes-on-device for the main process and its workers.

Each check that fails is one line (``AttachError``), raised before anything is sampled.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import UserError
from . import classify, procfs, pyspy

RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
_AGENTS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "torch/distributed/run.py")


class AttachError(UserError):
    """Attach cannot start on this PID; the message is the one line the user sees."""


@dataclass
class Proc:
    pid: int
    role: str  # "main" | "worker" | "child" (a child process that is not a DataLoader worker) | "forkserver"
    cmdline: list[str]
    start_method: str | None = None  # workers: "fork" | "spawn" | "forkserver"
    what: str | None = None  # other children: what their frames say they are
    threads: list[tuple[int, str]] = field(default_factory=list)  # (tid, name) from the dump
    found: str = "discovery"  # or "sampling": a worker first seen in the stacks (forked by a new epoch, or one
    # whose first look at discovery failed)


@dataclass
class Target:
    pid: int  # the main process
    given_pid: int
    cmdline: list[str]
    start_time_unix: float | None
    start_ticks: int | None
    python: str | None
    torch_loaded: bool | None
    processes: list[Proc]
    pin_memory_tid: int | None
    main_in_dataloader: bool  # the main thread's stack was inside a DataLoader call when first read
    ranks: dict[str, str]  # the main process's RANK etc. under torchrun (empty otherwise)
    siblings: list[dict[str, Any]]  # the other ranks: {pid, rank, local_rank}
    gpus: list[dict[str, Any]]
    gpu_absent: str | None

    @property
    def workers(self) -> list[Proc]:
        return [p for p in self.processes if p.role == "worker"]


def _is_python(pid: int) -> bool:
    argv = procfs.cmdline(pid)
    name = procfs.comm(pid)
    if argv and ("python" in argv[0].rsplit("/", 1)[-1] or "python" in name or name == "pt_data_worker"):
        return True
    # A forked worker runs the interpreter's own executable whatever its argv and name say (a job may set its
    # process title, and a child read mid-fork can show an empty command line for an instant).
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return False
    return exe.startswith("python")


def start_method(argv: list[str], parent_role: str) -> str:
    text = " ".join(argv)
    if parent_role == "forkserver":
        return "forkserver"
    if "multiprocessing.spawn" in text or "spawn_main" in text:
        return "spawn"
    return "fork"


def _child_kind(dumped: list[pyspy.ThreadDump]) -> str:
    files = " ".join(f.file for t in dumped for f in t.frames)
    if "torch/_inductor" in files:
        return "torch.compile worker"
    if "multiprocessing/forkserver.py" in files:
        return "forkserver"
    if "multiprocessing/pool.py" in files or "concurrent/futures/process.py" in files:
        return "process pool worker"
    return "other child process"


def _dump_safe(binary: str, pid: int) -> list[pyspy.ThreadDump] | None:
    try:
        return pyspy.dump(binary, pid)
    except pyspy.SamplerError:
        return None


def _is_worker(dumped: list[pyspy.ThreadDump]) -> bool:
    return any(classify.role(t.frames, t.name or "", True) == classify.WORKER for t in dumped)


#: Looks at a child before it is listed as "not Python" or "could not be read", and the pause between them. Why: a
#: child caught mid-fork or mid-exit shows an empty command line and no executable for an instant, and on a loaded
#: machine a non-blocking read of a worker can fail while it changes its stack; a second look 0.1 s later is settled.
#: A child that is gone by then was not part of the job's steady state and is not listed.
LOOKS = 3
LOOK_PAUSE_S = 0.1


def _look(binary: str, c: int, parent_role: str) -> Proc | None:
    """One child: a DataLoader worker, a forkserver, or another child with what it is; None when it has exited."""
    proc: Proc | None = None
    for attempt in range(LOOKS):
        if attempt:
            time.sleep(LOOK_PAUSE_S)
        if not procfs.exists(c):
            return None
        argv = procfs.cmdline(c)
        if not _is_python(c):
            proc = Proc(c, "child", argv, what="not Python")
            continue
        dumped = _dump_safe(binary, c)
        if dumped is None:
            proc = Proc(c, "child", argv, what="could not be read")
            continue
        if _is_worker(dumped):
            return Proc(c, "worker", argv, start_method(argv, parent_role),
                        threads=[(t.tid, t.name or "") for t in dumped])
        kind = _child_kind(dumped)
        return Proc(c, "forkserver" if kind == "forkserver" else "child", argv, what=kind)
    return proc if procfs.exists(c) else None


def watch(target: Target) -> tuple[list[tuple[int, int]], list[int]]:
    """The (pid, tid) pairs and pids whose kernel counters to read now: the main process, and every live child of it
    (and of its forkserver) not known to be something other than a worker. Only /proc is read (no py-spy): cheap
    enough to repeat while sampling, so workers forked after discovery get kernel clocks from when they appear."""
    others = {p.pid for p in target.processes if p.role == "child" and p.what not in ("not Python",
                                                                                       "could not be read")}
    servers = [p.pid for p in target.processes if p.role == "forkserver"]
    pids = [target.pid]
    for parent_pid in (target.pid, *servers):
        pids.extend(c for c in procfs.children(parent_pid) if c not in others and c not in servers and c not in pids)
    return [(p, t) for p in pids for t in procfs.threads(p)], pids


def find(pid: int, binary: str) -> Target:
    """The job's parts from ``pid``; AttachError (one line) when it cannot be attached to."""
    if pid <= 0 or not procfs.exists(pid):
        raise AttachError(f"no process with PID {pid}")
    if is_agent(pid):  # Python with torch loaded, but its DataLoaders are in its children, the ranks
        raise AttachError(f"process {pid} is torchrun's agent, not a rank: attach --rank-of {pid} samples every rank "
                          "(or give one rank's PID)")
    try:
        main_dump = pyspy.dump(binary, pid)
    except pyspy.SamplerError as e:
        raise AttachError(str(e)) from None
    given = pid
    if _is_worker(main_dump):  # a worker's PID: the job is its parent (through a forkserver, its grandparent)
        ppid = procfs.parent(pid) or pid
        if "forkserver" in " ".join(procfs.cmdline(ppid)):
            ppid = procfs.parent(ppid) or ppid
        pid = ppid
        try:
            main_dump = pyspy.dump(binary, pid)
        except pyspy.SamplerError as e:
            raise AttachError(str(e)) from None
    torch_loaded = procfs.maps_mention(pid, "libtorch")
    if torch_loaded is False:
        raise AttachError(f"process {pid} is Python but has not imported torch: no DataLoader to diagnose")
    procs = [Proc(pid, "main", procfs.cmdline(pid), threads=[(t.tid, t.name or "") for t in main_dump])]
    queue = [(c, "main") for c in procfs.children(pid)]
    while queue:
        c, parent_role = queue.pop(0)
        proc = _look(binary, c, parent_role)
        if proc is None:  # it exited while we looked (an old epoch's worker, a short-lived helper)
            continue
        procs.append(proc)
        if proc.role == "forkserver":
            queue.extend((g, "forkserver") for g in procfs.children(c))
    pin = next((t.tid for t in main_dump if classify.role(t.frames, t.name or "", False) == classify.PIN_MEMORY),
               None)
    main_thread = next((t for t in main_dump if t.tid == pid), main_dump[0] if main_dump else None)
    in_dl = main_thread is not None and classify.in_dataloader(main_thread.frames)
    ranks = procfs.environ_value(pid, RANK_VARS)
    siblings = _siblings(pid, ranks)
    gpus, gpu_absent = gpus_of([p.pid for p in procs if p.role in ("main", "worker")])
    exe = procs[0].cmdline[0] if procs[0].cmdline else None
    return Target(pid, given, procs[0].cmdline, procfs.start_time_unix(pid), procfs.start_ticks(pid), exe,
                  torch_loaded, procs, pin, in_dl, ranks, siblings, gpus, gpu_absent)


def agent_of(pid: int) -> int | None:
    """The torchrun agent that started ``pid``, if it was started by one."""
    ppid = procfs.parent(pid)
    if not ppid or ppid <= 1:
        return None
    text = " ".join(procfs.cmdline(ppid))
    return ppid if any(a in text for a in _AGENTS) else None


def _siblings(pid: int, ranks: dict[str, str]) -> list[dict[str, Any]]:
    agent = agent_of(pid)
    if agent is None:
        return []
    out = []
    for c in procfs.children(agent):
        if c == pid or not _is_python(c):
            continue
        env = procfs.environ_value(c, RANK_VARS)
        out.append({"pid": c, "rank": _int(env.get("RANK")), "local_rank": _int(env.get("LOCAL_RANK"))})
    return sorted(out, key=lambda s: (s["rank"] if s["rank"] is not None else 1 << 30, s["pid"]))


def is_agent(pid: int) -> bool:
    """torchrun's elastic agent itself (``torchrun ...``, ``python -m torch.distributed.run ...``): a Python process
    with torch loaded but no DataLoader of its own, whose children are the ranks (they carry RANK)."""
    argv = procfs.cmdline(pid)
    if not argv:
        return False
    head = [os.path.basename(argv[0]), *argv[1:3]]
    launcher = head[0] in ("torchrun",) or any(a in ("torch.distributed.run", "torch.distributed.launch") or
                                                a.endswith("torch/distributed/run.py") or
                                                os.path.basename(a) == "torchrun" for a in head[1:])
    return launcher and any("RANK" in procfs.environ_value(c, ("RANK",)) for c in procfs.children(pid))


#: How far up from the PID given ``--rank-of`` looks for torchrun's agent: a rank (1), a DataLoader worker of a rank
#: (2), a worker under the rank's forkserver (3).
RANK_OF_LEVELS = 3


def ranks_of(pid: int) -> list[int]:
    """Every rank's main process of the torchrun job ``pid`` belongs to (``pid`` itself when not under torchrun).

    ``pid`` may be a rank, one of a rank's DataLoader workers (its parent, or its forkserver's parent, is the rank: a
    worker's PID once sampled that one rank alone, with no ranks.json), or the agent itself (its ranks)."""
    agent = pid if is_agent(pid) else None
    p: int | None = pid
    for _ in range(RANK_OF_LEVELS):
        if agent is not None or p is None:
            break
        agent = agent_of(p)
        p = procfs.parent(p)
    if agent is None:
        return [pid]
    kids = [c for c in procfs.children(agent) if _is_python(c)]
    return sorted(kids, key=lambda c: (_int(procfs.environ_value(c, ("RANK",)).get("RANK")) or 0, c))


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def gpus_of(pids: list[int]) -> tuple[list[dict[str, Any]], str | None]:
    """The devices on which NVML lists one of ``pids`` as a compute process: [{index, name, pids, used_bytes}]."""
    try:
        import pynvml
    except ImportError:
        return [], "nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as e:  # NVMLError subclasses: no driver, no device
        return [], f"NVML unavailable ({type(e).__name__}); no GPU figures"
    out = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            try:
                running = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
            except Exception:
                running = []
            mine = [p for p in running if p.pid in pids]
            if mine:
                name = pynvml.nvmlDeviceGetName(h)
                out.append({"index": i, "name": name.decode() if isinstance(name, bytes) else str(name),
                            "pids": [int(p.pid) for p in mine],
                            "used_bytes": sum(int(p.usedGpuMemory or 0) for p in mine)})
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return out, (None if out else "NVML lists none of the job's processes on a GPU (a CPU job, or in a container "
                                  "NVML cannot see the job's PIDs)")
