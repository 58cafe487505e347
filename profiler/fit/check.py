"""The fit check as one dict: the breakdown (estimate), the card's memory (given or detected), whether it fits, the
largest batch that fits, and what to change when it does not (advice). What ``fit --json`` prints and what the
terminal view and the plot read (profiler/render/fit_terminal.py, fit_plot.py); the command's arguments and their
checks are in profiler/commands/fit.py.
"""
from __future__ import annotations

from profiler.fit.advice import oom_recommendations
from profiler.fit.estimate import breakdown_max_batch, estimate_memory
from profiler.fit.sizes import format_bytes, resolve_gpu_mem

NO_GPU_NOTE = "no GPU detected; give --gpu-mem SIZE_OR_PRESET to check the fit"


def detect_gpu_mem(device: str = "auto") -> tuple[int, str] | None:
    """(total bytes, name) of the CUDA device fit measures on (``cuda:N``, else device 0), or None without one."""
    try:
        import torch

        if not torch.cuda.is_available() or device == "cpu":
            return None
        index = torch.device(device).index if device.startswith("cuda") else None
        props = torch.cuda.get_device_properties(index or 0)
        return int(props.total_memory), f"{props.name} ({format_bytes(props.total_memory)}, detected)"
    except Exception:  # a broken driver is the same as no GPU for this purpose  # noqa: BLE001
        return None


def fit_result(model: str, batch_size: int, *, mode: str, precision: str, amp: bool, optimizer: str, image_size: int,
               num_classes: int, gpu_mem: str | None, device: str) -> dict:
    """Every figure of the fit check as one dict (what ``--json`` prints); UserError on a bad ``gpu_mem`` or model.

    ``gpu_mem``: a size or preset (profiler/fit/sizes.py), or None for the detected GPU's total memory.
    """
    gpu: tuple[int, str] | None
    if gpu_mem is not None:
        gpu = resolve_gpu_mem(gpu_mem)
    else:
        gpu = detect_gpu_mem(device)
    bd = estimate_memory(model, batch_size, mode=mode, precision=precision, amp=amp, optimizer=optimizer,
                         image_size=image_size, num_classes=num_classes, device=device)
    result: dict = {"breakdown": bd.to_dict(), "gpu_bytes": None, "gpu_label": None, "fits": None,
                    "headroom_bytes": None, "max_batch_size": None, "recommendations": [], "notes": list(bd.notes)}
    if gpu is None:
        result["notes"].append(NO_GPU_NOTE)
        return result
    gpu_bytes, label = gpu
    result.update(gpu_bytes=gpu_bytes, gpu_label=label, fits=bd.total_bytes <= gpu_bytes,
                  headroom_bytes=gpu_bytes - bd.total_bytes, max_batch_size=breakdown_max_batch(bd, gpu_bytes),
                  recommendations=oom_recommendations(bd, gpu_bytes))
    return result
