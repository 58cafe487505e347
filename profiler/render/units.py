"""Shared formatters and text safety for every renderer (terminal, plots, HTML, trace, compare).

Why one module: the same number must read the same in the terminal, the PNGs and the HTML page, and a user string
(a path, a dataset class, a skipped file's reason) must be made safe for each medium in one place, not per call site.
Labels and colors are not here: they come from the registry, :mod:`profiler.vocab`; :func:`stage_label` and
:func:`stage_color` only add the renderers' name for the leftover ``other`` part of idle time.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable

from .. import vocab

_MISSING = "—"


def _bad(v: float | None) -> bool:
    return v is None or not isinstance(v, (int, float)) or not math.isfinite(v)


def ms(v: float | None) -> str:
    """Milliseconds, digits by size (3 decimals under 1 ms, none from 100 ms): the one ms format of every view."""
    if v is None or _bad(v):
        return _MISSING
    a = abs(v)
    return f"{v:.3f}" if a < 1 else f"{v:.2f}" if a < 10 else f"{v:.1f}" if a < 100 else f"{v:,.0f}"


def seconds(v: float | None, digits: int = 3, unit: bool = True) -> str:
    """Seconds with a fixed number of decimals (tables line up), ``" s"`` appended unless ``unit`` is False."""
    if _bad(v):
        return _MISSING
    return f"{v:.{digits}f}" + (" s" if unit else "")


def pct(fraction: float | None, digits: int = 1) -> str:
    """A fraction (0.25) as a percentage ("25.0 %")."""
    if fraction is None or _bad(fraction):
        return _MISSING
    return f"{100 * fraction:.{digits}f} %"


_DECIMAL = ("B", "kB", "MB", "GB", "TB", "PB")
_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def nbytes(n: float | None, binary: bool = False, digits: int = 1) -> str:
    """Bytes with a unit: decimal (kB, MB, GB: what disks and throughput are sold in) or binary (KiB, MiB, GiB:
    what memory is counted in). Whole bytes below one kilo."""
    if n is None or _bad(n):
        return _MISSING
    base = 1024.0 if binary else 1000.0
    units = _BINARY if binary else _DECIMAL
    v = float(n)
    for u in units:
        if abs(v) < base or u == units[-1]:
            return f"{v:.0f} {u}" if u == "B" else f"{v:.{digits}f} {u}"
        v /= base
    return f"{v:.{digits}f} {units[-1]}"  # pragma: no cover - the loop always returns


def stage_label(name: str) -> str:
    """Table/legend label of a stage (registered or user-named); ``other`` is the unexplained rest of idle time."""
    return "other (unexplained)" if name == "other" else vocab.stage(name).label


def stage_color(name: str) -> str:
    return vocab.color(name)


def stage_order(names: Iterable[str]) -> list[str]:
    """Pipeline order: the registered sample stages, then user-named ones (also inside a sample) in the order given,
    then the registered batch / step / epoch stages, ``other`` last."""
    names = list(dict.fromkeys(names))
    known = [s.name for s in vocab.STAGES if s.name in names]
    sample = [n for n in known if vocab.STAGE[n].per == "sample"]
    extra = [n for n in names if n not in vocab.STAGE and n != "other"]
    rest = [n for n in known if n not in sample]
    return sample + extra + rest + (["other"] if "other" in names else [])


# --------------------------------------------------------------------------------------------------------------------
# Text safety. A user string is whatever the record holds: file names are bytes on Linux (os.fsdecode turns the
# non-UTF-8 ones into lone surrogates, which no UTF-8 encoder accepts), and may hold control characters or escape
# sequences that a terminal would obey.
# --------------------------------------------------------------------------------------------------------------------
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _escape_char(m: re.Match) -> str:
    c = m.group(0)
    o = ord(c)
    if 0xDC80 <= o <= 0xDCFF:  # os.fsdecode's surrogateescape: the original byte
        return f"\\x{o - 0xDC00:02x}"
    if o > 0xFF:
        return f"\\u{o:04x}"
    return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(c, f"\\x{o:02x}")


def printable(s: object) -> str:
    """``s`` as text that is safe in any medium: control characters and escape sequences shown as ``\\x1b`` etc.,
    undecodable file-name bytes (surrogate escapes) as ``\\xff``. Plain text is returned unchanged."""
    s = s if isinstance(s, str) else str(s)
    return _UNPRINTABLE.sub(_escape_char, s)


def markup(s: object) -> str:
    """A user string to put inside rich markup: printable, and ``[``...``]`` escaped so it is neither a style nor an
    error (``[/]`` in a path)."""
    from rich.markup import escape

    return escape(printable(s))


def mpl(s: object) -> str:
    """A user string for a matplotlib label: printable, and ``$`` escaped so it is not read as mathtext (a stray
    ``$`` pair around a backslash in a stage or device name would stop the plot)."""
    return printable(s).replace("$", r"\$")


def safe(o: object) -> object:
    """A copy of a JSON-like value with every string (keys too) made :func:`printable`; numbers untouched."""
    if isinstance(o, str):
        return printable(o)
    if isinstance(o, dict):
        return {printable(k) if isinstance(k, str) else k: safe(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [safe(v) for v in o]
    return o


def first_clause(text: object, limit: int = 140) -> str:
    """The lead of a long sentence, for a one-line view: up to its first "; " or " — " outside parentheses (where our
    sentences put the detail), cut at a word boundary with "…" beyond ``limit`` characters, and never inside an
    unclosed parenthesis (cut before it). The whole sentence stays one flag or one click away (``--details``, the
    page's Recommendations section)."""
    s = printable(text).strip()
    depth = 0
    for i, ch in enumerate(s):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and (s.startswith("; ", i) or s.startswith(" — ", i)) and i > 0:
            s = s[:i]
            break
    if len(s) <= limit:
        return s
    cut = s[: limit - 1].rsplit(" ", 1)[0]
    opened = [i for i, ch in enumerate(cut) if ch == "("]
    while opened and cut.count("(") > cut.count(")"):
        cut = cut[: opened.pop()]
    return cut.rstrip(" ,;:") + " …"


def short_gain(text: object, limit: int = 200) -> str:
    """A recommendation's expected gain in one line (:func:`first_clause`), keeping its one caveat that changes the
    meaning: a gain within the run's noise is not claimed (analysis/recommend.py says so after the figure)."""
    full = printable(text)
    short = first_clause(full, limit)
    if short != full and "no gain is claimed" in full:
        short += " (within this run's noise: no gain claimed)"
    return short
