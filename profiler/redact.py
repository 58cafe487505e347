"""Secrets never reach a record or a report: keys that name one, and values that look like one.

Why: a report is made to be shared (a colleague, an issue tracker), and the record holds what the user typed: a
script's arguments (``train.py --wandb-key ...``, ``--data s3://id:secret@bucket``) and the job's paths. Dropping
keys named like secrets (the HTML did) is not enough when the secret is a *value*. So values are checked too, by
what they look like, at collection (run.json never holds them) and again in the renderers (a record made elsewhere).

What counts, and why each rule:
- an option whose name contains a secret word or ends in ``key`` (``--api-key X``, ``--token=X``, ``--wandb-key X``):
  its value, whatever it is;
- credentials in a URL (``scheme://user:password@host``): the password;
- the shapes of common provider tokens (``sk-``, ``ghp_``, ``hf_``, ``xox?-``, ``AKIA``, ``glpat-``): the token;
- a long unbroken base64-like run (``HIGH_ENTROPY_MIN`` characters mixing upper case, lower case and digits): the
  value. Lower-case hex is left alone on purpose: it is what git and Hugging Face put in paths (40-digit commit
  hashes), and hiding a path's folder would make a report useless; such keys are caught by their option's name.
"""
from __future__ import annotations

import re
from typing import Any

#: Key or option-name parts that mark the value as secret (lower case, matched as substrings).
SENSITIVE_KEY_PARTS = ("token", "secret", "password", "passwd", "credential", "api_key", "apikey", "api-key",
                       "cookie", "environ", "env_vars", "private_key", "authorization")
#: What a hidden value is replaced by.
HIDDEN = "(hidden)"
#: Shortest run of [A-Za-z0-9+=_-] taken for a key when it mixes upper case, lower case and digits. Why 32: API keys
#: and tokens are 32-64 characters; words, run names and ids people print are shorter.
HIGH_ENTROPY_MIN = 32

_TOKEN_SHAPES = re.compile(r"\b(?:sk-[A-Za-z0-9_-]{16,}|ghp_[A-Za-z0-9]{20,}|gh[ousr]_[A-Za-z0-9]{20,}|"
                           r"hf_[A-Za-z0-9]{20,}|xox[abpsr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|glpat-[A-Za-z0-9_-]{20,})")
#: Longest URL scheme looked for before ``://``. Why bounded: an unbounded scheme pattern tried at every letter of a
#: long word is quadratic (40k characters took 4.7 s); registered schemes are short (IANA's longest is 36).
URL_SCHEME_MAX = 40
_URL_SEP = re.compile(r"://")
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
# After ``scheme://``: the user (no ``/``, ``:``, ``@`` or space), ``:``, the password, ``@``. Each part stops at the
# ``:`` or ``/`` of the next ``://``, so every character is scanned a bounded number of times: linear.
_URL_CREDENTIALS = re.compile(r"[^/\s:@]*:(?P<pw>[^@\s/]+)@")
_LONG_RUN = re.compile(r"[A-Za-z0-9+=_-]{%d,}" % HIGH_ENTROPY_MIN)


def is_sensitive_key(key: str) -> bool:
    """Does a key or option name say its value is a secret (``api_token``, ``--hf-token``)?"""
    k = key.lower().lstrip("-").replace("-", "_")
    return any(p.replace("-", "_") in k for p in SENSITIVE_KEY_PARTS)


def is_sensitive_option(name: str) -> bool:
    """An option whose value is a secret: a secret word in its name, or a name ending in ``key`` (``--wandb-key``,
    ``--access-key``; for options only: a record's own ``key`` fields are names, not secrets)."""
    k = name.lower().lstrip("-").replace("-", "_")
    return is_sensitive_key(k) or k == "key" or k.endswith("_key")


def _long_secret(m: re.Match[str]) -> str:
    s = m.group(0)
    mixed = re.search(r"[a-z]", s) and re.search(r"[A-Z]", s) and re.search(r"[0-9]", s)
    return HIDDEN if mixed else s


def _hide_url_passwords(text: str) -> str:
    """``scheme://user:password@host`` with the password hidden, in time linear in ``text``.

    Found from each ``://`` (not from each letter that might start a scheme): the scheme is checked backwards over at
    most ``URL_SCHEME_MAX`` characters, the credentials forwards with one anchored match."""
    parts: list[str] = []
    done = 0
    for sep in _URL_SEP.finditer(text):
        at = sep.start()
        if at < done:
            continue
        start = at
        while start > max(done, at - URL_SCHEME_MAX) and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        while start < at and text[start] not in _LETTERS:
            start += 1  # a scheme starts with a letter
        if start == at:
            continue
        m = _URL_CREDENTIALS.match(text, sep.end())
        if m is None:
            continue
        parts += [text[done:m.start("pw")], HIDDEN]
        done = m.end("pw")
    if not parts:
        return text
    parts.append(text[done:])
    return "".join(parts)


def redact_text(text: str) -> str:
    """``text`` with URL passwords, provider tokens and long key-like runs replaced by ``HIDDEN``.

    Linear in the length of ``text`` (a report of a 60,000-character script argument must not take minutes):
    scripts/bench_text.py measures it on 1 MB strings built to defeat each rule."""
    out = _hide_url_passwords(text)
    out = _TOKEN_SHAPES.sub(HIDDEN, out)
    return _LONG_RUN.sub(_long_secret, out)


def redact_argv(argv: list[str]) -> list[str]:
    """A command line as it may be shown: the value after (or ``=`` in) a secret-named option hidden, and any
    argument that looks like a secret hidden."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        a = str(arg)
        if hide_next and not a.startswith("-"):
            out.append(HIDDEN)
            hide_next = False
            continue
        hide_next = False
        if a.startswith("-"):
            name, eq, value = a.partition("=")
            if is_sensitive_option(name):
                if eq:
                    out.append(f"{name}={HIDDEN}")
                else:
                    out.append(a)
                    hide_next = True
                continue
        out.append(redact_text(a))
    return out


def redact_value(v: Any) -> Any:
    """A record value for a report: strings checked with ``redact_text``, lists and dicts element by element (dict
    keys that name a secret hide their value)."""
    if isinstance(v, str):
        return redact_text(v)
    if isinstance(v, list):
        return [redact_value(x) for x in v]
    if isinstance(v, dict):
        return {k: HIDDEN if is_sensitive_key(str(k)) else redact_value(x) for k, x in v.items()}
    return v
