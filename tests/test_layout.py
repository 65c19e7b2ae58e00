"""The plan of the house: imports point one way and never run in a circle.

Every import of every module in ``erl_envs``, ``erl_agents`` and ``benchmarks`` is read from the source (module-level
and inside functions alike: a lazy import is still a dependency), and the tests fail on an import circle or on an
import against the direction of the layers (docs/layout.md, "How the code is laid out").
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from paths import ROOT

PACKAGES = ("erl_envs", "erl_agents", "benchmarks")

# What each part may import from the project, besides itself. Each entry's prefix covers its submodules.
ALLOWED = {
    "erl_envs.protocol": (),
    "erl_envs.safe_parse": (),
    "erl_envs.paper_tasks": (),
    "erl_envs.grid": ("erl_envs.protocol", "erl_envs.safe_parse", "erl_envs.paper_tasks"),
    "erl_envs.qa": ("erl_envs.protocol", "erl_envs.safe_parse"),
    "erl_envs.reflection": ("erl_envs.protocol", "erl_envs.safe_parse", "erl_envs.grid", "erl_envs.qa"),
    "erl_envs.integrations": ("erl_envs",),
    "erl_envs.play": ("erl_envs",),
    "erl_envs.remote": ("erl_envs.integrations",),
    "erl_agents": ("erl_envs",),
    "benchmarks": ("erl_envs", "erl_agents"),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _project_modules() -> dict[str, Path]:
    return {_module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an imported name lives in (the longest dotted prefix that is one), or None."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``module`` imports, including the packages whose ``__init__`` an import runs (a package
    that is an ancestor of ``module`` itself is running already and is not counted)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package holding this module
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(anchor[: len(anchor) - node.level + 1] + ([base] if base else []))
            # `from package import submodule` imports the submodule; `from module import name` the module.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            resolved = _resolve(target, modules)
            if resolved is None:
                continue
            parts = resolved.split(".")
            for depth in range(1, len(parts) + 1):
                prefix = ".".join(parts[:depth])
                if prefix in modules and not (module == prefix or module.startswith(prefix + ".")):
                    found.add(prefix)
    found.discard(module)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _project_modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as the list of modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def _part(module: str) -> str | None:
    return max((p for p in ALLOWED if module == p or module.startswith(p + ".")), key=len, default=None)


def test_no_import_circle_anywhere():
    graph = import_graph()
    assert len(graph) > 60 and "erl_envs.grid.sokoban" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_imports_follow_the_layers():
    wrong = []
    for module, targets in import_graph().items():
        part = _part(module)
        if part is None:
            continue  # package roots: erl_envs and benchmarks re-export or hold nothing
        for target in targets:
            own = target == part or target.startswith(part + ".")
            allowed = any(target == a or target.startswith(a + ".") for a in ALLOWED[part])
            if not (own or allowed or target == module.split(".")[0]):  # its own root package: registration
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against the layers: " + "; ".join(sorted(wrong))


def test_the_checker_sees_a_circle_and_a_lazy_import(tmp_path):
    """The walk must not pass a broken tree: a circle closed by an import inside a function is still found."""
    graph = import_graph()
    assert find_cycle({**graph, "erl_envs.grid.actions": graph["erl_envs.grid.actions"] | {"erl_envs.grid.sokoban"}})
    lazy = tmp_path / "lazy.py"
    lazy.write_text("def f():\n    from erl_envs.reflection.wrapper import ReflectionWrapper\n")
    modules = _project_modules()
    assert _imports("erl_envs.grid.lazy", lazy, modules) == {"erl_envs.reflection", "erl_envs.reflection.wrapper"}


@pytest.mark.parametrize("package", ["erl_envs", "erl_agents"])
def test_no_module_holds_two_ideas_by_size(package):
    """~600 lines is where a module should be asked whether it holds two ideas; the few that are one idea that does
    not split naturally are named here with the reason."""
    one_idea: dict[str, int] = {}  # a module that is one idea over 600 lines would be named here, with its reason
    too_long = [f"{p.relative_to(ROOT)} ({len(p.read_text().splitlines())} lines)"
                for p in sorted((ROOT / package).rglob("*.py"))
                if len(p.read_text().splitlines()) > one_idea.get(p.relative_to(ROOT).as_posix(), 600)]
    assert not too_long, too_long
