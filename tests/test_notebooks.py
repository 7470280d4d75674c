"""The tutorial notebooks run top to bottom on the public API and are stored clean."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
REAL_MODELS = ("smollm2-135m", "minilm-l6")


def _executed(path: Path) -> pytest.param:
    """A notebook that loads a real pretrained model is marked ``real_model`` (out of the
    quick loop, still in the README's test command)."""
    text = path.read_text(encoding="utf-8")
    marks = [pytest.mark.real_model] if any(spec in text for spec in REAL_MODELS) else []
    return pytest.param(path, marks=marks, id=path.name)


def test_notebooks_exist():
    assert NOTEBOOKS, "notebooks/ holds no notebook"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_stored_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, path.name


@pytest.mark.parametrize("path", [_executed(path) for path in NOTEBOOKS])
def test_notebook_executes(path, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
