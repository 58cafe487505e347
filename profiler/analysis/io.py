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
from ..record.read import StorageView, samples, view
from ..thresholds import SERVED_FROM_RAM_FROM

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord
    from ..record.schema import BatchesTable, Storage


def _reading_times(batches: BatchesTable) -> list[float] | None:
    """When each batch's /proc/self/io reading was taken: right after its collate, in the producing worker."""
    for col in (batches["collate_end"], batches["sent"], batches["received"]):  # required columns
        if len(col) == len(batches["rchar"]):
            return [float(x) for x in col]
    return None


def _hit(requested: int, from_device: int) -> float | None:
    """Share of the bytes asked of read() that the page cache served; None when it cannot be told: nothing asked, or
    the device gave far more than read() asked for (page faults on memory-mapped files, which rchar never counts:
    the hit rate of those accesses is not measured anywhere)."""
    if requested <= 0 or from_device > th.DEVICE_BEYOND_RCHAR_FACTOR * requested:
        return None
    return round(max(0.0, 1.0 - from_device / requested), 4)


def human_bytes(n: float) -> str:
    """Decimal units (what disks are sold in), as the terminal prints them: 18157568 -> '18.2 MB'."""
    v = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if abs(v) < 1000.0:
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1000.0
    return f"{v:.1f} TB"


def storage_summary(from_device: int, requested: int, where: str) -> str:
    """The one sentence about storage bytes, from the kernel's two counters, each named (design: the device-read
    counter is the truth for "from the device", rchar is what read() asked for).

    Why both: a dataset reading through np.memmap / np.load(mmap_mode="r") asks read() for nothing while its page
    faults fetch megabytes from the device; "N of M from the device" with N > M then reads as nonsense."""
    dev, req = human_bytes(from_device), human_bytes(requested)
    if from_device <= 0:
        if requested >= th.READS_FILES_FROM_BYTES:
            return (f"Storage ({where}): no byte came from the storage device (the kernel's read_bytes); the {req} "
                    "asked of read() (rchar) were all served from the page cache.")
        return (f"Storage ({where}): no byte came from the storage device (the kernel's read_bytes): every read, "
                f"through read() ({req} asked, rchar) or a memory map, was served from the page cache or memory.")
    if from_device > th.DEVICE_BEYOND_RCHAR_FACTOR * requested:
        return (f"Storage ({where}): {dev} came from the storage device (the kernel's read_bytes, page faults on "
                f"memory-mapped files included), while read() was asked for {req} (rchar): the device bytes came "
                "through memory-mapped pages (or read-ahead), so the page cache's hit rate is not measured.")
    hit = _hit(requested, from_device)
    served = f": {hit * 100:.0f} % served from the page cache" if hit is not None else ""
    return (f"Storage ({where}): {dev} came from the storage device (the kernel's read_bytes) for {req} asked of "
            f"read() (rchar){served}.")


def summarize_storage(rec: RunRecord, items: int, calls_device: int | None, calls_rchar: int | None) -> None:
    """``storage.dataset_calls`` and ``storage.summary``: the measured window's bytes as its dataset calls counted
    them (per-thread kernel counters around each batch, the same figures the verdict quotes per sample), so every
    sentence about storage uses one set of numbers. Falls back to ``storage.window`` or the whole run's totals."""
    st: dict[str, Any] = dict(rec.storage or {})  # the section rewritten: its summary replaced
    st.pop("summary", None)
    sv = view(StorageView, st)
    if not st and not (calls_device or 0) and (calls_rchar or 0) < th.READS_FILES_FROM_BYTES:
        return  # an in-memory dataset with no storage facts: nothing to say about storage
    if calls_device is not None and calls_rchar is not None and items > 0:
        st["dataset_calls"] = {"bytes_from_device": int(calls_device), "bytes_requested": int(calls_rchar),
                               "samples": int(items),
                               "source": "the measured window's dataset calls (per-thread read_bytes and rchar)"}
        dev, req, where = int(calls_device), int(calls_rchar), f"measured window, {items} samples"
    elif sv.window is not None and st["window"]:  # _window_totals' figures
        dev, req = int(sv.window.bytes_from_device), int(sv.window.bytes_requested)
        where = "measured window, the workers' processes"
    elif sv.io_source:
        dev, req, where = int(sv.bytes_from_device or 0), int(sv.bytes_requested or 0), "whole run"
    else:
        return
    st["summary"] = storage_summary(dev, req, where)
    rec.storage = st  # type: ignore[assignment]


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
        for proc in samples(rec).processes:
            io = proc.io  # {rchar, read_bytes}: the counters as read
            if proc.role == "worker" and io:
                per_pid[int(proc.pid or 0)] = (int(io.get("rchar", 0)), int(io.get("read_bytes", 0)))
        source = "sampler's last /proc/<pid>/io of each worker"
    requested = sum(v[0] for v in per_pid.values())
    from_device = sum(v[1] for v in per_pid.values())
    out: Storage = {"io_source": source if per_pid else None, "worker_processes_with_io": len(per_pid),
                           "bytes_requested": int(requested), "bytes_from_device": int(from_device)}
    # Always written (None when it cannot be told), so a recomputation replaces a stale figure.
    out["page_cache_hit_fraction"] = _hit(requested, from_device)
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
    if io["io_source"] is not None:  # io_totals always says where its counts came from (None: nowhere)
        rec.storage = {**(rec.storage or {}), **io}


def served_from_ram_note(rec: RunRecord) -> str | None:
    """A run meant to measure storage (cold cache or a throttle) whose reads mostly hit the page cache measured RAM."""
    st = view(StorageView, rec.storage)
    hit = st.page_cache_hit_fraction
    if hit is None or hit < SERVED_FROM_RAM_FROM or not (st.throttle or st.cache_mode == "cold"):
        return None
    return (f"Caution: {hit * 100:.0f} % of the bytes read were served from the page cache, so this run measured "
            "RAM, not the storage device (use --cache cold).")
