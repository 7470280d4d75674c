"""Lazy package faces: a package names its public attributes without importing their modules.

No stability promise; internal to interv. Like ``interv/__init__.py`` it imports only modules
Python has loaded before it runs ``python -m interv`` (no ``typing``, no ``__future__``).
"""

import importlib
import importlib.util
from collections.abc import Callable, Mapping

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any


def _default_wait() -> None:
    from interv._threads import default_wait

    default_wait()


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: "dict[str, Any]"
) -> "tuple[Callable[[str], Any], Callable[[], list[str]]]":
    """Module-level ``__getattr__`` and ``__dir__`` for ``package``.

    A subpackage's face (``interv.engine``, ...), and the first name resolved through any
    face, apply interv's thread default first (:func:`interv._threads.default_wait`): torch
    is imported next. Every package face of interv uses it, beside an
    ``if TYPE_CHECKING:`` block that imports the same names from the same modules, so
    that editors and type checkers see the real objects (a test checks that the two agree).

    Args:
        package: the package's dotted name (for error messages).
        exports: public name -> dotted name of the module that defines it.
        namespace: the package's ``globals()``; a resolved name is cached there, so each
            module is imported once, on first use of one of its names. A name that is not
            exported but names a submodule (``interv.engine.stacking``) imports it.
    """

    if package != "interv":  # a subpackage: the first heavy use (torch comes next)
        _default_wait()

    def __getattr__(name: str) -> "Any":
        module_name = exports.get(name)
        if module_name is None:
            if not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}"):
                _default_wait()  # a submodule: torch comes next
                return importlib.import_module(f"{package}.{name}")  # a submodule, on use
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if module_name != "interv._threads":  # interv.load_model, ...: torch comes next
            _default_wait()
        value = getattr(importlib.import_module(module_name), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
