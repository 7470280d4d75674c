"""MkDocs hooks of interv's documentation site (``hooks:`` in ``mkdocs.yml``).

- The README is the site's home page: it is added as ``index.md``, its links into
  ``docs/`` made relative to the site (``docs/trust.md`` -> ``trust.md``), and the pages'
  links back to it (``../README.md#circuits``) point at ``index.md``; so both the
  repository view and the site follow the same links.
- The API reference is generated from the export tables of interv's package faces
  (``_EXPORTS`` in ``interv/__init__.py`` and each subpackage's ``__init__.py``): one page
  per face, one mkdocstrings entry per public name, pointed at the module that owns it. A
  name that no longer exists fails ``mkdocs build --strict``. The ``engine`` and
  ``report`` packages re-export nothing; their pages show each module's docstring.
- ``architectures.md`` is written by the family-matrix test; where a checkout does not have
  it yet, a stand-in page says so, so that the links to it still build.

Nothing here reads the network.
"""

from __future__ import annotations

import ast
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


def export_table(init: Path) -> dict[str, str]:
    """A package face's ``_EXPORTS`` (public name -> owning module), read from its source
    (the site documents the checkout, whichever interv is installed)."""
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(target, ast.Name) and target.id == "_EXPORTS" for target in targets):
                return ast.literal_eval(node.value)
    return {}


def api_page(face: str, shown: dict[str, str]) -> str:
    """The Markdown of one face's API page.

    ``shown`` maps each public object (``owner.name``) to the face whose page renders it:
    a name a face shares with one before it (``interv.TokenizedPairs`` is also
    ``interv.tasks.TokenizedPairs``) is linked there, not rendered twice.
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
    if exports:
        shared = []
        for name, owner in sorted(exports.items(), key=lambda item: item[0].lower()):
            target = f"{owner}.{name}"
            if target in shown:
                shared.append(f"[`{name}`][{target}]")
            else:
                shown[target] = face
                lines += [f"::: {target}", ""]
        if shared:
            lines[8:8] = [f"Also here, shown with an earlier face: {', '.join(shared)}.", ""]
    else:
        for module in sorted(package_dir.glob("*.py")):
            if not module.name.startswith("_"):
                lines += [
                    f"::: {face}.{module.stem}",
                    "    options:",
                    "      members: false",
                    "      show_root_heading: true",
                    "",
                ]
    return "\n".join(lines)


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
    shown: dict[str, str] = {}
    for face in FACES:
        files.append(File.generated(config, api_uri(face), content=api_page(face, shown)))
    return files


def on_config(config):
    api = [{title: api_uri(face)} for face, title in FACES.items()]
    for entry in config["nav"]:
        if isinstance(entry, dict) and "API reference" in entry:
            entry["API reference"] = api
    return config


def on_page_markdown(markdown, page, config, files):
    return re.sub(r"\]\((?:\.\./)+README\.md", "](index.md", markdown)
