"""The built-in pipeline under torchrun: process group, one device per rank, a sharded sampler, DDP, and a timed
all-reduce.

Collective wait, measured: a DDP communication hook does what DDP's default hook does (divide the gradient bucket
by the world size, all-reduce it) and records, per bucket, when the all-reduce was launched and when its future
completed. On gloo (CPU) the future completes when the collective is done, so launch→completion is the time this
rank spent in the all-reduce, waiting for the slowest rank included. On NCCL the future completes when the work is
queued on the stream, not when it ends on the device, so the hook is not installed there and the merge derives the
wait from step times instead (it says which it used).
"""
from __future__ import annotations

import time
from typing import Any

import torch

from .env import RankEnv

HOOK_METHOD = "DDP communication hook: all-reduce launch to completion per gradient bucket (gloo)"


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def rank_device(spec: str, denv: RankEnv) -> str:
    """One device per rank: ``auto``/``cuda`` become ``cuda:LOCAL_RANK`` where CUDA is present."""
    if spec in ("auto", "cuda") and torch.cuda.is_available():
        return f"cuda:{denv.local_rank % max(1, torch.cuda.device_count())}"
    return "cpu" if spec == "auto" else spec


def init_group(device: torch.device) -> str:
    """Join the job's process group (env:// from torchrun's variables); returns the backend."""
    import torch.distributed as dist

    backend = backend_for(device)
    if not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend)
    return backend


def destroy_group() -> None:
    """Leave the process group if this process joined one (idempotent; also on errors)."""
    import torch.distributed as dist

    try:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - a peer already gone: nothing left to leave
        pass


class AllreduceTimer:
    """The DDP comm hook that times each bucket's all-reduce (host perf_counter_ns, the session's clock)."""

    def __init__(self, world_size: int):
        self.world_size = world_size
        self.spans: list[tuple[int, int]] = []

    def hook(self) -> Any:
        """The hook function. No annotations: DDP refuses a ``bucket`` annotated other than dist.GradBucket, and
        this module's postponed annotations would be the string 'Any'."""
        import torch.distributed as dist

        spans, world = self.spans, self.world_size

        def allreduce_timed(state, bucket):  # noqa: ANN001
            buf = bucket.buffer()
            buf.div_(world)
            t0 = time.perf_counter_ns()
            fut = dist.all_reduce(buf, async_op=True).get_future()

            def done(f):  # noqa: ANN001
                spans.append((t0, time.perf_counter_ns()))  # list.append is atomic: safe from gloo's thread
                return f.value()[0]

            return fut.then(done)

        return allreduce_timed

    def section(self, t0_ns: int) -> dict:
        spans = sorted(self.spans)
        return {"method": HOOK_METHOD, "kind": "all_reduce",
                "start": [round((a - t0_ns) / 1e9, 6) for a, _ in spans],
                "end": [round((b - t0_ns) / 1e9, 6) for _, b in spans]}


def wrap_model(model: torch.nn.Module, device: torch.device, backend: str) -> tuple[torch.nn.Module, Any]:
    """DistributedDataParallel around ``model`` (one device per rank); the timing hook on gloo."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    timer = None
    if backend == "gloo":
        timer = AllreduceTimer(dist.get_world_size())
        ddp.register_comm_hook(None, timer.hook())
    return ddp, timer
