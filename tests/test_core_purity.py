"""The core is pure: no module of ``context_summarizer.core`` reaches storage, the environment,
files, the network or an edge of the package.

The test walks the imports of every core module (its AST, so a lazy import inside a function
counts too) and every name it reads, and fails on what the core must never touch.
"""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import pytest

import context_summarizer.core

CORE = Path(context_summarizer.core.__file__).parent

FORBIDDEN_IMPORTS = {
    "sqlite3": "storage",
    "redis": "storage",
    "context_summarizer.stores": "a store implementation",
    "context_summarizer.loaders": "the prompt and tokenizer loaders",
    "context_summarizer.library": "an edge (the library's drivers)",
    "context_summarizer.proxy": "an edge (the HTTP front door)",
    "context_summarizer.cli": "an edge (the CLI)",
    "context_summarizer.evaluation": "an edge (the evaluator)",
    "context_summarizer.testing": "the test upstream",
    "os": "the environment and the file system",
    "pathlib": "the file system",
    "importlib.resources": "package files",
    "socket": "the network",
    "httpx": "the network",
    "httpx2": "the network",
    "openai": "the network",
    "subprocess": "other processes",
}
FORBIDDEN_CALLS = {"open", "getenv", "environ", "putenv", "read_text", "read_bytes"}


def core_modules() -> list[tuple[str, Path]]:
    """Every module under ``context_summarizer/core`` (packages included), with its file."""
    found = [("context_summarizer.core", CORE / "__init__.py")]
    for info in pkgutil.walk_packages([str(CORE)], prefix="context_summarizer.core."):
        spec = info.module_finder.find_spec(info.name, None)  # type: ignore[call-arg]
        assert spec is not None and spec.origin is not None
        found.append((info.name, Path(spec.origin)))
    return found


def imported_names(module: str, path: Path) -> set[str]:
    """The absolute names ``module`` imports, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def forbidden(name: str) -> str | None:
    """Why importing ``name`` is forbidden in the core, or None."""
    for prefix, why in FORBIDDEN_IMPORTS.items():
        if name == prefix or name.startswith(prefix + "."):
            return why
    return None


MODULES = core_modules()


def test_the_walk_finds_the_core() -> None:
    names = {name for name, _ in MODULES}
    assert {
        "context_summarizer.core.engine",
        "context_summarizer.core.planner",
        "context_summarizer.core.tokens",
    } <= names
    assert "context_summarizer.core.tokens.counting" in names


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[name for name, _ in MODULES])
def test_a_core_module_imports_no_storage_environment_file_or_edge(module: str, path: Path) -> None:
    problems = sorted(
        f"{name} ({why})" for name in imported_names(module, path) if (why := forbidden(name))
    )
    assert not problems, f"{module} imports {', '.join(problems)}"


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[name for name, _ in MODULES])
def test_a_core_module_reads_no_file_or_environment(module: str, path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    used = {
        node.id if isinstance(node, ast.Name) else node.attr
        for node in ast.walk(tree)
        if isinstance(node, (ast.Name, ast.Attribute))
    }
    assert not used & FORBIDDEN_CALLS, f"{module} uses {sorted(used & FORBIDDEN_CALLS)}"


def test_the_walk_catches_what_it_forbids(tmp_path: Path) -> None:
    # The checks above must be able to fail: a module written as the old engine was.
    bad = tmp_path / "engine.py"
    bad.write_text(
        "import os\nfrom ..stores import Store\nfrom ..loaders.prompts import load_prompt\n"
        "def f():\n    import sqlite3\n    return os.environ, open('x')\n",
        encoding="utf-8",
    )
    names = imported_names("context_summarizer.core.engine", bad)
    assert {forbidden(n) for n in names} >= {
        "storage",
        "a store implementation",
        "the prompt and tokenizer loaders",
        "the environment and the file system",
    }
