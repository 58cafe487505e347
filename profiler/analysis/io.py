"""Storage numbers derived from the raw record, so ``report run.json`` recomputes them.

- :func:`io_totals`: bytes the workers asked for (``rchar``) vs bytes that came from the block device
  (``read_bytes``), over the whole run and over the measured window alone, and the page-cache hit fraction.
- :func:`derive_storage`: those totals written into the record's ``storage`` section.
- :func:`fits_in_page_cache`: the one answer to "can the page cache hold the dataset?", used by the dataset-vs-RAM
  finding and by the recommendations alike.
- :func:`served_from_ram_note`: the caution for a storage run whose reads came from the page cache.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import thresholds as th
from ..thresholds import SERVED_FROM_RAM_FROM

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord
    from ..record.schema import BatchesTable, Storage


def _reading_times(batches: BatchesTable) -> list[float] | None:
    """When each batch's /proc/self/io reading was taken: right after its collate, in the producing worker."""
    for col in (batches.get("collate_end"), batches.get("sent"), batches.get("received")):
        if col is not None and len(col) == len(batches["rchar"]):
            return [float(x) for x in col]
    return None


def _hit(requested: int, from_device: int) -> float | None:
    return round(max(0.0, 1.0 - from_device / requested), 4) if requested > 0 else None


def _window_totals(batches: BatchesTable, start_s: float, end_s: float) -> dict[str, Any] | None:
    """Bytes read during the measured window alone: per worker process, its last reading in the window minus its
    last reading before the window (zero when it had none: a process's counters start at zero)."""
    times = _reading_times(batches)
    if times is None:
        return None
    before: dict[int, tuple[int, int]] = {}
    inside: dict[int, tuple[int, int]] = {}
    rows = zip(batches["pid"], batches["worker"], batches["rchar"], batches["read_bytes"], times)
    for pid, worker, rc, rb, t in sorted(rows, key=lambda r: r[4]):
        if worker < 0 or rc < 0:
            continue
        if t < start_s:
            before[pid] = (rc, rb)
        elif t <= end_s:
            inside[pid] = (rc, rb)
    req = sum(rc - before.get(pid, (0, 0))[0] for pid, (rc, _) in inside.items())
    dev = sum(rb - before.get(pid, (0, 0))[1] for pid, (_, rb) in inside.items())
    return {"bytes_requested": int(req), "bytes_from_device": int(dev), "page_cache_hit_fraction": _hit(req, dev),
            "worker_processes_with_io": len(inside)}


def io_totals(rec: RunRecord) -> Storage:
    """Bytes the workers asked for vs bytes from the block device, and the page-cache hit fraction.

    Preferred source: the cumulative /proc/self/io readings each worker attached to its batches
    (``timeline.batches.rchar`` / ``read_bytes``; exact up to its last batch, and available for the measured window
    alone, under ``window``). Fallback: the sampler's last /proc/<pid>/io reading of each worker (whole run only).
    The main process (workers = 0) is left out: it also reads libraries and /proc, so its counters are not the
    dataset's reads.
    """
    batches = rec.timeline["batches"]
    per_pid: dict[int, tuple[int, int]] = {}
    source = None
    if batches["rchar"]:
        for pid, worker, rc, rb in zip(batches["pid"], batches["worker"], batches["rchar"], batches["read_bytes"]):
            if worker < 0 or rc < 0:
                continue
            prev = per_pid.get(pid, (0, 0))
            per_pid[pid] = (max(prev[0], rc), max(prev[1], rb))
        source = "workers' /proc/self/io at each batch"
    if not per_pid:
        for proc in rec.processes:
            io = proc.get("io")
            if proc.get("role") == "worker" and io:
                per_pid[int(proc["pid"])] = (int(io.get("rchar", 0)), int(io.get("read_bytes", 0)))
        source = "sampler's last /proc/<pid>/io of each worker"
    requested = sum(v[0] for v in per_pid.values())
    from_device = sum(v[1] for v in per_pid.values())
    out: Storage = {"io_source": source if per_pid else None, "worker_processes_with_io": len(per_pid),
                           "bytes_requested": int(requested), "bytes_from_device": int(from_device)}
    hit = _hit(requested, from_device)
    if hit is not None:
        out["page_cache_hit_fraction"] = hit
    win = rec.window
    if batches["rchar"]:
        out["window"] = _window_totals(batches, float(win["start_s"]), float(win["end_s"]))
    return out


def fits_in_page_cache(dataset_bytes: int | None, available_bytes: int | None) -> bool | None:
    """Can the page cache keep the whole dataset across epochs? None when either size is unknown.

    The one place this is judged (``PAGE_CACHE_SHARE_OF_AVAILABLE``): the dataset-vs-RAM finding and the
    "serve the dataset from RAM" recommendation both ask here, so they cannot disagree.
    """
    if not dataset_bytes or not available_bytes:
        return None
    return dataset_bytes <= th.PAGE_CACHE_SHARE_OF_AVAILABLE * available_bytes


def derive_storage(rec: RunRecord) -> None:
    """Recompute the storage byte counts from the raw /proc io readings (kept as recorded when there are none)."""
    io = io_totals(rec)
    if io.get("io_source") is not None:
        rec.storage = {**(rec.storage or {}), **io}


def served_from_ram_note(rec: RunRecord) -> str | None:
    """A run meant to measure storage (cold cache or a throttle) whose reads mostly hit the page cache measured RAM."""
    st = rec.storage or {}
    hit = st.get("page_cache_hit_fraction")
    if hit is None or hit < SERVED_FROM_RAM_FROM or not (st.get("throttle") or st.get("cache_mode") == "cold"):
        return None
    return (f"Caution: {hit * 100:.0f} % of the bytes read were served from the page cache, so this run measured "
            "RAM, not the storage device (use --cache cold).")
