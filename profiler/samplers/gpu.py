"""GPU sampling through NVML (the `nvidia-ml-py` package, imported as `pynvml`).

Why NVML and not torch.cuda: NVML reads the driver's own counters (utilisation, memory, PCIe traffic) without a CUDA
context and without synchronising the training stream, so sampling it from a background thread cannot perturb the
job. Every pynvml call is a ctypes foreign call, which releases the GIL while the driver works.

Indices: NVML numbers GPUs in PCI bus order over *all* GPUs of the machine; CUDA numbers the *visible* ones, by
default fastest first. `nvml_index_for_cuda_device` maps a torch `cuda:i` to its NVML index through the device UUID,
else through CUDA_VISIBLE_DEVICES (numeric indices, GPU-UUIDs and MIG-UUIDs, prefixes allowed as CUDA allows them).
A MIG instance has no utilisation or PCIe counters of its own in NVML: its parent GPU is sampled, and said so.

What the numbers mean: util_percent is NVML's share of the last sample period (1/6 s to 1 s depending on the
product) in which at least one kernel was running, so it says "busy", not "how much of the GPU was used";
idle attribution relies on CUDA events in the harness, this series is the cross-check and the picture.
PCIe rx/tx are bytes per second, measured one of two ways (recorded as `pcie_method`): from NVML's cumulative PCIe
byte counters (field values PCIE_COUNT_RX/TX_BYTES, newer GPUs and drivers), the mean rate between two ticks; else
nvmlDeviceGetPcieThroughput, a ~20 ms spot sample every PCIE_EVERY_TICKS ticks (None between), which says what the
link carried in those 20 ms, not over the tick.

Nothing here raises on a machine without a GPU or driver: callers get None plus a reason.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from profiler.samplers.thinning import halve

#: How each GPU series is reduced to fewer points (thinning.py): (attribute, key in the record) -> how.
SERIES_HOW = {("t_s", "t_s"): "last", ("util_percent", "util_percent"): "mean",
              ("mem_used_bytes", "mem_used_bytes"): "max", ("pcie_rx", "pcie_rx_bytes_per_s"): "mean",
              ("pcie_tx", "pcie_tx_bytes_per_s"): "mean"}

# nvmlDeviceGetPcieThroughput measures over a ~20 ms window and blocks the calling thread for that long; at one
# reading per second the sampler thread spends ~2 % of its wall time there (GIL released, so the job is not held).
# Ticks in between get None in the PCIe series.
PCIE_EVERY_TICKS = 10
PCIE_SPOT_METHOD = "nvml 20 ms spot sample"
PCIE_COUNTER_METHOD = "nvml byte counters, mean rate between ticks"
# NVML field ids of the cumulative PCIe byte counters (nvml.h NVML_FI_DEV_PCIE_COUNT_RX/TX_BYTES), for pynvml releases
# that predate the names.
_FI_PCIE_RX_BYTES = 198
_FI_PCIE_TX_BYTES = 197


def _import_pynvml() -> tuple[Any | None, str | None]:
    """Import pynvml lazily: a CPU-only install must not pay for (or fail on) it."""
    try:
        import pynvml
    except Exception as exc:  # ImportError, or a broken install raising anything at import
        return None, f"pynvml not importable: {exc}"
    return pynvml, None


def _text(value: Any) -> str:
    """Older pynvml releases return bytes for strings, newer ones str."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _try(fn: Any, *args: Any) -> Any | None:
    """One optional NVML query: None when the device or driver does not support it."""
    try:
        return fn(*args)
    except Exception:
        return None


def gpu_facts(index: int) -> dict | None:
    """Static facts about NVML GPU `index` for the environment section, or None without NVML/that GPU.

    Returns {index, name, uuid, memory_total_bytes, driver_version, pcie_gen_current, pcie_gen_max,
    pcie_width_current, pcie_width_max}; a field the device does not report is None.
    """
    pynvml, _reason = _import_pynvml()
    if pynvml is None:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:  # nvmlInit/nvmlShutdown are reference counted, so this pairs safely with a running GpuSampler
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return {
            "index": index,
            "name": _text(pynvml.nvmlDeviceGetName(handle)),
            "uuid": _text(u) if (u := _try(pynvml.nvmlDeviceGetUUID, handle)) is not None else None,
            "memory_total_bytes": int(mem.total),
            "driver_version": (_text(d) if (d := _try(pynvml.nvmlSystemGetDriverVersion)) is not None else None),
            "pcie_gen_current": _try(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
            "pcie_gen_max": _try(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
            "pcie_width_current": _try(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
            "pcie_width_max": _try(pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
        }
    except Exception:
        return None
    finally:
        _try(pynvml.nvmlShutdown)


_ORDER_NOTE = ("CUDA numbers devices fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID; the index is assumed to be "
               "NVML's")
_UUID_PREFIX = re.compile(r"^(gpu|mig)-", re.IGNORECASE)


@dataclass(frozen=True)
class NvmlDevice:
    """One row of NVML's device table: a physical GPU, or a MIG instance (``index`` is then its parent's)."""

    index: int
    uuid: str  # as NVML prints it: "GPU-..." or "MIG-..."
    mig: bool = False


@dataclass(frozen=True)
class NvmlMapping:
    """Which NVML device to sample for a torch ``cuda:i``, how that was decided, and what the reader must know."""

    index: int | None  # NVML index of the physical GPU to sample (a MIG instance's parent); None: not known
    uuid: str | None  # the matched device's NVML UUID
    mig: bool
    how: str
    note: str | None = None


def _norm_uuid(text: str) -> str:
    return _UUID_PREFIX.sub("", text.strip()).lower()


def parse_visible_devices(value: str | None) -> list[str] | None:
    """The device tokens CUDA sees in CUDA_VISIBLE_DEVICES ``value``; None when unset (every device is visible).

    As CUDA reads it: comma-separated integer indices or UUID strings ("GPU-8932f937...", abbreviated to a unique
    prefix, or "MIG-..."), enumerated in that order; the first invalid token (e.g. -1) hides itself and every token
    after it, so "0,2,-1,1" shows devices 0 and 2; an empty value shows none.
    """
    if value is None:
        return None
    tokens: list[str] = []
    for raw in value.split(","):
        token = raw.strip()
        if token.isdigit() or (_UUID_PREFIX.match(token) and len(token) > 4):
            tokens.append(token)
        else:
            break
    return tokens


def _by_uuid(table: list[NvmlDevice], uuid: str, prefix: bool) -> list[NvmlDevice]:
    want = _norm_uuid(uuid)
    # the legacy MIG form "MIG-GPU-<gpu uuid>/<gi>/<ci>" names the parent GPU
    want = want.split("/", 1)[0]
    want = _norm_uuid(want)
    return [d for d in table if (_norm_uuid(d.uuid).startswith(want) if prefix else _norm_uuid(d.uuid) == want)]


def _mapped(device: NvmlDevice, how: str, legacy_mig: bool = False) -> NvmlMapping:
    mig = device.mig or legacy_mig
    note = None
    if mig:
        note = (f"a MIG instance: NVML has no utilisation or PCIe counters per instance, so GPU {device.index} (its "
                "parent) is sampled; its figures include the other instances' work, and utilisation is not reported "
                "in MIG mode")
    return NvmlMapping(device.index, device.uuid, mig, how, note)


def map_cuda_device(cuda_index: int, visible: list[str] | None, table: list[NvmlDevice],
                    torch_uuid: str | None = None, pci_bus_order: bool = False) -> NvmlMapping:
    """NVML device for torch's ``cuda:<cuda_index>``: a pure function of what torch and NVML report.

    ``visible``: :func:`parse_visible_devices` of CUDA_VISIBLE_DEVICES; ``table``: NVML's GPUs and MIG instances;
    ``torch_uuid``: torch's UUID of the device (exact; tried first). Numeric tokens are CUDA indices, which follow
    NVML's PCI order only under CUDA_DEVICE_ORDER=PCI_BUS_ID (``pci_bus_order``); otherwise CUDA puts the fastest GPU
    first, so a numeric mapping is said to be an assumption.
    """
    if torch_uuid:
        hits = _by_uuid(table, torch_uuid, prefix=False)
        if len(hits) == 1:
            return _mapped(hits[0], "device UUID")
    if visible is not None:
        if cuda_index >= len(visible):
            return NvmlMapping(None, None, False, "not visible",
                               f"cuda:{cuda_index} is not among the {len(visible)} device(s) that "
                               "CUDA_VISIBLE_DEVICES shows")
        token = visible[cuda_index]
        if token.isdigit():
            index = int(token)
            if table and not any(d.index == index and not d.mig for d in table):
                return NvmlMapping(None, None, False, "CUDA_VISIBLE_DEVICES index",
                                   f"CUDA_VISIBLE_DEVICES names device {index}, which NVML does not list")
            note = None if pci_bus_order else _ORDER_NOTE
            uuid = next((d.uuid for d in table if d.index == index and not d.mig), None)
            return NvmlMapping(index, uuid, False, "CUDA_VISIBLE_DEVICES index", note)
        is_mig = token.lower().startswith("mig-")
        legacy = is_mig and token.lower().startswith("mig-gpu-")
        if legacy:
            hits = [d for d in _by_uuid(table, token[4:], prefix=True) if not d.mig]
        else:
            hits = [d for d in _by_uuid(table, token, prefix=True) if d.mig == is_mig]
        if len(hits) == 1:
            return _mapped(hits[0], "CUDA_VISIBLE_DEVICES UUID", legacy_mig=legacy)
        why = "matches no NVML device" if not hits else f"matches {len(hits)} NVML devices"
        return NvmlMapping(None, None, is_mig, "CUDA_VISIBLE_DEVICES UUID", f"CUDA_VISIBLE_DEVICES token {token} {why}")
    row = next((d for d in table if d.index == cuda_index and not d.mig), None)
    note = None if pci_bus_order else _ORDER_NOTE
    return NvmlMapping(cuda_index, row.uuid if row else None, False, "same index (CUDA_VISIBLE_DEVICES unset)",
                       note if len([d for d in table if not d.mig]) > 1 else None)


def nvml_device_table() -> list[NvmlDevice]:
    """NVML's GPUs and, for GPUs in MIG mode, their MIG instances; [] without NVML."""
    pynvml, _reason = _import_pynvml()
    if pynvml is None:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:
        return []
    table: list[NvmlDevice] = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            table.append(NvmlDevice(i, _text(pynvml.nvmlDeviceGetUUID(handle))))
            mode = _try(pynvml.nvmlDeviceGetMigMode, handle)
            if not mode or mode[0] != getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1):
                continue
            for j in range(_try(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
                mig = _try(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, j)
                uuid = _try(pynvml.nvmlDeviceGetUUID, mig) if mig is not None else None
                if uuid is not None:
                    table.append(NvmlDevice(i, _text(uuid), mig=True))
    except Exception:
        pass
    finally:
        _try(pynvml.nvmlShutdown)
    return table


def nvml_mapping_for_cuda_device(cuda_index: int, ask_torch: bool = True) -> NvmlMapping:
    """:func:`map_cuda_device` with this process's NVML table, CUDA_VISIBLE_DEVICES and (``ask_torch``) torch's UUID.

    Asking torch initialises CUDA in the caller if torch had not yet done so; the harness asks after it has.
    """
    uuid = None
    if ask_torch:
        try:
            import torch

            uuid = str(torch.cuda.get_device_properties(cuda_index).uuid)
        except Exception:
            uuid = None
    return map_cuda_device(cuda_index, parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES")),
                           nvml_device_table(), uuid, os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID")


def nvml_index_for_cuda_device(cuda_index: int) -> int | None:
    """NVML index of the GPU to sample for torch's `cuda:<cuda_index>` (a MIG instance's parent), or None when it
    cannot be told (the sampler then records the GPU as absent); see :func:`nvml_mapping_for_cuda_device`."""
    return nvml_mapping_for_cuda_device(cuda_index).index


def pcie_counter_rate(prev: tuple[int, int] | None, cur: tuple[int, int]) -> float | None:
    """Bytes per second between two readings ``(counter bytes, timestamp µs)`` of a cumulative NVML counter.

    None for the first reading, a non-advancing clock, or a counter that went backwards (a driver reload or a wrap).
    """
    if prev is None:
        return None
    d_bytes, d_us = cur[0] - prev[0], cur[1] - prev[1]
    if d_us <= 0 or d_bytes < 0:
        return None
    return d_bytes * 1e6 / d_us


class GpuSampler:
    """Per-tick NVML readings of one GPU, owned by the sampler thread (open, sample..., close on that thread).

    Series all have one entry per tick once open; a failed reading on one tick gives None entries rather than
    a shorter list, so `t_s` and the value series always line up.
    """

    def __init__(self, index: int | None, pcie_every: int = PCIE_EVERY_TICKS) -> None:
        self.index = index
        self.pcie_every = max(1, pcie_every)
        self.absent: dict[str, str] = {}
        self._nvml: Any = None  # the pynvml module once opened (untyped: NVML has no stubs)
        self._handle: Any | None = None
        self._name: str | None = None
        self._mem_total: int | None = None
        self._pcie_ok = True
        self.t_s: list[float] = []
        self.util_percent: list[float | None] = []
        self.mem_used_bytes: list[int | None] = []
        self.pcie_rx: list[float | None] = []
        self.pcie_tx: list[float | None] = []
        self.last_util: float | None = None
        self.mig_mode = False
        # PCIe counters (field values) when the device has them, else the spot sample; see the module docstring
        self._counters_ok: bool | None = None  # None: not yet tried
        self._prev_counts: tuple[tuple[int, int], tuple[int, int]] | None = None

    def open(self) -> bool:
        """Initialise NVML and the device handle; on failure record absent["gpu"] and return False."""
        if self.index is None:
            self.absent["gpu"] = "no NVML device for this run (a CPU run, or the CUDA device matched no NVML device)"
            return False
        pynvml, reason = _import_pynvml()
        if pynvml is None:
            self.absent["gpu"] = reason or "pynvml not importable"
            return False
        try:
            pynvml.nvmlInit()
        except Exception as exc:
            self.absent["gpu"] = f"NVML init failed: {exc}"
            return False
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
            self._name = _text(pynvml.nvmlDeviceGetName(handle))
            self._mem_total = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
        except Exception as exc:
            self.absent["gpu"] = f"NVML device {self.index} unavailable: {exc}"
            _try(pynvml.nvmlShutdown)
            return False
        self._nvml, self._handle = pynvml, handle
        mode = _try(pynvml.nvmlDeviceGetMigMode, handle)
        if mode and mode[0] == getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1):
            self.mig_mode = True
            self.absent["gpu_util"] = ("GPU in MIG mode: NVML reports no utilisation, and memory and PCIe are the "
                                       "whole GPU's, all instances together")
        return True

    def _read_counters(self) -> tuple[float | None, float | None] | None:
        """PCIe rx/tx B/s from the cumulative byte counters, or None when the device does not have them."""
        nv, h = self._nvml, self._handle
        ok = getattr(nv, "NVML_SUCCESS", 0)
        try:
            rx_id = getattr(nv, "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", _FI_PCIE_RX_BYTES)
            tx_id = getattr(nv, "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", _FI_PCIE_TX_BYTES)
            values = nv.nvmlDeviceGetFieldValues(h, [rx_id, tx_id])
            if any(v.nvmlReturn != ok for v in values):
                return None
            cur = ((int(values[0].value.ullVal), int(values[0].timestamp)),
                   (int(values[1].value.ullVal), int(values[1].timestamp)))
        except Exception:
            return None
        prev, self._prev_counts = self._prev_counts, cur
        return (pcie_counter_rate(prev[0] if prev else None, cur[0]),
                pcie_counter_rate(prev[1] if prev else None, cur[1]))

    def read(self, tick_index: int) -> tuple[float | None, int | None, float | None, float | None] | None:
        """One reading (util %, mem used, PCIe rx, tx B/s), or None when not open; does not store it.

        Kept apart from `append` so the caller can read (slow, GIL released) outside its lock and store inside it.
        PCIe is read only every `pcie_every` ticks (None between), see PCIE_EVERY_TICKS.
        """
        if self._handle is None:
            return None
        nv, h = self._nvml, self._handle
        util = mem_used = rx = tx = None
        try:
            util = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
        except Exception:
            pass
        try:
            mem_used = int(nv.nvmlDeviceGetMemoryInfo(h).used)
        except Exception:
            pass
        if self._counters_ok is not False:
            rates = self._read_counters()
            if self._counters_ok is None:
                self._counters_ok = rates is not None
            if rates is not None:
                rx, tx = rates
        if not self._counters_ok and self._pcie_ok and tick_index % self.pcie_every == 0:
            try:  # NVML reports KB/s (1024 bytes)
                rx = float(nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES)) * 1024.0
                tx = float(nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES)) * 1024.0
            except Exception as exc:
                rx = tx = None
                if all(v is None for v in self.pcie_rx):
                    self._pcie_ok = False  # never worked on this device: stop paying the 20 ms
                    self.absent["pcie"] = f"nvmlDeviceGetPcieThroughput unsupported: {exc}"
        return util, mem_used, rx, tx

    def append(self, t_s: float, reading: tuple[float | None, int | None, float | None, float | None] | None) -> None:
        """Store a reading from `read` (no-op for None, i.e. GPU not open)."""
        if reading is None:
            return
        util, mem_used, rx, tx = reading
        self.t_s.append(t_s)
        self.util_percent.append(util)
        self.mem_used_bytes.append(mem_used)
        self.pcie_rx.append(rx)
        self.pcie_tx.append(tx)
        self.last_util = util

    def halve(self) -> None:
        """Half the resolution (thinning.py): rates and utilisation averaged over each pair, memory at its peak."""
        for (name, _), how in SERIES_HOW.items():
            setattr(self, name, halve(getattr(self, name), how))

    def close(self) -> None:
        """Release NVML; idempotent."""
        if self._nvml is not None:
            _try(self._nvml.nvmlShutdown)
        self._nvml = self._handle = None

    def to_dict(self) -> dict | None:
        """The `samples.gpu` object of run.json, or None if the GPU was never opened."""
        if self._name is None:
            return None
        pcie = bool(self._counters_ok) or self._pcie_ok or any(v is not None for v in self.pcie_rx)
        return {
            "index": self.index,
            "name": self._name,
            "t_s": list(self.t_s),
            "util_percent": list(self.util_percent),
            "mem_used_bytes": list(self.mem_used_bytes),
            "mem_total_bytes": self._mem_total,
            "pcie_rx_bytes_per_s": list(self.pcie_rx) if pcie else None,
            "pcie_tx_bytes_per_s": list(self.pcie_tx) if pcie else None,
            "pcie_every_ticks": 1 if self._counters_ok else self.pcie_every,
            "pcie_method": (PCIE_COUNTER_METHOD if self._counters_ok else PCIE_SPOT_METHOD) if pcie else None,
            "mig_mode": self.mig_mode,
        }
