"""Turn the user's "paths" argument into a flat list of file paths.

Why: callers hand us whatever they have (one data directory, a list of image files, a Path). Silently treating a
directory as "one unreadable file" would make ``evict("data/")`` a no-op that looks like success, so directories are
walked here, once, for every storage helper.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

PathArg = str | os.PathLike[str]


def expand_paths(paths: PathArg | Iterable[PathArg]) -> list[str]:
    """Return file paths: single paths are wrapped, directories are walked (sorted, symlinks not followed into dirs).

    Order is deterministic (input order, then sorted names inside directories) so seeded sampling is reproducible.
    Paths that do not exist are kept; the callers skip what they cannot open.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    for p in paths:
        s = os.fspath(p)
        if os.path.isdir(s):
            out.extend(_walk(s))
        else:
            out.append(s)
    return out


def _walk(root: str) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            yield os.path.join(dirpath, name)
