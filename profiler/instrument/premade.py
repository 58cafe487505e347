"""Iterators made before a profile() block: ``it = iter(loader)`` outside the block, ``next(it)`` inside.

The profiler measures a loader from its ``iter()`` on (its workers and fetchers are set up there), so such an
iterator's batches pass through unmeasured. A block that stepped only those must say so, not that no DataLoader was
iterated: ``run``'s ``profile()`` (api.py) and the monitor's (monitor/api.py) both count them here.
"""
from __future__ import annotations

from typing import Any


def premade_message(who: str, batches: int) -> str:
    """What a block says that stepped only iterators made before it (watch_premade)."""
    return (f"{who}: the block iterated a DataLoader iterator made before it ({batches} batches by next(it) on an "
            "`it = iter(loader)` from outside the block), and no loader was iterated from inside it; nothing "
            "recorded: the profiler measures a loader from its iter() on, so its workers and fetches were started "
            "unprofiled. Call iter(loader) (or `for b in loader`) inside the block")


def watch_premade(session: Any) -> list[int]:
    """Count the batches the block takes from DataLoader iterators made before it (``it = iter(loader)`` outside,
    ``next(it)`` inside), which the session passes through unmeasured: their workers started before the hooks, so
    nothing of them can be timed, and the block must say that rather than that no DataLoader was iterated. Only
    iterators the session does not know (not the profiled one's, not another loader's) reach this wrapper, and only
    until the session adopts a loader."""
    seen = [0]
    other_next = getattr(session, "_other_next", None)
    iters = getattr(session, "_other_iters", None)
    if other_next is None or iters is None:
        return seen

    def counted(it: Any, orig: Any) -> Any:
        if getattr(session, "loader", None) is None and iters.get(it) is None:
            seen[0] += 1
        return other_next(it, orig)

    session._other_next = counted
    return seen
