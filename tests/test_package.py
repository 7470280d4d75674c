"""The package as a user meets it: cheap import, one error family, a working CLI."""

from __future__ import annotations

import ast
import importlib
import os
import pkgutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import interv
from interv.cli import main
from interv.errors import IntervError


def test_import_loads_neither_torch_nor_transformer_lens_nor_matplotlib():
    code = (
        "import sys, interv; "
        "heavy = [m for m in ('torch', 'transformer_lens', 'matplotlib', 'transformers') "
        "if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_every_public_name_resolves():
    for name in interv.__all__:
        assert getattr(interv, name) is not None, name


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        interv.no_such_name  # noqa: B018


def test_interv_error_is_a_value_error():
    assert issubclass(interv.IntervError, ValueError)


def test_cli_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "metrics" in capsys.readouterr().out


def test_console_script_is_installed():
    out = subprocess.run(["interv", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"interv {interv.__version__}"


FACES = (
    "interv",
    "interv.analysis",
    "interv.analysis.pruning",
    "interv.metrics",
    "interv.models",
    "interv.sweeps",
    "interv.tasks",
    "interv.zoo",
)


TC = "TYPE_CHECKING"


def _type_checking_imports(package: str) -> dict[str, str]:
    """name -> module of every import inside the package's ``if TYPE_CHECKING:`` block."""
    tree = ast.parse(Path(importlib.import_module(package).__file__).read_text())
    blocks = [
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    ]
    assert len(blocks) == 1, f"{package} needs one 'if TYPE_CHECKING:' block"
    return {
        alias.name: node.module
        for node in ast.walk(blocks[0])
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


@pytest.mark.parametrize("package", FACES)
def test_every_face_shows_type_checkers_exactly_its_lazy_exports(package):
    module = importlib.import_module(package)
    exports = module._EXPORTS
    assert _type_checking_imports(package) == exports
    assert set(module.__all__) - {"IntervError", "__version__"} == set(exports)
    submodules = {info.name for info in pkgutil.iter_modules(module.__path__)}
    assert not submodules & set(exports), "an export named like a submodule is shadowed by it"
    for name, owner in exports.items():
        assert getattr(module, name) is getattr(importlib.import_module(owner), name)


@pytest.mark.slow
def test_subpackages_and_their_modules_resolve_as_attributes():
    code = "import interv; print(interv.engine.stacking.BaseRunCache.__name__, interv.report.table)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("BaseRunCache <module 'interv.report.table'")


@pytest.mark.slow
def test_the_readme_cache_line_runs_after_a_plain_import():
    # docs/performance.md: `cache = interv.engine.stacking.BaseRunCache()`, as written
    code = (
        "import interv; cache = interv.engine.stacking.BaseRunCache(); print(type(cache).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "BaseRunCache"


def python_without_omp_setting(code: str) -> subprocess.CompletedProcess:
    """``python -c code`` in an environment without OMP_WAIT_POLICY (the tests set it)."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )


def test_importing_interv_changes_no_environment_variable_and_no_sys_path():
    code = (
        "import os, sys; env, path = dict(os.environ), list(sys.path); import interv; "
        "print(dict(os.environ) == env, sys.path == path, 'torch' in sys.modules)"
    )
    out = python_without_omp_setting(code)
    assert out.stdout.split() == ["True", "True", "False"]


def test_set_threads_before_torch_makes_openmp_wait_passively_without_importing_torch():
    code = (
        "import os, sys, interv; interv.set_threads(); "
        "print(os.environ['OMP_WAIT_POLICY'], 'torch' in sys.modules)"
    )
    out = python_without_omp_setting(code)
    assert out.stdout.split() == ["PASSIVE", "False"]


def test_set_threads_after_torch_sets_the_count_keeps_the_policy_and_refuses_bad_input(
    monkeypatch,
):
    import torch

    threads = torch.get_num_threads()
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # what torch started with here
    try:
        interv.set_threads(1)  # the same policy: nothing to say
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    with pytest.warns(RuntimeWarning, match=r"start Python with OMP_WAIT_POLICY=ACTIVE"):
        interv.set_threads(wait="active")
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"  # unchanged: OpenMP has read it
    with pytest.raises(IntervError, match=r"wait must be one of \('passive', 'active'\)"):
        interv.set_threads(wait="spin")
    with pytest.raises(IntervError, match=r"n must be an integer >= 1"):
        interv.set_threads(0)
    assert torch.get_num_threads() == threads


def test_the_interv_command_makes_openmp_wait_passively_at_its_entry(monkeypatch, capsys):
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert main([]) == 0  # the help: no handler, nothing imported
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    assert "usage: interv" in capsys.readouterr().out


def test_run_signature_is_typed():
    hints = typing.get_type_hints(interv.run)
    assert hints["task"] is interv.TokenizedPairs
    assert hints["return"] is interv.InterventionResult


@pytest.mark.slow  # zoo-sized but among the quick loop's slowest (issue 32)
def test_a_type_checker_sees_the_public_face(tmp_path):
    """mypy on a script that uses the lazy face (heavy third-party packages skipped: ~10 s)."""
    pytest.importorskip("mypy", reason="mypy is in interv[dev], not the Quickstart's [test]")
    script = tmp_path / "face.py"
    script.write_text(
        "import interv\nimport interv.metrics\n\nreveal_type(interv.run)\n"
        "reveal_type(interv.ZeroAblation(0, 1))\nreveal_type(interv.metrics.entropy)\n"
        "interv.run(None, 'not a task', [])\n"
    )
    skipped = "torch,transformer_lens,transformers,numpy,pandas,matplotlib,einops,tqdm"
    config = tmp_path / "mypy.ini"
    config.write_text(
        "[mypy]\nfollow_imports = silent\nignore_missing_imports = True\n"
        f"[mypy-{','.join(f'{name}.*' for name in skipped.split(','))}]\nfollow_imports = skip\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--no-incremental",
            "--config-file",
            str(config),
            "--cache-dir",
            str(tmp_path / "cache"),
            str(script),
        ],
        capture_output=True,
        text=True,
        cwd=Path(interv.__file__).parent.parent,
    ).stdout
    assert "task: interv.tasks.tokenized.TokenizedPairs" in out
    assert "-> interv.engine.results.InterventionResult" in out
    assert 'Revealed type is "interv.engine.interventions.ZeroAblation"' in out
    assert "def (rows: Any, *, key_mask: Any | None =, unit: str =" in out  # torch skipped
    assert 'Argument 2 to "run" has incompatible type "str"; expected "TokenizedPairs"' in out
