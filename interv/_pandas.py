"""pandas for the ``to_pandas()`` conversions, which build each frame beside its class.

Every frame is *long* (one row per observation) with the unit, and for causal numbers
the semantics sentence, as columns. pandas is optional (``pip install "interv[pandas]"``):
only the conversions import it. No stability promise; internal to interv.
"""

from __future__ import annotations

from typing import Any

from interv.errors import IntervError

__all__ = ["positions_text", "require_pandas"]


def require_pandas() -> Any:
    """The ``pandas`` module, or :class:`IntervError` saying how to install it."""
    try:
        import pandas  # optional dependency: imported on the first conversion only
    except ImportError as error:
        raise IntervError(
            "to_pandas() and interv report --csv/--parquet need pandas, an optional "
            "dependency of interv: pip install 'interv[pandas]' (or pip install pandas)"
        ) from error
    return pandas


def positions_text(positions: Any) -> str | None:
    """Positions as text (``"3 5"``), so that frames hold no lists; None = all positions."""
    if positions is None:
        return None
    return " ".join(str(int(p)) for p in positions)
