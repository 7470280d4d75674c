"""The package as a user meets it: cheap import, one error family, a working CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest

import interv
from interv.cli import main


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
