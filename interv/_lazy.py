"""Lazy re-exports: a package names its public attributes without importing their modules.

No stability promise; internal to interv.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str,
    exports: Mapping[str, str],
    namespace: dict[str, Any],
    moved: Mapping[str, str] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Module-level ``__getattr__`` and ``__dir__`` for ``package``.

    Args:
        package: the package's dotted name (for error messages).
        exports: public name -> dotted name of the module that defines it.
        namespace: the package's ``globals()``; a resolved name is cached there, so each
            module is imported once, on first use of one of its names.
        moved: old public name -> the public module it now lives in; such names still
            resolve, with a ``DeprecationWarning`` naming the new place (not cached, so
            every use warns; not listed by ``dir``).

    Any other public name that is a submodule of ``package`` is imported on first use,
    so ``import interv`` then ``interv.metrics.entropy(...)`` works as the notebooks show.
    """
    moved = moved or {}

    def __getattr__(name: str) -> Any:
        if name in moved:
            warnings.warn(
                f"{package}.{name} moved to {moved[name]}.{name}; the old name will be "
                "removed in the next release",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(importlib.import_module(moved[name]), name)
        module_name = exports.get(name)
        if module_name is None:
            # a subpackage (``interv.metrics``) resolves after a bare ``import interv``
            submodule = f"{package}.{name}"
            if not name.startswith("_") and importlib.util.find_spec(submodule) is not None:
                return importlib.import_module(submodule)
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module_name), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
