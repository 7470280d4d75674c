"""Tasks: clean/corrupted prompt pairs with a target (and a foil) at an answer position.

- :class:`PromptPairs` (:mod:`interv.tasks.pairs`): the text form, built in Python, read
  from JSONL, validated and tokenized for one model.
- :class:`TokenizedPairs` (:mod:`interv.tasks.tokenized`): the padded tensor form the
  runner consumes.
- :func:`load_task` and :func:`available_tasks` (:mod:`interv.tasks.builtin`): the
  built-in tasks (``"ioi"``, ``"capitals"``, ``"induction"``).
- :func:`from_mib` (:mod:`interv.tasks.mib`): a local MIB task file, its rows kept as MIB's
  loader keeps them (:class:`MIBTask`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interv._lazy import lazy_exports

# public name -> module that owns it
_EXPORTS: dict[str, str] = {
    "available_tasks": "interv.tasks.builtin",
    "from_mib": "interv.tasks.mib",
    "load_task": "interv.tasks.builtin",
    "MIBTask": "interv.tasks.mib",
    "PromptPairs": "interv.tasks.pairs",
    "TokenizedPairs": "interv.tasks.tokenized",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("interv.tasks", _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover - static analysers see the real names
    from interv.tasks.builtin import available_tasks, load_task
    from interv.tasks.mib import MIBTask, from_mib
    from interv.tasks.pairs import PromptPairs
    from interv.tasks.tokenized import TokenizedPairs
