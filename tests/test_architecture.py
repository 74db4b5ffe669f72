"""The layering, checked: engine imports neither bot nor storage, and engine has no import loop.

Every import counts, including those under ``TYPE_CHECKING`` and inside functions: a loop that
only the type checker sees is still two modules that cannot be read apart (docs/architecture.md).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN_IN_ENGINE = ("bot", "storage", "telegram", "aiosqlite", "sqlite3")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, absolute, as written (``from a import b`` gives a and a.b)."""
    found: set[str] = set()
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path.parent)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _engine_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in (ROOT / "engine").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        # ``engine.x`` imported as a package counts as its ``__init__``; a name that is not a
        # module (``from engine.x import y``) is dropped.
        graph[name] = {m for m in _imports(path) if m in modules and m != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import loop in ``graph``, as the modules along it, or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_engine_imports_neither_bot_nor_storage() -> None:
    offending = {
        _module_name(path): sorted(
            m for m in _imports(path) if m.split(".")[0] in FORBIDDEN_IN_ENGINE
        )
        for path in (ROOT / "engine").rglob("*.py")
    }
    assert {k: v for k, v in offending.items() if v} == {}


def test_engine_has_no_import_loop() -> None:
    assert _cycle(_engine_graph()) is None


def test_the_cycle_finder_finds_a_loop() -> None:
    # The check above can fail: a two-module loop and a longer one are both reported.
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
