"""Command line for the zoo: ``interv zoo list``, ``interv zoo info NAME``,
``interv zoo train NAME [--out DIR]``.

:func:`register` adds the ``zoo`` command to the ``interv`` argument parser; each
subcommand stores its handler as ``args.handler`` (called with the parsed arguments,
returns the exit status).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from interv.cli._vocabulary import add_quiet
from interv.zoo import _registry
from interv.zoo._registry import BackcopyAccuracy, EntropyChangeRecord, TaskAccuracy, card

__all__ = ["register"]

TOP_HEADS = 4  # heads listed with the entropy-change split (largest collapse first)


def _list(args: argparse.Namespace) -> int:
    for name in _registry.available():
        print(f"{name}: {_registry.description(name)}")
    return 0


def _accuracy_line(accuracy: TaskAccuracy | BackcopyAccuracy) -> str:
    """One line with the accuracy numbers, their units and the measurement."""
    if isinstance(accuracy, TaskAccuracy):
        return (
            f"top-1 accuracy (fraction of positions): repeated {accuracy.repeated:.3f} over "
            f"{accuracy.n_repeated} positions, fresh (chance reference) {accuracy.fresh:.3f} "
            f"over {accuracy.n_fresh} positions; {accuracy.measurement}"
        )
    return (
        f"next-token loss {accuracy.loss:.3f} nats/token (optimum {accuracy.optimal_loss:.3f}); "
        "top-1 accuracy (fraction of positions): after copy triggers "
        f"{accuracy.copy:.3f} over {accuracy.n_copy} positions, after a repeated # "
        f"{accuracy.recall:.3f} over {accuracy.n_recall}, after words {accuracy.word:.3f} "
        f"(optimum {accuracy.word_optimal:.3f}) over {accuracy.n_word}; {accuracy.measurement}"
    )


def _entropy_lines(record: EntropyChangeRecord) -> list[str]:
    """The entropy-change split along training and for the heads that collapse most."""
    overall = record.overall
    lines = [
        "entropy change from the first checkpoint (nats, mean over heads; total = sink part "
        "+ content part; share = sink / total):"
    ]
    for split in record.along:
        lines.append(
            f"  step {split.before} -> {split.after}: total {split.total:+.4f} = sink "
            f"{split.sink_part:+.4f} + content {split.content_part:+.4f}; sink share "
            f"{split.sink_share:.2f}; sink mass {split.sink_mass_before:.3f} -> "
            f"{split.sink_mass_after:.3f}"
        )
    lines.append(
        f"heads with the largest collapse, step {overall.before} -> {overall.after} (final):"
    )
    for head in sorted(record.heads, key=lambda head: head.total)[:TOP_HEADS]:
        lines.append(
            f"  {head.label}: total {head.total:+.4f} = sink {head.sink_part:+.4f} + content "
            f"{head.content_part:+.4f}; sink share {head.sink_share:.2f}; sink mass "
            f"{head.sink_mass_before:.3f} -> {head.sink_mass_after:.3f}"
        )
    lines.append(f"  ({record.measurement})")
    return lines


def _info(args: argparse.Namespace) -> int:
    zoo_card = card(args.name)
    training = zoo_card.recipe
    print(f"{zoo_card.name}: {zoo_card.description}")
    print(
        f"recipe: {training.steps} AdamW steps, lr {training.lr}, batch {training.batch_size} "
        f"sequences, init seed {training.init_seed}, data seed {training.data_seed}"
    )
    print(_accuracy_line(zoo_card.accuracy))
    print("roles (score = mean attention weight, 0..1, final weights):")
    for role in zoo_card.roles:
        print(
            f"  {role.role} {role.label}: score {role.score:.3f} >= threshold "
            f"{role.threshold} ({role.measurement})"
        )
    for role_name, table in zoo_card.role_scores.items():
        if not zoo_card.heads_with_role(role_name):
            best, layer, head = max(
                (score, layer, head)
                for layer, row in enumerate(table)
                for head, score in enumerate(row)
            )
            threshold = training.thresholds.of(role_name)
            print(
                f"  {role_name}: no head reaches the threshold {threshold} "
                f"(highest: L{layer}H{head} at {best:.3f})"
            )
    steps = ", ".join(f"{step}: {mass:.3f}" for step, mass in zoo_card.checkpoint_sink_mass)
    print(f"checkpoints (step: largest sink score over heads, mean weight on <bos>): {steps}")
    if zoo_card.entropy_change is not None:
        print("\n".join(_entropy_lines(zoo_card.entropy_change)))
    return 0


def _train(args: argparse.Namespace) -> int:
    from interv.zoo import train  # torch: on use (CLI start-up)

    card(args.name)  # an unknown name fails here, naming the zoo's models
    out = Path(args.out) if args.out is not None else Path("interv-zoo") / args.name
    # train() claims the directory before the ~3 minutes of training; files appear only
    # when training succeeds
    zoo_card = train(args.name, out)
    roles = ", ".join(f"{role.role} {role.label}" for role in zoo_card.roles)
    print(
        f"trained {zoo_card.name} into {out} in {zoo_card.training_wall_s:.0f} s (wall clock); "
        f"roles: {roles}"
    )
    print(_accuracy_line(zoo_card.accuracy))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``zoo list``, ``zoo info NAME`` and ``zoo train NAME [--out DIR]``."""
    zoo = subparsers.add_parser("zoo", help="small models interv trains itself and ships")
    commands = zoo.add_subparsers(dest="zoo_command", required=True)

    listing = commands.add_parser(
        "list", help="list the zoo models", description="List the zoo models that ship with interv."
    )
    listing.set_defaults(handler=_list)

    info = commands.add_parser("info", help="show a zoo model's card")
    info.add_argument("name", help="zoo model name (see `interv zoo list`)")
    info.set_defaults(handler=_info)

    training = commands.add_parser("train", help="train a zoo model from scratch")
    training.add_argument("name", help="zoo model name (see `interv zoo list`)")
    training.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="output directory: new, empty, or written by interv before (default: "
        "./interv-zoo/NAME)",
    )
    add_quiet(training)
    training.set_defaults(handler=_train)
