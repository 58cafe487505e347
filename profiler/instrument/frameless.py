"""Frameless gaps: a ``num_workers=0`` monitor gap with no frame of the profiler's on the job's steps (seam 10).

NOTE [ Frameless gaps ]
    In a gap (NOTE [ Monitor gaps ], gaps.py) the job's ``next()`` runs torch's ``__next__`` inside
    ``torch_hooks._gap_next``: one Python frame a step, measured at +0.32 % ± 0.20 of a light loop's CPU with no
    profiler around it (docs/performance.md, 2026-12-07 afternoon), a third of the monitor's 1 % budget. With
    ``num_workers=0`` and torch's own fetch making the gap's batches (torch_hooks.fetch_untimed) nothing else of the
    profiler's is on a gap step, so the frame goes too:

    - *torch's own ``__next__``*: the gap's iterator is given, as an instance, a class of its own: a subclass of its
      class with the same name, module and docstring whose ``__next__`` is torch's (``plain_class``, made once per
      iterator class). Assigning an instance's ``__class__`` changes no type, so no class gets a new version tag
      (torch_hooks.hook_next says why that matters); every other iterator keeps the hooked ``__next__``, so an
      interleaved loader still closes the gap at its first step.
    - *the looks*: a ``num_workers=0`` iterator draws each batch's indices with ``next(self._sampler_iter)``
      (``_next_index``, on every batch). In a gap ``_sampler_iter`` is ``chain(islice(src, k), iter(draw, SENT))``:
      C iterators hand out the next ``k`` batches' indices, and the batch after them is drawn by ``Tap._draw``
      (Python, once every few steps), which makes the look (``gaps.Gaps._tick``: the clock and the count against
      their thresholds) and arms the next ``k``. A look is made as the batch it is about is being fetched, where
      ``_gap_next`` made it just after: either way the next ``next()`` is the first one the look can change.
    - *counting*: torch's ``_num_yielded`` while the iterator lives; a job that drops it mid-gap takes that count
      with it, so the one ``islice`` in use is drained at the close (at most one look's worth of the sampler's
      batches): the batches drawn before, all handed out (no workers: a batch is drawn inside its ``next()``).
    - *the epoch's end*: the sampler's StopIteration meets ``_draw``, which tells the gap (its count and time, as
      ``torch_hooks.gap_ended``) and ends the chain, so torch's ``__next__`` raises StopIteration as it would.

    What the job can observe during a gap: ``type(it)`` is the stand-in class (``isinstance`` holds, the name is
    the same) and ``it._sampler_iter`` is the chain; both are torch's again at the gap's close. ``problems()`` checks
    the two torch details this relies on; where either is missing the gap keeps ``_gap_next``.
"""
from __future__ import annotations

import inspect
import weakref
from itertools import chain, islice
from typing import Any, Callable

from .torch_private import ORIG_NEXT, dl

_END = object()  # the sentinel that ends a gap's chain (iter(callable, sentinel))
_plain: dict[type, type] = {}


def plain_class(cls: type) -> type:
    """``cls`` with torch's own ``__next__``: what a frameless gap's iterator is while the gap lasts."""
    p = _plain.get(cls)
    if p is None:
        ns = {"__slots__": (), "__next__": ORIG_NEXT, "__module__": cls.__module__, "__qualname__": cls.__qualname__,
              "__doc__": cls.__doc__, "_profiler_plain": True}
        p = _plain[cls] = type(cls.__name__, (cls,), ns)
    return p


def problems() -> list[str]:
    """What this torch lacks of seam 10 (the gap then keeps ``_gap_next`` on every step)."""
    try:
        nxt_index = inspect.getsource(dl._BaseDataLoaderIter._next_index)
        nxt_data = inspect.getsource(dl._SingleProcessDataLoaderIter._next_data)
    except (OSError, TypeError, AttributeError):
        return ["the source of _BaseDataLoaderIter._next_index / _SingleProcessDataLoaderIter._next_data is missing"]
    out = []
    if "next(self._sampler_iter)" not in nxt_index:
        out.append("_BaseDataLoaderIter._next_index no longer draws from self._sampler_iter")
    if "self._next_index()" not in nxt_data:
        out.append("_SingleProcessDataLoaderIter._next_data no longer draws its indices with _next_index")
    return out


def usable(it: Any) -> bool:
    """Can a gap on ``it`` be frameless: a single-process iterator (or a subclass that keeps torch's ``_next_data``)
    whose sampler iterator is in place, on a torch that has seam 10?"""
    cls = type(it)
    return (isinstance(it, dl._SingleProcessDataLoaderIter) and not getattr(cls, "_profiler_plain", False)
            and getattr(cls, "_next_data", None) is dl._SingleProcessDataLoaderIter._next_data
            and getattr(cls, "_next_index", None) is dl._BaseDataLoaderIter._next_index
            and getattr(it, "_sampler_iter", None) is not None and _SEAM_OK)


class Tap:
    """A frameless gap's hold on its iterator: torch's ``__next__`` on it (``off``) or the hooked one again (``on``),
    and the looks drawn from its sampler (module NOTE). ``tick(it, y)`` is called as batch ``y`` of the epoch is
    drawn (1-based: ``_num_yielded`` once it is handed out); ``ended(it)`` at the sampler's StopIteration."""

    def __init__(self, it: Any, tick: Callable[[Any, int], None], ended: Callable[[Any], None]):
        self.ref = weakref.ref(it)
        self.cls = type(it)
        self.plain = plain_class(self.cls)
        self.src = it._sampler_iter
        self.tick, self.ended = tick, ended
        self.off = False  # torch's own __next__ on the iterator now
        self.cur: Any = None  # the islice handing out indices (off), its length and the batch its first draw makes
        self.cur_k = self.cur_y = 0

    def hook_off(self, it: Any, y_next: int, y_look: int) -> None:
        """torch's own ``__next__`` from the next call on; the next look as batch ``y_look`` is drawn (``y_next``:
        the next batch to be drawn; a look at it or earlier: at once)."""
        k = max(0, y_look - y_next)
        self.cur, self.cur_k, self.cur_y = islice(self.src, k), k, y_next
        it._sampler_iter = chain(self.cur, iter(self._draw, _END))
        if not self.off:
            it.__class__ = self.plain
            self.off = True

    def hook_on(self, it: Any) -> None:
        """The hooked ``__next__`` and torch's sampler iterator back on ``it``."""
        if self.off:
            it.__class__ = self.cls
            self.off = False
        it._sampler_iter = self.src
        self.cur = None

    def drawn(self) -> int:
        """The iterator is gone (the job dropped it mid-gap): the batches it handed out, from the islice in use."""
        if self.cur is None:
            return self.cur_y - 1
        left = sum(1 for _ in self.cur)  # (what the iterator did not draw: at most one look's worth)
        self.cur = None
        return self.cur_y - 1 + self.cur_k - left

    def _draw(self) -> Any:
        """The batch after the islice's: its indices, and the look made as it is drawn."""
        it = self.ref()
        try:
            idx = next(self.src)
        except StopIteration:
            if it is not None:
                self.ended(it)
            return _END
        if it is not None and self.off:
            y = it._num_yielded + 1  # (the batch being made now)
            self.cur, self.cur_k, self.cur_y = None, 0, y + 1
            self.tick(it, y)  # re-arms (hook_off) or turns the hook on (a probe, the close)
        return idx


_SEAM_OK = not problems()
