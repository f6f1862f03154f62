"""The design card's habits, checked: imports point one way, none hide inside functions,
files stay readable in one sitting."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ["timeline", "metadata", "index", "writers"]
BASE = {"timeline", "metadata", "index", "writers.errors", "writers.settings"}
# room -> the rooms it may import (a room always imports itself). Inside ``writers``:
# write <- services <- commit <- engine -> read; the client is the facade over them all, and
# only the CLI stands above the client.
ALLOWED = {
    "timeline": {"timeline"},
    "metadata": {"timeline", "metadata"},
    "index": {"timeline", "metadata", "index"},
    "writers.errors": {"timeline", "index"},  # re-exports index.errors.CorruptDataLogError
    "writers.settings": {"timeline"},
    "writers.write": BASE,
    "writers.services": BASE | {"writers.write"},
    "writers.commit": BASE | {"writers.write", "writers.services"},
    "writers.read": BASE | {"writers.write"},
    "writers.engine": BASE
    | {"writers.write", "writers.services", "writers.commit", "writers.read"},
    "writers.client": BASE
    | {"writers.write", "writers.services", "writers.commit", "writers.read", "writers.engine"},
    "writers": BASE | {"writers.client"},
    "writers.cli": BASE | {"writers.client", "writers.services", "writers.read", "writers.engine"},
}
SOURCES = [p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))]


def room_of(module: str) -> str:
    """The room of a module path such as ``writers.services.clean`` or ``index.keys``."""
    parts = module.split(".")
    if parts[0] != "writers":
        return parts[0]
    return "writers" if len(parts) == 1 else f"writers.{parts[1]}"


def module_of(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if is_package(node.module):  # ``from lakebraid.writers import settings``
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
    return found


def is_package(module: str) -> bool:
    """A lakebraid package (a folder with ``__init__.py``), not a module."""
    parts = module.split(".")
    if parts[0] != "lakebraid":
        return False
    return (REPO.joinpath(*parts[1:]) / "__init__.py").exists()


def imported_rooms(tree: ast.AST) -> set[str]:
    """The lakebraid rooms a module imports (``lakebraid.<room>...``)."""
    names = [m.split(".", 1) for m in imported_modules(tree)]
    return {room_of(n[1]) for n in names if n[0] == "lakebraid" and len(n) > 1}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_imports_point_one_way_and_sit_at_the_top(path: Path) -> None:
    room = room_of(module_of(path))
    tree = ast.parse(path.read_text())
    wrong = imported_rooms(tree) - ALLOWED[room] - {room}
    assert not wrong, f"{path} (room {room}) imports {sorted(wrong)} against the grain"
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
    lines = len(path.read_text().splitlines())
    assert lines <= 400, f"{path} has {lines} lines: split it by concern (at most 400)"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_functions_stay_short(path: Path) -> None:
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > 60
    ]
    assert not long, f"{path}: {long} over 60 lines: split into steps"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_arrow_scanner_over_python_files(path: Path) -> None:
    """``pq.read_table`` and the dataset API scan on Arrow's I/O threads; over a Python file
    object (fsspec) those threads call into Python after the read returned, and a process
    exiting meanwhile aborts in native code (apache/arrow#34314). Parquet is read through
    ``pq.ParquetFile``."""
    tree = ast.parse(path.read_text())
    called = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert "read_table" not in called, f"{path} calls read_table: read via pq.ParquetFile"
    assert "pyarrow.dataset" not in imported_modules(tree), f"{path} imports pyarrow.dataset"
