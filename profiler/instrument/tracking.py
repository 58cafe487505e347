"""Which loader the session profiles: the loaders the job makes and iterates, the one adopted, the others counted,
a loader made afresh each epoch carried on as the same one, and the window moving to another loader when the
profiled one stops early. The loader-tracking half of session.Session (a mixin: the state is the session's).

NOTE [ The profiled loader ]
    The first loader the job iterates (or the first one ``--loader`` names) is adopted; every other loader's batches
    are unwrapped and counted (OtherLoader), never measured. A loader made on the same line, over the same dataset
    class, with the same workers and batch size, and iterated once the profiled one's epoch is over, is that loader's
    next epoch (``recreated``). A loader iterated after the profiled one stopped delivering, whose epoch promises
    more batches, takes the window over: the short figures become an OtherLoader (ROLE_ENDED_EARLY) and the window
    starts afresh (``restarts``). One process, one record: a loader iterated in another thread or in a process the
    job forked is left alone.
"""
from __future__ import annotations

import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable

from . import torch_hooks
from .batch import DETAIL_RANGE, NO_RANGE, SAMPLING, BatchMeta, set_detail_range, set_worker_detail
from .gaps import Gaps
from .loaders import LoaderSelector, call_sites, count_samples, epoch_length
from .steps import (
    ROLE_ENDED_EARLY,
    ROLE_NOT_NAMED,
    ROLE_OTHER,
    CudaTimeline,
    EpochRow,
    LoaderInfo,
    OtherIter,
    OtherLoader,
    StepRow,
    Tail,
    loader_info,
    qualified_name,
)


class LoaderTracking:
    """The loader-tracking half of session.Session (state declared here for the types; set in Session.__init__)."""

    select: LoaderSelector | None
    override: dict[str, int]
    closed: bool
    loader: LoaderInfo | None
    epochs: list[EpochRow]
    others: list[OtherLoader]
    restarts: int
    rows: list[StepRow]
    metas: list[BatchMeta]
    tail: Tail
    tail_skipped: list[tuple[int, str, str]]
    read_from: dict[str, int]
    cuda: CudaTimeline | None
    window_start_ns: int
    _loader_ref: Any
    _iters: set[int]
    _inthread: dict[int, list[Any] | None]
    _other_entry: weakref.WeakKeyDictionary[Any, OtherLoader]
    _other_iters: weakref.WeakKeyDictionary[Any, OtherIter]
    _created: weakref.WeakKeyDictionary[Any, tuple[str | None, str | None]]
    _owner_pid: int
    _owner_thread: int | None
    _last_next_ns: int
    _epoch_batches: int
    _epoch_done: bool
    _live_iter: Any
    _n_steps: int
    _measured_done: int
    _open_row: StepRow | None
    _flat: list[list[Any]]
    _flat_done: int
    _rows_unsorted: bool
    _open_flat: list[Any] | None
    _open_wt: list[int] | None
    _tail_entered: bool
    _fast: bool
    _basis: dict[str, int]
    sampling: tuple[int, int] | None
    _plan: list[int] | None
    _lw1: int
    _gap: Gaps | None

    if TYPE_CHECKING:  # the session's own, called from here
        def _on_next(self, it: Any, orig: Callable[[Any], Any]) -> Any: ...

        def _materialize(self) -> None: ...

    def _loader_created(self, loader: Any) -> None:
        try:
            self._created[loader] = call_sites(2)
        except TypeError:  # not weak-referenceable (a DataLoader subclass with __slots__): no creation site
            pass


    def _on_iter(self, loader: Any, orig: Callable[[Any], Any]) -> Any:
        if os.getpid() != self._owner_pid or threading.get_ident() != self._owner_thread:
            return orig(loader)  # another thread, or a process the job forked: left alone (one process, one record)
        if self._gap is not None:  # the monitor's gap ends here (NOTE [ Monitor gaps ], gaps.py)
            self._gap.close(time.perf_counter_ns(), False)
        adopt = self._loader_ref is None and not self.closed and loader not in self._other_entry
        eligible = self.select is None or self.select.matches(qualified_name(loader.dataset),
                                                             self._created.get(loader, (None, None)))
        overridden = None
        if self.override and adopt and eligible:  # the profiled loader, before it starts
            overridden = torch_hooks.override_loader(loader, **self.override)
        sites = call_sites(1)
        t0 = time.perf_counter_ns()
        it = orig(loader)
        t1 = time.perf_counter_ns()
        if self.closed:
            return it
        if adopt and eligible:
            self._adopt(loader, it, sites, t0, t1, "the first loader the job iterated" if self.select is None
                        else f"named by --loader {self.select}")
            self.loader.overridden = overridden or None  # type: ignore[union-attr]
        elif self._loader_ref is not None and (self._loader_ref() is loader or self._remade(loader, eligible)):
            if self._loader_ref() is not loader:  # the same loader made afresh for this epoch: the window goes on
                self._loader_ref = weakref.ref(loader)
                self.loader.recreated += 1  # type: ignore[union-attr]
            self._iters.add(id(it))
            if loader.num_workers == 0:
                self._inthread[id(it)] = torch_hooks.lean_out_of(it)
            self.epochs.append(EpochRow(len(self.epochs), t0, t1))
            self._new_epoch(it)
        else:
            self._iters.discard(id(it))  # a dropped profiled iterator's id, reused by this one's
            self._inthread.pop(id(it), None)
            entry = self._other_entry.get(loader)
            if entry is None:
                entry = OtherLoader(qualified_name(loader.dataset), self._created.get(loader, (None, None))[0],
                                    int(loader.num_workers), loader.batch_size,
                                    ROLE_OTHER if eligible else ROLE_NOT_NAMED, iterated_at=sites[0], first_ns=t0)
                self._other_entry[loader] = entry
                self.others.append(entry)
            entry.epochs += 1
            # inside a step: the profiled loader delivered a batch this epoch and has not ended it (its next() not
            # called again yet: this loop is in that step's body)
            in_step = self._loader_ref is not None and self._epoch_batches > 0 and not self._epoch_done
            try:
                self._other_iters[it] = OtherIter(entry, weakref.ref(loader), t0, eligible, sites, in_step=in_step,
                                                  mark_ns=t0)
            except TypeError:
                pass
        return it

    def _remade(self, loader: Any, eligible: bool) -> bool:
        """Is ``loader`` the profiled one made afresh, as a loop that writes ``for b in DataLoader(...)`` inside its
        epoch loop does? Made on the same line, over the same dataset class, with the same workers and batch size,
        and iterated once the profiled loader's epoch is over (or the loader is gone): then it is that loader's next
        epoch, and the window goes on over it, instead of the run ending as partial when the first one stops."""
        li, old = self.loader, self._loader_ref() if self._loader_ref is not None else None
        if li is None or not eligible or loader in self._other_entry or not (old is None or self._epoch_done):
            return False
        created = self._created.get(loader, (None, None))[0]
        return created is not None and created == li.created_at and qualified_name(loader.dataset) == li.dataset_class \
            and int(loader.num_workers) == li.num_workers and loader.batch_size == li.batch_size

    def _adopt(self, loader: Any, it: Any, sites: tuple[str | None, str | None], t0: int, t1: int,
               why: str) -> None:
        self._loader_ref = weakref.ref(loader)
        self.loader = loader_info(loader, self._created.get(loader), sites)
        self.loader.chosen = why
        self._iters = {id(it)}
        self._inthread = {id(it): torch_hooks.lean_out_of(it)} if loader.num_workers == 0 else {}
        self.epochs = [EpochRow(0, t0, t1)]
        self._new_epoch(it)

    def _new_epoch(self, it: Any) -> None:
        self._epoch_batches, self._epoch_done = 0, False
        # NOTE [ Monitor sampling ] (batch.py): this epoch's fresh fetchers make in detail only the batches of the
        # detail range the monitor sets from now on (the last epoch's, emptied here, indexed that epoch's batches)
        self._plan = None
        if self.sampling is not None and self.loader is not None and SAMPLING[0]:
            set_detail_range(NO_RANGE, NO_RANGE)
            self._plan = DETAIL_RANGE
        try:
            self._live_iter = weakref.ref(it)
        except TypeError:
            self._live_iter = None

    def _takes_over(self, o: OtherIter) -> bool:
        """Does the window move to this other loader? Only when the profiled one has delivered nothing since this
        one was iterated (it stopped or was dropped, not interleaved with it) and this one's epoch promises more
        batches than the profiled one delivered in its last epoch (a sanity check, a shape probe)."""
        if not o.eligible or self.closed or self._last_next_ns > o.iter_ns:
            return False
        loader = o.loader()
        if loader is None:
            return False
        ahead = epoch_length(loader)
        if ahead is None and o.entry.steps:  # a loader seen before: the longest epoch it ran
            ahead = o.entry.steps // max(o.entry.epochs - 1, 1)
        mine = self._epoch_batches
        profiled = self._loader_ref() if self._loader_ref is not None else None
        if not self._epoch_done and self._live_iter is not None and self._live_iter() is not None \
                and profiled is not None:
            # Its epoch is unfinished and its iterator still held: a validation pass in the middle of a training
            # epoch, which returns to it. The rest of its epoch counts, so only a longer loader takes the window.
            mine = max(mine, epoch_length(profiled) or 0)
        return ahead is None or mine < ahead

    def _restart_on(self, o: OtherIter, it: Any) -> None:
        """The profiled loader stopped early: keep its short figures as an other loader, start afresh on ``o``."""
        old = self._loader_ref() if self._loader_ref is not None else None
        loader = o.loader()
        if loader is None:  # checked by _takes_over a moment ago; kept safe all the same
            return
        self._materialize()
        if self.loader is not None:
            li = self.loader
            measured = [r for r in self.rows if r.wait_end_ns]
            entry = OtherLoader(li.dataset_class, li.created_at, li.num_workers, li.batch_size, ROLE_ENDED_EARLY,
                                iterated_at=li.iterated_at, epochs=len(self.epochs),
                                steps=len(measured) + self.tail.steps,
                                samples=sum(r.n_samples for r in measured) + self.tail.samples,
                                wait_ns=sum(r.wait_end_ns - r.wait_start_ns for r in measured) + self.tail.wait_ns,
                                first_ns=self.epochs[0].iter_start_ns if self.epochs else 0,
                                last_ns=max([r.wait_end_ns for r in measured] or [0]))
            self.others.append(entry)
            if old is not None:
                self._other_entry[old] = entry
        self.others.remove(o.entry)
        del self._other_entry[loader]
        self.rows, self.metas, self.tail, self.tail_skipped, self.read_from = [], [], Tail(), [], {}
        self._n_steps = self._measured_done = 0
        self._open_row, self.cuda, self.window_start_ns, self._lw1, self._open_wt = None, None, 0, 0, None
        self._tail_entered = False
        set_worker_detail(True)  # the new loader's detail: every batch again
        self._flat, self._flat_done, self._rows_unsorted, self._open_flat, self._fast = [], 0, False, None, False
        self._basis = {}
        self.restarts += 1
        self._adopt(loader, it, o.sites, o.iter_ns, o.iter_ns,
                    f"the job went on with it after {self._restarted_from(old)} stopped early")
        self._epoch_batches = o.entry.steps if o.entry.epochs == 1 else 0  # what it already delivered this epoch
        if self.override and self.loader is not None:  # applied when the first loader started; too late for this one
            self.loader.chosen += " (--override-* changed the first loader, not this one: name it with --loader)"

    @staticmethod
    def _restarted_from(old: Any) -> str:
        return f"the {qualified_name(old.dataset).rsplit('.', 1)[-1]} loader" if old is not None else "the first loader"

    @staticmethod
    def _other_loop(o: OtherIter, t: int) -> None:
        """An other loader's loop went on to ``t`` (its next() returned or raised): OtherLoader.loop_ns."""
        d, o.mark_ns = t - o.mark_ns, t
        o.entry.loop_ns += d
        if o.in_step:
            o.entry.loop_in_step_ns += d

    def _other_next(self, it: Any, orig: Callable[[Any], Any]) -> Any:
        """next() of a loader that is not profiled: counted, or taking the window over (see _takes_over)."""
        o = self._other_iters.get(it)
        if o is None:
            return torch_hooks.unwrap(orig(it))
        if not o.checked:
            o.checked = True
            if self._takes_over(o):
                self._restart_on(o, it)
                return self._on_next(it, orig)
        t0 = time.perf_counter_ns()
        e = o.entry
        try:
            batch = torch_hooks.unwrap(orig(it))
        except StopIteration:
            self._other_loop(o, time.perf_counter_ns())
            raise
        t1 = time.perf_counter_ns()
        self._other_loop(o, t1)
        e.steps += 1
        e.wait_ns += t1 - t0
        e.last_ns = t1
        n = count_samples(batch, e.batch_size)
        e.samples += n[0] if n is not None else (e.batch_size or 1)
        return batch

