"""Findings: facts worth a line in every report beyond the verdict (skipped files, a partial run, RAM, the dataset vs
the page cache). The pattern findings (oversubscription, epoch starts, a sawtooth) are in patterns.py."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from ..record.read import read
from .context import Context
from .io import fits_in_page_cache

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord
    from ..record.schema import Finding


def finding(kind: str, message: str, **facts: Any) -> Finding:
    """One finding. Every reader shows ``kind`` and ``message``; the numbers behind it ride along as further keys (the
    record keeps keys its schema does not name), so a script can read them without parsing the sentence."""
    return cast("Finding", {**facts, "kind": kind, "message": message})


def dataset_vs_ram(rec: RunRecord, ctx: Context) -> Finding | None:
    """Can the page cache hold the dataset? If not, every epoch reads it from the device: say what that costs."""
    size, avail = ctx.dataset_bytes, ctx.ram_available_bytes
    fits = fits_in_page_cache(size, avail)
    if fits is None or avail is None:
        return None
    r = read(rec)
    total = r.environment.ram.total_bytes
    # The device's rate over the measured window: the window's device bytes (the kernel's read_bytes, as the storage
    # sentence counts them) over the window's seconds; the whole run's bytes over the window's time overstated it.
    from_dev = ctx.calls_device_bytes
    if from_dev is None:
        win = r.storage.window  # io.py's totals of the window's workers' processes (None: not counted)
        from_dev = int(win.bytes_from_device) if win is not None else 0
    rate = from_dev / ctx.window_s if from_dev > 0 and ctx.window_s > 0 else None
    gb = 1e9
    if fits:
        message = (f"Dataset {size / gb:.2f} GB fits in the page cache ({avail / gb:.1f} GB of RAM available): "
                   "after the first epoch, reads come from RAM unless memory pressure evicts them.")
    else:
        cost = (f"; at this run's device rate ({rate / 1e6:.0f} MB/s over the measured window, by the kernel's "
                f"read_bytes) that is {size / rate:.0f} s of reading per epoch") if rate else ""
        message = (f"Dataset {size / gb:.1f} GB cannot stay in the page cache ({avail / gb:.1f} GB of RAM "
                   f"available): every epoch reads it from the storage device{cost}.")
    return finding("dataset_vs_ram", message, dataset_bytes=size, ram_available_bytes=avail, ram_total_bytes=total,
                   fits_in_page_cache=fits, device_read_bytes_per_s=rate)


def findings(rec: RunRecord, ctx: Context) -> list[Finding]:
    """Facts worth a line in every report, beyond the verdict (skipped files, RAM, the dataset vs the page cache).

    The "measured RAM, not the storage device" caution is not repeated here: it is part of the verdict's summary."""
    out: list[Finding] = []
    n_skip = int(rec.skipped["count"])
    if n_skip:
        out.append(finding("skipped_files", f"{n_skip} file(s) could not be read or decoded and were skipped; see the "
                                            "skipped-files list."))
    if rec.partial:
        out.append(finding("partial", f"Partial run: {rec.partial_reason}. Figures cover what was measured before it "
                                      "ended."))
    ram = read(rec).ram  # analysis wrote it just before (analysis/ram.py): its rows are complete
    cor = ram.copy_on_read
    if cor:
        facts = {k: v for k, v in cor.items() if k not in ("kind", "message")}
        out.append(finding("copy_on_read", f"{cor['message']} Fix: {cor['fix']}", **facts))
    for row in ram.projection:
        if row["warning"] and row["workers"] == ctx.workers:
            out.append(finding("ram", f"RAM: {row['warning']}"))
    dr = dataset_vs_ram(rec, ctx)
    if dr:
        out.append(dr)
    return out
