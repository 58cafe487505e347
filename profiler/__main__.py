"""``python -m profiler``: the command line (profiler/cli.py), with the two ways a shell can end it cleanly.

- Ctrl-C (or SIGTERM/SIGHUP) while Python is still importing torch or building the parser (a second or two): one
  line and 128 + the signal, not a traceback. A signal after that is the command's to handle; one that still escapes
  it is reported here the same way.
- stdout closed early (``... | head``): the run's exit status, not a BrokenPipeError traceback and 1.
"""
from __future__ import annotations

import os
import sys


def _run() -> int:
    from . import signals  # the standard library only: in place within ~0.1 s of the process starting

    try:
        signals.install()  # inside the try: a signal that lands as the handlers go in is one line too
        with signals.holding():  # importing the commands imports torch, whose C start-up swallows exceptions
            from .cli import main
    except KeyboardInterrupt as e:
        print("profiler: interrupted while starting", file=sys.stderr)
        return signals.exit_status(e)
    try:
        code = main()
        sys.stdout.flush()
        return code
    except KeyboardInterrupt as e:  # signals.Terminated included: raised before the command could catch it
        from .signals import exit_status

        print("profiler: interrupted while starting", file=sys.stderr)
        return exit_status(e)
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that flush cannot fail a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(_run())
