"""Execute the tutorial notebooks and keep a copy with their outputs in docs/notebooks/.

A reader sees every number without running anything (GitHub renders the copies); the
notebooks themselves stay stored without outputs. ``tests/test_notebooks.py`` checks that
each copy has its notebook's cells and that the numbers the prose quotes are in the copy's
outputs (and, when it executes the notebooks, in fresh outputs too).

    python docs/notebooks/render.py                      # every notebook (docs/notebooks/index.md)
    python docs/notebooks/render.py 05_sinks_as_compositions.ipynb
    python docs/notebooks/render.py --markdown-only       # prose edited, code unchanged

``--markdown-only`` copies the notebooks' Markdown cells into the copies without executing
(refused when a code cell changed). An HTML output larger than 256 KiB (the report page that
notebook 06 displays) is replaced by a note saying so; figures are kept.
"""

from __future__ import annotations

import argparse
import html
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
NOTEBOOKS = HERE.parent.parent / "notebooks"
LARGEST_OUTPUT = 256 * 1024


def _trimmed(notebook: nbformat.NotebookNode) -> None:
    """Replace HTML outputs larger than :data:`LARGEST_OUTPUT` by a short note, in place."""
    for cell in notebook.cells:
        for index, output in enumerate(cell.get("outputs", [])):
            html = output.get("data", {}).get("text/html", "")
            size = len(html)
            if size > LARGEST_OUTPUT:
                cell.outputs[index] = nbformat.v4.new_output(
                    "stream",
                    name="stdout",
                    text=(
                        f"[an output of {size / 1024:.0f} KiB ({', '.join(output['data'])}) is "
                        "left out of this rendered copy; run the notebook to see it]\n"
                    ),
                )


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def _final_bars(notebook: nbformat.NotebookNode) -> None:
    """Give each progress widget's plain-text fallback its final state, in place.

    A widget output's ``text/plain`` is the bar as first drawn ("0%| | 0/30"); a reader
    without widgets (GitHub) would see every run stuck at 0%. The saved widget state holds
    the bar's last label, value and maximum (tqdm's HBox: label, progress, counts).
    """
    state = notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})

    def model(ref: str) -> dict:
        return state.get(ref.removeprefix("IPY_MODEL_"), {}).get("state", {})

    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            view = data.get(WIDGET_VIEW)
            children = model(view["model_id"]).get("children", []) if view else []
            if len(children) != 3:
                continue
            left, bar, right = (model(ref) for ref in children)
            if bar.get("max"):
                filled = round(10 * float(bar.get("value", 0)) / float(bar["max"]))
                text = f"{left.get('value', '')}|{'#' * filled}{' ' * (10 - filled)}|"
                text += str(right.get("value", ""))
                data["text/plain"] = html.unescape(text).replace("\u2007", " ")


def render(path: Path) -> float:
    """Execute ``path`` and write its copy with outputs; returns the seconds it took."""
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}
    ).execute()
    seconds = time.perf_counter() - start
    _trimmed(notebook)
    _final_bars(notebook)
    nbformat.write(notebook, HERE / path.name)
    return seconds


def copy_markdown(path: Path) -> None:
    """Copy the Markdown cells of ``path`` into its rendered copy (code cells must agree)."""
    source = nbformat.read(path, as_version=4)
    target = HERE / path.name
    copy = nbformat.read(target, as_version=4)
    kinds = [(c.cell_type, c.source if c.cell_type == "code" else None) for c in source.cells]
    if kinds != [(c.cell_type, c.source if c.cell_type == "code" else None) for c in copy.cells]:
        raise SystemExit(f"{path.name}: code cells changed; render it instead of --markdown-only")
    for cell, new in zip(copy.cells, source.cells, strict=True):
        if cell.cell_type == "markdown":
            cell.source = new.source
    nbformat.write(copy, target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("names", nargs="*", help="notebook file names (default: all)")
    parser.add_argument("--markdown-only", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    paths = [NOTEBOOKS / name for name in args.names] or sorted(NOTEBOOKS.glob("*.ipynb"))
    for path in paths:
        if args.markdown_only:
            copy_markdown(path)
            print(f"{path.name}: Markdown copied", flush=True)
            continue
        load = os.getloadavg()[0]
        seconds = render(path)
        print(f"{path.name}: executed in {seconds:.0f} s (load average {load:.1f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
