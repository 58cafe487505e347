"""Facts about the machine and software a run happened on, for run.json's `environment` section.

Why these: a report read on another machine must say what the numbers were measured on (a verdict of "cpu-bound"
means little without the number of usable cores), and `usable_cores` is what worker-count advice must use, since a
container's CPU quota or affinity mask can be far below the host's core count.

Privacy: no hostname, user name, paths or environment variables are recorded.
"""
from __future__ import annotations

import math
import os
import platform
import sys
from importlib import metadata

import psutil

from profiler.samplers.gpu import gpu_facts, nvml_mapping_for_cuda_device


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name") and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def _cgroup_dirs(controller: str) -> list[str]:
    """Directories that may hold this process's cgroup limits for `controller`, innermost first, then ancestors
    (limits nest: the tightest one on the path applies). Covers cgroup v2 (unified) and v1."""
    dirs: list[str] = []
    text = _read("/proc/self/cgroup") or ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _id, controllers, rel = parts
        if controllers == "":  # v2
            base = "/sys/fs/cgroup"
        elif controller in controllers.split(","):
            base = next((f"/sys/fs/cgroup/{c}" for c in (controllers, controller, "cpu,cpuacct")
                         if os.path.isdir(f"/sys/fs/cgroup/{c}")), "")
            if not base:
                continue
        else:
            continue
        rel = rel.strip("/")
        while True:
            d = os.path.join(base, rel) if rel else base
            if os.path.isdir(d) and d not in dirs:
                dirs.append(d)
            if not rel:
                break
            rel = os.path.dirname(rel)
    return dirs


def cgroup_cpu_quota() -> float | None:
    """CPUs allowed by the cgroup CPU quota (e.g. 1.5), or None when unlimited or unknown."""
    quotas: list[float] = []
    for d in _cgroup_dirs("cpu"):
        v2 = _read(os.path.join(d, "cpu.max"))
        if v2:
            quota, _, period = v2.partition(" ")
            if quota != "max" and period:
                quotas.append(int(quota) / int(period))
            continue
        q, p = _read(os.path.join(d, "cpu.cfs_quota_us")), _read(os.path.join(d, "cpu.cfs_period_us"))
        if q and p and int(q) > 0 and int(p) > 0:
            quotas.append(int(q) / int(p))
    return min(quotas) if quotas else None


def cgroup_memory_limit() -> int | None:
    """Bytes allowed by the cgroup memory limit, or None when unlimited or unknown."""
    limits: list[int] = []
    for d in _cgroup_dirs("memory"):
        for name in ("memory.max", "memory.limit_in_bytes"):
            v = _read(os.path.join(d, name))
            if v and v != "max" and v.isdigit() and int(v) < 2**60:  # v1 "unlimited" is ~2**63
                limits.append(int(v))
    return min(limits) if limits else None


def _version(dist: str) -> str | None:
    """Installed version without importing the package (importing torch costs seconds)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _pillow_facts() -> dict:
    """Pillow's version and whether its JPEG decoder is libjpeg-turbo (2-6x faster decode, a common cpu fix)."""
    try:
        from PIL import __version__, features

        return {"version": __version__, "libjpeg_turbo": bool(features.check_feature("libjpeg_turbo"))}
    except Exception:
        return {"version": None, "libjpeg_turbo": None}


def _torch_facts() -> dict:
    try:
        import torch
    except Exception:
        return {"version": None, "cuda_available": False, "cuda_version": None, "cudnn_version": None,
                "gpu_count": 0, "num_threads": None}
    try:
        cuda = bool(torch.cuda.is_available())
    except Exception:
        cuda = False
    try:
        cudnn = torch.backends.cudnn.version() if cuda else None
    except Exception:
        cudnn = None
    return {
        "version": str(torch.__version__),  # a TorchVersion (str subclass) otherwise
        "cuda_available": cuda,
        "cuda_version": str(torch.version.cuda) if torch.version.cuda else None,
        "cudnn_version": int(cudnn) if cudnn is not None else None,
        "gpu_count": torch.cuda.device_count() if cuda else 0,
        "num_threads": torch.get_num_threads(),
    }


def _gpu(cuda_available: bool, gpu_index: int | None, cuda_index: int | None) -> dict | None:
    """NVML facts for the GPU, else torch's device properties, else None.

    Two numberings, never mixed: ``gpu_index`` is NVML's (PCI order over every GPU of the machine), ``cuda_index``
    torch's (the visible devices, fastest first by default); a torch call gets the CUDA index only.
    """
    if not cuda_available and gpu_index is None:
        return None
    cuda = 0 if cuda_index is None else cuda_index
    mapping_note = None
    if gpu_index is None:
        # no NVML index given: map torch's device to NVML without asking torch (which would initialise CUDA here)
        mapping = nvml_mapping_for_cuda_device(cuda, ask_torch=False)
        gpu_index, mapping_note = mapping.index, mapping.note
    facts = gpu_facts(gpu_index) if gpu_index is not None else None
    if facts is not None:
        facts["cuda_index"] = cuda
        if mapping_note:
            facts["mapping_note"] = mapping_note
        return facts
    if not cuda_available:
        return None
    try:
        import torch

        props = torch.cuda.get_device_properties(cuda)
        return {"index": gpu_index, "cuda_index": cuda, "name": props.name,
                "memory_total_bytes": int(props.total_memory)}
    except Exception:
        return None


def probe_environment(gpu_index: int | None = None, cuda_index: int | None = None) -> dict:
    """Machine and software facts (JSON-safe). `gpu_index`: NVML index of the GPU in use; `cuda_index`: torch's
    index of it (default 0, the first visible device); without `gpu_index` the NVML device is found from
    CUDA_VISIBLE_DEVICES. `usable_cores` = min(affinity mask, cgroup quota) as a float (a quota may be fractional)."""
    logical = psutil.cpu_count(logical=True)
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = logical
    quota = cgroup_cpu_quota()
    usable = float(affinity or logical or 1)
    if quota is not None:
        usable = min(usable, quota)
    vm = psutil.virtual_memory()
    torch_facts = _torch_facts()
    pillow = _pillow_facts()
    return {
        "cpu": {
            "model": _cpu_model(),
            "logical_cores": logical,
            "physical_cores": psutil.cpu_count(logical=False),
            "affinity_cores": affinity,
            "cgroup_cpu_quota": round(quota, 3) if quota is not None else None,
            "usable_cores": round(usable, 3),
            "usable_cores_int": max(1, math.floor(usable + 1e-9)),  # for "--workers N" style advice
        },
        "ram": {
            "total_bytes": int(vm.total),
            "available_bytes": int(vm.available),
            "cgroup_limit_bytes": cgroup_memory_limit(),
        },
        "os": {"system": platform.system(), "release": platform.release(), "machine": platform.machine(),
               "platform": platform.platform(terse=True)},
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable_bits": 64 if sys.maxsize > 2**32 else 32},
        "packages": {
            "torch": torch_facts["version"],
            "torchvision": _version("torchvision"),
            "pillow": pillow["version"] or _version("pillow"),
            "numpy": _version("numpy"),
            "psutil": psutil.__version__,
            "nvidia-ml-py": _version("nvidia-ml-py"),
        },
        "pillow_libjpeg_turbo": pillow["libjpeg_turbo"],
        "torch": torch_facts,
        "gpu": _gpu(torch_facts["cuda_available"], gpu_index, cuda_index),
    }
