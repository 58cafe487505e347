"""Validate a run record against its typed schema (profiler.record.schema): the single home of that check.

Why here and nowhere else: a profiler is run when something is already wrong, and `report`/`compare` must read any
record someone hands them, damaged or not, without crashing. Every field of the raw sections is checked on load —
JSON type, finiteness, sign, magnitude, equal column lengths within a table, ordered instants — and the first bad
field is named in one line (``run record field 'timeline.steps.wait_end[3]' is NaN``). Analysis and renderers can
then trust what they read. Derived sections are recomputed by analysis, so a malformed one is dropped, not fatal.

The checkers are compiled once from the TypedDicts; timeline columns (the bulk of a record) take a fast path:
``set(map(type, col))`` for the element types, then numpy for range and finiteness, and a per-element scan only to
name the first bad element.
"""
from __future__ import annotations

import functools
import math
import types
import typing
from collections.abc import Callable
from typing import Any, Union

import numpy as np

from ..errors import UserError
from . import schema as S

# Largest magnitude a number in a record may have: 2**53, the last integer a float (and JavaScript) holds exactly.
# No measurement comes near it (9e15 s, 9 PB); a bigger one is damage, and would overflow analysis arithmetic.
MAX_ABS = 2 ** 53


class RecordError(UserError):
    """A run record that does not match its schema; the message names the first bad field."""


def fail(path: str, problem: str) -> typing.NoReturn:
    raise RecordError(f"run record field '{path}' {problem}")


def describe(v: Any) -> str:
    """How a JSON value reads in an error message."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"a boolean ({v})".lower()
    if isinstance(v, str):
        return f"a string ({v[:20]!r})"
    if isinstance(v, (int, float)):
        return f"the number {v!r}"[:60]
    return _CONTAINER.get(type(v), type(v).__name__)


_CONTAINER: dict[type, str] = {list: "a list", dict: "an object"}


_EXPECT = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
Checker = Callable[[Any, str], None]


class Scalar:
    """One JSON scalar: its accepted Python types, whether null is allowed, and its smallest value."""

    def __init__(self, base: type, nullable: bool = False, minimum: float | None = None):
        self.kinds: frozenset[type] = frozenset({int, float} if base is float else {base})
        self.numeric = base in (int, float)
        self.nullable = nullable
        self.minimum = minimum
        self.expect = _EXPECT.get(base, base.__name__) + (" or null" if nullable else "")

    def __call__(self, v: Any, path: str) -> None:
        if v is None:
            if not self.nullable:
                fail(path, "is null" if self.numeric else f"is null, expected {self.expect}")
            return
        t = type(v)
        if t not in self.kinds:
            if t is str and self.numeric and v.strip().lower() in ("nan", "inf", "infinity", "-inf", "-infinity"):
                fail(path, f"is the string {v!r}, not a number")
            fail(path, f"is {describe(v)}, expected {self.expect}")
        if self.numeric:
            if t is float and not math.isfinite(v):
                fail(path, "is NaN" if math.isnan(v) else "is infinite")
            if abs(v) > MAX_ABS:
                fail(path, f"is out of range ({v:.3g})")
            if self.minimum is not None and v < self.minimum:
                fail(path, f"is negative ({v!r})" if self.minimum == 0 else f"is below {self.minimum:g} ({v!r})")

    def column(self, col: Any, path: str) -> None:
        """A list of this scalar, checked at C speed when it is clean."""
        if type(col) is not list:
            fail(path, f"is {describe(col)}, expected a list")
        kinds = set(map(type, col))
        if kinds <= self.kinds:
            if not self.numeric or not col:
                return
            try:
                a = np.array(col, dtype=np.float64)
            except (OverflowError, ValueError):
                a = None
            if a is not None and np.isfinite(a).all() and (np.abs(a) <= MAX_ABS).all() \
                    and (self.minimum is None or (a >= self.minimum).all()):
                return
        for i, v in enumerate(col):
            self(v, f"{path}[{i}]")


class ListOf:
    def __init__(self, elem: Checker):
        self.elem = elem

    def __call__(self, v: Any, path: str) -> None:
        if isinstance(self.elem, Scalar):
            self.elem.column(v, path)
            return
        if type(v) is not list:
            fail(path, f"is {describe(v)}, expected a list")
        for i, x in enumerate(v):
            self.elem(x, f"{path}[{i}]")


class DictOf:
    def __init__(self, value: Checker):
        self.value = value

    def __call__(self, v: Any, path: str) -> None:
        if type(v) is not dict:
            fail(path, f"is {describe(v)}, expected an object")
        for k, x in v.items():
            self.value(x, join(path, k))


class Nullable:
    def __init__(self, inner: Checker):
        self.inner = inner

    def __call__(self, v: Any, path: str) -> None:
        if v is not None:
            self.inner(v, path)


def check_any(v: Any, path: str) -> None:
    """An untyped part (package versions, a GPU's details): any JSON, but still no NaN or infinity."""
    t = type(v)
    if t is float:
        if not math.isfinite(v):
            fail(path, "is NaN" if math.isnan(v) else "is infinite")
    elif t is dict:
        for k, x in v.items():
            check_any(x, join(path, str(k)))
    elif t is list:
        for i, x in enumerate(v):
            check_any(x, f"{path}[{i}]")


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class Object:
    """A TypedDict: required keys present, known keys typed, unknown keys kept (forward compatible) but finite;
    for tables, every value a column of one length; instants that bound a duration in order."""

    def __init__(self, cls: type, only: tuple[str, ...] | None = None):
        self.cls = cls
        self.fields: dict[str, tuple[Checker, bool]] = {}
        for name, tp in S.get_type_hints(cls, include_extras=True).items():
            if only is not None and name not in only:
                continue
            required = bool(getattr(cls, "__total__", True))  # every TypedDict class has it; a plain type is total
            origin: Any = typing.get_origin(tp)  # typeshed types it narrower than the special forms it returns
            if origin is S.Required or origin is S.NotRequired:
                required = origin is S.Required
                tp = typing.get_args(tp)[0]
            self.fields[name] = (compile_type(tp), required)
        self.known = frozenset(S.get_type_hints(cls))
        self.table = cls in S.TABLES
        self.groups = S.TABLE_COLUMN_GROUPS.get(cls, ())
        self.ordered = S.ORDERED.get(cls, ())
        self.same_length = S.SAME_LENGTH.get(cls, ())

    def __call__(self, v: Any, path: str) -> None:
        if type(v) is not dict:
            fail(path, f"is {describe(v)}, expected an object")
        if self.table:
            self._shape(v, path)
        for name, (check, required) in self.fields.items():
            if name in v:
                check(v[name], join(path, name))
            elif required:
                fail(join(path, name), "is missing")
        for k, x in v.items():
            if k not in self.known:
                (self._unknown_column if self.table else check_any)(x, join(path, str(k)))
        if self.same_length:
            self._same_length(v, path)
        for a, b in self.ordered:
            if a in v and b in v:
                self._in_order(v, a, b, path)

    def _shape(self, v: dict, path: str) -> None:
        """Every value a list (or, for column groups, an object of lists) of the first column's length."""
        n, first = None, ""
        for k, col in v.items():
            cols = col.items() if k in self.groups and type(col) is dict else [("", col)]
            for sub, c in cols:
                p = join(join(path, k), sub) if sub else join(path, k)
                if type(c) is not list:
                    fail(p, f"is {describe(c)}, expected a column (a list)")
                if n is None:
                    n, first = len(c), p
                elif len(c) != n:
                    fail(p, f"has {len(c)} rows, but '{first}' has {n}")

    @staticmethod
    def _unknown_column(col: Any, path: str) -> None:
        check_any(col, path)  # shape already checked: a list of the table's length

    def _same_length(self, v: dict, path: str) -> None:
        keys = [k for k in self.same_length if type(v.get(k)) is list]
        for k in keys[1:]:
            if len(v[k]) != len(v[keys[0]]):
                fail(join(path, k), f"has {len(v[k])} entries, but '{join(path, keys[0])}' has {len(v[keys[0]])}")

    def _in_order(self, v: dict, a: str, b: str, path: str) -> None:
        lo, hi = v[a], v[b]
        if self.table:
            if not lo:
                return
            la, hb = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
            bad = np.flatnonzero(hb < la)
            if bad.size:
                i = int(bad[0])
                fail(f"{join(path, b)}[{i}]", f"is before {a}[{i}] ({hi[i]!r} < {lo[i]!r})")
        elif lo is not None and hi is not None and hi < lo:
            fail(join(path, b), f"is before {a} ({hi!r} < {lo!r})")


@functools.cache
def compile_type(tp: Any) -> Checker:
    """The checker for one annotation of profiler.record.schema."""
    if tp is Any:
        return check_any
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        base, *meta = typing.get_args(tp)
        minimum = next((m.value for m in meta if isinstance(m, S.Min)), None)
        return Scalar(base, minimum=minimum)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"schema: only 'X | None' unions are supported, not {tp}")
        inner = compile_type(args[0])
        if isinstance(inner, Scalar):
            return Scalar(_base(args[0]), nullable=True, minimum=inner.minimum)
        return Nullable(inner)
    if origin is list:
        return ListOf(compile_type(typing.get_args(tp)[0]))
    if origin is dict:
        return DictOf(compile_type(typing.get_args(tp)[1]))
    if isinstance(tp, type) and S.is_typeddict(tp):
        return Object(tp)
    if tp in (int, float, str, bool):
        return Scalar(tp)
    raise TypeError(f"schema: no checker for {tp!r}")


def _base(tp: Any) -> type:
    return typing.get_args(tp)[0] if typing.get_origin(tp) is typing.Annotated else tp


RAW = Object(S.Record, only=S.RAW_SECTIONS)
DERIVED = {name: compile_type(S.get_type_hints(S.Record, include_extras=True)[name])
           for name in S.DERIVED_SECTIONS}
DERIVED_DEFAULTS: dict[str, Callable[[], Any]] = {name: (list if name == "findings" else dict)
                                                  for name in S.DERIVED_SECTIONS}


def validate(d: Any) -> None:
    """Raise RecordError (a UserError: one line, exit 2) naming the first field of ``d`` that breaks the schema.

    ``d`` must already be at the current schema version (``profiler.record.migrate.upgrade`` does that). Only the raw
    sections are checked here; see ``drop_bad_derived`` for the derived ones."""
    if type(d) is not dict:
        raise RecordError("not a profiler run record: the top level is not a JSON object")
    RAW(d, "")


def drop_bad_derived(d: dict[str, Any]) -> list[str]:
    """Reset each malformed derived section to empty (analysis recomputes them all); returns the names reset."""
    dropped = []
    for name, check in DERIVED.items():
        if name not in d:
            continue
        try:
            check(d[name], name)
        except RecordError:
            d[name] = DERIVED_DEFAULTS[name]()
            dropped.append(name)
    return dropped
