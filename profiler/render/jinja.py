"""The one jinja Environment of every HTML page (report.html, compare.html).

Autoescape is on for every template, whatever its file name: every string a page shows may come from the user (paths,
file names, class names, a skipped file's reason) and must never become markup.
"""
from __future__ import annotations

import functools
from pathlib import Path

from jinja2 import Environment, FileSystemLoader

TEMPLATES = Path(__file__).parent / "templates"


@functools.lru_cache(maxsize=1)
def environment() -> Environment:
    return Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True, trim_blocks=True,
                       lstrip_blocks=True, keep_trailing_newline=True)
