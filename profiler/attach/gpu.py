"""GPU utilisation and memory of the devices the job uses, read with NVML at the sampler's rate during the window.

Guarded: no NVML (no driver, no device, the package missing) is not an error; the record then says why there are no
GPU figures (``attach.absent.gpu``). Reads are NVML queries from this process: the job is not touched.
"""
from __future__ import annotations

from typing import Any


class GpuSampler:
    def __init__(self, indices: list[int]) -> None:
        self.indices = indices
        self.util: dict[int, list[float]] = {i: [] for i in indices}
        self.mem: dict[int, list[int]] = {i: [] for i in indices}
        self._nvml: Any = None
        self._handles: dict[int, Any] = {}
        if not indices:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handles = {i: pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices}
        except Exception:  # NVMLError and ImportError alike: no GPU figures, said in the record
            self._nvml = None

    def read(self) -> None:
        if self._nvml is None:
            return
        for i, h in self._handles.items():
            try:
                self.util[i].append(float(self._nvml.nvmlDeviceGetUtilizationRates(h).gpu))
                self.mem[i].append(int(self._nvml.nvmlDeviceGetMemoryInfo(h).used))
            except Exception:
                continue

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self._nvml = None

    def summary(self, index: int) -> dict[str, Any]:
        u, m = self.util.get(index) or [], self.mem.get(index) or []
        return {"util_samples": len(u), "util_mean_percent": round(sum(u) / len(u), 2) if u else None,
                "util_max_percent": max(u) if u else None, "mem_used_max_bytes": max(m) if m else None}
