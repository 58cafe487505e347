"""``view``: a record section (a JSON object) as a frozen dataclass, taking each declared field the section holds.

The machinery under profiler/record/read.py's views (views_raw, views_derived, views_attach), in a module of its own
so that a view's own properties can read its rows as views too without an import cycle.
"""
from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Mapping
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

V = TypeVar("V")


@functools.lru_cache(maxsize=None)
def _fields(cls: type) -> tuple[tuple[str, type | None, bool], ...]:
    """Each field's name, the view type it holds (or None), and whether it is a list of that view. A field typed
    ``SomeView | None`` holds that view where the section has an object there, else None (absent: not recorded)."""
    hints = get_type_hints(cls)
    out: list[tuple[str, type | None, bool]] = []
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        args = get_args(t)
        if isinstance(t, types.UnionType) and len(args) == 2 and type(None) in args:
            t = next(a for a in args if a is not type(None))
            args = get_args(t)
        if isinstance(t, type) and dataclasses.is_dataclass(t):
            out.append((f.name, t, False))
        elif get_origin(t) is list and args and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
            out.append((f.name, args[0], True))
        else:
            out.append((f.name, None, False))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _optional(cls: type, name: str) -> bool:
    """Whether the field's default is None (a ``SomeView | None`` field: a non-object there reads as None)."""
    return next(f for f in dataclasses.fields(cls) if f.name == name).default is None


def view(cls: type[V], section: object) -> V:
    """``section`` (a record section, or None / anything else: all defaults) as the view ``cls``. A field holding
    null takes the view's default, as an absent one does (a nullable field's default is None anyway)."""
    if not isinstance(section, Mapping):
        return cls()
    kw: dict[str, Any] = {}
    for name, sub, many in _fields(cls):  # type: ignore[arg-type]  # a class is hashable
        if name not in section or section[name] is None:
            continue
        v = section[name]
        if sub is None:
            kw[name] = v
        elif many:
            kw[name] = [view(sub, x) for x in v] if isinstance(v, list) else []
        elif isinstance(v, Mapping) or not _optional(cls, name):  # type: ignore[arg-type]
            kw[name] = view(sub, v)
    return cls(**kw)
