"""MkDocs hooks of interv's documentation site (``hooks:`` in ``mkdocs.yml``).

- The README is the site's home page: it is added as ``index.md``, its links into
  ``docs/`` made relative to the site (``docs/trust.md`` -> ``trust.md``), and the pages'
  links back to it (``../README.md#circuits``) point at ``index.md``; so both the
  repository view and the site follow the same links.
- The API reference is generated from the export tables of interv's package faces
  (``_EXPORTS`` in ``interv/__init__.py`` and each subpackage's ``__init__.py``): one page
  per face, one mkdocstrings entry per public name, pointed at the module that owns it. A
  name that no longer exists fails ``mkdocs build --strict``. The ``interv`` page groups
  its names by task; every page then renders the ``__all__`` names of the face's public
  modules that the face does not re-export (``tests/test_api_reference.py`` checks that
  every name of ``interv.__all__`` and of each public module's ``__all__`` has an entry).
- ``architectures.md`` is written by the family-matrix test; where a checkout does not have
  it yet, a stand-in page says so, so that the links to it still build.

Nothing here reads the network.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]

# face -> its page's title; the order of the API section
FACES = {
    "interv": "interv",
    "interv.metrics": "interv.metrics",
    "interv.tasks": "interv.tasks",
    "interv.models": "interv.models",
    "interv.engine": "interv.engine",
    "interv.analysis": "interv.analysis",
    "interv.circuits": "interv.circuits",
    "interv.zoo": "interv.zoo",
    "interv.sweeps": "interv.sweeps",
    "interv.report": "interv.report",
}


def _body(path: Path) -> list[ast.stmt]:
    """The top-level statements of a source file, parsed once per version of the file."""
    return _parsed(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=512)
def _parsed(path: str, mtime_ns: int) -> list[ast.stmt]:
    return ast.parse(Path(path).read_text(encoding="utf-8")).body


def export_table(init: Path) -> dict[str, str]:
    """A package face's ``_EXPORTS`` (public name -> owning module), read from its source
    (the site documents the checkout, whichever interv is installed)."""
    for node in _body(init):
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(target, ast.Name) and target.id == "_EXPORTS" for target in targets):
                return ast.literal_eval(node.value)
    return {}


# the `interv` page's sections, by the task a name serves: owning package or module prefix
# -> section title (first match wins; the order is the page's)
TASKS = (
    ("interv.models", "Load a model and a task"),
    ("interv.tasks", "Load a model and a task"),
    ("interv._threads", "Load a model and a task"),
    ("interv.engine.runner", "Intervene: run interventions and read their effects"),
    ("interv.engine.results", "Intervene: run interventions and read their effects"),
    ("interv.engine.interventions", "Interventions: ablations, patches, value edits"),
    ("interv.engine.directions", "Interventions: ablations, patches, value edits"),
    ("interv.engine.masks", "Interventions: ablations, patches, value edits"),
    ("interv.engine.paths", "Interventions: ablations, patches, value edits"),
    ("interv.engine", "Write your own intervention"),
    ("interv.analysis", "Concentration of every head"),
    ("interv.audit", "Screens: estimate everything, verify the top, audit the rest"),
    ("interv.circuits", "Circuits"),
    ("interv.report", "Reports and the attention viewer"),
    ("interv.sweeps", "Sweeps"),
    ("interv.errors", "Errors"),
)
# names first within their section (the entry points); the rest alphabetically
FIRST = ("load_model", "load_task", "run", "concentration", "discover", "build_report")
# modules outside the faces' packages that the `interv` page documents (the CLI's reference
# is docs/command-line.md, generated from its parsers)
TOP_MODULES = ("audit", "demo", "errors", "exercises", "flags", "provenance", "stats")


def literal_list(path: Path, name: str) -> list[str]:
    """A module's ``name = [...]`` (``__all__``), read from its source; [] when absent."""
    for node in _body(path):
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(target, ast.Name) and target.id == name for target in targets):
                try:
                    return [str(item) for item in ast.literal_eval(node.value)]
                except ValueError:  # built from other lists: the names that are literal
                    return [
                        element.value
                        for element in ast.walk(node.value)
                        if isinstance(element, ast.Constant) and isinstance(element.value, str)
                    ]
    return []


def public_modules(face: str) -> list[str]:
    """The public modules a face's page documents: every module of its package (and its
    subpackages that are not faces themselves) without a leading underscore in its path,
    and, for ``interv``, :data:`TOP_MODULES`."""
    package_dir = ROOT.joinpath(*face.split("."))
    if face == "interv":
        return [f"interv.{name}" for name in TOP_MODULES]
    found = []
    for module in sorted(package_dir.rglob("*.py")):
        parts = module.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        dotted = ".".join(parts)
        if any(part.startswith("_") for part in parts) or dotted == face:
            continue
        if any(
            dotted.startswith(f"{other}.") or dotted == other
            for other in FACES
            if other != face and other.startswith(f"{face}.")
        ):
            continue
        found.append(dotted)
    return found


def module_path(dotted: str) -> Path:
    base = ROOT.joinpath(*dotted.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def owner_of(module: str, name: str) -> str:
    """``owner.name`` for a name of ``module``'s ``__all__``: the module it is imported from
    (one ``from interv.x import name`` deep), else ``module`` itself."""
    for node in _body(module_path(module)):
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").startswith("interv")
            and any((alias.asname or alias.name) == name for alias in node.names)
        ):
            return f"{node.module}.{name}"
    return f"{module}.{name}"


def _task_of(owner: str) -> str:
    return next((title for prefix, title in TASKS if owner.startswith(prefix)), "More")


def _entry(target: str) -> list[str]:
    return [f"::: {target}", ""]


def api_page(face: str, shown: dict[str, str]) -> str:
    """The Markdown of one face's API page.

    ``shown`` maps each public object (``owner.name``) to the face whose page renders it:
    a name a face shares with one before it (``interv.TokenizedPairs`` is also
    ``interv.tasks.TokenizedPairs``) is linked there, not rendered twice. The ``interv``
    page groups its names by task (:data:`TASKS`); every page ends with the names of its
    public modules' ``__all__`` that its face does not re-export, one section per module.
    """
    package_dir = ROOT.joinpath(*face.split("."))
    lines = [
        f"# `{face}`",
        "",
        f"::: {face}",
        "    options:",
        "      members: false",
        "      show_root_heading: false",
        "      show_root_toc_entry: false",
        "",
    ]
    exports = export_table(package_dir / "__init__.py")
    if face == "interv":
        exports = {**exports, "IntervError": "interv.errors"}
    shared = []
    sections: dict[str, list[str]] = {}
    for name, owner in sorted(
        exports.items(),
        key=lambda item: (
            item[0] not in FIRST,
            FIRST.index(item[0]) if item[0] in FIRST else 0,
            item[0].lower(),
        ),
    ):
        target = f"{owner}.{name}"
        if target in shown:
            shared.append(f"[`{name}`][{target}]")
            continue
        shown[target] = face
        title = _task_of(owner) if face == "interv" else ""
        sections.setdefault(title, []).extend(_entry(target))
    order = [title for _, title in TASKS] + ["More", ""]
    for title in sorted(sections, key=order.index):
        if title:
            lines += [f"## {title}", ""]
        lines += sections[title]
    for module in public_modules(face):
        rest = []
        for name in dict.fromkeys(literal_list(module_path(module), "__all__")):
            target = owner_of(module, name)
            if target in shown:
                continue
            shown[target] = face
            rest.append(name)
        if rest:
            lines += [
                f"## More from `{module}`",
                "",
                f"::: {module}",
                "    options:",
                "      show_root_heading: false",
                "      show_root_toc_entry: false",
                f"      members: [{', '.join(rest)}]",
                "",
            ]
    if shared:
        lines[8:8] = [f"Also here, shown with an earlier face: {', '.join(shared)}.", ""]
    return "\n".join(lines)


def api_pages() -> dict[str, str]:
    """Every face's page (face -> Markdown), in :data:`FACES` order."""
    shown: dict[str, str] = {}
    return {face: api_page(face, shown) for face in FACES}


def api_uri(face: str) -> str:
    return f"api/{face}.md"


def on_files(files, config):  # MkDocs calls these hooks by name
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    readme = re.sub(r"\]\(docs/", "](", readme)
    files.append(File.generated(config, "index.md", content=readme))
    if files.get_file_from_path("architectures.md") is None:
        stand_in = (
            "# Architectures\n\nThe family matrix (which families interv models exactly, and "
            "which it refuses) is generated into `docs/architectures.md` by its test; this "
            "checkout does not have it yet.\n"
        )
        files.append(File.generated(config, "architectures.md", content=stand_in))
    for face, page in api_pages().items():
        files.append(File.generated(config, api_uri(face), content=page))
    return files


def on_config(config):
    api = [{title: api_uri(face)} for face, title in FACES.items()]
    for entry in config["nav"]:
        if isinstance(entry, dict) and "API reference" in entry:
            entry["API reference"] = api
    return config


def on_page_markdown(markdown, page, config, files):
    return re.sub(r"\]\((?:\.\./)+README\.md", "](index.md", markdown)
