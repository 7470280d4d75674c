"""Head clustering under both conventions: linkage and ARI oracles, a sink-confounded
construction, and the plot."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from interv.analysis._patterns import rows_from_pattern
from interv.analysis.clustering import (
    adjusted_rand_index,
    average_linkage,
    cluster_heads,
    clustering_agreement,
    cut_tree,
    plot_clustering,
)
from interv.analysis.similarity import head_similarity
from interv.errors import IntervError

matplotlib.use("Agg")

POINTS = torch.tensor([0.0, 1.0, 5.0, 6.0, 20.0], dtype=torch.float64)
LINE_DISTANCE = (POINTS[:, None] - POINTS[None, :]).abs()


def test_average_linkage_merges_closest_clusters_at_their_mean_distance():
    merges = average_linkage(LINE_DISTANCE)
    expected = torch.tensor(
        [
            [0, 1, 1.0, 2],  # {0}, {1} at |0 - 1|
            [2, 3, 1.0, 2],  # {5}, {6} at |5 - 6|
            [5, 6, (5 + 6 + 4 + 5) / 4, 4],  # {0, 1} with {5, 6}: mean of 4 distances
            [4, 7, (20 + 19 + 15 + 14) / 4, 5],  # {20} with the rest
        ],
        dtype=torch.float64,
    )
    assert torch.equal(merges, expected)


def test_cut_tree_gives_k_clusters_numbered_by_lowest_member():
    merges = average_linkage(LINE_DISTANCE)
    assert cut_tree(merges, 1).tolist() == [0, 0, 0, 0, 0]
    assert cut_tree(merges, 2).tolist() == [0, 0, 0, 0, 1]
    assert cut_tree(merges, 3).tolist() == [0, 0, 1, 1, 2]
    assert cut_tree(merges, 5).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(IntervError, match=r"k \(number of clusters\) must be an int in 1\.\.5"):
        cut_tree(merges, 6)


def test_adjusted_rand_index_matches_a_hand_computed_value():
    # contingency [[2, 1, 0], [0, 1, 2]]: index 2, expected 6 * 3 / 15 = 1.2, max 4.5
    first = torch.tensor([0, 0, 0, 1, 1, 1])
    second = torch.tensor([0, 0, 1, 1, 2, 2])
    assert adjusted_rand_index(first, second) == pytest.approx((2 - 1.2) / (4.5 - 1.2))


@given(
    labels=st.lists(st.integers(0, 3), min_size=2, max_size=12),
    other=st.lists(st.integers(0, 3), min_size=12, max_size=12),
    permutation_seed=st.integers(0, 1000),
)
def test_adjusted_rand_index_is_symmetric_and_ignores_label_names(labels, other, permutation_seed):
    first = torch.tensor(labels)
    second = torch.tensor(other[: len(labels)])
    renamed = torch.randperm(4, generator=torch.Generator().manual_seed(permutation_seed))[first]
    assert adjusted_rand_index(first, renamed) == pytest.approx(1.0)
    assert adjusted_rand_index(first, second) == pytest.approx(adjusted_rand_index(second, first))
    assert adjusted_rand_index(first, second) <= 1.0 + 1e-12


def _sink_confounded_heads():
    """Heads 0, 1 park 0.9 on the sink, heads 2, 3 park 0.1; heads 0, 2 read the first
    key, heads 1, 3 the last. Keep-sink groups by sink mass, drop-sink by content."""
    early = torch.tensor([0.7, 0.1, 0.1, 0.1], dtype=torch.float64)
    late = early.flip(0)
    contents = torch.stack([early, late, early, late])
    sink_mass = torch.tensor([0.9, 0.9, 0.1, 0.1], dtype=torch.float64)[:, None]
    rows = torch.cat([sink_mass, (1 - sink_mass) * contents], dim=-1)  # [head, key]
    pattern = rows[None, None, :, None, :].expand(2, 1, 4, 5, 5).clone()
    return head_similarity(rows_from_pattern(pattern, causal=False), n_resamples=5)


@pytest.mark.parametrize("measure", ["cosine", "js", "aitchison"])
def test_sink_confounded_heads_cluster_by_sink_mass_only_when_the_sink_is_kept(measure):
    clustering = cluster_heads(_sink_confounded_heads(), measure=measure, k=2)
    assert clustering.keep_labels.tolist() == [0, 0, 1, 1]
    assert clustering.drop_labels.tolist() == [0, 1, 0, 1]
    # contingency all ones: index 0, expected (2 * 2) / 6, max 2 -> -0.5
    assert clustering.adjusted_rand_index == pytest.approx(-0.5)
    records = clustering.to_records()
    assert [r["head"] for r in records] == ["L0H0", "L0H1", "L0H2", "L0H3"]
    assert all(r["k"] == 2 and r["measure"] == measure for r in records)


def test_clustering_agreement_point_values_are_cluster_heads_and_same_prompts_give_no_spread():
    similarity = _sink_confounded_heads()  # two identical prompts
    agreements = clustering_agreement(similarity, measure="cosine", ks=[1, 2, 4], n_resamples=20)
    assert [a.k for a in agreements] == [1, 2, 4]
    for agreement in agreements:
        point = cluster_heads(similarity, measure="cosine", k=agreement.k).adjusted_rand_index
        assert agreement.adjusted_rand_index == point
        assert math.isnan(agreement.ci_low) and math.isnan(agreement.ci_high)  # 2 < 3 prompts
    assert agreements[1].adjusted_rand_index == pytest.approx(-0.5)
    assert agreements[1].n_heads == 4 and agreements[1].n_prompts == 2
    assert "adjusted Rand index -0.500" in agreements[1].describe()
    assert "interval n/a: no interval from fewer than 3 prompts" in agreements[1].describe()


def _prompt_dependent_heads_pattern():
    """``[3, 1, 6, 6, 6]``: six heads on three prompts, rows that differ by prompt, sink mass
    rising with the head index (seeded)."""
    generator = torch.Generator().manual_seed(0)
    weights = torch.rand(3, 1, 6, 6, 6, generator=generator, dtype=torch.float64) + 0.05
    weights[..., 0] *= torch.linspace(1, 30, 6, dtype=torch.float64)[None, None, :, None]
    return weights / weights.sum(dim=-1, keepdim=True)


def _prompt_dependent_heads():
    pattern = _prompt_dependent_heads_pattern()
    return head_similarity(rows_from_pattern(pattern, causal=False), n_resamples=5)


def test_clustering_agreement_interval_reclusters_each_resample_of_prompts():
    from interv.stats import bootstrap_indices, percentile_interval

    similarity = _prompt_dependent_heads()
    agreements = clustering_agreement(similarity, measure="js", ks=[2, 3], n_resamples=30, seed=4)
    per_prompt = similarity.per_prompt[similarity.measures.index("js")]
    draws = {2: [], 3: []}
    for index in bootstrap_indices(3, 30, 4):
        keep, drop = (average_linkage(per_prompt[c, index].mean(dim=0)) for c in range(2))
        for k in draws:
            draws[k].append(adjusted_rand_index(cut_tree(keep, k), cut_tree(drop, k)))
    for agreement in agreements:
        low, high = percentile_interval(
            torch.tensor(draws[agreement.k], dtype=torch.float64), 0.95, n_items=3
        )
        assert (agreement.ci_low, agreement.ci_high) == (low, high)
        assert agreement.n_resamples == 30 and agreement.seed == 4


def test_clustering_agreement_with_one_prompt_has_no_interval_and_bad_options_raise():
    single = head_similarity(
        rows_from_pattern(_prompt_dependent_heads_pattern()[:1], causal=False), n_resamples=5
    )
    (agreement,) = clustering_agreement(single, ks=[2])
    assert agreement.ci_low != agreement.ci_low and agreement.n_resamples == 0
    similarity = _sink_confounded_heads()
    with pytest.raises(IntervError, match="ks must name"):
        clustering_agreement(similarity, ks=[])
    with pytest.raises(IntervError, match="n_resamples"):
        clustering_agreement(similarity, n_resamples=0)
    with pytest.raises(IntervError, match=r"k \(number of clusters\)"):
        clustering_agreement(similarity, ks=[5])


def test_plot_clustering_draws_both_matrices_in_keep_sink_order():
    import matplotlib.pyplot as plt

    clustering = cluster_heads(_sink_confounded_heads(), measure="js", k=2)
    figure = plot_clustering(clustering)
    panels = [ax for ax in figure.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["keep_sink (js)", "drop_sink (js)"]
    order = clustering.keep_order
    shown = panels[1].images[0].get_array()
    assert torch.allclose(torch.tensor(shown.data), clustering.drop_distance[order][:, order])
    plt.close(figure)
    figure, axes = plt.subplots(1, 2)
    assert plot_clustering(clustering, axes=axes) is figure
    plt.close(figure)
