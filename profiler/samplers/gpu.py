"""GPU sampling through NVML (the `nvidia-ml-py` package, imported as `pynvml`).

Why NVML and not torch.cuda: NVML reads the driver's own counters (utilisation, memory, PCIe traffic) without a CUDA
context and without synchronising the training stream, so sampling it from a background thread cannot perturb the
job. Every pynvml call is a ctypes foreign call, which releases the GIL while the driver works.

Indices: NVML numbers GPUs in PCI bus order over *all* GPUs of the machine; CUDA numbers the *visible* ones, by
default fastest first. `nvml_index_for_cuda_device` maps a torch `cuda:i` to its NVML index through the device UUID.

What the numbers mean: util_percent is NVML's share of the last sample period (1/6 s to 1 s depending on the
product) in which at least one kernel was running, so it says "busy", not "how much of the GPU was used";
idle attribution relies on CUDA events in the harness, this series is the cross-check and the picture.
PCIe rx/tx are bytes per second over a ~20 ms window, every PCIE_EVERY_TICKS ticks (None between).

Nothing here raises on a machine without a GPU or driver: callers get None plus a reason.
"""
from __future__ import annotations

import os
from typing import Any

# nvmlDeviceGetPcieThroughput measures over a ~20 ms window and blocks the calling thread for that long; at one
# reading per second the sampler thread spends ~2 % of its wall time there (GIL released, so the job is not held).
# Ticks in between get None in the PCIe series.
PCIE_EVERY_TICKS = 10


def _import_pynvml() -> tuple[Any | None, str | None]:
    """Import pynvml lazily: a CPU-only install must not pay for (or fail on) it."""
    try:
        import pynvml  # type: ignore[import-not-found]
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


def nvml_index_for_cuda_device(cuda_index: int) -> int:
    """NVML index of torch's `cuda:<cuda_index>`; falls back to `cuda_index` when the mapping cannot be made.

    Tries the device UUID (exact, and robust to CUDA_DEVICE_ORDER), then a numeric CUDA_VISIBLE_DEVICES list.
    Calling this initialises CUDA in the caller if torch had not yet done so; the harness calls it after it has.
    """
    pynvml, _reason = _import_pynvml()
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(cuda_index).uuid)  # e.g. "a1b2...": NVML says "GPU-a1b2..."
    except Exception:
        uuid = None
    if pynvml is not None and uuid:
        try:
            pynvml.nvmlInit()
            try:
                for i in range(pynvml.nvmlDeviceGetCount()):
                    nv_uuid = _text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)))
                    if nv_uuid.removeprefix("GPU-").removeprefix("MIG-") == uuid.removeprefix("GPU-"):
                        return i
            finally:
                _try(pynvml.nvmlShutdown)
        except Exception:
            pass
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    parts = [p.strip() for p in visible.split(",") if p.strip()]
    if parts and all(p.isdigit() for p in parts) and cuda_index < len(parts):
        return int(parts[cuda_index])
    return cuda_index


class GpuSampler:
    """Per-tick NVML readings of one GPU, owned by the sampler thread (open, sample..., close on that thread).

    Series all have one entry per tick once open; a failed reading on one tick gives None entries rather than
    a shorter list, so `t_s` and the value series always line up.
    """

    def __init__(self, index: int | None, pcie_every: int = PCIE_EVERY_TICKS) -> None:
        self.index = index
        self.pcie_every = max(1, pcie_every)
        self.absent: dict[str, str] = {}
        self._nvml: Any | None = None
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

    @property
    def is_open(self) -> bool:
        return self._handle is not None

    def open(self) -> bool:
        """Initialise NVML and the device handle; on failure record absent["gpu"] and return False."""
        if self.index is None:
            self.absent["gpu"] = "no GPU index given (CPU run)"
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
        return True

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
        if self._pcie_ok and tick_index % self.pcie_every == 0:
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

    def close(self) -> None:
        """Release NVML; idempotent."""
        if self._nvml is not None:
            _try(self._nvml.nvmlShutdown)
        self._nvml = self._handle = None

    def to_dict(self) -> dict | None:
        """The `samples.gpu` object of run.json, or None if the GPU was never opened."""
        if self._name is None:
            return None
        pcie = self._pcie_ok or any(v is not None for v in self.pcie_rx)
        return {
            "index": self.index,
            "name": self._name,
            "t_s": list(self.t_s),
            "util_percent": list(self.util_percent),
            "mem_used_bytes": list(self.mem_used_bytes),
            "mem_total_bytes": self._mem_total,
            "pcie_rx_bytes_per_s": list(self.pcie_rx) if pcie else None,
            "pcie_tx_bytes_per_s": list(self.pcie_tx) if pcie else None,
            "pcie_every_ticks": self.pcie_every,
        }
