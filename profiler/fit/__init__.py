"""Will it fit? Device memory of one training or inference step, and what to change when it does not.

Modules, in import order (each imports only those before it, and of the rest of the profiler only
profiler.harness.models and profiler.errors): sizes (memory sizes and GPU presets), measure (activation bytes as
a line in batch size, on the CPU or the GPU), estimate (the breakdown and the largest batch), advice (what to change
when it does not fit), check (every figure of one check as the dict ``fit --json`` prints). The ``fit`` command's
arguments and handler are profiler/commands/fit.py; the terminal view and the PNG profiler/render/fit_terminal.py
and fit_plot.py.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from profiler.fit.advice import oom_recommendations
    from profiler.fit.estimate import MemoryBreakdown, estimate_memory, max_batch_size

__all__ = ["MemoryBreakdown", "estimate_memory", "max_batch_size", "oom_recommendations"]


def __getattr__(name: str) -> Any:
    """The package's names, imported when first asked for. Why lazy: estimate and advice import torch (through
    profiler.harness.models), and ``profiler.fit.sizes`` (pure: sizes, GPU presets, ``format_bytes``) is imported by
    renderers, which must not import torch (tests/test_layout.py)."""
    if name == "oom_recommendations":
        from profiler.fit.advice import oom_recommendations

        return oom_recommendations
    if name in ("MemoryBreakdown", "estimate_memory", "max_batch_size"):
        from profiler.fit import estimate

        return getattr(estimate, name)
    raise AttributeError(f"module 'profiler.fit' has no attribute {name!r}")
