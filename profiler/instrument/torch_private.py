"""torch's private objects the profiler calls or restores, saved once at import: a leaf module (it imports torch and
nothing of the profiler), so that the record's envelope (batch.Instrumented pins through :func:`pin_batch`) and the
hooks (torch_hooks.py) can both reach them without importing each other.

NOTE [ The saved originals ]
    Each ``ORIG_*`` is torch's own object as it was when the profiler was first imported, before any hook replaced
    it: torch_hooks.install puts wrappers in their place and torch_hooks.uninstall puts these back. They are saved
    here, in a module nothing re-executes, so the originals are never a wrapper of ours; torch_hooks.check() verifies
    the seams themselves (torch_hooks.py's docstring lists all eight).
"""
from __future__ import annotations

from typing import Any

import torch.utils.data._utils.signal_handling as signal_handling  # noqa: F401 - torch's SIGCHLD handler's module
import torch.utils.data._utils.worker as worker_mod
from torch.utils.data import DataLoader
from torch.utils.data import dataloader as dl

ORIG_WORKER_LOOP = worker_mod._worker_loop
ORIG_CREATE_FETCHER = dl._DatasetKind.__dict__["create_fetcher"]
ORIG_NEXT = dl._BaseDataLoaderIter.__next__
ORIG_ITER = DataLoader.__iter__
ORIG_INIT = DataLoader.__init__


def pin_batch(batch: Any, device: Any = None) -> Any:
    """torch's own pinning of a batch (what the pin-memory thread would do to the user's batch)."""
    from torch.utils.data._utils.pin_memory import pin_memory

    return pin_memory(batch, device)
