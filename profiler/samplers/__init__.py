"""Background sampling during a run: machine (psutil), per-process (/proc), GPU (NVML), plus the environment probe."""
from __future__ import annotations

from profiler.samplers.background import Sampler
from profiler.samplers.environment import probe_environment
from profiler.samplers.gpu import gpu_facts, nvml_index_for_cuda_device, nvml_mapping_for_cuda_device

__all__ = ["Sampler", "gpu_facts", "nvml_index_for_cuda_device", "nvml_mapping_for_cuda_device", "probe_environment"]
