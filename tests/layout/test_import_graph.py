"""The package's layout holds: no import loop inside `chalicelib/` (imports inside functions count; those
only a type checker reads do not)."""

from __future__ import annotations

import ast
from pathlib import Path

from .import_graph import PACKAGE, ROOT, cycles, graph, modules


def test_no_import_loop_inside_the_package() -> None:
    assert cycles(graph()) == []


def test_the_graph_sees_imports_inside_functions_and_skips_type_checking_ones(tmp_path: Path) -> None:
    """The checker itself: a loop closed by an import inside a function is found; one closed only under
    `if TYPE_CHECKING:` is not."""
    package = tmp_path / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("def later():\n    from .a import thing\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import d\n"
    )
    (package / "d.py").write_text("from .c import anything\n")
    assert set(modules(tmp_path)) == {PACKAGE, *(f"{PACKAGE}.{m}" for m in "abcd")}
    assert cycles(graph(tmp_path)) == [[f"{PACKAGE}.a", f"{PACKAGE}.b"]]


#: the floors, top to bottom: a module may import its own floor and those below, never one above
#: (`app` → `api`/`stages` → `operations`/`tasks` → `services` → `ports` → `domain`; ARCHITECTURE.md)
NEVER_IMPORTS = {
    "domain": {"api", "stages", "operations", "tasks", "services", "ports", "adapters", "local", "bootstrap"},
    "ports": {"api", "stages", "operations", "tasks", "services", "adapters", "local", "bootstrap"},
    "services": {"api", "stages", "operations", "tasks", "adapters", "local", "bootstrap"},
    "tasks": {"api", "stages", "operations", "adapters", "local", "bootstrap"},
    "operations": {"api", "stages", "adapters", "local", "bootstrap"},
    "stages": {"api", "local", "bootstrap"},
    "api": {"stages", "adapters", "local", "bootstrap"},
    "adapters": {"api", "stages", "operations", "tasks", "services", "local", "bootstrap"},
}


def floor(module: str) -> str:
    """`chalicelib.services.dispatch` -> `services`; a top-level module is its own floor."""
    return module.split(".")[1] if "." in module else module


def test_no_module_imports_a_floor_above_its_own() -> None:
    climbs = sorted(
        f"{module} -> {target}"
        for module, targets in graph().items()
        for target in targets
        if floor(target) in NEVER_IMPORTS.get(floor(module), set())
    )
    assert climbs == []


def test_the_top_level_holds_only_the_shared_modules() -> None:
    top = {m for m in modules() if m.count(".") == 1 and not (ROOT / m.replace(".", "/")).is_dir()}
    # the ports are a package of their own (one module per kind of port), re-exported by `chalicelib.ports`
    assert top == {f"{PACKAGE}.{m}" for m in ("bootstrap", "commands", "observability", "settings")}


#: a module over this many lines says at the top of its docstring why it is not split
LONG = 600
LIMIT = 900


def test_modules_stay_small_or_say_why() -> None:
    sizes = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in modules().items()}
    assert {m: n for m, n in sizes.items() if n > LIMIT} == {}
    unexplained = []
    for module, lines in sizes.items():
        if lines > LONG:
            doc = ast.get_docstring(ast.parse(modules()[module].read_text(encoding="utf-8"))) or ""
            if "600 lines" not in doc:
                unexplained.append(f"{module} ({lines} lines)")
    assert unexplained == []


def test_test_modules_import_their_siblings_by_module_name() -> None:
    """`from tests.x import …` works only when the project root is importable as a package root, which
    CI's first pass (scripts/without_system_tools.py) does not give: siblings are imported as `test_x`."""
    through_package = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            through_package += [
                f"{path.relative_to(ROOT)}: {name}" for name in names if name.split(".")[0] == "tests"
            ]
    assert through_package == []
