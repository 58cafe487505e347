"""Memory sizes as users type them ("6GiB", "24GB", "512MiB", "6g") and GPU presets by name.

Units follow the usual convention (and Hugging Face accelerate's ``max_memory`` parser): ``KB/MB/GB/TB`` are
powers of 1000, ``KiB/MiB/GiB/TiB`` powers of 1024; a bare letter (``6g``, ``512m``) is binary, as in
``docker -m 6g`` and ``java -Xmx6g``. GPU makers' "24 GB" is in fact 24 GiB, so the presets below are binary;
typing ``--gpu-mem 24GB`` understates such a card by 7 %, which errs on the safe side.
"""
from __future__ import annotations

import re

from profiler.errors import UserError

KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4

_UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "k": KIB, "m": MIB, "g": GIB, "t": TIB,
    "kib": KIB, "mib": MIB, "gib": GIB, "tib": TIB,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
}
# Largest memory size accepted: 64 TiB is ~100x the largest single accelerator (a 2026 GPU carries < 300 GiB); a
# bigger figure is a typo, and past ~2**63 bytes it would not even fit the integer types the numbers end up in.
MAX_MEMORY_BYTES = 64 * TIB
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")

# Advertised memory of common training/inference GPUs, in GiB (what the spec sheet says). Usable memory is a bit
# lower: nvidia-smi shows e.g. 81,559 MiB of 81,920 on an H100 80GB and 143,771 MiB on an H200 "141 GB" (ECC and
# driver reservations), and the CUDA context then takes a few hundred MiB more; the estimator's workspace allowance
# (estimate.py) covers the context, so the presets stay at the advertised figure.
GPU_PRESETS: dict[str, int] = {
    "rtx2060-6g": 6 * GIB,
    "rtx2080ti-11g": 11 * GIB,
    "rtx3060-12g": 12 * GIB,
    "rtx3080-10g": 10 * GIB,
    "rtx3090-24g": 24 * GIB,
    "rtx4060-8g": 8 * GIB,
    "rtx4070-12g": 12 * GIB,
    "rtx4080-16g": 16 * GIB,
    "rtx4090-24g": 24 * GIB,
    "t4-16g": 16 * GIB,
    "v100-16g": 16 * GIB,
    "v100-32g": 32 * GIB,
    "a10-24g": 24 * GIB,
    "l4-24g": 24 * GIB,
    "a100-40g": 40 * GIB,
    "a100-80g": 80 * GIB,
    "h100-80g": 80 * GIB,
    "h200-141g": 141 * GIB,
}


def parse_size(text: str) -> int:
    """Bytes in ``text`` ("6GiB", "6GB", "6g", "512MiB", "1.5GiB", "1024"); UserError when it is not a size."""
    match = _SIZE_RE.match(str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise UserError(
            f"cannot read memory size '{text}': use a number with a unit such as 6GiB, 24GB, 512MiB or 6g"
        )
    value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise UserError(f"memory size must be positive, got '{text}'")
    if value > MAX_MEMORY_BYTES:
        raise UserError(f"memory size '{text}' is more than {format_bytes(MAX_MEMORY_BYTES)}: "
                        "check the number and its unit")
    return value


def format_bytes(n: float | None) -> str:
    """``1.50 GiB`` style (binary units, as nvidia-smi and torch.cuda report); ``-`` for None."""
    if n is None:
        return "-"
    sign = "-" if n < 0 else ""
    n = abs(float(n))
    for unit, scale in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= scale:
            return f"{sign}{n / scale:.2f} {unit}"
    return f"{sign}{int(n)} B"


def resolve_gpu_mem(text: str) -> tuple[int, str]:
    """``(bytes, label)`` for a preset name (case-insensitive, e.g. ``a100-40g``) or a size (``24GiB``)."""
    key = str(text).strip().lower()
    if key in GPU_PRESETS:
        return GPU_PRESETS[key], f"{key} ({format_bytes(GPU_PRESETS[key])})"
    if not _SIZE_RE.match(key):
        raise UserError(
            f"unknown --gpu-mem '{text}': give a size such as 24GiB or a preset: {', '.join(GPU_PRESETS)}"
        )
    try:
        size = parse_size(key)
    except UserError as exc:
        raise UserError(f"--gpu-mem: {exc}") from None
    return size, format_bytes(size)
