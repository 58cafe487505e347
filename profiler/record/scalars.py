"""The record schema's building blocks: the typing helpers of this Python and the scalar vocabulary.

Why a module of its own: the record's sections are declared in several modules (``schema``, ``sections_job``,
``sections_derived``), and each must resolve the same ``Count``, ``Seconds``, ... when ``get_type_hints`` reads its
annotations (they are strings under ``from __future__ import annotations``, looked up in the declaring module).
``profiler.record.schema`` re-exports every name here; readers import from it.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Annotated

# Required/NotRequired are in typing from 3.11; on 3.10 (the oldest we support) typing_extensions has them, with the
# TypedDict and introspection helpers that understand them. validate.py takes them from here (through schema) so
# they match.
if sys.version_info >= (3, 11):
    from typing import NotRequired, Required, TypedDict, get_type_hints, is_typeddict  # noqa: F401
else:  # pragma: no cover - exercised on 3.10 only
    from typing_extensions import NotRequired, Required, TypedDict, get_type_hints, is_typeddict  # noqa: F401


@dataclass(frozen=True)
class Min:
    """The smallest value a number may take (inclusive)."""
    value: float


# Scalar vocabulary -------------------------------------------------------------------------------------------------
Count = Annotated[int, Min(0)]  # how many of something; also bytes
Id = Annotated[int, Min(-1)]  # a row's batch/worker/index/step number; -1 = unknown, or the main process (worker)
Counter = Annotated[int, Min(-1)]  # a cumulative /proc/<pid>/io counter; -1 = unreadable
Seconds = Annotated[float, Min(0)]  # a duration
Time = float  # an instant: seconds since the run started (host clock)
Share = Annotated[float, Min(0)]  # a fraction or a percentage
