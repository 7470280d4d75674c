"""The registry of intervention kinds, the built-in ones included: name -> :class:`Kind`.

Kinds register themselves with :func:`interv.engine.protocol.register` when their module is
imported; this module imports the built-in modules, so every lookup here sees them.
"""

from __future__ import annotations

import importlib

# imported for their side effect: each registers its built-in kinds
from interv.engine import directions, interventions, masks, paths  # noqa: F401
from interv.engine.protocol import _KINDS, Kind, register
from interv.errors import IntervError

__all__ = ["get_kind", "kind_of", "kinds"]


def kinds() -> dict[str, Kind]:
    """Every registered kind, built-in and user-registered, by name."""
    return dict(_KINDS)


def get_kind(name: str) -> Kind:
    """The kind registered as ``name``, or a class named by import path ``"module:Class"``.

    An import path imports the module (which may register kinds of its own) and, when
    the class is not registered under that path yet, registers it there.

    Raises:
        IntervError: an unknown name (the known ones are listed), a module that does not
            import, or a class that breaks the protocol.
    """
    if name in _KINDS:
        return _KINDS[name]
    if ":" not in name:
        raise IntervError(
            f"unknown intervention kind {name!r}; choose one of {tuple(sorted(_KINDS))}, or "
            "name your own class by its import path 'package.module:ClassName'"
        )
    module_name, _, class_name = name.partition(":")
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
