"""Every private torch detail the profiler relies on, in one place, each checked by ``check()``.

Profiling a user's DataLoader unchanged needs these seams. Public API offers none of them for an existing loader
(a ``collate_fn`` or ``worker_init_fn`` of ours would replace the user's and change what their code observes), so:

1. ``torch.utils.data._utils.worker._worker_loop`` — the function every worker process runs. The DataLoader looks
   it up as a module attribute when it starts workers, so replacing it makes new workers run
   :func:`profiled_worker_loop` first. Under ``spawn`` / ``forkserver`` the target is pickled *by reference*, so the
   child imports this module, installs the in-worker hooks itself, then calls torch's loop with the same arguments.
2. ``torch.utils.data.dataloader._DatasetKind.create_fetcher`` — called in the worker loop (and by the
   single-process iterator) to build the fetcher; wrapped so every fetcher is instrumented (fetch.py, proxies.py).
3. ``torch.utils.data.dataloader._BaseDataLoaderIter.__next__`` — the main side: one call per batch the user's loop
   takes; it unwraps the batch and marks the step boundary.
4. ``torch.utils.data.DataLoader.__iter__`` — the start of each epoch (worker start-up, first prefetch).
5. ``torch.utils.data.DataLoader.__init__`` — wrapped while profiling so the Session learns where each loader was
   created (a public hook for that does not exist); the wrapper calls the original first and changes nothing.
6. ``torch.utils.data._utils.fetch``'s fetchers — their ``dataset`` (map-style), ``dataset_iter`` (iterable),
   ``collate_fn`` and ``fetch`` attributes are replaced on each fetcher instance (``instrument_fetcher``), and
   ``torch.utils.data._utils.pin_memory.pin_memory`` pins what the envelope carries (``pin_batch``).
7. ``_SingleProcessDataLoaderIter._dataset_fetcher`` — the fetcher of a ``num_workers=0`` iterator, whose
   ``fetch`` (inline_fetch.inline_map_fetch's) hands its lean batches' clocks over beside the batch (``lean_out_of``).
8. ``torch.utils.data._utils.signal_handling``'s SIGCHLD handler — recognised by its module and paused while the
   profiler saves its record (``worker_watchdog_paused``), so a worker dying then cannot abort the save.
9. ``_BaseDataLoaderIter._num_yielded`` — the batches an iterator has handed out this epoch, read (never written) by
   the monitor's gaps (``_gap_next``) while the ``__next__`` hook is off between detail chunks (instrument/gaps.py, NOTE
   [ Monitor gaps ]). Checked by ``gap_problems()``, not ``check()``: without it the monitor keeps the hook on every
   step (its cost before gaps), ``run`` does not need it.

``check()`` fails loudly (tests/test_torch_hooks.py) when a torch release moves any of them; ``install`` refuses to
run (one clear line) rather than profile wrongly.

A DataLoader subclass whose own ``__iter__`` / ``__init__`` (or an iterator subclass whose ``__next__``) never calls
the hooked one is followed by overrides.py; torchdata's StatefulDataLoader, which also has its own worker loop, by
torchdata_hooks.py (with its own ``check()``). hooks.py installs and removes all three together (both of those call
into this module, never the other way: no import cycle).
"""
from __future__ import annotations

import inspect
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable

from torch.utils.data import DataLoader

from . import clocks, substages, worker
from .batch import Instrumented
from .fetch import instrumented_parts
from .inline_fetch import MADE_ATTR, inline_map_fetch, lean_out_holder
from .torch_private import ORIG_CREATE_FETCHER as _ORIG_CREATE_FETCHER
from .torch_private import ORIG_INIT as _ORIG_INIT
from .torch_private import ORIG_ITER as _ORIG_ITER
from .torch_private import ORIG_NEXT as _ORIG_NEXT
from .torch_private import ORIG_WORKER_LOOP as _ORIG_WORKER_LOOP
from .torch_private import dl as _dl
from .torch_private import pin_batch  # noqa: F401 - torch's pinning, named here as before
from .torch_private import signal_handling as _signal_handling
from .torch_private import worker_mod as _worker_mod

_installed = False
_hooked_next: Any = None  # install's __next__ (hook_next puts it back after a monitor gap)


def check() -> list[str]:
    """What this torch lacks of the seams above (empty when everything is where the profiler expects it)."""
    problems = []
    if not callable(getattr(_worker_mod, "_worker_loop", None)):
        problems.append("torch.utils.data._utils.worker._worker_loop is missing")
    else:
        params = list(inspect.signature(_ORIG_WORKER_LOOP).parameters)
        if not params or params[0] != "dataset_kind":  # the arguments themselves are passed through untouched
            problems.append(f"_worker_loop's parameters changed: {params[:4]}")
    cf = _dl._DatasetKind.__dict__.get("create_fetcher")
    if not isinstance(cf, staticmethod):
        problems.append("_DatasetKind.create_fetcher is no longer a staticmethod")
    elif list(inspect.signature(cf.__func__).parameters) != ["kind", "dataset", "auto_collation", "collate_fn",
                                                             "drop_last"]:
        problems.append("_DatasetKind.create_fetcher's parameters changed")
    if not hasattr(_dl, "_BaseDataLoaderIter") or "__next__" not in _dl._BaseDataLoaderIter.__dict__:
        problems.append("_BaseDataLoaderIter.__next__ is missing")
    src = inspect.getsource(_dl._MultiProcessingDataLoaderIter.__init__)
    if "_utils.worker._worker_loop" not in src:
        problems.append("the DataLoader no longer starts workers through _utils.worker._worker_loop")
    import torch.utils.data._utils.fetch as fetch

    if not hasattr(fetch._IterableDatasetFetcher(iter(()), False, None, False), "dataset_iter"):
        problems.append("_IterableDatasetFetcher has no dataset_iter")
    for cls in (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher):
        f = cls([] if cls is fetch._MapDatasetFetcher else iter(()), False, None, False)
        if not all(hasattr(f, a) for a in ("dataset", "collate_fn", "fetch")):
            problems.append(f"{cls.__name__} lacks dataset/collate_fn/fetch")
        # The timed stand-ins work only if fetch() looks these up on the instance each call.
        src = inspect.getsource(cls.fetch)
        want = ("self.dataset_iter", "self.collate_fn") if cls is fetch._IterableDatasetFetcher else \
            ("self.dataset", "self.collate_fn")
        if not all(w in src for w in want):
            problems.append(f"{cls.__name__}.fetch no longer reads {' and '.join(want)}")
    from torch.utils.data._utils import pin_memory as _pin

    if not callable(getattr(_pin, "pin_memory", None)):
        problems.append("torch.utils.data._utils.pin_memory.pin_memory is missing")
    if "self._dataset_fetcher" not in inspect.getsource(_dl._SingleProcessDataLoaderIter.__init__):
        problems.append("_SingleProcessDataLoaderIter no longer keeps its fetcher as _dataset_fetcher")
    if "__init__" not in DataLoader.__dict__:
        problems.append("DataLoader.__init__ is not defined on DataLoader itself")
    if not callable(getattr(_signal_handling, "_set_SIGCHLD_handler", None)):
        problems.append("torch.utils.data._utils.signal_handling._set_SIGCHLD_handler is missing")
    return problems


def _torch_sigchld_handler() -> Any | None:
    """torch's SIGCHLD handler (set by the first multi-worker iterator), or None when another one is in place."""
    if not hasattr(signal, "SIGCHLD"):
        return None
    h = signal.getsignal(signal.SIGCHLD)
    return h if callable(h) and getattr(h, "__module__", None) == _signal_handling.__name__ else None


_paused_handler: Any = None  # torch's SIGCHLD handler while paused (pause_worker_watchdog)


def pause_worker_watchdog() -> None:
    """Pause torch's SIGCHLD handler from the job's end until ``resume_worker_watchdog`` (main thread only).

    Why: that handler raises ``RuntimeError: DataLoader worker ... is killed by signal`` in *whatever* code runs when
    a worker of a live iterator dies. After the profiled job has ended (a failed job's traceback keeps its iterator
    alive) workers still die: a scheduler signals the whole process group (torchrun's ``killpg`` when one rank
    failed), the OOM killer picks one. The raise then landed in the profiler's own imports or save and lost the
    record as an "internal error". The job is over, so nobody needs the alarm; the handler is put back after.
    """
    global _paused_handler
    if _paused_handler is not None or threading.current_thread() is not threading.main_thread():
        return
    h = _torch_sigchld_handler()
    if h is not None:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _paused_handler = h


def resume_worker_watchdog() -> None:
    """Put torch's SIGCHLD handler back (idempotent; main thread only)."""
    global _paused_handler
    if _paused_handler is None or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGCHLD) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGCHLD, _paused_handler)
    _paused_handler = None


@contextmanager
def worker_watchdog_paused() -> Iterator[None]:
    """``pause_worker_watchdog`` for a block (the profiler's own saving), resumed after unless it was paused
    before the block (then whoever paused it resumes it)."""
    already = _paused_handler is not None
    pause_worker_watchdog()
    try:
        yield
    finally:
        if not already:
            resume_worker_watchdog()


def _create_fetcher(kind: Any, dataset: Any, auto_collation: Any, collate_fn: Any, drop_last: Any) -> Any:
    from torch.utils.data import get_worker_info

    fetcher = _ORIG_CREATE_FETCHER.__func__(kind, dataset, auto_collation, collate_fn, drop_last)
    info = get_worker_info()
    return instrument_fetcher(fetcher, info.id if info is not None else -1)


# torch's _MapDatasetFetcher.fetch, as inline_fetch.inline_map_fetch writes it out (whitespace aside). Where torch's
# differs, the general path (proxy and timed collate_fn) is used instead: it relies only on what check() verifies.
_MAP_FETCH_SOURCE = """
def fetch(self, possibly_batched_index):
    if self.auto_collation:
        if hasattr(self.dataset, "__getitems__") and self.dataset.__getitems__:
            data = self.dataset.__getitems__(possibly_batched_index)
        else:
            data = [self.dataset[idx] for idx in possibly_batched_index]
    else:
        data = self.dataset[possibly_batched_index]
    return self.collate_fn(data)
"""
_map_fetch_known: bool | None = None


def _squash(src: str) -> str:
    return "\n".join(line.strip() for line in src.strip().splitlines() if line.strip())


def map_fetch_is_known() -> bool:
    """Is torch's map-style fetch exactly the one inline_map_fetch copies? (Read once per process.)"""
    global _map_fetch_known
    if _map_fetch_known is None:
        import torch.utils.data._utils.fetch as fetch

        try:
            _map_fetch_known = _squash(inspect.getsource(fetch._MapDatasetFetcher.fetch)) == _squash(_MAP_FETCH_SOURCE)
        except (OSError, TypeError):  # no source (a frozen install): the general path
            _map_fetch_known = False
    return _map_fetch_known


def instrument_fetcher(fetcher: Any, worker_id: int) -> Any:
    """Put the timed stand-ins (proxies.py, fetch.py) on a torch fetcher (its ``dataset`` or ``dataset_iter``,
    ``collate_fn`` and ``fetch``); ``check()`` verifies the fetchers still read these attributes per call. A plain
    map-style fetcher over a dataset without ``__getitems__`` gets inline_fetch.inline_map_fetch instead, when
    torch's fetch is the one it copies: only its ``fetch`` is replaced."""
    import torch.utils.data._utils.fetch as fetch_module

    kind = type(fetcher)
    if kind is fetch_module._MapDatasetFetcher and not (hasattr(fetcher.dataset, "__getitems__")
                                                        and fetcher.dataset.__getitems__) and map_fetch_is_known():
        fetcher.fetch = inline_map_fetch(fetcher, worker_id)
        clocks.forget_last_fetch()  # a new fetcher (after any calibration): its first fetch reads both ends
        return fetcher
    iterable = hasattr(fetcher, "dataset_iter")
    source = fetcher.dataset_iter if iterable else fetcher.dataset
    timed, collate, fetch = instrumented_parts(source, iterable, fetcher.collate_fn, fetcher.fetch, worker_id)
    if iterable:
        fetcher.dataset_iter = timed
        for name in ("state_dict", "load_state_dict"):  # torchdata checkpoints the iterator through these
            method = getattr(source, name, None)
            if callable(method):
                setattr(timed, name, method)
    else:
        fetcher.dataset = timed
    fetcher.collate_fn = collate
    fetcher.fetch = fetch
    clocks.forget_last_fetch()
    return fetcher


def lean_out_of(it: Any) -> list[Any] | None:
    """The LEAN_OUT holder of a ``num_workers=0`` iterator's fetch (inline_fetch.inline_map_fetch's), or None
    (another fetch, or an iterator with workers)."""
    # Any in-thread iterator (torchdata's StatefulDataLoader has its own, not a _SingleProcessDataLoaderIter).
    fetcher = getattr(it, "_dataset_fetcher", None) if isinstance(it, _dl._BaseDataLoaderIter) \
        and getattr(it, "_num_workers", None) == 0 else None
    return lean_out_holder(getattr(fetcher, "fetch", None))


_on_created: Callable[[Any], None] | None = None


def watch_loader_creation(on_created: Callable[[Any], None] | None) -> None:
    """Call ``on_created(loader)`` after each ``DataLoader.__init__`` (subclasses included) until called with None.

    Why: where a loader was made is the first fact a user needs to tell several loaders apart, and torch offers no
    hook for it. The wrapper runs the original ``__init__`` first and returns nothing of its own."""
    global _on_created
    _on_created = on_created
    if on_created is None:
        DataLoader.__init__ = _ORIG_INIT  # type: ignore[method-assign]
        return
    if DataLoader.__init__ is not _ORIG_INIT:
        return

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _ORIG_INIT(self, *args, **kwargs)
        cb = _on_created
        if cb is not None:
            cb(self)

    __init__.__wrapped__ = _ORIG_INIT  # type: ignore[attr-defined]
    DataLoader.__init__ = __init__  # type: ignore[method-assign]


def install_worker_side() -> None:
    """In-worker hooks: fetchers and library sub-stages (idempotent)."""
    _dl._DatasetKind.create_fetcher = staticmethod(_create_fetcher)  # type: ignore[method-assign]
    substages.install_library_stages()  # (the audit hook: at the first timed fetch, proxies.install_audit)


# (pid, forked from the main thread) of the process whose iter() is starting workers; a forked worker inherits it, a
# spawned one imports this module afresh and sees None.
_forker: tuple[int, bool] | None = None


def note_forker() -> None:
    """An iter() that may start workers is under way in this process and thread (``_forker``)."""
    global _forker
    _forker = (os.getpid(), threading.current_thread() is threading.main_thread())


def worker_process_setup() -> None:
    """What a worker process the profiler starts does before the loader's own loop: end with its parent, no
    peer-gone noise, the in-worker hooks, and the profiler's signal handling back (signals.keep_in_worker)."""
    from .. import signals

    if threading.current_thread() is not threading.main_thread():
        # A "worker" that is a thread of the job's own process (MONAI's ThreadDataLoader(use_thread_workers=True)
        # starts torch's loop in threads): the process-wide settings below are the job's; only the hooks.
        install_worker_side()
        return
    if _forker is not None and _forker[1] and os.getppid() == _forker[0]:
        worker.die_with_parent()
    worker.quiet_peer_gone()
    signals.keep_in_worker()
    install_worker_side()


def profiled_worker_loop(*args: Any, **kwargs: Any) -> Any:
    """The worker process's entry point while profiling: install the in-worker hooks, then torch's own loop."""
    worker_process_setup()
    return _ORIG_WORKER_LOOP(*args, **kwargs)


def install(on_next: Callable[[Any, Callable[[Any], Any]], Any],
            on_iter: Callable[[Any, Callable[[Any], Any]], Any]) -> None:
    """Main process: route workers, fetchers, ``__next__`` and ``__iter__`` through the profiler."""
    global _installed
    problems = check()
    if problems:
        from ..errors import UserError

        raise UserError(f"this torch ({torch_version()}) changed a DataLoader internal the profiler needs: "
                        f"{problems[0]}")

    def __next__(self: Any) -> Any:
        return on_next(self, _ORIG_NEXT)

    def __iter__(self: Any) -> Any:
        note_forker()
        return on_iter(self, _ORIG_ITER)

    __next__.__wrapped__ = _ORIG_NEXT  # type: ignore[attr-defined]
    __iter__.__wrapped__ = _ORIG_ITER  # type: ignore[attr-defined]
    _worker_mod._worker_loop = profiled_worker_loop
    install_worker_side()
    _dl._BaseDataLoaderIter.__next__ = __next__  # type: ignore[method-assign]
    DataLoader.__iter__ = __iter__  # type: ignore[method-assign]
    _installed = True
    global _hooked_next
    _hooked_next = __next__


def uninstall() -> None:
    """Restore torch. Batches still in flight from instrumented workers are unwrapped by ``unwrap``."""
    global _installed, gap_on
    gap_on = False
    _worker_mod._worker_loop = _ORIG_WORKER_LOOP
    _dl._DatasetKind.create_fetcher = _ORIG_CREATE_FETCHER  # type: ignore[method-assign]
    _dl._BaseDataLoaderIter.__next__ = _unwrapping_next  # type: ignore[method-assign]
    DataLoader.__iter__ = _ORIG_ITER  # type: ignore[method-assign]
    substages.uninstall_library_stages()
    _installed = False


# NOTE [ Monitor gaps ] (gaps.py): the state ``_gap_next`` reads at every step of a gap, set by the Gaps object
gap_ended: Callable[[Any], None] | None = None  # told of an iterator's StopIteration inside a monitor gap
gap_look: Callable[[Any, int], None] | None = None  # called when a threshold below is reached (Gaps._look)
gap_stop_y = 0  # ... the iterator's batch count at which to look
gap_due_ns = 0  # ... the perf_counter_ns at which to look (the clock read on the steps whose count & gap_mask is 0)
gap_mask = 0
gap_y = 0  # the batch count of the last step through the gap (the job may drop the iterator mid-gap)
gap_on = False  # a gap is open and the hook off (hook_next): _gap_next steps through it, else hands the step on
_perf_ns = time.perf_counter_ns


def _gap_next(self: Any) -> Any:
    """``__next__`` inside a monitor gap (NOTE [ Monitor gaps ], gaps.py): torch's own; the batch count copied and
    compared, the clock read and compared every ``gap_mask + 1`` steps, and ``gap_look`` called only when one of them
    says something is due; an envelope that a fetcher made all the same (its count ran apart from the epoch's) opened,
    so the job never sees one. An epoch's end is told to ``gap_ended`` (its count and time: the job may drop the
    iterator before the gap closes). Written for few bytecodes: it runs at every step of a gap, the job's own path.
    Outside a gap (the hook on: ``gap_on`` False) it hands the step to the profiler's ``__next__`` (hook_next says why
    it stays installed)."""
    global gap_y
    if not gap_on:
        return _hooked_next(self)
    try:
        data = _ORIG_NEXT(self)
    except StopIteration:
        cb = gap_ended
        if cb is not None:
            cb(self)
        raise
    y = gap_y = self._num_yielded
    if y >= gap_stop_y or not y & gap_mask and _perf_ns() >= gap_due_ns:
        look = gap_look
        if look is not None:
            look(self, y)
    return data.batch if data.__class__ is Instrumented else data


def hook_next(on: bool) -> None:
    """The profiler's ``__next__`` on (every step seen) or off (a monitor gap: ``_gap_next`` steps through it);
    nothing unless installed. ``_gap_next`` is put on ``_BaseDataLoaderIter`` at the first gap and stays until the
    hooks come out; on and off is then the flag ``gap_on``. Why not swap the class attribute each time: storing one
    gives the class (and its subclasses) a new version tag, which drops every specialised attribute read and method
    call on their instances, torch's own ``__next__`` and ``_next_data`` included, back to the generic path, with a
    backoff before they specialise again; a probe turns the hook on and off 10 times a second, and CPython 3.12+
    stops giving a class new tags after 1,000 (MAX_VERSIONS_PER_CLASS): its instances' reads would stay generic for
    the rest of the job. (On this 3.11 VM the monitor measured no different either way: it is the 3.12+ limit that
    decides.)"""
    global gap_on
    if not (_installed and _hooked_next is not None):
        return
    gap_on = not on
    if not on and _dl._BaseDataLoaderIter.__dict__.get("__next__") is not _gap_next:
        _dl._BaseDataLoaderIter.__next__ = _gap_next  # type: ignore[method-assign]


def fetch_untimed(it: Any) -> tuple[Any, Any] | None:
    """A monitor gap on a ``num_workers=0`` iterator whose fetcher has the written-out fetch (inline_fetch): take it
    off the fetcher, so torch's own ``fetch`` (the class's) makes the gap's batches with no frame of ours (NOTE
    [ Monitor gaps ]). Returns what fetch_timed_again puts back, or None (workers, another fetch: left as it is; its
    untimed branch runs per batch instead)."""
    fetcher = getattr(it, "_dataset_fetcher", None) if isinstance(it, _dl._BaseDataLoaderIter) \
        and getattr(it, "_num_workers", None) == 0 else None
    fn = vars(fetcher).get("fetch") if fetcher is not None and hasattr(fetcher, "__dict__") else None
    if fetcher is None or fn is None or not isinstance(getattr(fn, MADE_ATTR, None), list):
        return None
    del fetcher.fetch  # the class's fetch (torch's) from the next batch on
    from .fetch import skip_fetch

    skip_fetch()  # the next timed fetch measures nothing back to the last one before the gap
    return fetcher, fn


def fetch_timed_again(taken: tuple[Any, Any], it: Any) -> None:
    """The gap's end: the written-out fetch back on its fetcher, its count set to the batches ``it`` has handed out
    (with no workers, every batch made was handed out: the count the fetch would have kept)."""
    fetcher, fn = taken
    y = batches_yielded(it) if it is not None else None
    if y is not None:
        getattr(fn, MADE_ATTR)[0] = y
    fetcher.fetch = fn


def next_is_hooked(it: Any) -> bool:
    """Does ``it``'s ``__next__`` resolve to the hook this module put on ``_BaseDataLoaderIter`` (not an iterator
    subclass's own, overrides.py, or torchdata's)? Only then does ``hook_next`` take it off ``it``'s path."""
    nxt = getattr(type(it), "__next__", None)
    return _hooked_next is not None and (nxt is _hooked_next or nxt is _gap_next)


def batches_yielded(it: Any) -> int | None:
    """Seam 9: the batches ``it`` handed out this epoch (None where torch keeps no such count)."""
    v = getattr(it, "_num_yielded", None)
    return v if v.__class__ is int else None


def gap_problems() -> list[str]:
    """What this torch lacks of seam 9 (the monitor then keeps its hook on every step)."""
    try:
        nxt, reset = inspect.getsource(_ORIG_NEXT), inspect.getsource(_dl._BaseDataLoaderIter._reset)
    except (OSError, TypeError, AttributeError):
        return ["the source of _BaseDataLoaderIter.__next__ / _reset is not available"]
    if "self._num_yielded += 1" not in nxt or "self._num_yielded = 0" not in reset:
        return ["_BaseDataLoaderIter no longer counts its batches in _num_yielded"]
    return []


def _unwrapping_next(self: Any) -> Any:
    """After profiling: persistent workers started while profiling still send envelopes; open them, nothing else."""
    return unwrap(_ORIG_NEXT(self))


def unwrap(data: Any) -> Any:
    return data.batch if isinstance(data, Instrumented) else data


def torch_version() -> str:
    import torch

    return torch.__version__


# --- loader override: `sweep` runs a user's script unchanged at other num_workers / batch_size settings ------------
def override_loader(loader: Any, num_workers: int | None = None, batch_size: int | None = None) -> dict[str, Any]:
    """Change an existing DataLoader's ``num_workers`` / ``batch_size`` before it is first iterated, so a sweep can run
    the user's script unchanged at other settings. Returns {setting: [before, after]} for what changed.

    ``DataLoader.__setattr__`` refuses ``batch_size``, ``batch_sampler``, ``sampler`` and ``drop_last`` once the
    loader is initialised, so those go through ``object.__setattr__``; the BatchSampler is re-created from the
    loader's own sampler and drop_last exactly as ``DataLoader.__init__`` would have built it. A loader with a
    custom batch_sampler or ``batch_size=None`` has no batch size to change: a UserError says so.
    """
    from torch.utils.data import BatchSampler

    from ..errors import UserError

    changed: dict[str, Any] = {}
    if num_workers is not None and num_workers != loader.num_workers:
        before = loader.num_workers
        loader.num_workers = int(num_workers)  # allowed by DataLoader after init
        if num_workers == 0:
            object.__setattr__(loader, "prefetch_factor", None)
        elif getattr(loader, "prefetch_factor", None) is None:
            object.__setattr__(loader, "prefetch_factor", 2)  # DataLoader's default with workers
        if num_workers == 0 and loader.persistent_workers:
            object.__setattr__(loader, "persistent_workers", False)
        changed["num_workers"] = [before, int(num_workers)]
    if batch_size is not None and batch_size != loader.batch_size:
        if loader.batch_size is None:
            raise UserError("--override-batch-size: the profiled DataLoader has no batch_size to change (it was built "
                            "with batch_size=None or its own batch_sampler)")
        if not isinstance(loader.batch_sampler, BatchSampler):
            raise UserError("--override-batch-size: the profiled DataLoader's batch sampler is not a plain "
                            "BatchSampler; change the batch size in the script instead")
        before = loader.batch_size
        kind = type(loader.batch_sampler)  # torchdata's stateful BatchSampler stays one
        try:
            same = list(inspect.signature(kind).parameters) == ["sampler", "batch_size", "drop_last"]
        except (TypeError, ValueError):
            same = False
        object.__setattr__(loader, "batch_size", int(batch_size))
        object.__setattr__(loader, "batch_sampler", (kind if same else BatchSampler)(loader.sampler, int(batch_size),
                                                                                      loader.drop_last))
        changed["batch_size"] = [before, int(batch_size)]
    return changed
