"""Command line for the sink-aware analyses: ``interv similarity`` and ``interv entropy-change``.

:func:`register` adds both commands to the ``interv`` argument parser; each stores its
handler as ``args.handler`` (called with the parsed arguments, returns the exit
status). Handlers import torch and the models lazily, so ``interv --help`` stays fast.

- ``interv similarity MODEL [--prompts FILE] [--measures ...] [--k K] [--plot FILE]``:
  head distances under keep-sink and drop-sink, the verdict flip rate with its
  bootstrap interval, the clustering agreement, and the Aitchison sink share.
- ``interv entropy-change --zoo NAME --from STEP [--to STEP]``: per-head and overall
  split of the entropy change between two training checkpoints into sink and content
  parts.
"""

from __future__ import annotations

import argparse
from pathlib import Path

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
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise IntervError(f"cannot read --prompts file {str(path)!r}: {error}") from error
    prompts = [line.strip() for line in lines if line.strip()]
    if not prompts:
        raise IntervError(f"--prompts file {str(path)!r} has no non-empty line (one prompt a line)")
    return prompts


def _run_similarity(args: argparse.Namespace) -> int:
    from interv.analysis._patterns import attention_rows
    from interv.analysis.clustering import cluster_heads, plot_clustering
    from interv.analysis.similarity import head_similarity
    from interv.models import load_model

    model = load_model(args.model)
    rows = attention_rows(model, _read_prompts(args.prompts), sink=args.sink)
    similarity = head_similarity(
        rows, measures=args.measures, n_resamples=args.resamples, seed=args.seed
    )
    print(f"scope: {similarity.scope}")
    print("verdict flip rate (share of head triples 'A closer to B than to C' that flip):")
    for flip in similarity.flips:
        print(f"  {flip.describe()}")
    print(f"clustering agreement, keep-sink vs drop-sink (k={args.k}):")
    for measure in similarity.measures:
        clustering = cluster_heads(similarity, measure=measure, k=args.k)
        print(f"  {clustering.describe()}")
        if args.plot is not None:
            import matplotlib.pyplot as plt

            path = args.plot.with_name(f"{args.plot.stem}-{measure}{args.plot.suffix}")
            figure = plot_clustering(clustering)
            figure.savefig(path)
            plt.close(figure)
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


def _run_entropy_change(args: argparse.Namespace) -> int:
    from interv.analysis.attribution import checkpoint_entropy_change

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
                f"  L{layer}H{head}: total {float(result.total[layer, head]):+.4f} "
                f"(std over prompts {float(spread[layer, head]):.4f}) = sink "
                f"{float(result.sink_part[layer, head]):+.4f} + content "
                f"{float(result.content_part[layer, head]):+.4f}; sink share "
                f"{float(result.sink_share[layer, head]):.2f}; sink mass "
                f"{float(result.sink_mass_before[layer, head]):.3f} -> "
                f"{float(result.sink_mass_after[layer, head]):.3f}"
            )
    print(result.describe())
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``similarity`` and ``entropy-change`` commands to ``interv``'s parser."""
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
        "--prompts", type=Path, default=None, help="text file, one prompt a line (default: 4)"
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
    similarity.add_argument("--resamples", type=int, default=200, help="bootstrap resamples")
    similarity.add_argument("--seed", type=int, default=0, help="seed of triples and bootstrap")
    similarity.add_argument(
        "--plot", type=Path, default=None, help="save one PNG per measure, FILE-<measure>.png"
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
    change.add_argument("--zoo", required=True, help="zoo model name, e.g. induction-2l")
    change.add_argument("--from", dest="from_step", type=int, required=True, help="early step")
    change.add_argument(
        "--to", dest="to_step", type=int, default=None, help="late step (default: final weights)"
    )
    change.add_argument("--n-sequences", type=int, default=16, help="held-out sequences")
    change.add_argument("--unit", choices=("nats", "bits"), default="nats", help="entropy unit")
    change.set_defaults(handler=_run_entropy_change)
