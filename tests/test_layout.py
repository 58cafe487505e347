"""The package's layering, checked from the source (no imports run, so these are cheap; docs/architecture.md draws
the table and says why):

- every import of one part of the package by another, at module level or inside a function, is one the layer table
  (LAYERS) allows; imports under ``if TYPE_CHECKING:`` are types only and never run, so they are left out;
- no import cycle among the modules, function-level imports included (a module importing its own package excepted:
  Python has started that one already);
- the renderers import no torch, psutil or pynvml, not even through a module they import (run in a fresh process);
- analysis is pure: nothing of it, not even a function-level import, reaches render, commands or cli;
- renderers measure nothing, compute no analysis and run no command: render reaches no harness, instrument,
  samplers, analysis, commands or cli (it draws what the analysis put in the record)
  (test_render.py checks the same from the other side: no torch, psutil, pynvml);
- a private name (one leading underscore) is not imported from another module;
- every command module is in the registry, and the parser lists the registry's commands in its order.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "profiler"


def _modname(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_modname(p): p for p in sorted(PKG.rglob("*.py"))}


@functools.lru_cache(maxsize=None)  # parsed once per module for all the tests here
def _imports(mod: str, types: bool = True) -> list[tuple[str, str | None, bool]]:
    """(imported module, name imported from it or None, at module level) for every profiler import of ``mod``;
    ``types`` False: without the imports under ``if TYPE_CHECKING:`` (never run)."""
    path = MODULES[mod]
    is_pkg = path.name == "__init__.py"
    out: list[tuple[str, str | None, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for ch in ast.iter_child_nodes(node):
            typing_only = isinstance(ch, ast.If) and "TYPE_CHECKING" in ast.unparse(ch.test)
            if typing_only and not types:
                continue
            here = top and not isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and not typing_only
            if isinstance(ch, ast.ImportFrom):
                if ch.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[:len(base) - (ch.level - 1)] + ([ch.module] if ch.module else [])
                    source = ".".join(base)
                else:
                    source = ch.module or ""
                for a in ch.names:
                    sub = f"{source}.{a.name}"
                    out.append((sub, None, here) if sub in MODULES else (source, a.name, here))
            elif isinstance(ch, ast.Import):
                out.extend((a.name, None, here) for a in ch.names)
            visit(ch, here)

    visit(ast.parse(path.read_text()), True)
    return [(m, n, top) for m, n, top in out if m == "profiler" or m.startswith("profiler.")]


def _owner(target: str) -> str | None:
    """The profiler module an import of ``target`` lands in (``profiler.x.y`` -> ``profiler.x`` when y is a name)."""
    while target not in MODULES and "." in target:
        target = target.rsplit(".", 1)[0]
    return target if target in MODULES else None


def _reaches(mod: str, prefixes: tuple[str, ...]) -> list[str]:
    return sorted({t for t, _, _ in _imports(mod) if (_owner(t) or t).startswith(prefixes)})


# The layer table: what each part of the package may import besides itself (a part is a top-level module or
# subpackage of profiler/; an entry names a part or one module of it). Lower layers first; nothing imports upwards.
_BASE = ("errors", "vocab", "thresholds", "fsutil", "redact", "signals", "outdir")
LAYERS: dict[str, tuple[str, ...]] = {
    # base: small leaves every layer may use (errors, words, thresholds with their reasons, files, signals)
    "errors": (), "vocab": ("errors",), "thresholds": ("errors",), "fsutil": ("errors",), "redact": ("errors",),
    "signals": ("errors",), "outdir": ("errors", "fsutil"),
    "config": _BASE + ("storage.spec",),
    # the contract: the record depends on nothing that measures, analyses or draws
    "record": _BASE,
    # measurement: each on its own, none of them reads a record
    "storage": _BASE, "samplers": _BASE, "instrument": _BASE,
    # fit: memory sizes of the built-in models (their definitions are harness.models)
    "fit": _BASE + ("harness.models",),
    # pure analysis: record -> report; fit's advice and storage's device specs are pure tables
    "analysis": _BASE + ("record", "storage.spec", "fit"),
    # renderers: the record and the report only (fit.sizes: pure sizes and format_bytes)
    "render": _BASE + ("record", "fit.sizes"),
    "distributed": _BASE + ("record", "analysis"),
    "attach": _BASE + ("record", "samplers", "distributed"),
    # (distributed: a torchrun rank's folder, as harness has it)
    "monitor": _BASE + ("record", "instrument", "analysis", "render", "distributed"),
    "saving": _BASE + ("record", "instrument", "analysis", "render", "distributed"),
    "harness": _BASE + ("config", "record", "instrument", "samplers", "storage", "fit", "render", "distributed",
                        "saving"),
    "api": _BASE + ("config", "record", "instrument", "harness", "monitor", "saving"),
    # the command line: commands may use every part below them; only cli and __main__ use the commands
    "commands": _BASE + ("config", "record", "instrument", "samplers", "storage", "fit", "analysis", "render",
                         "distributed", "attach", "monitor", "saving", "harness", "api"),
    "cli": _BASE + ("commands",),
    "__main__": _BASE + ("cli",),
    "profiler": _BASE + ("api", "instrument"),  # the package: profile() and stage(), imported lazily
}
# Imports the table does not allow yet: (importing module or part, imported module) -> what it is waiting for
# (test_no_stale_layer_exceptions fails once one is gone, so the list only shrinks).
LAYER_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("profiler.render", "profiler.analysis.headline"): "pure text from an analyzed record (the headline, the key "
                                                       "figures), the same words in every renderer: to be written into "
                                                       "the record's derived sections, which renderers read",
    ("profiler.render", "profiler.analysis.binds"): "binds_label, a what-if row's label: the same",
}


def _excepted(mod: str, target: str) -> bool:
    return any((mod == m or mod.startswith(m + ".")) and target == t for m, t in LAYER_EXCEPTIONS)


def _part(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _allowed(mod: str, target: str) -> bool:
    if target == "profiler" or _part(target) == _part(mod):  # the package itself (__version__), or its own part
        return True
    return any(target == f"profiler.{a}" or target.startswith(f"profiler.{a}.") for a in LAYERS[_part(mod)])


def _layer_breaks() -> dict[tuple[str, str], str]:
    return {(m, o): ("module level" if top else "in a function") for m in MODULES
            for t, _, top in _imports(m, types=False) if (o := _owner(t)) and not _allowed(m, o)}


def test_every_part_is_in_the_layer_table():
    assert {_part(m) for m in MODULES} == set(LAYERS)


def test_every_import_follows_the_layer_table():
    bad = {k: v for k, v in _layer_breaks().items() if not _excepted(*k)}
    assert bad == {}


def test_no_stale_layer_exceptions():
    breaks = _layer_breaks()
    stale = [(m, t) for m, t in LAYER_EXCEPTIONS
             if not any((b == m or b.startswith(m + ".")) and bt == t for b, bt in breaks)]
    assert stale == []


def test_renderers_import_no_torch():
    """Every renderer imported in a fresh process: none of the measuring libraries comes in, through any import."""
    import subprocess
    import sys

    mods = sorted(m for m in MODULES if m.startswith("profiler.render"))
    code = ("import importlib, sys\n"
            f"for m in {mods!r}: importlib.import_module(m)\n"
            "print(sorted(k for k in ('torch', 'psutil', 'pynvml') if k in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[-2] == "[]"


def test_no_import_cycle():
    graph = {m: {o for t, _, _ in _imports(m, types=False) if (o := _owner(t)) and o != m
                 and not m.startswith(o + ".")} for m in MODULES}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def dfs(u: str, stack: list[str]) -> None:
        state[u] = 1
        stack.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                cycles.append(stack[stack.index(v):] + [v])
            elif not state.get(v):
                dfs(v, stack)
        stack.pop()
        state[u] = 2

    for m in MODULES:
        if not state.get(m):
            dfs(m, [])
    assert cycles == []


def test_analysis_never_imports_render_or_commands():
    bad = {m: r for m in MODULES if m.startswith("profiler.analysis")
           if (r := _reaches(m, ("profiler.render", "profiler.commands", "profiler.cli")))}
    assert bad == {}


def test_render_imports_no_measurement_and_no_command():
    modules = [m for m in MODULES if m.startswith("profiler.render")]
    assert {"profiler.render.ranks_terminal", "profiler.render.ranks_html", "profiler.render.ranks_trace",
            "profiler.render.sweep_terminal"} <= set(modules)
    bad = {m: r for m in modules if (r := [t for t in _reaches(m, ("profiler.harness", "profiler.instrument",
                                                                   "profiler.samplers", "profiler.analysis",
                                                                   "profiler.commands", "profiler.cli"))
                                           if not _excepted(m, _owner(t) or t)])}
    assert bad == {}


def test_no_private_name_imported_from_another_module():
    bad = [(m, t, n) for m in MODULES for t, n, _ in _imports(m)
           if n and n.startswith("_") and not n.startswith("__") and t != m]
    assert bad == []


def test_every_command_module_is_registered_and_parsed_in_order():
    from profiler.cli import build_parser
    from profiler.commands import COMMANDS

    files = {p.stem for p in (PKG / "commands").glob("*.py")} - {"__init__", "ranks"}  # ranks: shared, not a command
    assert {c.name for c in COMMANDS} == files
    for c in COMMANDS:
        mod = __import__(f"profiler.commands.{c.name}", fromlist=["main"])
        assert c.main is mod.main and c.add_arguments is mod.add_arguments
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert list(sub.choices) == [c.name for c in COMMANDS]
