"""The proxy keeps the shape the core has: no import cycle among its modules, the running
proxy's services (``ProxyServices``) reached only by the code that builds and serves the app,
and the lane on public APIs only (nothing of uvicorn's).

The test reads each module's imports from its AST (a lazy import inside a function counts;
one under ``if TYPE_CHECKING:`` does not, as it never runs)."""

from __future__ import annotations

import ast
from pathlib import Path

import context_summarizer.proxy

PROXY = Path(context_summarizer.proxy.__file__).parent
PACKAGE = "context_summarizer.proxy"

COMPOSITION_ROOT = {"context_summarizer.proxy.app", "context_summarizer.proxy.server"}
"""The modules that build the proxy's services and hand each to the code that uses it."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(PROXY).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((PACKAGE, *parts))


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path) -> set[str]:
    """The modules ``path`` imports at run time, as absolute names (``from . import x`` counts
    as importing the package and ``package.x``)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for orelse in child.orelse:
                    visit(orelse)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    origin = ".".join([*base, child.module] if child.module else base)
                else:
                    origin = child.module or ""
                found.add(origin)
                found.update(f"{origin}.{alias.name}" for alias in child.names)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _proxy_graph() -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in PROXY.rglob("*.py")}
    # A module's packages are imported before it whatever it names: an edge to one of them
    # (``from . import x``) is no import of its own.
    return {
        name: {
            imported
            for imported in _imports(path)
            if imported in modules and imported != name and not name.startswith(f"{imported}.")
        }
        for name, path in modules.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_the_proxy_modules_import_no_cycle() -> None:
    graph = _proxy_graph()
    assert len(graph) > 40  # every module was read
    assert _cycles(graph) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_only_the_composition_root_reaches_the_proxy_services() -> None:
    reaching = set()
    for path in PROXY.rglob("*.py"):
        name = _module_name(path)
        text = path.read_text(encoding="utf-8")
        if "context_summarizer.proxy.services" in _imports(path) or "state.proxy" in text:
            reaching.add(name)
    assert reaching - {"context_summarizer.proxy.services"} == COMPOSITION_ROOT


def test_the_lane_uses_nothing_of_uvicorn() -> None:
    lane = PROXY / "lane"
    for path in lane.rglob("*.py"):
        imported = _imports(path)
        assert not [name for name in imported if name.split(".")[0] == "uvicorn"], path
