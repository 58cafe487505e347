"""Error types that decide the process exit status.

UserError means the user gave input we cannot work with (exit 2, one line on stderr, no traceback);
anything else escaping the CLI is an internal error (exit 1, with a hint to report it).
"""
from __future__ import annotations


class UserError(Exception):
    """Bad input from the user: the CLI prints ``str(self)`` on one line and exits with status 2."""
