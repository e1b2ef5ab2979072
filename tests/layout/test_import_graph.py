"""The package's layout holds: no import loop inside `chalicelib/` (imports inside functions count; those
only a type checker reads do not)."""

from __future__ import annotations

from pathlib import Path

from .import_graph import PACKAGE, cycles, graph, modules


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
