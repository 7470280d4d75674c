"""Command line for the analyses: ``similarity``, ``entropy-change`` and ``pruning``.

:func:`register` adds the commands to the ``interv`` argument parser; each stores its
handler as ``args.handler`` (called with the parsed arguments, returns the exit
status). Handlers import torch and the models lazily, so ``interv --help`` stays fast.

- ``interv similarity MODEL [--prompts FILE] [--measures ...] [--k K] [--plot FILE]``:
  head distances under keep-sink and drop-sink, the verdict flip rate with its
  bootstrap interval, the clustering agreement, and the Aitchison sink share.
- ``interv entropy-change MODEL --from STEP [--to STEP]``: per-head and overall
  split of the entropy change between two training checkpoints into sink and content
  parts.
- ``interv pruning MODEL [--task NAME | --pairs FILE.jsonl | --text] [--max-heads K] [--ks K ...]
  [--random-seeds S ...] [--plot FILE]``: pruning
  curves (heads mean-ablated cumulatively in the order of each ranking), each printed
  with its unit and the ablation's semantics.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path
from typing import Any

from interv import zoo
from interv._checks import as_int, as_positions, check_index, read_text
from interv._outputs import claim_file
from interv._progress import stages
from interv.cli._vocabulary import METRICS, add_deprecated
from interv.cli.tasks import add_task_options, command_pairs
from interv.engine.sites import head_label
from interv.errors import IntervError

__all__ = ["DEFAULT_PROMPTS", "register"]

DEFAULT_PROMPTS = (
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "When Mary and John went to the store, John gave a drink to Mary.",
    "The capital of France is Paris, and the capital of Italy is Rome.",
    "In 1969 the first humans walked on the Moon during the Apollo mission.",
)
"""Prompts used when ``--prompts`` is not given (four sentences of ~12-16 tokens)."""


def _read_prompts(path: Path | None) -> list[str]:
    if path is None:
        return list(DEFAULT_PROMPTS)
    lines = read_text(path, "--prompts file").splitlines()
    prompts = [line.strip() for line in lines if line.strip()]
    if not prompts:
        raise IntervError(f"--prompts file {str(path)!r} has no non-empty line (one prompt a line)")
    return prompts


def _plot_format(path: Path) -> str:
    """The image format of ``path`` (its suffix; PNG without one), checked."""
    from matplotlib.backend_bases import FigureCanvasBase  # matplotlib: on use (CLI start-up)

    supported = FigureCanvasBase.get_supported_filetypes()
    fmt = path.suffix.lstrip(".").lower() or "png"
    if fmt not in supported:
        raise IntervError(
            f"--plot {str(path)!r}: unknown image format {fmt!r}; use a suffix among "
            f"{sorted(supported)}"
        )
    return fmt


def _save_figure(figure: Any, output: Any, name: str, fmt: str) -> Path:
    """Save ``figure`` as ``name`` through a claimed output (never over someone's file)."""
    import matplotlib.pyplot as plt  # matplotlib: on use (CLI start-up)

    buffer = io.BytesIO()
    figure.savefig(buffer, format=fmt)
    plt.close(figure)
    return output.write_bytes(name, buffer.getvalue())


def _check_counts(args: argparse.Namespace, *names: str) -> None:
    for name in names:
        value = getattr(args, name)
        if value is not None:
            as_int(value, f"--{name.replace('_', '-')}", minimum=1)


def _run_similarity(args: argparse.Namespace) -> int:
    from interv.models.loading import check_model_spec  # torch: on use (CLI start-up)

    # every option, the prompts and the plot files are checked before the model loads
    check_model_spec(args.model)
    _check_counts(args, "k", "resamples")
    sink = as_positions(args.sink, "--sink", allow_empty=False)
    prompts = _read_prompts(args.prompts)
    plots = {}
    if args.plot is not None:
        fmt = _plot_format(args.plot)
        for measure in args.measures:
            path = args.plot.with_name(f"{args.plot.stem}-{measure}{args.plot.suffix}")
            plots[measure] = (claim_file(path, what="--plot file", by="interv similarity"), fmt)

    from interv.analysis._patterns import attention_rows  # torch: on use (CLI start-up)
    from interv.analysis.clustering import (  # torch: on use (CLI start-up)
        cluster_heads,
        plot_clustering,
    )
    from interv.analysis.similarity import head_similarity  # torch: on use (CLI start-up)
    from interv.models import load_model  # torch: on use (CLI start-up)
    from interv.tasks.pairs import check_tokenizable  # torch: on use (CLI start-up)

    names = ("loading the model", "attention rows", "similarity and bootstrap", "clustering")
    with contextlib.ExitStack() as claims:
        for output, _ in plots.values():
            claims.enter_context(output)
        with stages(names) as bar:
            bar.start("loading the model")
            model = load_model(args.model)
            check_tokenizable(model, prompts)
            bar.start("attention rows")
            rows = attention_rows(model, prompts, sink=list(sink), off_row_sink=args.off_row_sink)
            bar.start("similarity and bootstrap")
            similarity = head_similarity(
                rows, measures=args.measures, n_resamples=args.resamples, seed=args.seed
            )
            bar.start("clustering")
            clusterings = [
                cluster_heads(similarity, measure=measure, k=args.k)
                for measure in similarity.measures
            ]
        print(f"scope: {similarity.scope}")
        print("verdict flip rate (share of head triples 'A closer to B than to C' that flip):")
        for flip in similarity.flips:
            print(f"  {flip.describe()}")
        print(f"clustering agreement, keep-sink vs drop-sink (k={args.k}):")
        for measure, clustering in zip(similarity.measures, clusterings, strict=True):
            print(f"  {clustering.describe()}")
            if measure in plots:
                output, fmt = plots[measure]
                name = f"{args.plot.stem}-{measure}{args.plot.suffix}"
                path = _save_figure(plot_clustering(clustering), output, name, fmt)
                print(f"  plot: {path}")
    if "aitchison" in similarity.measures:
        share = similarity.aitchison_sink_share
        off_diagonal = share[~share.isnan()]
        print(
            "Aitchison split: sink term's share of the squared distance over all head pairs "
            f"(fraction): median {float(off_diagonal.median()):.3f}, mean "
            f"{float(off_diagonal.mean()):.3f}"
        )
    return 0


def _zoo_model(args: argparse.Namespace) -> str:
    """The positional MODEL, or the deprecated ``--zoo``'s value; never two different."""
    if args.zoo_option is not None and args.model is not None and args.zoo_option != args.model:
        raise IntervError(f"two models given: {args.model!r} and --zoo {args.zoo_option!r}")
    name = args.model or args.zoo_option
    if name is None:
        raise IntervError(
            f"give the zoo model: interv entropy-change MODEL --from STEP; available: "
            f"{', '.join(zoo.available())}"
        )
    return name


def _run_entropy_change(args: argparse.Namespace) -> int:
    args.zoo = _zoo_model(args)
    if args.zoo not in zoo.available():
        raise IntervError(
            f"unknown zoo model {args.zoo!r}; available: {', '.join(zoo.available())}"
        )
    shipped = zoo.checkpoints(args.zoo)
    for flag, step in (("--from", args.from_step), ("--to", args.to_step)):
        if step is not None and step not in shipped:
            raise IntervError(
                f"{flag} {step}: zoo model {args.zoo!r} has no checkpoint at that step; shipped "
                f"steps: {', '.join(str(s) for s in shipped)} (--to defaults to the final weights)"
            )
    _check_counts(args, "n_sequences")

    from interv.zoo import checkpoint_entropy_change  # torch: on use (CLI start-up)

    with stages(("loading both checkpoints and splitting the change",)) as bar:
        bar.start("loading both checkpoints and splitting the change")
        result = checkpoint_entropy_change(
            args.zoo,
            before=args.from_step,
            after=args.to_step,
            n_sequences=args.n_sequences,
            unit=args.unit,
        )
    print(f"scope: {result.scope}")
    print(f"per head ({result.unit}; share = sink / total, NaN if |total| < {result.share_atol}):")
    spread = result.spread("total")
    n_layers, n_heads = result.total.shape
    for layer in range(n_layers):
        for head in range(n_heads):
            print(
                f"  {head_label(layer, head)}: total {float(result.total[layer, head]):+.4f} "
                f"(std over prompts {float(spread[layer, head]):.4f}) = sink "
                f"{float(result.sink_part[layer, head]):+.4f} + content "
                f"{float(result.content_part[layer, head]):+.4f}; sink share "
                f"{float(result.sink_share[layer, head]):.2f}; sink mass "
                f"{float(result.sink_mass_before[layer, head]):.3f} -> "
                f"{float(result.sink_mass_after[layer, head]):.3f}"
            )
    print(result.describe())
    return 0


def _run_pruning(args: argparse.Namespace) -> int:
    from interv.analysis.pruning import RANKINGS, check_rankings  # torch: on use (CLI start-up)
    from interv.analysis.pruning.rankings import check_seeds  # torch: on use (CLI start-up)
    from interv.engine.targets import METRICS  # torch: on use (CLI start-up)
    from interv.models.loading import check_model_spec  # torch: on use (CLI start-up)

    # every option, the task's prompts and the plot file are checked before the model loads
    check_model_spec(args.model)
    rankings = list(RANKINGS) if args.rankings is None else args.rankings
    check_rankings(rankings)
    _check_counts(args, "n_pairs", "n_tokens")
    if args.max_heads is not None:
        as_int(args.max_heads, "--max-heads", minimum=0)
    if args.ks is not None:
        for k in args.ks:
            as_int(k, "--ks", minimum=0)
        if list(args.ks) != sorted(set(args.ks)):
            raise IntervError(f"--ks must be ascending and distinct; got {args.ks}")
    check_seeds(args.random_seeds)
    layers = as_positions(args.layers, "--layers", allow_empty=False)
    pairs = None
    if not args.text:
        metrics = ("loss", *METRICS)
        if args.metric not in metrics:
            raise IntervError(f"unknown --metric {args.metric!r}; choose one of {metrics}")
        pairs = command_pairs(args, metric=args.metric)
    plot = None
    if args.plot is not None:
        plot = (
            claim_file(args.plot, what="--plot file", by="interv pruning"),
            _plot_format(args.plot),
        )

    from interv.analysis.pruning import (  # torch: on use (CLI start-up)
        TaskEvaluation,
        TextEvaluation,
        pruning_curves,
    )
    from interv.models import load_model  # torch: on use (CLI start-up)
    from interv.report.plots import plot_pruning_curves  # torch: on use (CLI start-up)

    names = ("loading the model", "tokenizing", "rankings and curves")
    with contextlib.ExitStack() as claims:
        if plot is not None:
            claims.enter_context(plot[0])
        with stages(names) as bar:
            bar.start("loading the model")
            model = load_model(args.model)
            bar.start("tokenizing")
            if layers is not None:
                for layer in layers:
                    check_index(
                        layer,
                        model.cfg.n_layers,
                        "layer",
                        f"{args.model} has {model.cfg.n_layers} layers",
                    )
            if pairs is None:
                evaluation = TextEvaluation.from_text(model, n_tokens=args.n_tokens)
                if args.rankings is None:
                    rankings.remove("attribution")
            else:
                evaluation = TaskEvaluation(pairs.tokenize(model), metric=args.metric)
            heads = None
            if layers is not None:
                heads = [(layer, head) for layer in layers for head in range(model.cfg.n_heads)]
            bar.start("rankings and curves")
            curves = pruning_curves(
                model,
                evaluation,
                orders=rankings,
                max_heads=args.max_heads,
                ks=args.ks,
                heads=heads,
                seed=args.seed,
                random_seeds=args.random_seeds,
            )
        print(f"scope: {curves.scope}")
        print(f"semantics: {curves.ablation}")
        print(f"lower is better: {curves.lower_is_better}")
        intervals = curves.intervals() if curves.item_values else {}
        for name in curves.orders:
            print(f"  {curves.describe(name)}")
            if name in intervals:
                bounds = ", ".join(
                    f"[{low:.4g}, {high:.4g}]" for low, high in intervals[name].tolist()
                )
                print(f"    95% interval over the {curves.n_items} {curves.items}: {bounds}")
            removed = ", ".join(head_label(*head) for head in curves.orders[name])
            print(f"    removed in order: {removed}")
            print(f"    rule: {curves.rules[name]}")
        if plot is not None:
            path = _save_figure(plot_pruning_curves(curves), plot[0], args.plot.name, plot[1])
            print(f"plot: {path}")
    return 0


#: the orders of :data:`interv.analysis.pruning.RANKINGS` (a test keeps the two equal)
RANKING_NAMES = (
    "entropy",
    "content_entropy",
    "sink_mass",
    "contribution",
    "exact_effect",
    "attribution",
    "random",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``similarity``, ``entropy-change`` and ``pruning`` commands to the parser."""
    similarity = subparsers.add_parser(
        "similarity",
        help="head similarity under keep-sink and drop-sink, verdict flips, clustering",
        description=(
            "Head-by-head distances of a model's attention rows under the keep-sink and "
            "drop-sink conventions, the share of 'A closer to B than to C' verdicts that "
            "flip between them (bootstrap CI over prompts), and the agreement of the two "
            "head clusterings (adjusted Rand index)."
        ),
    )
    similarity.add_argument("model", help="model spec for interv.load_model, e.g. smollm2-135m")
    similarity.add_argument(
        "--prompts",
        type=Path,
        default=None,
        metavar="FILE.txt",
        help="text file, one prompt a line (default: 4 shipped prompts)",
    )
    similarity.add_argument(
        "--measures",
        nargs="+",
        choices=("cosine", "js", "aitchison"),
        default=["cosine", "js", "aitchison"],
        help="distance measures (default: all three)",
    )
    similarity.add_argument("--k", type=int, default=4, help="clusters per cut (default: 4)")
    similarity.add_argument("--sink", type=int, nargs="+", default=[0], help="sink positions")
    similarity.add_argument(
        "--off-row-sink",
        choices=("as_key",),
        default=None,
        help="for a model whose rows sum to less than 1 (an off-row learned sink, gpt-oss): "
        "count the deficit as one extra sink key (default: refuse such a model)",
    )
    similarity.add_argument("--resamples", type=int, default=200, help="bootstrap resamples")
    similarity.add_argument("--seed", type=int, default=0, help="seed of triples and bootstrap")
    similarity.add_argument(
        "--plot",
        type=Path,
        default=None,
        metavar="FILE.png",
        help="save one image per measure, FILE-<measure>.png (never over a file interv did "
        "not write)",
    )
    similarity.set_defaults(handler=_run_similarity)

    change = subparsers.add_parser(
        "entropy-change",
        help="split an entropy change between checkpoints into sink and content parts",
        description=(
            "Per head and overall: how much of the change of attention entropy between two "
            "training checkpoints of a zoo model is sink growth and how much is content "
            "sharpening (exact identity: total = sink part + content part)."
        ),
    )
    change.add_argument("model", nargs="?", default=None, help="zoo model name, e.g. induction-2l")
    add_deprecated(change, "--zoo", dest="zoo_option", new="interv entropy-change MODEL")
    change.add_argument("--from", dest="from_step", type=int, required=True, help="early step")
    change.add_argument(
        "--to", dest="to_step", type=int, default=None, help="late step (default: final weights)"
    )
    change.add_argument("--n-sequences", type=int, default=16, help="held-out sequences")
    change.add_argument("--unit", choices=("nats", "bits"), default="nats", help="entropy unit")
    change.set_defaults(handler=_run_entropy_change)

    pruning = subparsers.add_parser(
        "pruning",
        help="pruning curves: heads mean-ablated cumulatively in the order of each ranking",
        description=(
            "Rank heads (entropy, content entropy, sink mass, contribution norm, exact "
            "effect, attribution, random), mean-ablate the least important first, "
            "cumulatively, and print the task metric or text loss after each removal."
        ),
    )
    pruning.add_argument("model", help="model spec for interv.load_model, e.g. induction-2l")
    source = pruning.add_mutually_exclusive_group()
    add_task_options(pruning, group=source, n_pairs_default=16)
    source.add_argument(
        "--text", action="store_true", help="next-token loss on interv's shipped text sample"
    )
    pruning.add_argument(
        "--metric",
        default="loss",
        choices=("loss", *METRICS),
        help="task metric: loss (-log_prob of the target, nats; default) or a target metric",
    )
    pruning.add_argument("--max-heads", type=int, default=None, help="most heads removed")
    pruning.add_argument(
        "--ks",
        type=int,
        nargs="+",
        default=None,
        help="numbers of heads removed at which to evaluate, ascending (default: every k up "
        "to --max-heads)",
    )
    pruning.add_argument(
        "--random-seeds",
        type=int,
        nargs="+",
        default=None,
        help="one random order per seed, named 'random (seed s)' (default: one 'random' "
        "order of --seed)",
    )
    pruning.add_argument(
        "--layers", type=int, nargs="+", default=None, help="candidate layers (default: all)"
    )
    pruning.add_argument(
        "--rankings",
        nargs="+",
        default=None,
        choices=RANKING_NAMES,
        help="orders: entropy content_entropy sink_mass contribution exact_effect attribution "
        "random (default: all; attribution is left out with --text)",
    )
    pruning.add_argument("--n-tokens", type=int, default=1024, help="text tokens (--text)")
    pruning.add_argument("--seed", type=int, default=0, help="seed of the task and 'random'")
    pruning.add_argument(
        "--plot",
        type=Path,
        default=None,
        metavar="FILE.png",
        help="save the curves as an image (never over a file interv did not write)",
    )
    pruning.set_defaults(handler=_run_pruning)
