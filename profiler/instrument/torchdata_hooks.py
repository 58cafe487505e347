"""Every private torchdata detail the profiler relies on, in one place, each checked by ``check()``.

torchdata's ``StatefulDataLoader`` is a ``torch.utils.data.DataLoader`` subclass with its own copy of the iterators
and the worker loop (so that the loader's state can be checkpointed). What the profiler needs of it:

1. ``torchdata.stateful_dataloader.stateful_dataloader._worker_loop`` — the module global its multiprocessing
   iterator starts each worker with (``target=_worker_loop``): torchdata's own loop
   (``torchdata.stateful_dataloader.worker``), which torch_hooks' replacement of torch's never reaches. Replaced by
   :func:`profiled_worker_loop` (the in-worker hooks, then torchdata's loop with the same arguments). Under
   ``spawn`` / ``forkserver`` the target is pickled by reference, so the child imports this module.
2. That loop makes its fetchers with torch's ``_DatasetKind.create_fetcher`` (looked up on torch's class when
   called), so they are torch_hooks' instrumented fetchers; and it checkpoints an IterableDataset's iterator as
   ``fetcher.dataset_iter`` through the ``Stateful`` protocol (``state_dict`` / ``load_state_dict``), which
   torch_hooks.instrument_fetcher keeps on the timed stand-in it puts there.
3. ``StatefulDataLoader.__iter__`` and ``__init__`` never call DataLoader's: overrides.py finds and wraps them by
   what they do; its iterators subclass ``_BaseDataLoaderIter`` and their ``__next__`` calls its ``__next__``
   (torch_hooks' hook sees every batch); its single-process iterator keeps its fetcher as ``_dataset_fetcher``
   (torch_hooks.lean_out_of).
4. ``torchdata.nodes.Loader.__iter__`` — wrapped only to note where a torchdata.nodes Loader was first iterated:
   such a pipeline is not profiled (docs/loaders.md), and the run says so instead of "iterated no DataLoader".

The job imports torchdata after the profiler started, so the patches are applied when its modules are imported (a
finder on ``sys.meta_path`` that runs them right after the module's own code), or at ``install()`` when it was
imported already. ``check()`` fails loudly (tests/test_next_jobs.py) when a torchdata release moves any of them; at
run time a moved seam is left unpatched with one line on stderr (the loader is then profiled from the main process
only), never a failure in the job's own import.
"""
from __future__ import annotations

import importlib
import importlib.abc
import inspect
import os
import sys
import threading
from types import ModuleType
from typing import Any, Callable

STATEFUL = "torchdata.stateful_dataloader.stateful_dataloader"
STATEFUL_WORKER = "torchdata.stateful_dataloader.worker"
NODES_LOADER = "torchdata.nodes.loader"

_patched: list[tuple[Any, str, Any]] = []  # (object, attribute, what it held) to put back
_finder: _AfterImport | None = None
_said: set[str] = set()  # seams found moved at run time (one line each)
#: Where the job first iterated a torchdata.nodes Loader ("file:line" of the user's code), or None.
nodes_loader_at: str | None = None


def torchdata_version() -> str:
    try:
        from importlib.metadata import version

        return version("torchdata")
    except Exception:  # noqa: BLE001 - not installed, or no metadata
        return "?"


def _own(fn: Any) -> Any:
    """The function ``fn`` stands in for, when it is one of ours."""
    return getattr(fn, "_profiler_own", fn)


def _source(obj: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


def check_stateful(sdl: ModuleType, sw: ModuleType) -> list[str]:
    """What this torchdata's StatefulDataLoader lacks of the seams above (empty when all are where expected)."""
    from torch.utils.data import DataLoader
    from torch.utils.data import dataloader as _dl

    from . import overrides

    problems = []
    loop = _own(getattr(sdl, "_worker_loop", None))
    if not callable(loop) or loop is not getattr(sw, "_worker_loop", None):
        problems.append(f"{STATEFUL}._worker_loop is no longer {STATEFUL_WORKER}._worker_loop")
    else:
        assert loop is not None
        params = list(inspect.signature(loop).parameters)
        if not params or params[0] != "dataset_kind":  # passed through untouched; a new loop is a new contract
            problems.append(f"torchdata's _worker_loop parameters changed: {params[:4]}")
        src = _source(loop)
        if "_DatasetKind.create_fetcher" not in src or "from torch.utils.data import _DatasetKind" not in src:
            problems.append("torchdata's _worker_loop no longer makes its fetchers with torch's "
                            "_DatasetKind.create_fetcher")
        if "try_to_deserialize(fetcher.dataset_iter," not in "".join(src.split()):
            problems.append("torchdata's _worker_loop no longer restores an iterable's state through "
                            "fetcher.dataset_iter")
    mp_iter = getattr(sdl, "_StatefulMultiProcessingDataLoaderIter", None)
    if mp_iter is None or "target=_worker_loop" not in _source(mp_iter.__init__):
        problems.append("StatefulDataLoader no longer starts its workers with its module's _worker_loop")
    loader = getattr(sdl, "StatefulDataLoader", None)
    if loader is None or not issubclass(loader, DataLoader):
        problems.append("torchdata's StatefulDataLoader is no longer a DataLoader subclass")
    else:
        for name in ("__iter__", "__init__"):
            if not overrides.seen_by_hooks(loader, name):
                problems.append(f"StatefulDataLoader.{name} neither calls DataLoader's nor makes its own "
                                "(overrides.py cannot follow it)")
    base = getattr(sdl, "_StatefulBaseDataLoaderIter", None)
    if base is None or not issubclass(base, _dl._BaseDataLoaderIter):
        problems.append("torchdata's iterators no longer subclass _BaseDataLoaderIter")
    elif not overrides.seen_by_hooks(base, "__next__"):
        problems.append("torchdata's iterators' __next__ no longer reaches _BaseDataLoaderIter.__next__")
    single = getattr(sdl, "_StatefulSingleProcessDataLoaderIter", None)
    if single is None or "self._dataset_fetcher = _DatasetKind.create_fetcher" not in _source(single):
        problems.append("torchdata's single-process iterator no longer keeps its fetcher as _dataset_fetcher")
    if "try_to_serialize(fetcher.dataset_iter)" not in _source(getattr(sw, "_make_state_dict", None)):
        problems.append("torchdata no longer checkpoints an iterable's iterator as fetcher.dataset_iter")
    stateful = getattr(sys.modules.get("torchdata.stateful_dataloader.stateful"), "Stateful", None)
    if stateful is None:
        problems.append("torchdata.stateful_dataloader.stateful.Stateful is missing")
    else:
        class Both:
            def state_dict(self) -> dict:
                return {}

            def load_state_dict(self, state: dict) -> None:
                pass

        if not isinstance(Both(), stateful) or isinstance(object(), stateful):
            problems.append("torchdata's Stateful protocol is no longer state_dict / load_state_dict")
    return problems


def check_nodes(loader_mod: ModuleType) -> list[str]:
    loader = getattr(loader_mod, "Loader", None)
    if loader is None or not callable(loader.__dict__.get("__iter__")):
        return ["torchdata.nodes.Loader.__iter__ is missing"]
    return []


def check() -> list[str]:
    """What this torchdata lacks of the seams above; empty when all are where expected or torchdata is absent."""
    try:
        sdl, sw = importlib.import_module(STATEFUL), importlib.import_module(STATEFUL_WORKER)
    except ImportError:
        return []
    problems = check_stateful(sdl, sw)
    try:
        nl = importlib.import_module(NODES_LOADER)
    except ImportError:  # torchdata before 0.10: no nodes
        return problems
    return problems + check_nodes(nl)


# --- the patches ---------------------------------------------------------------------------------------------------
def profiled_worker_loop(*args: Any, **kwargs: Any) -> Any:
    """A StatefulDataLoader worker's entry point while profiling: the in-worker hooks, then torchdata's loop."""
    from . import torch_hooks

    torch_hooks.worker_process_setup()
    return importlib.import_module(STATEFUL_WORKER)._worker_loop(*args, **kwargs)


def _say(seam: str, problem: str) -> None:
    if seam in _said:
        return
    _said.add(seam)
    print(f"profiler: this torchdata ({torchdata_version()}) changed an internal the profiler needs ({problem}); "
          f"its {seam} is profiled from the main process only", file=sys.stderr)


def _set(obj: Any, attr: str, value: Any) -> None:
    _patched.append((obj, attr, obj.__dict__.get(attr) if isinstance(obj, type) else getattr(obj, attr)))
    setattr(obj, attr, value)


def _patch_stateful(sdl: ModuleType) -> None:
    if getattr(sdl, "_worker_loop", None) is profiled_worker_loop:
        return
    sw = importlib.import_module(STATEFUL_WORKER)
    problems = check_stateful(sdl, sw)
    if problems:
        _say("StatefulDataLoader", problems[0])
        return
    profiled_worker_loop._profiler_own = sdl._worker_loop  # type: ignore[attr-defined]
    _set(sdl, "_worker_loop", profiled_worker_loop)


def _patch_nodes(nl: ModuleType) -> None:
    loader = getattr(nl, "Loader", None)
    problems = check_nodes(nl)
    if problems:
        _say("torchdata.nodes Loader", problems[0])
        return
    own = loader.__dict__["__iter__"]
    if getattr(own, "_profiler_own", None) is not None:
        return
    owner = (os.getpid(), threading.get_ident())

    def __iter__(self: Any) -> Any:
        global nodes_loader_at
        if nodes_loader_at is None and (os.getpid(), threading.get_ident()) == owner:
            from .loaders import call_sites

            nodes_loader_at = call_sites(1)[0]
        return own(self)

    __iter__._profiler_own = own  # type: ignore[attr-defined]
    __iter__.__wrapped__ = own  # type: ignore[attr-defined]
    _set(loader, "__iter__", __iter__)


_PATCHES: dict[str, Callable[[ModuleType], None]] = {STATEFUL: _patch_stateful, NODES_LOADER: _patch_nodes}


class _Then(importlib.abc.Loader):
    """A module's own loader, then the patch once the module's code has run (its real loader put back after)."""

    def __init__(self, loader: Any, patch: Callable[[ModuleType], None]):
        self._loader, self._patch = loader, patch

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        try:
            self._patch(module)
        except Exception as e:  # noqa: BLE001 - the job's import must go on; the loader is then seen from main only
            _say(module.__name__, f"{type(e).__name__}: {e}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _AfterImport(importlib.abc.MetaPathFinder):
    """On ``sys.meta_path``: for the modules in _PATCHES only, the spec the other finders give, loaded by _Then."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        patch = _PATCHES.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Then(spec.loader, patch)
        return spec


def install() -> None:
    """Patch torchdata's modules already imported, and the others when the job imports them (torch_hooks.install
    calls it, in the main process)."""
    global _finder, nodes_loader_at
    nodes_loader_at = None
    if _finder is None:
        _finder = _AfterImport()
        sys.meta_path.insert(0, _finder)
    for name, patch in _PATCHES.items():
        module = sys.modules.get(name)
        if module is not None:
            try:
                patch(module)
            except Exception as e:  # noqa: BLE001 - as in _Then
                _say(name, f"{type(e).__name__}: {e}")


def uninstall() -> None:
    """Put torchdata back and stop watching imports (``nodes_loader_at`` is kept for the run's last line)."""
    global _finder
    if _finder is not None:
        try:
            sys.meta_path.remove(_finder)
        except ValueError:
            pass
        _finder = None
    while _patched:
        obj, attr, old = _patched.pop()
        setattr(obj, attr, old)
