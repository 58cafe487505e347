"""profiler: find out why a PyTorch job does not keep its compute device busy, and what to change.

``profiler.profile()`` profiles the DataLoader a block of your code iterates; ``profiler.stage("name")`` names a
part of your Dataset's ``__getitem__`` (near-zero cost when nothing is profiled). The command line:
``python -m profiler run train.py``.
"""
from __future__ import annotations

__version__ = "0.2.0"


def __getattr__(name: str):  # lazy: `import profiler` stays cheap and does not import torch
    if name in ("profile", "ProfileRun", "WindowClosed"):
        from . import api

        return getattr(api, name)
    if name == "stage":
        from .instrument.substages import stage

        return stage
    raise AttributeError(name)


__all__ = ["ProfileRun", "WindowClosed", "__version__", "profile", "stage"]
