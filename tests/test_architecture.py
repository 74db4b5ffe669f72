"""The structure, checked (docs/architecture.md "Structure rules").

- engine imports neither bot nor storage, and has no import loop, between modules nor between
  its subpackages (``engine/<package>/``: a loop there is two packages that cannot be read
  apart, even when no two modules import each other);
- the engine is composed in one pass: nothing is set on an engine object after it is built
  (no attribute assigned, no ``set_*``/``bind`` call), and the composition functions hold no
  rules (no nested function or lambda).

Every import counts, including those under ``TYPE_CHECKING`` and inside functions: a loop that
only the type checker sees is still two modules that cannot be read apart.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN_IN_ENGINE = ("bot", "storage", "telegram", "aiosqlite", "sqlite3", "asyncpg", "psycopg")


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


def _package(module: str) -> str | None:
    """``engine.plan.service`` -> ``engine.plan``; a top-level module (``engine.events``)
    belongs to no subpackage: it is the shared layer every package may import."""
    parts = module.split(".")
    if len(parts) > 2:
        return ".".join(parts[:2])
    return module if (ROOT / Path(*parts)).is_dir() else None


def _package_graph() -> dict[str, set[str]]:
    """Which subpackage of engine/ imports which (each import between two modules counts)."""
    graph: dict[str, set[str]] = {}
    for module, imported in _engine_graph().items():
        mine = _package(module)
        if mine is None:
            continue
        graph.setdefault(mine, set())
        for other in imported:
            theirs = _package(other)
            if theirs is not None and theirs != mine:
                graph[mine].add(theirs)
                graph.setdefault(theirs, set())
    return graph


def test_engine_subpackages_have_no_import_loop() -> None:
    # The packages layer: tools at the bottom, then checks, plan, worktree, progress, goal,
    # usage, approval, agent (docs/architecture.md).
    assert _cycle(_package_graph()) is None


def _imported_from(tree: ast.Module) -> dict[str, str]:
    """Each name the module imports, with the module it comes from (``.`` when relative)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                names[alias.asname or alias.name] = "." if node.level else node.module or ""
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = alias.name
    return names


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


SETTER_CALLS = ("set_", "bind")


def _late_setters(path: Path, *, foreign: tuple[str, ...]) -> list[str]:
    """Where a function sets something on an object it built from another module's class or
    factory (one whose module starts with one of ``foreign``): ``obj.attr = ...``,
    ``obj.set_x(...)``, ``obj.bind(...)``. The object is known by the local name the call's
    result was bound to, which is what composition code does."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = _imported_from(tree)
    found: list[str] = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        built: set[str] = set()
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                origin = imported.get(_root_name(node.value) or "")
                if origin is not None and origin.startswith(foreign):
                    built.update(t.id for t in node.targets if isinstance(t, ast.Name))
        for node in ast.walk(function):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id in built
                ):
                    found.append(f"{path.name}:{node.lineno} {target.value.id}.{target.attr} =")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in built
                and node.func.attr.startswith(SETTER_CALLS)
            ):
                found.append(f"{path.name}:{node.lineno} {node.func.value.id}.{node.func.attr}()")
    return found


def test_nothing_is_set_on_an_engine_object_after_it_is_built() -> None:
    # The engine is composed in one pass with constructor arguments: a part that needs another
    # is given it, a listener subscribes itself when built. Checked wherever engine objects
    # are built: the engine itself (objects of another engine module) and the front ends.
    offending = [
        hit
        for path in sorted((ROOT / "engine").rglob("*.py"))
        for hit in _late_setters(path, foreign=("engine", "."))
    ] + [
        hit
        for folder in ("bot", "bench")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for hit in _late_setters(path, foreign=("engine",))
    ]
    assert offending == []


def test_nothing_is_set_on_a_front_end_part_after_it_is_built() -> None:
    # The front ends are composed in one pass too (docs/architecture.md "The front end's
    # side"): the outbox, the card presenter, the channel and the access gate are given what
    # they use, a part that listens to another subscribes itself when built, and the engine's
    # channel is a queue the composition delivers to the front end once it exists
    # (bot.channels.ChannelQueue), never a slot bound afterwards.
    offending = [
        hit
        for path in sorted((ROOT / "bot").rglob("*.py"))
        for hit in _late_setters(path, foreign=("bot", "engine", "."))
    ]
    assert offending == []


# The bot's composition: the functions that build its parts and the engine on them.
BOT_COMPOSITION = {
    "bot/compose.py": ("open_plangate",),
    "bot/runner.py": ("run_bot", "serve_front_ends"),
    "bot/telegram/app.py": ("build_application",),
}


def _holders(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The empty lists ``function`` makes that a function nested in it reads: a holder filled
    once a part exists (``holder.append(gate)``, read back as ``holder[0]``), which is a
    setter by another name."""
    empty = {
        target.id
        for node in ast.walk(function)
        if isinstance(node, ast.Assign | ast.AnnAssign)
        and isinstance(node.value, ast.List)
        and not node.value.elts
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    return sorted(
        {
            name.id
            for nested in ast.walk(function)
            if nested is not function
            and isinstance(nested, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            for name in ast.walk(nested)
            if isinstance(name, ast.Name) and name.id in empty
        }
    )


def test_the_bot_composition_holds_no_part_in_a_holder() -> None:
    found: dict[str, list[str]] = {}
    for file, names in BOT_COMPOSITION.items():
        tree = ast.parse((ROOT / file).read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if function.name in names and (held := _holders(function)):
                found[f"{file}:{function.name}"] = held
    assert found == {}


def test_the_holder_finder_finds_a_holder() -> None:
    source = (
        "def build():\n"
        "    holder: list[int] = []\n"
        "    kept = []\n"
        "    def save() -> int:\n"
        "        return holder[0]\n"
        "    holder.append(1)\n"
        "    kept.append(2)\n"
    )
    (function,) = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)][:1]
    assert _holders(function) == ["holder"]


def test_the_setter_finder_finds_a_setter(tmp_path: Path) -> None:
    source = tmp_path / "compose.py"
    source.write_text(
        "from engine.x import Thing, make\n"
        "def build():\n"
        "    thing = Thing()\n"
        "    other = make(thing)\n"
        "    thing.hook = other.run\n"
        "    other.set_driver(thing)\n"
        "    mine = object()\n"
        "    mine.ok = 1\n",
        encoding="utf-8",
    )
    assert _late_setters(source, foreign=("engine",)) == [
        "compose.py:5 thing.hook =",
        "compose.py:6 other.set_driver()",
    ]


COMPOSITION = {"engine/app.py": "build_engine", "bot/compose.py": "open_plangate"}


def test_composition_holds_no_rules() -> None:
    # A rule written as a closure in the composition ("a goal round never waits on a person")
    # belongs to the service that owns it; composition only passes parts to constructors.
    nested: list[str] = []
    for file, name in COMPOSITION.items():
        tree = ast.parse((ROOT / file).read_text(encoding="utf-8"))
        (function,) = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
        ]
        nested += [
            f"{file}:{n.lineno}"
            for n in ast.walk(function)
            if n is not function
            and isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        ]
    assert nested == []


# What a front end may import from the engine: its API (engine.api, which also carries the few
# pure helpers front ends share), the ports it implements or calls (with the keys it names
# chats, people and messages by, and the channel's limits), and the event and value types.
# The composition roots and the command line are exempt: they build the engine.
FRONT_END_SURFACE = (
    "engine.api",
    "engine.ports",
    "engine.keys",
    "engine.limits",
    "engine.model.types",
    "engine.model.transcribe",
    "engine.events",
    "engine.errors",
    "engine.text",
    "engine.tasks",
)
COMPOSITION_ROOTS = frozenset({"cli", "compose", "demo", "doctor", "runner", "settings", "wizard"})


def _on_surface(module: str) -> bool:
    parts = module.split(".")
    if parts[0] != "engine" or len(parts) == 1:
        return True
    if len(parts) == 3 and parts[2] == "types":  # engine.<package>.types: value types
        return True
    return any(module == m or module.startswith(m + ".") for m in FRONT_END_SURFACE)


def test_front_ends_reach_the_engine_only_through_its_surface() -> None:
    # bot/ (Telegram, and any sibling front end) talks to EngineApi, implements the ports and
    # reads the event and value types; it never reaches into a service.
    offending: dict[str, list[str]] = {}
    for path in sorted((ROOT / "bot").rglob("*.py")):
        if path.parent == ROOT / "bot" and path.stem in COMPOSITION_ROOTS:
            continue
        outside = sorted(
            m for m in _imports(path) if m.split(".")[0] == "engine" and not _on_surface(m)
        )
        # ``from engine.api import x`` also yields engine.api.x: a name, not a module.
        outside = [m for m in outside if not _on_surface(m.rpartition(".")[0])]
        if outside:
            offending[str(path.relative_to(ROOT))] = outside
    assert offending == {}


# What a channel's cards and messages say and how: its own, drawn from what every channel
# shares (bot.cardview, bot.approvals), never from another channel's cards, channel or
# renderer.
PRESENTATION = ("cards", "presenter", "channel", "render")
CHANNEL_PACKAGES = ("telegram", "slack")


def test_no_channel_draws_through_another_channels_presentation() -> None:
    offending: dict[str, list[str]] = {}
    for mine in CHANNEL_PACKAGES:
        others = [f"bot.{o}.{part}" for o in CHANNEL_PACKAGES if o != mine for part in PRESENTATION]
        for path in sorted((ROOT / "bot" / mine).rglob("*.py")):
            hits = sorted(m for m in _imports(path) if m.startswith(tuple(others)))
            if hits:
                offending[str(path.relative_to(ROOT))] = hits
    assert offending == {}


def test_the_shared_front_end_modules_and_the_demo_name_no_channel() -> None:
    # The card view, the approval wording and the console demo are every channel's: a front
    # end like any other reaches them, and they reach no channel's package.
    offending = {
        name: sorted(
            m
            for m in _imports(ROOT / "bot" / f"{name}.py")
            if m.startswith(tuple(f"bot.{channel}" for channel in CHANNEL_PACKAGES))
        )
        for name in ("cardview", "approvals", "demo")
    }
    assert {k: v for k, v in offending.items() if v} == {}


CHAT_SERVICES = re.compile(r"telegram|slack", re.IGNORECASE)


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the string constants that are docstrings (module, class, function)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _service_words(path: Path, root: Path = ROOT) -> list[str]:
    """Where the code of ``path`` names a chat service: an identifier, an attribute, an
    import, an argument or a string it uses. Comments and docstrings may name one as an
    example; the code may not (what it says reaches a chat that may be any service)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    hits: list[str] = []
    for node in ast.walk(tree):
        words: list[str] = []
        if isinstance(node, ast.Name):
            words = [node.id]
        elif isinstance(node, ast.Attribute):
            words = [node.attr]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            words = [node.name]
        elif isinstance(node, ast.arg | ast.keyword):
            words = [node.arg or ""]
        elif isinstance(node, ast.alias):
            words = [node.name, node.asname or ""]
        elif isinstance(node, ast.ImportFrom):
            words = [node.module or ""]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            words = [] if id(node) in docs else [node.value]
        hits += [
            f"{path.relative_to(root)}:{getattr(node, 'lineno', '?')} {w[:40]!r}"
            for w in words
            if CHAT_SERVICES.search(w)
        ]
    return hits


def test_no_engine_module_names_a_chat_service() -> None:
    # The engine knows chats, people and a channel; which service carries them is the front
    # end's (bot/). Its code names none, so a second front end changes nothing in it.
    hits = [h for path in sorted((ROOT / "engine").rglob("*.py")) for h in _service_words(path)]
    assert hits == []


def test_the_service_word_finder_reads_code_not_prose(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        '"""Docs may say Telegram."""\n'
        "# so may comments: Slack\n"
        "import telegram\n"
        "def f(slack_token):\n"
        '    """An example: Telegram."""\n'
        '    return "sent to Telegram"\n',
        encoding="utf-8",
    )
    found = sorted(_service_words(source, tmp_path), key=lambda h: int(h.split(":")[1][0]))
    assert [h.split(" ", 1)[1] for h in found] == [
        "'telegram'",
        "'slack_token'",
        "'sent to Telegram'",
    ]


def test_the_cycle_finder_finds_a_loop() -> None:
    # The check above can fail: a two-module loop and a longer one are both reported.
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
