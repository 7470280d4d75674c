"""The registry of intervention kinds, the built-in ones included: name -> :class:`Kind`.

Kinds register themselves with :func:`interv.engine.protocol.register` when their module is
imported; this module imports the built-in modules, so every lookup here sees them.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Iterable

# imported for their side effect: each registers its built-in kinds
from interv.engine import directions, interventions, masks, paths  # noqa: F401
from interv.engine.protocol import _KINDS, Kind, register
from interv.errors import IntervError

__all__ = ["allows", "get_kind", "kind_of", "kinds", "parse_import_path"]


def kinds() -> dict[str, Kind]:
    """Every registered kind, built-in and user-registered, by name."""
    return dict(_KINDS)


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_import_path(name: str) -> tuple[str, str]:
    """``"package.module:ClassName"`` as ``(module, class name)``; refused unless both are
    dotted Python identifiers (no relative ``.module``, no empty part)."""
    module_name, _, class_name = name.partition(":")
    parts = module_name.split(".")
    if not all(_IDENTIFIER.match(p) for p in parts) or not _IDENTIFIER.match(class_name):
        raise IntervError(
            f"intervention kind {name!r} is not an import path 'package.module:ClassName' "
            "(dotted Python identifiers, no relative module, no empty part)"
        )
    return module_name, class_name


def allows(module_name: str, allowed: Iterable[str]) -> bool:
    """Whether ``module_name`` is one of the ``allowed`` modules or below one."""
    return any(module_name == a or module_name.startswith(f"{a}.") for a in allowed)


def get_kind(
    name: str,
    *,
    allow_import: Iterable[str] = (),
    on_import: Callable[[str], None] | None = None,
) -> Kind:
    """The kind registered as ``name``, or a class named by import path ``"module:Class"``.

    interv imports no module because a file names it (the trust model,
    ``docs/trust.md``). An import path resolves:

    - against the kinds already registered (built-in, or ``interv.register`` in the user's
      own code) and the modules already imported (by the user's own code, before the
      config is read): nothing is imported;
    - by importing the module only when it is one of ``allow_import`` or below one (the
      user's ``--allow-import MODULE`` or ``allow_import=``); ``on_import(module)`` is
      called first, so the command line can say what it imports.

    The class found is registered under the path.

    Raises:
        IntervError: an unknown name (the known ones are listed), a malformed import
            path, a module that is neither imported nor allowed (the message says how to
            allow it), a module that does not import, or a class that breaks the protocol.
    """
    if not isinstance(name, str):
        raise IntervError(f"an intervention kind is a string; got {name!r}")
    if name in _KINDS:
        return _KINDS[name]
    if ":" not in name:
        raise IntervError(
            f"unknown intervention kind {name!r}; choose one of {tuple(sorted(_KINDS))}, or "
            "name your own class by its import path 'package.module:ClassName'"
        )
    module_name, class_name = parse_import_path(name)
    module = sys.modules.get(module_name)
    if module is None:
        if not allows(module_name, allow_import):
            raise IntervError(
                f"intervention kind {name!r} names module {module_name!r}, which is not "
                "imported; interv does not import code a config or a manifest names unless you "
                f"allow it: pass --allow-import {module_name} (Python: allow_import="
                f"({module_name!r},)), or import it (or call interv.register) in your own code "
                "first"
            )
        if on_import is not None:
            on_import(module_name)
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise IntervError(
                f"intervention kind {name!r}: module {module_name!r} does not import ({error})"
            ) from error
    cls = getattr(module, class_name, None)
    if cls is None:
        raise IntervError(f"intervention kind {name!r}: {module_name} has no {class_name!r}")
    register(name)(cls)
    return _KINDS[name]


def kind_of(cls_or_name: type | str) -> Kind | None:
    """The first registered kind of a class (or of a class name), else None."""
    for kind in _KINDS.values():
        if kind.cls is cls_or_name or kind.cls.__name__ == cls_or_name:
            return kind
    return None
