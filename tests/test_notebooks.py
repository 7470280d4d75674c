"""The tutorial notebooks run top to bottom on the public API and are stored clean; their
solutions (notebooks/solutions/) pass their own checks, in every documented form."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
RENDERED = ROOT / "docs" / "notebooks"
SOLUTIONS = ROOT / "notebooks" / "solutions"
# an absolute path of the machine that executed a notebook (a home, a checkout, a temporary
# directory): a rendered copy must not show one
MACHINE_PATH = re.compile(r"(?<![\w.:/])/(?:home|root|tmp|work|Users|var|private|opt)/[^\s'\"]*")
ANSWER = re.compile(r"^answer_(\w+) = None\b.*$", re.MULTILINE)
REAL_MODELS = ("smollm2-135m", "minilm-l6", "gemma3-270m")

# A number the prose quotes from an output is written as a code span holding only the
# number, e.g. `0.12` or `-9.97` or `61.2` (a trailing % is allowed): it must then appear in
# the outputs of the notebook's code cells, printed the same way.
QUOTED = re.compile(r"`([+-]?\d[\d,]*(?:\.\d+)?)%?`")


def quoted_numbers(notebook) -> list[str]:
    """Every number the notebook's Markdown cells quote (code spans holding only a number)."""
    return [
        number
        for cell in notebook.cells
        if cell.cell_type == "markdown"
        for number in QUOTED.findall(cell.source)
    ]


def output_text(notebook) -> str:
    """The text of every stream and plain-text output of the notebook's code cells."""
    parts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                parts.append(output.get("text", ""))
            elif "text/plain" in output.get("data", {}):
                parts.append(output["data"]["text/plain"])
    return "\n".join(parts)


def unmatched_quotes(notebook) -> list[str]:
    """Quoted numbers that no output prints (a leading + may be left out of the prose)."""
    text = output_text(notebook)
    missing = []
    for number in quoted_numbers(notebook):
        digits = number.lstrip("+")
        sign = "" if digits.startswith("-") else r"\+?"
        if not re.search(rf"(?<![\d.]){sign}{re.escape(digits)}(?!\d)", text):
            missing.append(number)
    return missing


def shows_a_widget(notebook) -> bool:
    """Whether a code cell's outputs hold a Jupyter widget (tqdm's progress bar)."""
    return any(
        "application/vnd.jupyter.widget-view+json" in output.get("data", {})
        for cell in notebook.cells
        for output in cell.get("outputs", [])
    )


# executing a notebook starts a kernel (a subprocess): out of the quick loop (issue 32), in the
# full suite
SLOW_NOTEBOOKS = (
    "01_concentration.ipynb",
    "03_intervention_semantics.ipynb",
    "11_two_models.ipynb",
)


def _executed(path: Path) -> pytest.param:
    """A notebook that loads a real pretrained model is marked ``real_model``, a slow one
    ``slow`` (out of the quick loop, still in the README's test command)."""
    text = path.read_text(encoding="utf-8")
    marks = [pytest.mark.real_model] if any(spec in text for spec in REAL_MODELS) else []
    if path.name in SLOW_NOTEBOOKS:
        marks.append(pytest.mark.slow)
    return pytest.param(path, marks=marks, id=path.name)


def test_notebooks_exist():
    assert NOTEBOOKS, "notebooks/ holds no notebook"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_stored_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, path.name


def exercise_cells(notebook) -> list[int]:
    """Indices of the code cells after the last "## Exercises" heading that call ``check(``."""
    heading = max(
        i
        for i, c in enumerate(notebook.cells)
        if c.cell_type == "markdown" and "## Exercises" in c.source
    )
    return [
        i
        for i, c in enumerate(notebook.cells)
        if i > heading and c.cell_type == "code" and "check(" in c.source
    ]


VARIANT = "--- variant {n}: exercise {name}, {kind}"


def with_solutions(notebook, path: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """Put the notebook's solutions into its exercise cells, in place, and append a cell that
    re-runs those cells with each equivalent form of an answer and with each sign flip.

    Returns the exercise names and the (name, kind) of every variant run, in order, kind
    being ``"form"`` (must be accepted) or ``"flip"`` (must be rejected).
    """
    solution = (SOLUTIONS / path.with_suffix(".py").name).read_text(encoding="utf-8")
    forms, signed = solution_variants(solution)
    cells = exercise_cells(notebook)
    names = [name for i in cells for name in ANSWER.findall(notebook.cells[i].source)]
    checks = "\n".join(ANSWER.sub("", notebook.cells[i].source) for i in cells)
    for i in cells:
        notebook.cells[i].source = ANSWER.sub("", notebook.cells[i].source)
    notebook.cells.insert(cells[0], nbformat.v4.new_code_cell(solution))
    variants = []
    driver = [f"_solved = {{k: globals()[f'answer_{{k}}'] for k in {names!r}}}"]
    for name in names:
        runs = [("form", form) for form in forms.get(name, [])]
        runs += [("flip", f"-_solved[{name!r}]")] if name in signed else []
        for kind, value in runs:
            marker = VARIANT.format(n=len(variants), name=name, kind=kind)
            variants.append((name, kind))
            driver += [
                f"print({marker!r})",
                f"answer_{name} = {value}",
                f"exec({checks!r})",
                f"answer_{name} = _solved[{name!r}]",
            ]
    notebook.cells.append(nbformat.v4.new_code_cell("\n".join(driver)))
    return names, variants


def solution_variants(solution: str) -> tuple[dict[str, list[str]], list[str]]:
    """A solution file's ``FORMS`` (exercise -> the source of each equivalent answer) and
    ``SIGNED`` (exercises whose sign-flipped answer must be rejected), read without running
    the file (it needs the notebook's names)."""
    forms: dict[str, list[str]] = {}
    signed: list[str] = []
    for node in ast.parse(solution).body:
        if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)):
            continue
        if node.targets[0].id == "FORMS":
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                forms[ast.literal_eval(key)] = [ast.unparse(item) for item in value.elts]
        elif node.targets[0].id == "SIGNED":
            signed = ast.literal_eval(node.value)
    return forms, signed


def verdicts(notebook, names, variants) -> list[str]:
    """What is wrong with the checks' printed verdicts: each solution must be correct, each
    equivalent form correct, each sign flip rejected."""
    lines = output_text(notebook).splitlines()
    problems = []
    first = {}
    for line in lines:
        for name in names:
            if line.startswith(f"exercise {name}: ") and name not in first:
                first[name] = line
    for name in names:
        if not first.get(name, "").startswith(f"exercise {name}: correct"):
            problems.append(f"the solution of exercise {name}: {first.get(name)!r}")
    for n, (name, kind) in enumerate(variants):
        marker = lines.index(VARIANT.format(n=n, name=name, kind=kind))
        line = next(x for x in lines[marker:] if x.startswith(f"exercise {name}: "))
        wanted = "correct" if kind == "form" else "not yet"
        if not line.startswith(f"exercise {name}: {wanted}"):
            problems.append(f"exercise {name}, {kind}: {line!r}")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_every_notebook_has_solutions_to_each_exercise(path):
    notebook = nbformat.read(path, as_version=4)
    solution = SOLUTIONS / path.with_suffix(".py").name
    assert solution.is_file(), f"{path.name} has no solutions file {solution.name}"
    names = [
        name for i in exercise_cells(notebook) for name in ANSWER.findall(notebook.cells[i].source)
    ]
    text = solution.read_text(encoding="utf-8")
    for name in names:
        assert re.search(rf"^answer_{name} = ", text, re.MULTILINE), (solution.name, name)


@pytest.mark.parametrize("path", [_executed(path) for path in NOTEBOOKS])
def test_notebook_executes_and_its_quoted_numbers_are_its_outputs(path, tmp_path):
    """The notebook runs top to bottom with its solutions put into its exercise cells: every
    quoted number is an output, every solution passes its check, in every form it lists,
    and no sign-flipped answer passes."""
    notebook = nbformat.read(path, as_version=4)
    names, variants = with_solutions(notebook, path)
    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    assert not unmatched_quotes(notebook), f"{path.name}: quoted numbers no output prints"
    if "progress(done, total, label)" in path.read_text(encoding="utf-8"):
        assert shows_a_widget(notebook), f"{path.name}: no progress widget in its outputs"
    assert not verdicts(notebook, names, variants), verdicts(notebook, names, variants)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_ends_with_exercises_checked_by_a_cell(path):
    cells = nbformat.read(path, as_version=4).cells
    headings = [
        i for i, c in enumerate(cells) if c.cell_type == "markdown" and "## Exercises" in c.source
    ]
    assert headings, f"{path.name} has no '## Exercises' section"
    after = cells[headings[-1] :]
    checks = sum(c.source.count("check(") for c in after if c.cell_type == "code")
    assert 2 <= checks <= 3, f"{path.name}: {checks} checked exercises (expected 2 or 3)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_rendered_copy_has_the_notebook_s_cells_and_its_outputs(path):
    """docs/notebooks/ holds each notebook executed (``python docs/notebooks/render.py``):
    the same cells, every code cell run, and the prose's quoted numbers in its outputs."""
    rendered = RENDERED / path.name
    assert rendered.is_file(), f"{rendered} is missing: run python docs/notebooks/render.py"
    source = nbformat.read(path, as_version=4).cells
    copy = nbformat.read(rendered, as_version=4)
    assert [c.source for c in copy.cells] == [c.source for c in source], (
        f"{rendered.name} is stale: run python docs/notebooks/render.py {path.name}"
    )
    code = [c for c in copy.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), f"{rendered.name} not executed"
    assert quoted_numbers(copy) == quoted_numbers(nbformat.read(path, as_version=4))
    assert not unmatched_quotes(copy), f"{rendered.name}: quoted numbers no output prints"
    if "progress(done, total, label)" in path.read_text(encoding="utf-8"):
        assert shows_a_widget(copy), f"{rendered.name}: no progress widget in its outputs"
    assert not MACHINE_PATH.findall(output_text(copy)), (
        f"{rendered.name} shows a path of the machine it was executed on: "
        f"{MACHINE_PATH.findall(output_text(copy))[:3]}"
    )
