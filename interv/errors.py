"""The one error family of interv.

Every error interv raises on bad input derives from :class:`IntervError`, itself a
``ValueError``, so ``except ValueError`` keeps working for callers that do not know
interv. Messages name the offending value and the allowed choices.
"""

__all__ = ["IntervError"]


class IntervError(ValueError):
    """Bad input to interv: the message names the value and what was expected."""
