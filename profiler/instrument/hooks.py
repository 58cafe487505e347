"""Every hook the profiler puts into torch and torchdata, put in and taken out together.

torch_hooks.py holds torch's own seams; overrides.py follows DataLoader subclasses whose own ``__iter__`` /
``__next__`` / ``__init__`` never reach the hooked ones; torchdata_hooks.py replaces torchdata's own worker loop. The
last two call into torch_hooks (a StatefulDataLoader worker runs torch_hooks' worker setup), so torch_hooks must not
import them back: this module, above all three, is the one place that installs them (the Session calls it).
"""
from __future__ import annotations

from typing import Any, Callable

from . import overrides, torch_hooks, torchdata_hooks


def install(on_next: Callable[[Any, Callable[[Any], Any]], Any], on_iter: Callable[[Any, Callable[[Any], Any]], Any],
            on_relay: Callable[[Any, Any], Any] | None = None) -> None:
    """torch's seams first (the subclass wrappers hand their calls to the same ``on_next`` / ``on_iter``; a
    subclass's generator ``__iter__`` hands its generator to ``on_relay``: relay.py)."""
    torch_hooks.install(on_next, on_iter)
    overrides.install(on_next, on_iter, on_relay)
    torchdata_hooks.install()


def uninstall() -> None:
    """The reverse order: the subclass wrappers and torchdata's loop first, then torch's seams."""
    overrides.uninstall()
    torchdata_hooks.uninstall()
    torch_hooks.uninstall()
