"""Tasks: clean/corrupted prompt pairs with a target (and a foil) at an answer position.

- :class:`PromptPairs` (:mod:`interv.tasks.pairs`): the text form, built in Python, read
  from JSONL, validated and tokenized for one model.
- :class:`TokenizedPairs` (:mod:`interv.tasks.tokenized`): the padded tensor form the
  runner consumes.
- :func:`load_task` and :func:`available_tasks` (:mod:`interv.tasks.builtin`): the
  built-in tasks (``"ioi"``, ``"capitals"``, ``"induction"``).
"""

from __future__ import annotations

from interv.tasks.builtin import available_tasks, load_task
from interv.tasks.pairs import PromptPairs
from interv.tasks.tokenized import TokenizedPairs

__all__ = ["PromptPairs", "TokenizedPairs", "available_tasks", "load_task"]
