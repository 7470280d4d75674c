"""report/ is split into its data and its renderers: no module that defines a report's data
imports a renderer (at its top, where the data is defined); a report displays itself by
handing itself to a renderer when asked. The renderers are found by the code: the modules
that use the report kit (interv/report/kit.py) or matplotlib, and every module that imports
one of them."""

from __future__ import annotations

import ast
from pathlib import Path

import interv.report

REPORT = Path(interv.report.__file__).parent
DATA = {"table", "sections", "agreement", "flags", "screens", "sweep"}


def _typing_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST, top_only: bool) -> set[str]:
    """Modules ``tree`` imports (at its top, or anywhere), annotations-only imports left out."""
    found = set()
    kept = [n for n in getattr(tree, "body", [tree]) if not _typing_only(n)]
    nodes = kept if top_only else [n for top in kept for n in ast.walk(top)]
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _modules() -> dict[str, ast.Module]:
    return {
        path.stem: ast.parse(path.read_text(encoding="utf-8"))
        for path in REPORT.glob("*.py")
        if path.stem != "__init__"
    }


def _renderers(modules: dict[str, ast.Module]) -> set[str]:
    renderers = {
        name
        for name, tree in modules.items()
        if name != "kit"
        and any(
            m == "interv.report.kit" or m.startswith("matplotlib")
            for m in _imports(tree, top_only=False)
        )
    }
    grown = True
    while grown:  # a module importing a renderer at its top renders too
        more = {
            name
            for name, tree in modules.items()
            if name not in renderers
            and any(m.removeprefix("interv.report.") in renderers for m in _imports(tree, True))
        }
        grown = bool(more)
        renderers |= more
    return renderers


def test_no_data_module_of_the_report_imports_a_renderer():
    modules = _modules()
    renderers = _renderers(modules)
    assert {"page", "render", "plots", "circuit_page", "viewer"} <= renderers
    assert not DATA & renderers, f"data modules that import a renderer: {DATA & renderers}"


def test_a_report_shows_itself_through_the_renderers_on_use_only():
    report = _modules()["report"]  # interv/report/report.py: the Report that displays itself
    methods = {
        node.name: _imports(node, top_only=False)
        for node in ast.walk(report)
        if isinstance(node, ast.FunctionDef)
    }
    lazy = {name for name, found in methods.items() if found}
    assert lazy == {"save", "_repr_markdown_", "_repr_html_"}
