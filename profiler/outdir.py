"""Output folders: unique per run, created atomically, and removed again when a run ends before writing anything.

Why: two runs started in the same second with the default ``--out`` used to pick the same time-stamped name, both
said "Wrote ...", and one record silently replaced the other. ``os.mkdir`` without ``exist_ok`` is atomic: exactly one
process creates a given name, the other gets FileExistsError and tries ``name-2``, ``name-3``... No lock needed, and
it holds across processes and machines sharing a filesystem (NFS included, mkdir is atomic there too).

A run that fails on bad input (exit 2) must not leave an empty folder behind: ``removed_if_unused(path)`` wraps the
run and removes the folders this process created for it when the run raises and they are still empty. ``os.rmdir``
removes only empty folders, so nothing the run (or anyone else) wrote can ever be deleted by it.
"""
from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import UserError

#: Suffixes tried after a name is taken (``name-2`` .. ``name-1000``). Why 1,000: a thousand runs with one name in one
#: folder means something is looping; past it we say so instead of probing on.
MAX_SUFFIX = 1000

# Folders created by this process, per output folder: the output folder itself and any missing parents, outermost
# first. Only these may be removed again.
_created: dict[Path, list[Path]] = {}


def _fail(flag: str, path: os.PathLike[str] | str, e: OSError) -> UserError:
    return UserError(f"{flag} {os.fspath(path)}: cannot create or write there ({e.strerror or e})")


def _check_text(flag: str, path: os.PathLike[str] | str) -> str:
    s = os.fspath(path)
    if not s or not s.strip():
        raise UserError(f"{flag} is empty; leave the option out to use its default")
    if "\0" in s:
        raise UserError(f"{flag} contains a NUL character")
    return s


def _makedirs(path: Path, flag: str) -> list[Path]:
    """``mkdir -p`` that returns the folders it created (outermost first); UserError when it cannot."""
    missing: list[Path] = []
    p = path
    while not os.path.lexists(p):
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    made: list[Path] = []
    for d in reversed(missing):
        try:
            os.mkdir(d)
            made.append(d)
        except FileExistsError:
            pass  # made meanwhile by someone else (a concurrent run): fine, but not ours to remove
        except OSError as e:
            raise _fail(flag, path, e) from None
    if not path.is_dir():
        raise UserError(f"{flag} {path}: exists and is not a folder")
    return made


def _probe(path: Path, flag: str) -> None:
    """Write and delete a file: a read-only or full filesystem fails here, not after the whole run."""
    probe = path / f".write-test-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise _fail(flag, path, e) from None


def create_run_dir(base: os.PathLike[str] | str, name: str, flag: str = "--out") -> Path:
    """Create ``base/name`` (or ``name-2``, ``name-3``... if taken) atomically and return it; UserError on failure.

    ``base`` is created if missing. ``name`` is one path component: separators and NULs are replaced by ``_``.
    """
    base_s = _check_text(flag, base)
    clean = name.replace(os.sep, "_").replace("\0", "_")
    if os.altsep:
        clean = clean.replace(os.altsep, "_")
    if clean in ("", ".", ".."):
        clean = f"run{clean}"
    base_path = Path(os.path.abspath(base_s))  # absolute: a script's os.chdir must not move the run's folder
    made = _makedirs(base_path, flag)
    for k in range(1, MAX_SUFFIX + 1):
        path = base_path / (clean if k == 1 else f"{clean}-{k}")
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        except OSError as e:
            _remove_empty(made)
            raise _fail(flag, path, e) from None
        _created[path] = [*made, path]
        try:
            _probe(path, flag)
        except UserError:
            discard_if_empty(path)
            raise
        return path
    _remove_empty(made)
    raise UserError(f"{flag} {base_s}: {MAX_SUFFIX} folders named {clean}[-N] exist already; choose another --out")


def prepare_out(path: os.PathLike[str] | str, flag: str = "--out") -> Path:
    """An explicit output folder: create it (and its parents) if missing, check it is writable; UserError if not.

    An existing folder is used as it is (the user named it); a file in its place is an error. The path returned is
    absolute.
    """
    s = _check_text(flag, path)
    p = Path(os.path.abspath(s))  # absolute: a script's os.chdir must not move the run's folder
    if os.path.lexists(p) and not p.is_dir():
        raise UserError(f"{flag} {s}: exists and is not a folder")
    made = _makedirs(p, flag)
    if made:
        _created[p] = made
    try:
        _probe(p, flag)
    except UserError:
        discard_if_empty(p)
        raise
    return p


def _remove_empty(folders: list[Path]) -> None:
    for d in reversed(folders):  # innermost first: a parent is empty only once its child is gone
        try:
            os.rmdir(d)
        except OSError:
            return  # not empty (or gone): everything above it is not empty either


def discard_if_empty(path: os.PathLike[str] | str) -> bool:
    """Remove ``path`` and the parents created with it if they are (still) empty. True when ``path`` is gone.

    Only folders this process created through ``create_run_dir``/``prepare_out`` are touched.
    """
    p = Path(path)
    folders = _created.pop(p, [])
    _remove_empty(folders)
    return not os.path.lexists(p)


def forget(path: os.PathLike[str] | str) -> None:
    """Mark ``path`` as kept: a later ``discard_if_empty`` leaves it alone (call once the run wrote its record)."""
    _created.pop(Path(path), None)


@contextmanager
def removed_if_unused(path: os.PathLike[str] | str) -> Iterator[Path]:
    """Run the block; if it raises (bad input, Ctrl-C before the first step...) and ``path`` is still empty, remove it.

    Usage: ``out = create_run_dir(...)``; ``with removed_if_unused(out): run and write``. A folder with anything
    in it stays (rmdir cannot remove it), so a partial record written before the error is never lost.
    """
    p = Path(path)
    try:
        yield p
    except BaseException:
        discard_if_empty(p)
        raise
    forget(p)


# Folders claimed by this process (see ``claim``): the open descriptor holds the lock until the process ends.
_claims: dict[Path, int] = {}


def claim(path: Path, flag: str = "--out") -> Path:
    """Hold an exclusive lock on the output folder ``path`` for this process's life; UserError (one line) if another
    run holds it.

    Why: two runs given the same explicit ``--out`` at once both wrote run.json there and said so; one record was
    silently replaced. ``flock`` on the folder itself leaves no lock file behind (the folder stays removable when
    empty) and is released by the kernel when the process ends, however it ends — no stale lock after a SIGKILL.
    """
    if path in _claims:
        return path
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise _fail(flag, path, e) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UserError(f"{flag} {path}: another profiler run is writing there now; wait for it or choose another "
                        f"{flag}") from None
    except OSError:
        pass  # a filesystem without flock (some network mounts): run unlocked rather than not at all
    _claims[path] = fd
    return path


def api_run_dir(out_arg: os.PathLike[str] | str | None, name: str, say: Callable[[str], None]) -> Path:
    """The folder of a ``profile()`` block (run or monitor): ``out=`` claimed, or a new one under reports/; where
    neither can be had, one in the temp folder, said in one line. A library call must not fail the user's program
    over where its record goes."""
    import tempfile

    try:
        if out_arg:
            return claim(prepare_out(out_arg, flag="out="))
        return create_run_dir("reports", name, flag="out=")
    except UserError as e:
        fallback = create_run_dir(tempfile.gettempdir(), f"profiler-{name}", flag="out=")
        say(f"{e}; writing to {fallback} instead")
        return fallback
