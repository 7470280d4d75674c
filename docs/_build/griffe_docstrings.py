"""A griffe extension: interv's docstrings as the API reference shows them.

- Sphinx roles (``:class:`~interv.errors.IntervError```, ``:func:`run```), which Markdown
  would print as they are, become inline code: the last dotted part when the target starts
  with ``~`` (as Sphinx does), the whole target otherwise.
- A doctest example in the running text (``>>> ...`` lines at the docstring's own
  indentation) becomes a fenced Python block, which Markdown would read as a quote.
- A dataclass field declared ``converted(converter, default=...)`` (``interv._fields``)
  shows its real default, and a field with none shows as required: griffe would otherwise
  render the ``converted(...)`` call itself as the default.
- A parameter entry that documents several parameters at once (``x, y: rows ...``) becomes
  one entry per parameter, so that griffe still checks every documented name against the
  signature (a stale one fails ``mkdocs build --strict``).
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj|ref|py:\w+):`(~?)([^`]+)`")
_GROUPED = re.compile(r"^(\s+)([A-Za-z_]\w*(?:, [A-Za-z_]\w*)+)( \([^)]*\))?:", flags=re.M)


def _plain(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


def _one_per_name(match: re.Match[str]) -> str:
    indent, names, kind = match[1], match[2].split(", "), match[3] or ""
    last = names[-1]
    firsts = "".join(f"{indent}{name}{kind}: as `{last}`.\n" for name in names[:-1])
    return f"{firsts}{indent}{last}{kind}:"


def _fenced_examples(text: str) -> str:
    lines, out, example = text.splitlines(), [], False
    for line in lines:
        is_example = line.startswith((">>>", "... ")) or (example and line == "...")
        if is_example and not example:
            out.append("```python")
        elif example and not is_example:
            out.append("```")
        out.append(line)
        example = is_example
    if example:
        out.append("```")
    return "\n".join(out)


def _rewrite(obj: griffe.Object) -> None:
    if obj.docstring is not None:
        text = _ROLE.sub(_plain, obj.docstring.value)
        obj.docstring.value = _fenced_examples(_GROUPED.sub(_one_per_name, text))


def _unconverted(value: object) -> object:
    """The default inside ``converted(converter, default=X)``: ``X``, or None (required)."""
    if isinstance(value, griffe.ExprCall) and str(value.function).rsplit(".", 1)[-1] == "converted":
        for argument in value.arguments:
            if isinstance(argument, griffe.ExprKeyword) and argument.name == "default":
                return argument.value
        return None
    return value


class IntervDocstrings(griffe.Extension):
    """Rewrite every docstring griffe loads, and converted fields' defaults (see the module
    docstring)."""

    def on_attribute_instance(self, *, attr: griffe.Attribute, **kwargs: object) -> None:
        attr.value = _unconverted(attr.value)

    def on_object(self, *, obj: griffe.Object, **kwargs: object) -> None:
        _rewrite(obj)

    def on_package(self, *, pkg: griffe.Module, **kwargs: object) -> None:
        _rewrite(pkg)
