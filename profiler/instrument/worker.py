"""What runs inside a DataLoader worker process for the profiler, besides the instrumented fetch: dying with the
parent, and no traceback when the parent hangs up on purpose.

The instrumented fetch itself is split along its seams (docs/architecture.md draws the flow):

- batch.py: the batch record (BatchMeta, its ``marks``, the Instrumented envelope, the LeanOut hand-off);
- derived.py: derived clocks (how a few readings become each call's times, after the window);
- proxies.py: the per-call path (the timed dataset, iterator and collate; the recorder; per-call cost calibration);
- fetch.py: a fetch's two ends (counters, the envelope) and the general instrumented fetch;
- inline_fetch.py: the written-out ``num_workers=0`` map fetch and its lean stretches;
- torch_hooks.py puts them on torch's fetchers; torch_private.py holds torch's private functions and the originals.

The names below the functions are re-exported for code and tests written against the one-module layout; new code
imports from the module that defines them.
"""
from __future__ import annotations

import sys
import traceback
from typing import Any

from .batch import (  # noqa: F401 - re-exported (see the module docstring)
    CALL_FIELDS,
    MARKS,
    ROW_COLUMNS,
    BatchMeta,
    Instrumented,
    LeanOut,
    call_values,
    lean_meta,
    pack_calls,
)
from .derived import (  # noqa: F401 - re-exported
    CALL_CPU_FROM_NS,
    CLOSE_TIMING_FROM_OFF_NS,
    NO_CPU,
    call_cpu,
    join_calls,
    share_batch_counters,
)
from .fetch import instrumented_parts  # noqa: F401 - re-exported
from .inline_fetch import LEAN_CHECK, LEAN_STRETCH, inline_call_costs, inline_map_fetch  # noqa: F401 - re-exported
from .proxies import (  # noqa: F401 - re-exported
    CALIBRATION_REPEATS,
    call_cost_ns,
    clock_cost_ns,
    install_audit,
    report_skipped,
)


def die_with_parent() -> None:
    """Ask the kernel to end this (forked) worker the moment its parent dies (PR_SET_PDEATHSIG, Linux).

    Why: a profiled run killed outright (SIGKILL, the OOM killer) leaves its workers running until torch's watchdog
    notices, ~5 s later, still reading and decoding. Only for workers forked by the main thread: the signal follows
    the *thread* that forked, which for the main thread lives as long as the process. Nothing the job can observe
    changes while its main process lives. Best effort: elsewhere it does nothing."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def quiet_peer_gone() -> None:
    """In a worker: no traceback when the main process hangs up in the middle of taking a batch's file descriptor.

    Why: a Ctrl-C (or SIGTERM) that lands while the main process is receiving a batch by file descriptor
    (``rebuild_storage_fd``) cuts the handshake; the worker's multiprocessing resource-sharer thread then prints an
    EOFError/ConnectionResetError traceback through ``sys.excepthook`` — noise about a peer that is stopping on
    purpose, printed under the profiler's one clear line. Only that thread's peer-gone errors are silenced; every
    other exception reaches the hook the worker had."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        from multiprocessing import AuthenticationError

        if issubclass(kind, (EOFError, ConnectionError, AuthenticationError)) and any(
                f.f_code.co_name == "_serve" and f.f_code.co_filename.endswith("resource_sharer.py")
                for f, _ in traceback.walk_tb(tb)):
            return
        previous(kind, exc, tb)

    sys.excepthook = hook

