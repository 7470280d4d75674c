"""The API reference renders an entry for every public name (issue 40): every name of
``interv.__all__``, of each face's ``__all__`` and of each public module's ``__all__``.

The pages are the ones ``mkdocs build`` generates (docs/_build/site_hooks.py); mkdocstrings
then fails the strict build on a name it cannot find, so a name here is a rendered entry.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

BUILD = Path(__file__).parent.parent / "docs" / "_build"


@pytest.fixture(scope="module")
def hooks():
    sys.path.insert(0, str(BUILD))
    try:
        import site_hooks

        yield site_hooks
    finally:
        sys.path.remove(str(BUILD))


def _entries(pages: dict[str, str]) -> set[str]:
    """``owner.name`` of every entry: ``::: target`` lines and ``members: [...]`` lists."""
    found = set()
    for page in pages.values():
        module = None
        for line in page.splitlines():
            if line.startswith("::: "):
                module = line[4:].strip()
                found.add(module)
            members = re.match(r"\s+members: \[(.*)\]$", line)
            if members and module:
                found |= {f"{module}.{name.strip()}" for name in members[1].split(",")}
    return found


def _resolves(hooks, entries: set[str], module: str, name: str) -> bool:
    """Whether ``module.name``, or the object it re-exports (followed through the face's
    export table and ``from interv.x import name`` lines), has an entry."""
    candidates = {f"{module}.{name}"}
    package_init = hooks.ROOT.joinpath(*module.split(".")) / "__init__.py"
    if package_init.is_file():
        owner = hooks.export_table(package_init).get(name)
        if owner is not None:
            candidates.add(f"{owner}.{name}")
    for _ in range(3):
        for target in list(candidates):
            owner = target.rsplit(".", 1)[0]
            if hooks.module_path(owner).is_file():
                candidates.add(hooks.owner_of(owner, name))
    return bool(candidates & entries)


def test_every_public_name_has_an_entry(hooks):
    pages = hooks.api_pages()
    entries = _entries(pages)
    for entry in list(entries):  # an entry of a re-exported name is its owner's entry too
        module, _, name = entry.rpartition(".")
        if module and hooks.module_path(module).is_file():
            entries.add(hooks.owner_of(module, name))
    missing = []
    modules = ["interv", *(m for face in hooks.FACES for m in (face, *hooks.public_modules(face)))]
    for module in dict.fromkeys(modules):
        # read from the source, as the site does (no import: the quick loop stays quick)
        path = hooks.module_path(module)
        names = hooks.literal_list(path, "__all__")
        if path.name == "__init__.py":
            names += list(hooks.export_table(path))
        for name in names:
            if name.startswith("__"):
                continue
            if not _resolves(hooks, entries, module, name):
                missing.append(f"{module}.{name}")
    assert not missing, f"no API entry for {len(missing)} public names: {missing[:20]}"
    assert "interv.errors.IntervError" in entries
    assert len(entries) > 300


def test_the_interv_page_is_grouped_by_task_with_the_entry_points_first(hooks):
    page = hooks.api_pages()["interv"]
    titles = re.findall(r"^## (.*)$", page, flags=re.MULTILINE)
    assert titles[0] == "Load a model and a task" and "Circuits" in titles
    first = re.findall(r"^::: (\S+)$", page, flags=re.MULTILINE)[1:]  # after the page's own
    assert first[:2] == ["interv.models.loading.load_model", "interv.tasks.builtin.load_task"]
    assert page.index("::: interv.engine.runner.run\n") < page.index("ZeroAblation")


def test_converted_fields_show_their_real_default(hooks):
    sys.path.insert(0, str(BUILD))
    try:
        import griffe
        import griffe_docstrings
    finally:
        sys.path.remove(str(BUILD))
    loader = griffe.GriffeLoader(
        extensions=griffe.load_extensions(griffe_docstrings.IntervDocstrings),
        search_paths=[str(BUILD.parent.parent)],
    )
    module = loader.load("interv.engine.directions")
    loader.resolve_aliases()
    add_vector = module["AddVector"]
    assert add_vector["vector"].value is None  # required, not "converted(_vector)"
    positions = add_vector["positions"].value
    assert str(positions) == "None"
