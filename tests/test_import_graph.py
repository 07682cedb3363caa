"""The modules of ``dape_core`` import one another without a circle: every ``dape_core`` import of every module, those
inside functions included, read with ``ast``."""

import ast
from pathlib import Path

import dape_core

PACKAGE = Path(dape_core.__file__).parent


def package_modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its ``__init__.py``)."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the package that module ``name`` imports: a submodule where one is named, else the module (or
    package) that defines the name."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names)
    owners = set()
    for module in found:
        while module and module not in modules:
            module = module.rpartition(".")[0]
        if module and module != name:
            owners.add(module)
    return owners


def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    return {name: imported(name, path, modules) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import one another, directly or through others (strongly connected components of
    more than one module, Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_graph_sees_imports_inside_functions_and_of_submodules():
    graph = import_graph()
    assert "dape_core.implementations.fused" in graph["dape_core.implementations"]  # inside _fused_measured
    assert "dape_core.implementations.fused_kernel" in graph["dape_core.implementations.fused"]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_of_dape_core_imports_itself_through_others():
    assert circles(import_graph()) == []
