"""Loaders whose batches cross threads on their way to the training loop: MONAI's ``ThreadDataLoader``.

NOTE [ Relayed loaders ]
    ``ThreadDataLoader.__iter__`` is a generator: at the first ``next()`` it calls ``DataLoader.__iter__`` (the
    epoch starts, in the job's main thread) and hands that iterator to a ``ThreadBuffer``, whose background thread
    calls its ``__next__`` and puts each batch on a queue; the main thread waits on the queue (``buffer_size``
    batches ahead; each yielded ``repeats`` times). The session's ``next()`` hook ran in that thread, so the loader
    was left alone (one process, one record) and the run measured 0 steps.

    overrides.py wraps every DataLoader subclass's own generator ``__iter__`` that calls its parent's: the generator
    it returns is handed to :meth:`Relays._on_relay`, which returns a generator of ours over it (:func:`stepped`,
    a generator still, closing the loader's when closed). Nothing changes while the loader's iterator is taken in
    the main thread (timm's ``MultiEpochsDataLoader``, a subclass that transforms its parent's batches): those
    steps are the iterator's own, as before. Once the profiled loader's iterator is taken in *another* thread of
    this process (:meth:`Relays._off_thread_next`), the loader is *relayed*: a step is the main thread's ``next()``
    on our generator (the wait on the queue: off-CPU, as a wait on workers is), the iterator leaves the profiled
    set and ours takes its place, and each batch's BatchMeta (its workers' figures, or the in-thread fetch's clocks
    with ``num_workers=0``) is kept beside the batch it came with until the main thread takes that batch.

    What follows from it: a repeated batch (``repeats``) is a step that did not wait, without worker figures (its
    making was counted once, at its first yield); a batch ready in the buffer is a short wait, as a prefetched
    batch is. The relay thread's own time (moving batches to the queue) is not attributed: it overlaps the steps.
    Not measured: the wait of the very first batch of the first epoch of each relayed loader (the relay is found
    inside it, after its wait began): that batch is a step without a wait, inside the warm-up unless ``--warmup 0``;
    from the second epoch on (the same loader) every batch is measured.
"""
from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Callable

from . import torch_hooks
from .batch import LO_W_ENTRY, BatchMeta, Instrumented, lean_meta, meta_of
from .steps import LoaderInfo

#: Batches a relay thread may have taken ahead of the main thread (their BatchMeta kept until taken): MONAI's
#: ThreadBuffer holds ``buffer_size`` (default 1) plus the one being put. Why a bound at all: a relay that drops
#: batches (a consumer that breaks early and leaves the thread running) must not grow memory; the oldest go first.
MAX_KEPT = 64
#: Added to the profiled loader's ``chosen`` (run.json job.loader.chosen; the loader line of the reports) once found
#: relayed: what a step means for it.
RELAYED_NOTE = ("; its batches are taken from the DataLoader in a background thread and handed over a queue (as "
                "MONAI's ThreadDataLoader does): a step is the main thread's next(), a batch yielded again a step of "
                "its own")


class Relay:
    """One epoch of a relayed loader: the loader's own generator, the iterator its body made (``inner``), the
    BatchMeta of the batches the relay thread took, until the main thread takes them."""

    __slots__ = ("loader", "gen", "inner_id", "relayed", "kept", "__weakref__")

    def __init__(self, loader: Any, gen: Any, relayed: bool):
        self.loader = weakref.ref(loader)
        self.gen = gen
        self.inner_id = 0  # id() of the iterator the generator's DataLoader.__iter__ made (0: not made yet)
        self.relayed = relayed
        self.kept: dict[int, tuple[Any, BatchMeta]] = {}  # id(batch) -> (batch, its meta)

    def keep(self, batch: Any, meta: BatchMeta) -> None:
        kept = self.kept
        kept[id(batch)] = (batch, meta)  # the batch is held: its id cannot be reused while kept
        while len(kept) > MAX_KEPT:
            kept.pop(next(iter(kept)))

    def take(self, batch: Any) -> Any:
        """The batch as the session's step expects it: its envelope when the relay thread kept a meta for it."""
        got = self.kept.pop(id(batch), None)
        return Instrumented(batch, got[1]) if got is not None and got[0] is batch else batch


def _next_of(box: Relay) -> Any:
    """``orig`` for the session's step on a relayed loader: the loader's next batch, with its meta."""
    return box.take(next(box.gen))


def stepped(session: Relays, box: Relay) -> Generator[Any, None, None]:
    """The generator the job iterates in place of the loader's own (NOTE [ Relayed loaders ])."""
    gen = box.gen
    try:
        while True:
            if box.relayed and id(box) in session._iters:
                try:
                    batch = session._on_next(box, _next_of)
                except StopIteration:
                    return
            else:
                try:
                    batch = next(gen)
                except StopIteration:
                    return
                if box.relayed and id(box) in session._iters:
                    # The relay was found inside this call (its first batch): a step of its own, without its wait.
                    batch = session._on_next(box, lambda b: b.take(batch))
            yield batch
    finally:
        session._relay_done(box)
        gen.close()


class Relays:
    """The relayed-loader half of session.Session (a mixin ahead of tracking.LoaderTracking: it sees the loader's
    ``iter()`` and the steps of iterators that are not profiled first)."""

    closed: bool
    _iters: set[int]
    _inthread: dict[int, list[Any] | None]
    _owner_pid: int
    _owner_thread: int | None
    _loader_ref: Any
    loader: LoaderInfo | None

    if TYPE_CHECKING:
        def _on_next(self, it: Any, orig: Callable[[Any], Any]) -> Any: ...

    def _relays(self) -> dict[int, Relay]:
        """id(inner iterator) -> its relay (made on first use: the session's __init__ is not this module's)."""
        d: dict[int, Relay] | None = self.__dict__.get("_relay_by_inner")
        if d is None:
            d = self.__dict__["_relay_by_inner"] = {}
        return d

    def _relay_state(self) -> tuple[list[Relay], weakref.WeakSet[Any]]:
        """(the relays whose generator has not made its iterator yet, the loaders found relayed)."""
        st: tuple[list[Relay], weakref.WeakSet[Any]] | None = self.__dict__.get("_relay_st")
        if st is None:
            st = self.__dict__["_relay_st"] = ([], weakref.WeakSet())
        return st

    def _on_relay(self, loader: Any, gen: Any) -> Any:
        """A DataLoader subclass's own generator ``__iter__`` returned ``gen`` (overrides.py): ours over it, in the
        job's main thread while profiling; ``gen`` itself anywhere else."""
        if self.closed or os.getpid() != self._owner_pid or threading.get_ident() != self._owner_thread:
            return gen
        pending, known = self._relay_state()
        try:
            relayed = loader in known
        except TypeError:  # not weak-referenceable
            relayed = False
        box = Relay(loader, gen, relayed)
        if relayed and self._loader_ref is not None and self._loader_ref() is loader:
            self._iters.add(id(box))  # its steps are measured from this epoch's first batch
        pending.append(box)
        return stepped(self, box)

    def _on_iter(self, loader: Any, orig: Callable[[Any], Any]) -> Any:
        it = super()._on_iter(loader, orig)  # type: ignore[misc]
        pending = self._relay_state()[0]
        if not pending or threading.get_ident() != self._owner_thread:
            return it
        box = next((b for b in reversed(pending) if b.loader() is loader and not b.inner_id), None)
        if box is not None:  # the generator's DataLoader.__iter__: its iterator is this epoch's
            pending.remove(box)
            box.inner_id = id(it)
            self._relays()[id(it)] = box
            if box.relayed and id(it) in self._iters:
                self._relay_swap(box)
        return it

    def _relay_swap(self, box: Relay) -> None:
        """The relay's steps are the main thread's on our generator, not the iterator's (taken in another thread)."""
        self._iters.discard(box.inner_id)
        self._inthread.pop(box.inner_id, None)
        self._iters.add(id(box))
        li = self.loader
        if li is not None and RELAYED_NOTE not in li.chosen:
            li.chosen += RELAYED_NOTE

    def _off_thread_next(self, it: Any, orig: Callable[[Any], Any]) -> Any:
        """``next()`` on a loader's iterator in a thread other than the job's main one (session._on_next's first
        test): left alone (unwrapped), unless it is a relayed loader's iterator in this process: then the batch's
        meta is kept for the main thread's step."""
        box = self.__dict__.get("_relay_by_inner", {}).get(id(it))
        if box is None or self.closed or os.getpid() != self._owner_pid:
            return torch_hooks.unwrap(orig(it))
        if not box.relayed:
            box.relayed = True
            loader = box.loader()
            if loader is not None:
                try:
                    self._relay_state()[1].add(loader)
                except TypeError:
                    pass
            if box.inner_id in self._iters:
                self._relay_swap(box)
        if id(box) not in self._iters:  # a loader that is not the profiled one: nothing kept (no batch held)
            return torch_hooks.unwrap(orig(it))
        t0 = time.perf_counter_ns()
        data = orig(it)
        if data.__class__ is Instrumented:
            box.keep(data.batch, meta_of(data))
            return data.batch
        holder = torch_hooks.lean_out_of(it)  # num_workers=0: the fetch ran in this thread, its clocks beside
        lean = holder[0] if holder is not None else None
        if lean is not None and lean[LO_W_ENTRY] >= t0:
            box.keep(data, lean_meta(lean, os.getpid()))
        return data

    def _relay_done(self, box: Relay) -> None:
        """Its generator ended or was closed: forget its iterator (ids are reused)."""
        if self.__dict__.get("_relay_by_inner", {}).get(box.inner_id) is box:
            del self._relays()[box.inner_id]
        self._iters.discard(id(box))
        pending = self._relay_state()[0]
        if box in pending:
            pending.remove(box)
        box.kept.clear()
