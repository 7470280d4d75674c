"""Cluster heads under both sink conventions and measure how much the clusterings agree.

A standard head-clustering pipeline groups heads by the similarity of their attention
rows. Whether the sink is kept in the rows can decide the grouping: heads that park
most of their mass on the sink fall together under keep-sink whatever content they
read. This module clusters the head distance matrices of a
:class:`~interv.analysis.similarity.HeadSimilarity` under keep-sink and drop-sink with
the same algorithm and compares the two partitions.

- **Clustering**: agglomerative, average linkage (UPGMA): start from single heads and
  repeatedly merge the two clusters with the smallest mean pairwise head distance
  (ties: the lowest pair of slots, so the result is deterministic); cut the tree when
  ``k`` clusters remain. The distance matrix is symmetrized as ``(D + D^T) / 2``.
- **Agreement**: the adjusted Rand index (Hubert and Arabie, 1985) of the two
  partitions, from their contingency table: 1 for identical partitions, ~0 in
  expectation for independent random ones, negative below chance. When neither
  partition has a within-cluster pair to disagree on (``k`` = 1 or ``k`` = number of
  heads) the index is 0/0 and is reported as 1 (the partitions are identical).
- **Interval** (:func:`clustering_agreement`): percentile bootstrap over prompts. Each
  resample draws the prompts with replacement, averages their per-prompt head distances
  (:attr:`HeadSimilarity.per_prompt`) under each convention, clusters both and recomputes
  the index at every ``k``, seeded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv.analysis.similarity import DISTANCE_UNITS, HeadSimilarity
from interv.errors import IntervError
from interv.metrics.compare import CONVENTIONS
from interv.stats import TOO_FEW, bootstrap_indices, percentile_interval

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "ClusteringAgreement",
    "HeadClustering",
    "adjusted_rand_index",
    "average_linkage",
    "cluster_heads",
    "clustering_agreement",
    "cut_tree",
    "plot_clustering",
]


def average_linkage(distance: torch.Tensor) -> torch.Tensor:
    """Average-linkage agglomerative clustering of ``n`` items from their distances.

    Args:
        distance: ``[n, n]`` symmetric, finite distances (any non-negative unit), n >= 2.

    Returns:
        ``[n - 1, 4]`` float64 merges in order, in the layout of
        ``scipy.cluster.hierarchy.linkage``: ``(cluster_a, cluster_b, height, size)`` with
        ``cluster_a < cluster_b``;
        items are clusters ``0..n-1`` and merge ``i`` creates cluster ``n + i``. ``height``
        is the mean distance between the items of the two merged clusters (same unit).
    """
    if distance.ndim != 2 or distance.shape[0] != distance.shape[1] or distance.shape[0] < 2:
        raise IntervError(
            f"distance must be a square [n, n] matrix with n >= 2; got {tuple(distance.shape)}"
        )
    if not bool(distance.isfinite().all()):
        raise IntervError("distance must be finite everywhere; got NaN or inf entries")
    n = distance.shape[0]
    current = ((distance + distance.T) / 2).to(torch.float64).clone()
    current.fill_diagonal_(math.inf)
    ids = list(range(n))
    sizes = torch.ones(n, dtype=torch.float64)
    merges = torch.zeros(n - 1, 4, dtype=torch.float64)
    for step in range(n - 1):
        flat = int(current.argmin())
        i, j = sorted(divmod(flat, n))
        size = sizes[i] + sizes[j]
        low, high = sorted((ids[i], ids[j]))
        merges[step] = torch.tensor([low, high, float(current[i, j]), float(size)])
        merged = (sizes[i] * current[i] + sizes[j] * current[j]) / size
        current[i], current[:, i] = merged, merged
        current[i, i] = math.inf
        current[j], current[:, j] = math.inf, math.inf
        ids[i], sizes[i] = n + step, size
    return merges


def _leaf_order(merges: torch.Tensor) -> list[int]:
    """Items in dendrogram order (left subtree before right) of a linkage."""
    n = len(merges) + 1
    order, stack = [], [2 * n - 2]
    while stack:
        node = stack.pop()
        if node < n:
            order.append(node)
        else:
            left, right = (int(v) for v in merges[node - n, :2])
            stack.extend((right, left))
    return order


def cut_tree(merges: torch.Tensor, k: int) -> torch.Tensor:
    """``[n]`` int64 cluster labels after the first ``n - k`` merges of a linkage.

    Labels are numbered ``0..k-1`` in order of each cluster's lowest item.
    """
    n = len(merges) + 1
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        raise IntervError(f"k (number of clusters) must be an int in 1..{n}; got {k!r}")
    members: dict[int, list[int]] = {i: [i] for i in range(n)}
    for step in range(n - k):
        left, right = (int(v) for v in merges[step, :2])
        members[n + step] = members.pop(left) + members.pop(right)
    labels = torch.empty(n, dtype=torch.int64)
    for label, items in enumerate(sorted(members.values(), key=min)):
        labels[items] = label
    return labels


def adjusted_rand_index(first: torch.Tensor, second: torch.Tensor) -> float:
    """Adjusted Rand index of two partitions of the same items.

    Args:
        first, second: ``[n]`` int labels (any non-negative ints) of the same ``n`` items.

    Returns:
        ``(sum_ij C(n_ij, 2) - E) / (max - E)`` with ``n_ij`` the contingency table,
        ``E = sum_i C(a_i, 2) sum_j C(b_j, 2) / C(n, 2)`` and ``max`` the mean of the
        two marginal sums; unitless, at most 1 (1 = identical partitions). 1 when the
        denominator is 0 (both partitions trivial: see the module docstring).
    """
    if first.shape != second.shape or first.ndim != 1 or len(first) < 2:
        raise IntervError(
            f"labels must be two [n] tensors of the same length n >= 2; got "
            f"{tuple(first.shape)} and {tuple(second.shape)}"
        )
    n_second = int(second.max()) + 1
    table = torch.bincount(first * n_second + second, minlength=(int(first.max()) + 1) * n_second)
    table = table.reshape(-1, n_second).to(torch.float64)

    def pairs(counts: torch.Tensor) -> torch.Tensor:
        return (counts * (counts - 1) / 2).sum()

    within = pairs(table)
    rows, columns = pairs(table.sum(dim=1)), pairs(table.sum(dim=0))
    expected = rows * columns / (len(first) * (len(first) - 1) / 2)
    maximum = (rows + columns) / 2
    if float(maximum - expected) == 0:
        return 1.0
    return float((within - expected) / (maximum - expected))


@dataclass(frozen=True, eq=False)
class HeadClustering:
    """Average-linkage clusterings of the heads under keep-sink and drop-sink.

    Attributes:
        measure: the head distance measure (see :data:`DISTANCE_UNITS`).
        k: number of clusters of each cut.
        keep_distance, drop_distance: ``[head, head]`` float64 head distances.
        keep_linkage, drop_linkage: ``[head - 1, 4]`` merges (see :func:`average_linkage`).
        keep_labels, drop_labels: ``[head]`` int64 cluster of each head.
        adjusted_rand_index: agreement of the two partitions (unitless, <= 1).
        head_labels: ``"L{layer}H{head}"`` of every head, layer-major.
        scope: the scope line of the :class:`HeadSimilarity` clustered.
        model_name, n_prompts: scope fields.
    """

    measure: str
    k: int
    keep_distance: torch.Tensor
    drop_distance: torch.Tensor
    keep_linkage: torch.Tensor
    drop_linkage: torch.Tensor
    keep_labels: torch.Tensor
    drop_labels: torch.Tensor
    adjusted_rand_index: float
    head_labels: tuple[str, ...]
    scope: str
    model_name: str
    n_prompts: int
    algorithm: str = "agglomerative, average linkage (UPGMA), cut at k clusters"

    @property
    def keep_order(self) -> list[int]:
        """Head indices in keep-sink dendrogram order."""
        return _leaf_order(self.keep_linkage)

    def describe(self) -> str:
        """One line: the agreement of the two clusterings, with its scope."""
        return (
            f"{self.measure}: adjusted Rand index {self.adjusted_rand_index:.3f} (unitless, "
            f"1 = same partition, ~0 = chance) between keep-sink and drop-sink clusterings "
            f"of {len(self.head_labels)} heads into k={self.k} clusters ({self.algorithm})"
        )

    def to_records(self) -> list[dict[str, Any]]:
        """One dict per head: its cluster under each convention, and the scope fields.

        Keys: ``head``, ``keep_sink_cluster``, ``drop_sink_cluster``, ``measure``,
        ``distance_unit``, ``k``, ``adjusted_rand_index``, ``algorithm``, ``model``,
        ``n_prompts``.
        """
        return [
            {
                "head": label,
                "keep_sink_cluster": int(self.keep_labels[i]),
                "drop_sink_cluster": int(self.drop_labels[i]),
                "measure": self.measure,
                "distance_unit": DISTANCE_UNITS[self.measure],
                "k": self.k,
                "adjusted_rand_index": self.adjusted_rand_index,
                "algorithm": self.algorithm,
                "model": self.model_name,
                "n_prompts": self.n_prompts,
            }
            for i, label in enumerate(self.head_labels)
        ]


def cluster_heads(similarity: HeadSimilarity, *, measure: str = "js", k: int = 4) -> HeadClustering:
    """Cluster the heads under both conventions and compare the partitions.

    Args:
        similarity: head distances from :func:`interv.analysis.head_similarity`.
        measure: which distance to cluster on (one of ``similarity.measures``).
        k: number of clusters, in ``1..number of heads``.

    Returns:
        A :class:`HeadClustering` with both trees, both partitions and their adjusted
        Rand index.
    """
    keep, drop = (similarity.distance(measure, convention) for convention in CONVENTIONS)
    keep_linkage, drop_linkage = average_linkage(keep), average_linkage(drop)
    keep_labels, drop_labels = cut_tree(keep_linkage, k), cut_tree(drop_linkage, k)
    return HeadClustering(
        measure=measure,
        k=k,
        keep_distance=keep,
        drop_distance=drop,
        keep_linkage=keep_linkage,
        drop_linkage=drop_linkage,
        keep_labels=keep_labels,
        drop_labels=drop_labels,
        adjusted_rand_index=adjusted_rand_index(keep_labels, drop_labels),
        head_labels=similarity.head_labels,
        scope=similarity.scope,
        model_name=similarity.model_name,
        n_prompts=similarity.n_prompts,
    )


@dataclass(frozen=True)
class ClusteringAgreement:
    """Agreement of the keep-sink and drop-sink clusterings at one ``k``, with its interval.

    Attributes:
        measure: the head distance measure clustered (see :data:`DISTANCE_UNITS`).
        k: number of clusters of both cuts.
        adjusted_rand_index: the index on all prompts (unitless, <= 1; 1 = same
            partition, ~0 = chance), as :func:`cluster_heads` gives it.
        ci_low, ci_high: percentile bootstrap interval over prompts.
        confidence: coverage of the interval (e.g. 0.95).
        n_resamples: bootstrap resamples of the prompts (0: one prompt, no interval).
        n_heads: heads clustered.
        model_name, n_prompts: scope.
        seed: seed of the bootstrap draws.
    """

    measure: str
    k: int
    adjusted_rand_index: float
    ci_low: float
    ci_high: float
    confidence: float
    n_resamples: int
    n_heads: int
    model_name: str
    n_prompts: int
    seed: int
    algorithm: str = "agglomerative, average linkage (UPGMA), cut at k clusters"

    def describe(self) -> str:
        """One line: the index with its interval, the measure, ``k`` and the scope."""
        interval = (
            f"{100 * self.confidence:.0f}% bootstrap CI over {self.n_prompts} prompts "
            f"{self.ci_low:.3f}..{self.ci_high:.3f}, {self.n_resamples} resamples"
            if self.ci_low == self.ci_low
            else f"interval {TOO_FEW} ({self.n_prompts} here)"
        )
        return (
            f"{self.measure}, k={self.k}: adjusted Rand index {self.adjusted_rand_index:.3f} "
            f"({interval}; unitless, "
            f"1 = same partition, ~0 = chance) between keep-sink and drop-sink clusterings of "
            f"{self.n_heads} heads of {self.model_name}"
        )


def clustering_agreement(
    similarity: HeadSimilarity,
    *,
    measure: str = "js",
    ks: tuple[int, ...] | list[int] = (4,),
    n_resamples: int = 200,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[ClusteringAgreement, ...]:
    """Adjusted Rand index of the keep-sink vs drop-sink clusterings, with bootstrap intervals.

    Args:
        similarity: head distances from :func:`interv.analysis.head_similarity`.
        measure: which distance to cluster on (one of ``similarity.measures``).
        ks: numbers of clusters, each in ``1..number of heads``.
        n_resamples: bootstrap resamples of the prompts (>= 1).
        confidence: coverage of the percentile interval, in (0, 1).
        seed: seed of the resamples.

    Returns:
        One :class:`ClusteringAgreement` per ``k``, in order; the point value is the
        index of :func:`cluster_heads` on all prompts (the interval is NaN with one prompt).
    """
    ks = tuple(ks)
    if not ks:
        raise IntervError("ks must name at least one number of clusters; got an empty list")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise IntervError(f"n_resamples must be an int >= 1; got {n_resamples!r}")
    if not 0 < confidence < 1:
        raise IntervError(f"confidence must be in (0, 1), e.g. 0.95; got {confidence!r}")
    points = [cluster_heads(similarity, measure=measure, k=k) for k in ks]
    m, _ = similarity._index(measure, CONVENTIONS[0])
    per_prompt = similarity.per_prompt[m]  # [convention, prompt, head, head]
    n_prompts = similarity.n_prompts
    draws = torch.full((len(ks), n_resamples), torch.nan, dtype=torch.float64)
    if n_prompts > 1:
        indices = bootstrap_indices(n_prompts, n_resamples, seed)
        for r, index in enumerate(indices):
            keep, drop = (
                average_linkage(per_prompt[c, index].mean(dim=0)) for c in range(len(CONVENTIONS))
            )
            for i, k in enumerate(ks):
                draws[i, r] = adjusted_rand_index(cut_tree(keep, k), cut_tree(drop, k))
    return tuple(
        ClusteringAgreement(
            measure=measure,
            k=k,
            adjusted_rand_index=point.adjusted_rand_index,
            ci_low=percentile_interval(draws[i], confidence, n_items=n_prompts)[0],
            ci_high=percentile_interval(draws[i], confidence, n_items=n_prompts)[1],
            confidence=confidence,
            n_resamples=n_resamples if n_prompts > 1 else 0,
            n_heads=len(similarity.head_labels),
            model_name=similarity.model_name,
            n_prompts=n_prompts,
            seed=seed,
        )
        for i, (k, point) in enumerate(zip(ks, points, strict=True))
    )


def plot_clustering(clustering: HeadClustering, *, axes: tuple[Axes, Axes] | None = None) -> Figure:
    """Both distance matrices side by side, heads in keep-sink dendrogram order.

    Args:
        clustering: the result to draw.
        axes: two matplotlib Axes to draw into (keep-sink, drop-sink); None = a new
            figure with two panels.

    Returns:
        The matplotlib Figure (nothing is shown or saved). Cluster boundaries of the
        keep-sink cut are drawn on both panels, so a drop-sink regrouping is visible.
    """
    import matplotlib.pyplot as plt  # matplotlib on use

    if axes is None:
        figure, axes = plt.subplots(1, 2, figsize=(11, 5), layout="constrained")
    elif len(axes) != 2:
        raise IntervError(f"axes must be two matplotlib Axes; got {len(axes)}")
    figure = axes[0].figure
    order = clustering.keep_order
    labels = [clustering.head_labels[i] for i in order]
    keep_sorted = clustering.keep_labels[order]
    boundaries = (torch.nonzero(keep_sorted[1:] != keep_sorted[:-1])[:, 0] + 0.5).tolist()
    unit = DISTANCE_UNITS[clustering.measure]
    matrices = (clustering.keep_distance, clustering.drop_distance)
    for ax, convention, matrix in zip(axes, CONVENTIONS, matrices, strict=True):
        image = ax.imshow(matrix[order][:, order].numpy(), cmap="viridis")
        figure.colorbar(image, ax=ax, label=unit, shrink=0.8)
        for boundary in boundaries:
            ax.axhline(boundary, color="white", linewidth=0.8)
            ax.axvline(boundary, color="white", linewidth=0.8)
        ax.set_title(f"{convention} ({clustering.measure})")
        if len(labels) <= 40:
            ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=6)
            ax.set_yticks(range(len(labels)), labels, fontsize=6)
        ax.set_xlabel("head (keep-sink dendrogram order)")
    figure.suptitle(
        f"{clustering.model_name}: head distances, k={clustering.k} clusters, adjusted Rand "
        f"index {clustering.adjusted_rand_index:.2f} (keep-sink vs drop-sink)"
    )
    return figure
