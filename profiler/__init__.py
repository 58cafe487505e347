"""profiler: find out why a PyTorch job does not keep its compute device busy, and what to change."""
from __future__ import annotations

__version__ = "0.1.0"
