"""Every private torch detail the profiler relies on, in one place, each checked by ``check()``.

Profiling a user's DataLoader unchanged needs these seams. Public API offers none of them for an existing loader
(a ``collate_fn`` or ``worker_init_fn`` of ours would replace the user's and change what their code observes), so:

1. ``torch.utils.data._utils.worker._worker_loop`` — the function every worker process runs. The DataLoader looks
   it up as a module attribute when it starts workers, so replacing it makes new workers run
   :func:`profiled_worker_loop` first. Under ``spawn`` / ``forkserver`` the target is pickled *by reference*, so the
   child imports this module, installs the in-worker hooks itself, then calls torch's loop with the same arguments.
2. ``torch.utils.data.dataloader._DatasetKind.create_fetcher`` — called in the worker loop (and by the
   single-process iterator) to build the fetcher; wrapped so every fetcher is instrumented (worker.py).
3. ``torch.utils.data.dataloader._BaseDataLoaderIter.__next__`` — the main side: one call per batch the user's loop
   takes; it unwraps the batch and marks the step boundary.
4. ``torch.utils.data.DataLoader.__iter__`` — the start of each epoch (worker start-up, first prefetch).
5. ``torch.utils.data._utils.signal_handling``'s SIGCHLD handler — recognised by its module and paused while the
   profiler saves its record (``worker_watchdog_paused``), so a worker dying then cannot abort the save.

``check()`` fails loudly (tests/test_torch_hooks.py) when a torch release moves any of them; ``install`` refuses to
run (one clear line) rather than profile wrongly.
"""
from __future__ import annotations

import inspect
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable

import torch.utils.data._utils.signal_handling as _signal_handling
import torch.utils.data._utils.worker as _worker_mod
from torch.utils.data import DataLoader
from torch.utils.data import dataloader as _dl

from . import substages, worker

_ORIG_WORKER_LOOP = _worker_mod._worker_loop
_ORIG_CREATE_FETCHER = _dl._DatasetKind.__dict__["create_fetcher"]
_ORIG_NEXT = _dl._BaseDataLoaderIter.__next__
_ORIG_ITER = DataLoader.__iter__
_installed = False


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
    return worker.instrument_fetcher(fetcher, info.id if info is not None else -1)


def install_worker_side() -> None:
    """In-worker hooks: fetchers and library sub-stages (idempotent)."""
    _dl._DatasetKind.create_fetcher = staticmethod(_create_fetcher)
    substages.install_library_stages()
    worker.install_audit()


# (pid, forked from the main thread) of the process whose iter() is starting workers; a forked worker inherits it, a
# spawned one imports this module afresh and sees None.
_forker: tuple[int, bool] | None = None


def profiled_worker_loop(*args: Any, **kwargs: Any) -> Any:
    """The worker process's entry point while profiling: install the in-worker hooks, then torch's own loop."""
    if _forker is not None and _forker[1] and os.getppid() == _forker[0]:
        worker.die_with_parent()
    worker.quiet_peer_gone()
    install_worker_side()
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
        global _forker
        _forker = (os.getpid(), threading.current_thread() is threading.main_thread())
        return on_iter(self, _ORIG_ITER)

    __next__.__wrapped__ = _ORIG_NEXT  # type: ignore[attr-defined]
    __iter__.__wrapped__ = _ORIG_ITER  # type: ignore[attr-defined]
    _worker_mod._worker_loop = profiled_worker_loop
    install_worker_side()
    _dl._BaseDataLoaderIter.__next__ = __next__
    DataLoader.__iter__ = __iter__
    _installed = True


def uninstall() -> None:
    """Restore torch. Batches still in flight from instrumented workers are unwrapped by ``unwrap``."""
    global _installed
    _worker_mod._worker_loop = _ORIG_WORKER_LOOP
    _dl._DatasetKind.create_fetcher = _ORIG_CREATE_FETCHER
    _dl._BaseDataLoaderIter.__next__ = _unwrapping_next
    DataLoader.__iter__ = _ORIG_ITER
    substages.uninstall_library_stages()
    _installed = False


def _unwrapping_next(self: Any) -> Any:
    """After profiling: persistent workers started while profiling still send envelopes; open them, nothing else."""
    return unwrap(_ORIG_NEXT(self))


def unwrap(data: Any) -> Any:
    return data.batch if isinstance(data, worker.Instrumented) else data


def torch_version() -> str:
    import torch

    return torch.__version__


# --- loader override (issue 10: `sweep` of a user's script) -------------------------------------------------------
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
        object.__setattr__(loader, "batch_size", int(batch_size))
        object.__setattr__(loader, "batch_sampler", BatchSampler(loader.sampler, int(batch_size), loader.drop_last))
        changed["batch_size"] = [before, int(batch_size)]
    return changed
