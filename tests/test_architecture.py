"""The design card's habits, checked: imports point one way, none hide inside functions,
files stay readable in one sitting."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ["timeline", "metadata", "index", "writers"]
ALLOWED = {
    "timeline": {"timeline"},
    "metadata": {"timeline", "metadata"},
    "index": {"timeline", "metadata", "index"},
    "writers": {"timeline", "metadata", "index", "writers"},
}
SOURCES = [p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))]


def imported_modules(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if node.module == "lakebraid":
                found.update(f"lakebraid.{alias.name}" for alias in node.names)
    return found


def imported_packages(tree: ast.AST) -> set[str]:
    """The lakebraid rooms a module imports (``lakebraid.<room>...``)."""
    parts = [m.split(".") for m in imported_modules(tree)]
    return {p[1] for p in parts if p[0] == "lakebraid" and len(p) > 1} & set(PACKAGES)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_imports_point_one_way_and_sit_at_the_top(path: Path) -> None:
    package = path.relative_to(REPO).parts[0]
    tree = ast.parse(path.read_text())
    assert imported_packages(tree) <= ALLOWED[package], f"{path} imports against the grain"
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            inner = [n for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom)]
            assert not inner, f"{path}:{node.name} hides an import inside a function"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_rooms_are_imported_by_their_lakebraid_name(path: Path) -> None:
    bare = {m for m in imported_modules(ast.parse(path.read_text())) if m.split(".")[0] in PACKAGES}
    assert not bare, f"{path} imports {sorted(bare)}: write lakebraid.<room> (one importable name)"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_files_stay_small(path: Path) -> None:
    assert len(path.read_text().splitlines()) < 600
