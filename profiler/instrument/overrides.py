"""DataLoader subclasses that override iteration without calling DataLoader's own, found by what they do.

torch_hooks.py hooks ``DataLoader.__iter__`` (an epoch starts), ``_BaseDataLoaderIter.__next__`` (a batch) and
``DataLoader.__init__`` (where a loader was made). A subclass whose own method never calls the parent's bypasses
that hook: torchdata's ``StatefulDataLoader`` makes its iterator in its own ``__iter__`` and sets its attributes in
its own ``__init__``, so before this module a job training from it ran unprofiled ("iterated no DataLoader").

Followed: every class below ``DataLoader`` or ``_BaseDataLoaderIter`` — those defined before ``install()`` (walked)
and those defined while profiling (``__init_subclass__``: a job imports torchdata after the profiler started) —
whose *own* ``__iter__`` / ``__next__`` / ``__init__`` is a plain function whose code (nested functions included)
names neither ``super`` nor the method (nor ``iter`` / ``next``): it makes the iterator, the batch or the loader
itself (:func:`bypasses`). That method is wrapped like torch's: ``__iter__`` through the session's ``on_iter``,
``__next__`` through ``on_next``, ``__init__`` then the creation callback. A method that calls its parent's is left
alone: the parent's hook sees it as before (MONAI's ``DataLoader``, timm's ``MultiEpochsDataLoader``). One kind is
wrapped all the same: a *generator* ``__iter__`` that calls its parent's (MONAI's ``ThreadDataLoader``, timm's
``MultiEpochsDataLoader``): the generator it returns goes to the session's ``on_relay``, because the parent's
iterator it makes may be taken in another thread (ThreadDataLoader's ThreadBuffer), where the session's ``next()``
hook leaves it alone; relay.py then steps the generator in the main thread instead (NOTE [ Relayed loaders ]).

Not followed, and why (docs/loaders.md): a generator ``__iter__`` that makes its iterator without any DataLoader's
``__iter__`` (its body runs at the first ``next()``, after the epoch began: there is no call to time); a loader
that is no DataLoader at all (torchdata.nodes' ``Loader``, DALI, FFCV): nothing of torch's runs. Workers started
by a loop other than torch's or torchdata's (torchdata_hooks.py) inherit the in-worker hooks when forked; spawned
ones are not instrumented (the main side is still measured).
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from torch.utils.data import DataLoader
from torch.utils.data import dataloader as _dl

_NOT_PLAIN = inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR | inspect.CO_COROUTINE
# Names in a method's code that say it calls its parent's (or the builtin that does).
_REACHES = {"__iter__": ("iter",), "__next__": ("next",), "__init__": ()}
_ROOT_METHODS: dict[type, tuple[str, ...]] = {DataLoader: ("__iter__", "__init__"),
                                              _dl._BaseDataLoaderIter: ("__next__",)}

_on_iter: Callable[[Any, Callable[[Any], Any]], Any] | None = None
_on_next: Callable[[Any, Callable[[Any], Any]], Any] | None = None
# (loader, the generator its own __iter__ returned) -> what the job iterates (relay.py: NOTE [ Relayed loaders ])
_on_relay: Callable[[Any, Any], Any] | None = None
_wrapped: list[tuple[type, str, Any]] = []  # (class, method name, the class's own function) to put back
_subclass_hooks: list[tuple[type, Any]] = []  # (root, the __init_subclass__ its __dict__ had, or None)


def _code_names(fn: Any) -> set[str] | None:
    """Every name a function's code uses (its nested functions' and lambdas' too), or None for no Python code."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    names: set[str] = set()
    todo = [code]
    while todo:
        c = todo.pop()
        names.update(c.co_names)
        names.update(c.co_freevars)
        todo.extend(k for k in c.co_consts if inspect.iscode(k))
    return names


def _names_parent(names: set[str], name: str) -> bool:
    return bool({"super", "__class__", name, *_REACHES[name]} & names)


def calls_parent(fn: Any, name: str) -> bool:
    """Does ``fn`` (a class's own ``name`` method) reach its parent's: ``super()``, the method by name, or the
    builtin that calls it? Generators included (their body runs later, in the same thread); True for no Python
    code (left alone)."""
    names = _code_names(fn)
    return names is None or _names_parent(names, name)


def bypasses(fn: Any, name: str) -> bool:
    """Is ``fn`` a plain function (no generator or coroutine) that makes what the parent's ``name`` would make
    without calling it, so the parent's hook never runs? The ones this module wraps."""
    names = _code_names(fn)
    return names is not None and not fn.__code__.co_flags & _NOT_PLAIN and not _names_parent(names, name)


def seen_by_hooks(cls: type, name: str) -> bool:
    """Does the profiler see ``cls``'s ``name`` (its own or the one it inherits): torch's hooked method, one this
    module wraps, or one that calls its parent's? False for a generator that never calls its parent's."""
    for k in cls.__mro__:
        fn = k.__dict__.get(name)
        if fn is None:
            continue
        return k in _ROOT_METHODS or getattr(fn, "_profiler_own", None) is not None or bypasses(fn, name) \
            or calls_parent(fn, name)
    return False


def _iter_wrapper(own: Any) -> Any:
    @functools.wraps(own)
    def __iter__(self: Any) -> Any:
        on_iter = _on_iter
        if on_iter is None or not (hasattr(self, "dataset") and hasattr(self, "num_workers")):
            return own(self)
        from . import torch_hooks

        torch_hooks.note_forker()
        return on_iter(self, own)

    __iter__._profiler_own = own  # type: ignore[attr-defined]
    return __iter__


def _next_wrapper(own: Any) -> Any:
    @functools.wraps(own)
    def __next__(self: Any) -> Any:
        on_next = _on_next
        if on_next is None:
            from .torch_hooks import unwrap

            return unwrap(own(self))  # after profiling: persistent workers still send envelopes
        return on_next(self, own)

    __next__._profiler_own = own  # type: ignore[attr-defined]
    return __next__


def _init_wrapper(own: Any) -> Any:
    @functools.wraps(own)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        own(self, *args, **kwargs)
        from . import torch_hooks

        cb = torch_hooks._on_created
        if cb is not None:
            cb(self)

    __init__._profiler_own = own  # type: ignore[attr-defined]
    return __init__


def _relay_wrapper(own: Any) -> Any:
    """A generator ``__iter__`` that calls its parent's (MONAI's ThreadDataLoader): its generator, handed to the
    session, which may step it in the main thread when the parent's iterator is taken in another (relay.py)."""
    @functools.wraps(own)
    def __iter__(self: Any) -> Any:
        gen = own(self)
        on_relay = _on_relay
        if on_relay is None or not (hasattr(self, "dataset") and hasattr(self, "num_workers")):
            return gen
        return on_relay(self, gen)

    __iter__._profiler_own = own  # type: ignore[attr-defined]
    return __iter__


def relays(fn: Any) -> bool:
    """Is ``fn`` (a DataLoader subclass's own ``__iter__``) a generator that calls its parent's? Its body runs at
    the first ``next()``, and what it does with the parent's iterator (another thread may take it) is seen then."""
    return getattr(fn, "__code__", None) is not None and bool(fn.__code__.co_flags & inspect.CO_GENERATOR) \
        and calls_parent(fn, "__iter__")


_WRAPPERS = {"__iter__": _iter_wrapper, "__next__": _next_wrapper, "__init__": _init_wrapper}


def follow(cls: type) -> list[str]:
    """Wrap ``cls``'s own methods that bypass their parent's hook (:func:`bypasses`); the names wrapped."""
    done = []
    for root, names in _ROOT_METHODS.items():
        if cls is root or not issubclass(cls, root):
            continue
        for name in names:
            fn = cls.__dict__.get(name)
            if fn is None or getattr(fn, "_profiler_own", None) is not None:
                continue
            if name == "__iter__" and relays(fn):
                setattr(cls, name, _relay_wrapper(fn))
                _wrapped.append((cls, name, fn))
                done.append(name)
                continue
            if not bypasses(fn, name):
                continue
            setattr(cls, name, _WRAPPERS[name](fn))
            _wrapped.append((cls, name, fn))
            done.append(name)
    return done


def _subclasses(root: type) -> list[type]:
    out: list[type] = []
    todo: list[type] = list(root.__subclasses__())
    seen: set[type] = set()
    while todo:
        c = todo.pop()
        if c in seen:
            continue
        seen.add(c)
        out.append(c)
        todo.extend(c.__subclasses__())
    return out


def _hook_subclassing(root: type) -> None:
    """Follow every class defined below ``root`` from now on (until ``uninstall``)."""
    own = root.__dict__.get("__init_subclass__")

    parent: Any = root  # (a variable: mypy takes super(root, ...) as a call on the type's own methods)

    def __init_subclass__(cls: Any, /, **kwargs: Any) -> None:
        if own is not None:
            own.__func__(cls, **kwargs)
        else:
            super(parent, cls).__init_subclass__(**kwargs)
        try:
            follow(cls)
        except Exception:  # noqa: BLE001 - a class we cannot follow stays as defined; the job's import goes on
            pass

    setattr(root, "__init_subclass__", classmethod(__init_subclass__))
    _subclass_hooks.append((root, own))


def install(on_next: Callable[[Any, Callable[[Any], Any]], Any],
            on_iter: Callable[[Any, Callable[[Any], Any]], Any],
            on_relay: Callable[[Any, Any], Any] | None = None) -> None:
    """Follow the subclasses defined so far and those defined from now on (hooks.install calls it)."""
    global _on_iter, _on_next, _on_relay
    _on_iter, _on_next, _on_relay = on_iter, on_next, on_relay
    if _subclass_hooks:
        return
    for root in _ROOT_METHODS:
        for cls in _subclasses(root):
            follow(cls)
        _hook_subclassing(root)


def uninstall() -> None:
    """Put every wrapped method back (a bypassing ``__next__`` keeps opening envelopes: persistent workers started
    while profiling still send them) and stop following new subclasses."""
    global _on_iter, _on_next, _on_relay
    _on_iter = _on_next = _on_relay = None
    for cls, name, fn in reversed(_wrapped):
        if name != "__next__":
            setattr(cls, name, fn)
    _wrapped[:] = [w for w in _wrapped if w[1] == "__next__"]
    for root, own in reversed(_subclass_hooks):
        if own is not None:
            setattr(root, "__init_subclass__", own)
        else:
            try:
                del root.__init_subclass__
            except AttributeError:
                pass
    _subclass_hooks.clear()
