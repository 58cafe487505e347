"""Termination signals as exceptions, so a run stopped by a scheduler, `timeout` or a closed terminal keeps its record.

Why: Python turns only SIGINT into an exception (KeyboardInterrupt). SIGTERM (what `kill`, `timeout` and job
schedulers send) and SIGHUP (a closed terminal or ssh session) kill the process outright, so nothing in a ``finally``
runs: no partial record, and a kernel-throttle cgroup stays behind. ``install()`` makes both raise ``Terminated``, a
KeyboardInterrupt subclass, so every existing ``except KeyboardInterrupt`` / ``finally`` path handles them too.
SIGINT still raises a plain KeyboardInterrupt, exactly as Python's own handler does; ``signal_number(exc)`` tells
them apart. Note: an *uncaught* Terminated ends Python like a KeyboardInterrupt (status 130); the CLI catches it and
returns ``exit_status(exc)`` instead.

A second signal while the first is being handled (the user presses Ctrl-C again while the loader shuts down or the
record is written) must not throw away what the first one is saving. Once an interrupt has been raised, further
signals are remembered, not raised, and ``deferred()`` holds even the first one during a critical section (writing
the record and reports), raising it after. The user keeps a way out: the ``FORCE_AFTER``-th signal is raised anyway.

"Being handled" is checked, not assumed: C code that calls back into Python can clear an exception raised there
(torch's C start-up clears a failed numpy import, so a SIGTERM in the first second of ``import torch`` vanished and
every later one was held as "still saving"). A later signal is held only while the raised interrupt is still
propagating or being handled (it is in ``sys.exc_info()``'s chain) or once the job has ended and the run is saving
(``job_ended``); otherwise the earlier one was lost and the new one is raised as a first. ``holding()`` keeps
signals out of such C code altogether (``import torch``) and raises the first one after it.

Exit status: ``exit_status(exc)`` is 128 + the signal number (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP), the
shell convention for "ended by signal N".

A process forked from this one (the job's own ``multiprocessing.Pool``, torchdata.nodes' process mappers, a bare
``os.fork()``) is the job's, not the profiler's: it gets back the dispositions the job had before ``install()``
(``_after_fork_in_child``), so ``Pool.terminate()``'s SIGTERM ends it as it would without the profiler, instead of
raising ``Terminated`` and printing its traceback. The DataLoader workers the profiler's own worker loop sets up
take the profiler's handling back (``keep_in_worker``): their loop ends quietly on an interrupt, as before. Spawned
and forkserver children start from a fresh interpreter and never had the handlers.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

#: The signals that end a run. SIGQUIT is left alone on purpose: its default core dump is what a user asks for with it.
HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

#: The signal count at which we stop holding back. Why 3: "Ctrl-C twice" is a common reflex (and the issue's case) and
#: must still leave a record; a third press is a deliberate "quit now", which a tool must never refuse.
FORCE_AFTER = 3

_NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}


class Terminated(KeyboardInterrupt):
    """A termination signal received by the main thread; ``signum`` says which (SIGINT for Ctrl-C)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {describe(signum)}")
        self.signum = int(signum)


def describe(signum: int) -> str:
    """Human name of a signal: 'Ctrl-C' for SIGINT, else its symbolic name ('SIGTERM')."""
    try:
        sig = signal.Signals(signum)
    except ValueError:
        return f"signal {signum}"
    return _NAMES.get(sig, sig.name)


def signal_number(exc: BaseException | None) -> int | None:
    """The signal behind an exception: ``signum`` of a Terminated, SIGINT for a plain KeyboardInterrupt, else None."""
    if isinstance(exc, Terminated):
        return exc.signum
    if isinstance(exc, KeyboardInterrupt):
        return int(signal.SIGINT)
    return None


def exit_status(exc: BaseException | int | None = None) -> int:
    """128 + signal number for an interrupt (130 for Ctrl-C); with nothing given, of the first signal received.

    Returns 130 when no signal is known at all (a KeyboardInterrupt raised by code, not by a signal).
    """
    if isinstance(exc, int):
        return 128 + exc
    signum = signal_number(exc)
    if signum is None and _state.received:
        signum = _state.received[0]
    return 128 + (signum if signum is not None else int(signal.SIGINT))


@dataclass
class _State:
    received: list[int] = field(default_factory=list)  # every signal seen, in order
    raised: bool = False  # an interrupt has been raised: the run is already stopping
    depth: int = 0  # nesting of deferred()
    noted: bool = False  # the "still saving" line was printed
    in_flight: int | None = None  # id() of the interrupt raised last (not a reference: it would keep its frames)
    job_done: bool = False  # the profiled job has ended: from here to the saved record, signals are held
    starting: int = 0  # nesting of holding(): the note must not speak of saving when nothing was measured yet


_state = _State()
_installed = False
# signal -> the disposition the process had when install() took it over (the job's own: a default action)
_job_had: dict[int, Any] = {}
# In a forked child: the signals the parent had taken over, given back to the job at the fork (keep_in_worker)
_ours_at_fork: list[int] = []


def _note(state: _State) -> None:
    """One line on stderr so a user pressing Ctrl-C again knows why nothing happened. os.write: safe in a handler."""
    if state.noted:
        return
    state.noted = True
    left = FORCE_AFTER - len(state.received)
    doing = ("stopping once start-up is done" if state.starting and not state.job_done
             else "still saving what was measured")
    try:
        os.write(2, f"\nprofiler: {doing}; press Ctrl-C {left} more time"
                    f"{'s' if left != 1 else ''} to quit at once\n".encode())
    except OSError:
        pass  # no stderr (closed terminal after SIGHUP): the note is a courtesy only


def interrupt(signum: int) -> KeyboardInterrupt:
    """The exception for ``signum``: a plain KeyboardInterrupt for SIGINT (as Python's own), else ``Terminated``."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def _raise(st: _State, signum: int) -> None:
    exc = interrupt(signum)
    st.raised, st.in_flight = True, id(exc)
    raise exc


def _in_hand(st: _State) -> bool:
    """Is the interrupt we raised still on its way (in an ``except``/``finally``/``__exit__`` now running, or the
    context of an exception raised there)? False when C code cleared it or a caller swallowed it."""
    exc = sys.exc_info()[1]
    seen = 0
    while exc is not None and seen < 16:
        if id(exc) == st.in_flight and isinstance(exc, KeyboardInterrupt):
            return True
        exc, seen = exc.__context__, seen + 1
    return False


def _handler(signum: int, frame: FrameType | None) -> None:
    st = _state
    st.received.append(signum)
    if len(st.received) >= FORCE_AFTER:
        _raise(st, signum)
    if st.depth > 0 or st.job_done or (st.raised and _in_hand(st)):
        _note(st)
        return
    _raise(st, signum)


def job_ended() -> None:
    """The profiled job has ended (finished, failed or interrupted): what follows is saving what was measured, so
    from now on signals are held, and the first one is raised at the end of the next ``deferred()`` block (the one
    that writes the record). Without it a SIGTERM in the milliseconds between the job's end and that block (a
    scheduler stopping every rank when one failed) ended the run with no record."""
    _state.job_done = True


def _is_default(handler: object, signum: int) -> bool:
    return handler is signal.SIG_DFL or (signum == signal.SIGINT and handler is signal.default_int_handler)


def install() -> list[int]:
    """Make SIGINT, SIGTERM and SIGHUP raise ``Terminated`` in the main thread; returns the signals newly taken over.

    Signals the process ignores (``nohup`` sets SIGHUP to SIG_IGN; a background job in a script ignores SIGINT) or
    that someone else handles stay as they are: only default actions are replaced. Idempotent. Outside the main
    thread nothing can be installed and the result is empty.
    """
    global _installed, _state
    if threading.current_thread() is not threading.main_thread():
        return []
    prevs = {sig: signal.getsignal(sig) for sig in HANDLED}
    taken = [int(sig) for sig, prev in prevs.items() if _is_default(prev, sig)]
    if taken and not _installed:
        _state = _State()  # a new run: forget signals a previous one received (before a handler can record one)
    _installed = _installed or bool(taken)
    for sig in taken:
        _job_had[sig] = prevs[signal.Signals(sig)]
        signal.signal(sig, _handler)  # a signal may be raised from here on: the state above is already in place
    return taken


def restore(taken: list[int] | None = None) -> None:
    """Give back the default action of ``taken`` (all of ours when None); forget the state once none is ours.

    For a library caller that installed the handlers only for a while (KernelThrottle does, for its lifetime).
    """
    global _installed, _state
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in HANDLED if taken is None else [signal.Signals(t) for t in taken]:
        if signal.getsignal(sig) is _handler:
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    if not any(signal.getsignal(s) is _handler for s in HANDLED):
        _installed = False
        _state = _State()


def _after_fork_in_child() -> None:
    """os.register_at_fork's child hook: the job's own dispositions back in a process forked from this one (the
    module docstring says why); what was ours is remembered for ``keep_in_worker``."""
    global _installed, _state, _ours_at_fork
    ours = []
    for sig in HANDLED:
        try:
            if signal.getsignal(sig) is _handler:
                signal.signal(sig, _job_had.get(int(sig), signal.default_int_handler if sig == signal.SIGINT
                                                 else signal.SIG_DFL))
                ours.append(int(sig))
        except (ValueError, OSError):  # not the main thread of the main interpreter: nothing can be changed
            return
    _ours_at_fork = ours
    _installed = False
    _state = _State()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def keep_in_worker() -> None:
    """In a DataLoader worker the profiler's worker loop starts: the profiler's handling of the signals it had taken
    over in the parent, as the worker had before ``_after_fork_in_child`` gave them back (torch's worker loop ends
    quietly on the KeyboardInterrupt they raise). Nothing in a spawned worker (it never had them)."""
    global _installed
    if threading.current_thread() is not threading.main_thread():
        return
    for num in _ours_at_fork:
        if _is_default(signal.getsignal(num), num):
            signal.signal(num, _handler)
            _installed = True


def uninstall() -> None:
    """Restore every default action and forget every signal received (tests)."""
    restore(None)


def received() -> list[int]:
    """The signals received since ``install()``, in order (empty if none)."""
    return list(_state.received)


@contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP until the block ends, then raise the first one (if the run was not stopping already).

    Use around work that must not be cut in half: writing run.json and the reports, changing cgroup membership.
    With ``install()`` active this only marks the section; otherwise it swaps in temporary handlers (main thread
    only; elsewhere it does nothing, since only the main thread can run Python signal handlers) and, after the block,
    re-delivers each held signal to whatever handler the process had before.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _installed and any(signal.getsignal(s) is _handler for s in HANDLED):
        with _marked():
            yield
        return
    got: list[int] = []
    old: dict[int, Any] = {}  # signal number -> the handler it had (what getsignal returns)
    for sig in HANDLED:
        prev = signal.getsignal(sig)
        if prev is None or prev is signal.SIG_IGN:
            continue  # installed from C (cannot be restored) or ignored: leave it
        old[sig] = signal.signal(sig, lambda n, _f: got.append(n))
    try:
        yield
    finally:
        for num, handler in old.items():
            signal.signal(num, handler)
        for n in got:
            signal.raise_signal(n)


@contextmanager
def _marked() -> Iterator[None]:
    st = _state
    st.depth += 1
    try:
        yield
    finally:
        st.depth -= 1
    # Reached only when the block ended normally: an exception from it propagates instead of this.
    if st.depth == 0 and st.received and not st.raised:
        _raise(st, st.received[0])


@contextmanager
def holding() -> Iterator[None]:
    """Hold signals across code that may clear an exception raised inside it (C extensions importing Python
    modules, ``import torch`` above all), then raise the first one. With our handlers installed this is
    ``deferred()``; without them it does nothing (the default actions stay the process's own)."""
    if _installed and threading.current_thread() is threading.main_thread():
        st = _state
        st.starting += 1
        try:
            with deferred():
                yield
        finally:
            st.starting -= 1
    else:
        yield


def pending() -> int | None:
    """The first signal received and held but never raised (one that came after the record was saved, while the
    report was printing), else None: the command must still end with its status (128 + N), not 0."""
    st = _state
    if st.received and not st.raised:
        return st.received[0]
    return None
