"""One spelling per concept on the ``interv`` command line.

Every command builds its options from here, so that one concept is written one way
everywhere (``tests/test_cli_vocabulary.py`` checks the parsers against :data:`CONCEPTS`):

- the model is the first positional argument (``interv grid induction-2l``);
- the number of prompt pairs is ``--n-pairs N_PAIRS``;
- a head is written ``L1H0`` (layer 1, head 0), as one word;
- the exactly verified top of a screen is ``--top-k TOP_K``, its random audit ``--audit``,
  its stopping rule ``--alpha`` (default 0.05, as :class:`interv.Screen`; ``none``: verify
  the top once);
- a closed set of values is listed by argparse (``choices=``), so ``--help`` names them;
- ``--quiet`` exists exactly on the commands that write a directory (``--out``);
- a mistake is one line, ``interv: error: ...``, exit status 2.

Old spellings (``--n-prompts``, ``--verify-top``, ``--zoo``, ``--model`` of ``demo``,
``--sender LAYER HEAD``, heads written ``1:0``) are still accepted for one release, each
with one ``interv: warning: ...`` line on stderr naming the new spelling. Internal to
interv's command line; no stability promise.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, NoReturn

from interv.errors import IntervError

__all__ = [
    "ALPHA_DEFAULT",
    "CONCEPTS",
    "METRICS",
    "IntervParser",
    "add_alpha",
    "add_deprecated",
    "add_quiet",
    "alpha_value",
    "deprecation",
    "parse_head",
]

#: the target metrics of :data:`interv.engine.targets.METRICS`, listed here so that
#: ``interv --help`` needs no torch (a test keeps the two equal)
METRICS = ("target_logit", "logit_diff", "log_prob", "prob", "kl_from_clean")

#: ``--alpha``'s default: :class:`interv.Screen`'s (a test keeps the two equal)
ALPHA_DEFAULT = 0.05

#: concept -> (the one spelling, the old spellings still accepted for one release)
CONCEPTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "model": ("MODEL (first positional argument)", ("--zoo NAME", "demo --model SPEC")),
    "number of prompt pairs": ("--n-pairs N_PAIRS", ("--n-prompts",)),
    "a head": ("L1H0", ("1:0", "--sender LAYER HEAD")),
    "exactly verified top": ("--top-k TOP_K", ("--verify-top K",)),
    "audit sample": ("--audit AUDIT", ()),
    "stopping rule of a screen": ("--alpha ALPHA (default 0.05; none: one look)", ()),
    "bootstrap resamples of a circuit": ("--stability RESAMPLES", ("--stability B",)),
    "batch of stacked forwards": ("--batch-size BATCH_SIZE", ("--batch-size B",)),
    "no progress and no summary": ("--quiet (every command with --out)", ()),
}

_HEAD = re.compile(r"^L(\d+)H(\d+)$")
_OLD_HEAD = re.compile(r"^(\d+):(\d+)$")


def deprecation(old: str, new: str) -> None:
    """One line on stderr: ``old`` still works for one release; ``new`` is the spelling."""
    print(
        f"interv: warning: {old} is deprecated; write {new} (the old spelling is accepted "
        "until the next release)",
        file=sys.stderr,
    )


def parse_head(text: str, option: str = "a head") -> tuple[int, int]:
    """A head written ``L1H3`` as ``(layer, head)``; ``1:3`` is accepted with a deprecation."""
    text = str(text).strip()
    match = _HEAD.match(text)
    if match is not None:
        return int(match[1]), int(match[2])
    match = _OLD_HEAD.match(text)
    if match is not None:
        deprecation(f"{option} written {text!r}", f"L{match[1]}H{match[2]}")
        return int(match[1]), int(match[2])
    raise IntervError(f"{option}: a head is written L1H3 (layer 1, head 3); got {text!r}")


class IntervParser(argparse.ArgumentParser):
    """An argument parser whose mistakes end in one line, ``interv: error: ...``."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("interv").strip()
        where = f" (see 'interv {command} --help')" if command else " (see 'interv --help')"
        self.exit(2, f"interv: error: {command + ': ' if command else ''}{message}{where}\n")


class _Deprecated(argparse.Action):
    """An old spelling: stores into the new option's ``dest`` and says so once."""

    def __init__(self, option_strings: list[str], dest: str, *, new: str, **kwargs: Any):
        self.new = new
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        deprecation(str(option_string), self.new)
        setattr(namespace, self.dest, values)


def add_deprecated(
    parser: argparse.ArgumentParser, old: str, *, dest: str, new: str, **kwargs: Any
) -> None:
    """Accept ``old`` (hidden from ``--help``) as a deprecated spelling of ``new``."""
    parser.add_argument(old, dest=dest, action=_Deprecated, new=new, default=None, **kwargs)


def add_quiet(parser: argparse.ArgumentParser) -> None:
    """``--quiet``: on every command that writes a directory, and only there."""
    parser.add_argument(
        "--quiet", action="store_true", help="no progress bar and no summary on stdout"
    )


def alpha_value(text: str) -> float | None:
    """``--alpha``'s value: a number in (0, 1), or ``none`` (verify the top once)."""
    if text.lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(
            f"--alpha must be a number in (0, 1) or 'none' (one look); got {text!r}"
        )
    return value


def add_alpha(parser: Any, *, given_only: bool = False) -> None:
    """``--alpha ALPHA``, the screen's stopping rule, with :class:`interv.Screen`'s default.

    ``given_only``: absent from the namespace unless given (``interv sweep`` screens only
    when a screen flag is given; the default then is the same :class:`interv.Screen`'s).
    """
    parser.add_argument(
        "--alpha",
        type=alpha_value,
        default=argparse.SUPPRESS if given_only else ALPHA_DEFAULT,
        help=f"verify more until the 95%% bound on the miss rate is below ALPHA (default "
        f"{ALPHA_DEFAULT}; none: verify the top once)",
    )
