"""Built-in tasks: deterministic generators of :class:`~interv.tasks.pairs.PromptPairs`.

``load_task(name, n_pairs=..., seed=..., **options)`` builds a task; the same
arguments always give the same pairs. :func:`available_tasks` lists the names.

- ``"ioi"`` (indirect-object identification, for causal LMs such as SmolLM2):
  "When Mary and John went to the store, John gave a drink to" -> " Mary" (the
  indirect object), foil " John" (the repeated subject). The corrupted prompt
  replaces the repeated subject with a third name ("..., Paul gave a drink to"), the
  "ABC" corruption: the prompt no longer says which of the first two names is the
  subject, and token lengths match because every name is one token. Eight templates,
  both name orders (ABBA and BABA), random places and objects. Options: ``name_set``
  (``"mixed"``, ``"female"``, ``"male"``; all three names of a pair come from it).
- ``"capitals"`` (factual recall): "The capital of France is" -> " Paris"; the
  corrupted prompt names another country, whose capital is the foil. Countries and
  capitals are single tokens in SmolLM2's tokenizer, so the lengths match there. At most
  one pair per country (33): more would repeat prompts and is refused.
- ``"induction"`` (for the zoo's word-level models, vocabulary
  :data:`ZOO_SYMBOLS`): a prefix of ``prefix_len`` distinct random symbols, then a
  copy of a chunk of it (1 to ``max_repeat`` symbols from a random offset); the answer
  is the symbol that followed the chunk's first occurrence. The corrupted prompt
  replaces that first occurrence and the answer after it with fresh symbols (absent
  from the clean prompt), so the answer cannot be copied from context; every other
  position is unchanged. The foil is a symbol absent from both prompts. Targets are
  bare symbols (``"k"``): the zoo tokenizer splits on whitespace.
"""

from __future__ import annotations

import functools
import inspect
import json
import random
import re
import string
import typing
from collections.abc import Callable
from importlib import resources
from typing import Any

from interv.errors import IntervError
from interv.tasks.pairs import PromptPairs

__all__ = ["IOI_TEMPLATES", "ZOO_SYMBOLS", "available_tasks", "ioi_templates", "load_task"]

ZOO_SYMBOLS: tuple[str, ...] = tuple(
    string.ascii_uppercase + string.ascii_lowercase + string.digits
)
"""The 62 content symbols of the zoo vocabulary, in id order (ids 2..63)."""

IOI_TEMPLATES: tuple[str, ...] = (
    "When {A} and {B} went to the {PLACE}, {S} gave a {OBJECT} to",
    "Then, {A} and {B} went to the {PLACE}. {S} gave a {OBJECT} to",
    "After {A} and {B} went to the {PLACE}, {S} gave a {OBJECT} to",
    "While {A} and {B} were working at the {PLACE}, {S} gave a {OBJECT} to",
    "Friends {A} and {B} found a {OBJECT} at the {PLACE}. {S} gave it to",
    "When {A} and {B} got a {OBJECT} at the {PLACE}, {S} decided to give it to",
    "The {PLACE} was quiet when {A} and {B} arrived. {S} handed the {OBJECT} to",
    "Then, {A} and {B} had a long argument at the {PLACE}. Afterwards {S} said to",
)
"""IOI templates: ``{A}``/``{B}`` are the first two names, ``{S}`` the repeated subject."""


def ioi_templates(pairs: PromptPairs) -> tuple[int, ...]:
    """Per pair of an IOI task, the index of its clean prompt's template in
    :data:`IOI_TEMPLATES` (e.g. the ``groups`` of a leave-one-template-out stability).

    Raises:
        IntervError: a clean prompt that fits no template (naming the pair).
    """
    patterns = [
        re.compile(
            "".join(
                "(.+?)" if part.startswith("{") else re.escape(part)
                for part in re.split(r"(\{[A-Z]+\})", template)
            )
            + "$"
        )
        for template in IOI_TEMPLATES
    ]
    out = []
    for i, prompt in enumerate(pairs.clean):
        found = [t for t, pattern in enumerate(patterns) if pattern.match(prompt)]
        if len(found) != 1:
            raise IntervError(
                f"clean prompt {i} ({prompt!r}) fits {len(found)} of the {len(IOI_TEMPLATES)} "
                "IOI templates; ioi_templates reads the pairs of load_task('ioi')"
            )
        out.append(found[0])
    return tuple(out)


_IOI_PLACES = ("store", "park", "school", "office", "garden", "restaurant", "hospital", "station")
_IOI_OBJECTS = ("drink", "book", "ring", "letter", "bottle", "gift", "key", "ball")
_CAPITALS_TEMPLATE = "The capital of {country} is"


def available_tasks() -> tuple[str, ...]:
    """Names accepted by :func:`load_task`."""
    return tuple(sorted(_TASKS))


def load_task(name: str, *, n_pairs: int = 32, seed: int = 0, **options: Any) -> PromptPairs:
    """Build the built-in task ``name`` with ``n_pairs`` pairs, deterministically from ``seed``.

    Task-specific ``options`` are listed in the module docstring; an unknown name or
    option raises :class:`~interv.errors.IntervError` listing the valid ones.
    """
    builder = _TASKS.get(name)
    if builder is None:
        raise IntervError(f"unknown task {name!r}; available tasks are {available_tasks()}")
    if isinstance(n_pairs, bool) or not isinstance(n_pairs, int) or n_pairs < 1:
        raise IntervError(f"n_pairs must be an integer >= 1; got {n_pairs!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise IntervError(f"seed must be an integer; got {seed!r}")
    parameters = dict(list(inspect.signature(builder).parameters.items())[2:])
    allowed = tuple(parameters)
    for option, value in options.items():
        if option not in allowed:
            raise IntervError(
                f"task {name!r} has no option {option!r}; its options are {allowed or '(none)'}"
            )
        _check_option_type(name, option, value, typing.get_type_hints(builder).get(option))
    return builder(n_pairs, random.Random(seed), **options)


def _check_option_type(task: str, option: str, value: Any, annotation: Any) -> None:
    """A task option's value has its builder's annotated type (``int`` or ``str``; a
    sweep config's ``options = {prefix_len = "20"}`` is refused here, not deep inside)."""
    expected = annotation
    if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise IntervError(f"task {task!r} option {option!r} must be an integer; got {value!r}")
    if expected is str and not isinstance(value, str):
        raise IntervError(f"task {task!r} option {option!r} must be a string; got {value!r}")


def _ioi(n_pairs: int, rng: random.Random, name_set: str = "mixed") -> PromptPairs:
    name_sets = _ioi_name_sets()
    if name_set not in name_sets:
        raise IntervError(f"unknown IOI name_set {name_set!r}; choose one of {tuple(name_sets)}")
    names = name_sets[name_set]
    clean, corrupted, targets, foils = [], [], [], []
    for _ in range(n_pairs):
        template = rng.choice(IOI_TEMPLATES)
        indirect_object, subject, third = rng.sample(names, 3)
        first, second = rng.sample((indirect_object, subject), 2)
        slots = {
            "A": first,
            "B": second,
            "PLACE": rng.choice(_IOI_PLACES),
            "OBJECT": rng.choice(_IOI_OBJECTS),
        }
        clean.append(template.format(S=subject, **slots))
        corrupted.append(template.format(S=third, **slots))
        targets.append(" " + indirect_object)
        foils.append(" " + subject)
    return PromptPairs(
        clean=tuple(clean),
        corrupted=tuple(corrupted),
        targets=tuple(targets),
        foils=tuple(foils),
        name="ioi",
        description=(
            "indirect-object identification: predict the non-repeated name; corrupted "
            f"prompts replace the repeated subject with a third name (name set {name_set!r})"
        ),
    )


def _capitals(n_pairs: int, rng: random.Random) -> PromptPairs:
    table = _capital_table()
    if n_pairs > len(table):
        raise IntervError(
            f"the task 'capitals' has {len(table)} countries, so at most {len(table)} pairs with "
            f"distinct clean prompts; n_pairs={n_pairs} would repeat prompts, which every "
            "bootstrap over prompts would count as independent"
        )
    # every country at most once, in a seeded random order
    order = rng.sample(range(len(table)), len(table))
    clean, corrupted, targets, foils = [], [], [], []
    for index in order[:n_pairs]:
        other = rng.choice([i for i in range(len(table)) if i != index])
        clean.append(_CAPITALS_TEMPLATE.format(country=table[index][0]))
        corrupted.append(_CAPITALS_TEMPLATE.format(country=table[other][0]))
        targets.append(" " + table[index][1])
        foils.append(" " + table[other][1])
    return PromptPairs(
        clean=tuple(clean),
        corrupted=tuple(corrupted),
        targets=tuple(targets),
        foils=tuple(foils),
        name="capitals",
        description=(
            "factual recall of capitals; corrupted prompts name another country, whose "
            "capital is the foil"
        ),
    )


def _induction(
    n_pairs: int, rng: random.Random, prefix_len: int = 20, max_repeat: int = 8
) -> PromptPairs:
    if not 2 <= prefix_len <= len(ZOO_SYMBOLS) - 3:
        raise IntervError(
            f"prefix_len must be in 2..{len(ZOO_SYMBOLS) - 3} symbols; got {prefix_len!r}"
        )
    # the corruption needs max_repeat + 1 fresh symbols and the foil one more
    largest_repeat = min(prefix_len - 1, len(ZOO_SYMBOLS) - prefix_len - 2)
    if not 1 <= max_repeat <= largest_repeat:
        raise IntervError(
            f"max_repeat must be in 1..{largest_repeat} for prefix_len={prefix_len}; "
            f"got {max_repeat!r}"
        )
    clean, corrupted, targets, foils = [], [], [], []
    for _ in range(n_pairs):
        prefix = rng.sample(ZOO_SYMBOLS, prefix_len)
        repeat = rng.randint(1, max_repeat)
        offset = rng.randint(0, prefix_len - repeat - 1)
        unused = [symbol for symbol in ZOO_SYMBOLS if symbol not in prefix]
        foil, *fresh = rng.sample(unused, repeat + 2)
        chunk = prefix[offset : offset + repeat]
        corrupted_prefix = list(prefix)
        corrupted_prefix[offset : offset + repeat + 1] = fresh
        clean.append(" ".join(prefix + chunk))
        corrupted.append(" ".join(corrupted_prefix + chunk))
        targets.append(prefix[offset + repeat])
        foils.append(foil)
    return PromptPairs(
        clean=tuple(clean),
        corrupted=tuple(corrupted),
        targets=tuple(targets),
        foils=tuple(foils),
        name="induction",
        description=(
            f"induction on {prefix_len} distinct random symbols followed by a repeat of "
            f"1..{max_repeat} of them; corrupted prompts replace the first occurrence"
        ),
    )


@functools.cache
def _ioi_name_sets() -> dict[str, tuple[str, ...]]:
    raw = json.loads(resources.files("interv.tasks.data").joinpath("ioi_names.json").read_text())
    sets = {key: tuple(names) for key, names in raw.items()}
    return {"mixed": tuple(name for names in sets.values() for name in names), **sets}


@functools.cache
def _capital_table() -> tuple[tuple[str, str], ...]:
    raw = json.loads(resources.files("interv.tasks.data").joinpath("capitals.json").read_text())
    return tuple((country, capital) for country, capital in raw)


_TASKS: dict[str, Callable[..., PromptPairs]] = {
    "capitals": _capitals,
    "induction": _induction,
    "ioi": _ioi,
}
