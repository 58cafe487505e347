"""The package's layering, checked from the source (no imports run, so these are cheap):

- no import cycle among the modules' top-level imports (a module importing its own package excepted: Python has
  started that one already);
- analysis is pure: nothing of it, not even a function-level import, reaches render, commands or cli;
- renderers measure nothing, compute no analysis and run no command: render reaches no harness, instrument,
  samplers, analysis, commands or cli (it draws what the analysis put in the record)
  (test_render.py checks the same from the other side: no torch, psutil, pynvml);
- a private name (one leading underscore) is not imported from another module;
- every command module is in the registry, and the parser lists the registry's commands in its order.
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "profiler"


def _modname(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_modname(p): p for p in sorted(PKG.rglob("*.py"))}


def _imports(mod: str) -> list[tuple[str, str | None, bool]]:
    """(imported module, name imported from it or None, at module level) for every profiler import of ``mod``."""
    path = MODULES[mod]
    is_pkg = path.name == "__init__.py"
    out: list[tuple[str, str | None, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for ch in ast.iter_child_nodes(node):
            here = top and not isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and not (
                isinstance(ch, ast.If) and "TYPE_CHECKING" in ast.unparse(ch.test))
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


def test_no_import_cycle_at_module_level():
    graph = {m: {o for t, _, top in _imports(m) if top and (o := _owner(t)) and o != m
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
    bad = {m: r for m in modules if (r := _reaches(m, ("profiler.harness", "profiler.instrument", "profiler.samplers",
                                                        "profiler.analysis", "profiler.commands", "profiler.cli")))}
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
