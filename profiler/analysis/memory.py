"""Device memory after an out-of-memory: what to change, recomputed from the record's ``memory.breakdown``."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..record.read import MemoryView, view

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord


def _fit_advice() -> Callable[[Any, int], list[dict[str, Any]]]:
    """The fit package's pure advice function (breakdown, device bytes) -> recommendations.

    Imported lazily: the fit package is large, and a record without an OOM never needs it. The advice builds
    torchvision models on the meta device (shapes only: no memory, no weights, no I/O) to compare parameter counts, so
    it stays a pure function of the record.
    """
    from ..fit import oom_recommendations

    return oom_recommendations


def memory_advice(rec: RunRecord) -> list[dict[str, Any]]:
    """What to change after a device out-of-memory, recomputed from ``memory.breakdown`` (the fit estimate of this
    model, batch and mode) and the device's size. Empty when the run did not run out of memory or the record lacks
    the breakdown or the device size."""
    mem = view(MemoryView, rec.memory)
    bd, total = mem.breakdown, mem.device_total_bytes
    if mem.oom is None or not bd or not total:
        return []
    return list(_fit_advice()(bd, int(total)))


def derive_memory(rec: RunRecord) -> None:
    """Recompute the out-of-memory advice from ``memory.breakdown``; a failure is noted, never raised (the advice is
    a bonus on a run that already failed), and a record's own list is then kept."""
    mem = rec.memory  # written to: the advice, or why there is none
    m = view(MemoryView, mem)
    if not mem or m.oom is None:
        return
    try:
        advice = memory_advice(rec)
    except Exception as e:
        mem["oom_recommendations_error"] = f"{type(e).__name__}: {e}"
        return
    if advice or m.breakdown:
        mem["oom_recommendations"] = advice
