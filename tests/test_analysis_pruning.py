"""Pruning curves: cumulative mean ablation in the order of each head ranking."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import interv
from interv.analysis.pruning import (
    RANKINGS,
    EmbeddingEvaluation,
    TaskEvaluation,
    TextEvaluation,
    pruning_curves,
    rank_heads,
    text_sample,
)
from interv.analysis.pruning.rankings import _order
from interv.engine.attribution_patching import approximate_head_patching_scores
from interv.engine.interventions import Combined, MeanAblation, ReferenceSet
from interv.report.plots import plot_pruning_curves
from interv.tasks.tokenized import TokenizedPairs

ALL_HEADS = [(layer, head) for layer in range(2) for head in range(4)]


@pytest.fixture(scope="module")
def zoo():
    return interv.load_model("induction-2l")


@pytest.fixture(scope="module")
def evaluation(zoo) -> TaskEvaluation:
    task = interv.load_task("induction", n_pairs=16, seed=0).tokenize(zoo)
    return TaskEvaluation(task)


def test_k0_equals_the_unablated_task_loss_exactly(zoo, evaluation):
    curves = pruning_curves(zoo, evaluation, orders={"given": [(1, 0), (0, 3)]})
    unablated = interv.run(zoo, evaluation.task, MeanAblation(1, 0), metric="log_prob")
    # the curve's value is the float64 mean over prompts of each prompt's loss
    assert float(curves.values["given"][0]) == -float(unablated.clean.double().mean())


def test_kth_point_ablates_exactly_the_first_k_heads_together(zoo, evaluation):
    order = [(1, 2), (0, 0), (1, 3)]
    curves = pruning_curves(zoo, evaluation, orders={"given": order})
    for k in range(1, len(order) + 1):
        direct = interv.run(
            zoo,
            evaluation.task,
            Combined(parts=tuple(MeanAblation(layer, head) for layer, head in order[:k])),
            metric="log_prob",
        )
        assert float(curves.values["given"][k]) == pytest.approx(-float(direct.mean()[0]), abs=1e-5)
    assert curves.orders["given"] == tuple(order)


def test_pruning_by_exact_effect_is_never_worse_than_random_at_the_first_steps(zoo, evaluation):
    steps = 3
    orders = {
        "exact_effect": rank_heads(zoo, evaluation, rankings=["exact_effect"])["exact_effect"],
        **{
            f"random seed {seed}": rank_heads(zoo, evaluation, rankings=["random"], seed=seed)[
                "random"
            ]
            for seed in range(6)
        },
    }
    curves = pruning_curves(zoo, evaluation, orders=orders, max_heads=steps)
    random_mean = torch.stack([v for name, v in curves.values.items() if name != "exact_effect"])
    assert curves.lower_is_better
    assert bool((curves.values["exact_effect"][1:] <= random_mean.mean(0)[1:]).all())


def test_curves_at_chosen_ks_equal_the_full_curves_at_those_points(zoo, evaluation):
    orders = rank_heads(zoo, evaluation, rankings=["sink_mass", "random"])
    full = pruning_curves(zoo, evaluation, orders=dict(orders))
    chosen = pruning_curves(zoo, evaluation, orders=dict(orders), ks=[0, 2, 5, 8])
    assert full.ks == tuple(range(9)) and chosen.ks == (0, 2, 5, 8)
    for name in orders:
        torch.testing.assert_close(chosen.values[name], full.values[name][[0, 2, 5, 8]])
    records = chosen.to_records()
    assert [r["k"] for r in records[:4]] == [0, 2, 5, 8]
    assert records[2]["heads_removed"] == [f"L{a}H{b}" for a, b in orders["sink_mass"][:5]]
    assert "k = [0, 2, 5, 8]" in chosen.describe("random")
    (ax,) = plot_pruning_curves(chosen).axes
    assert list(ax.lines[0].get_xdata()) == [0, 2, 5, 8]


def test_every_head_removed_is_one_set_with_one_value_whatever_the_order(zoo, evaluation):
    curves = pruning_curves(zoo, evaluation, orders=["entropy", "sink_mass"], ks=[0, 8])
    torch.testing.assert_close(
        curves.item_values["entropy"][-1], curves.item_values["sink_mass"][-1], atol=0, rtol=0
    )


def test_several_random_seeds_give_one_named_order_each(zoo, evaluation):
    curves = pruning_curves(
        zoo, evaluation, orders=["entropy", "random"], random_seeds=[0, 1, 2], ks=[0, 1, 4]
    )
    names = ["entropy", "random (seed 0)", "random (seed 1)", "random (seed 2)"]
    assert list(curves.orders) == names
    single = rank_heads(zoo, evaluation, rankings=["random"], seed=1)["random"]
    assert curves.orders["random (seed 1)"] == single
    assert curves.rules["random (seed 2)"].endswith("seed 2")
    assert len({curves.orders[name] for name in names[1:]}) == 3
    with pytest.raises(interv.IntervError, match="random_seeds"):
        pruning_curves(zoo, evaluation, orders=["random"], random_seeds=[1, 1])
    with pytest.raises(interv.IntervError, match="random_seeds"):
        pruning_curves(zoo, evaluation, orders={"given": ALL_HEADS}, random_seeds=[1])


def test_values_are_item_means_and_intervals_are_bootstraps_over_items(zoo, evaluation):
    curves = pruning_curves(zoo, evaluation, orders=["sink_mass", "exact_effect"], ks=[0, 3, 8])
    assert curves.items == "prompts" and curves.n_items == evaluation.task.n_pairs
    for name, items in curves.item_values.items():
        assert tuple(items.shape) == (3, 16)
        torch.testing.assert_close(curves.values[name], items.mean(dim=-1))
    intervals = curves.intervals(n_bootstrap=200, seed=1)
    for name, bounds in intervals.items():
        assert tuple(bounds.shape) == (3, 2)
        assert bool((bounds[:, 0] <= curves.values[name] + 1e-12).all())
        assert bool((bounds[:, 1] >= curves.values[name] - 1e-12).all())
    assert bool(intervals["sink_mass"][1, 1] > intervals["sink_mass"][1, 0])  # spread over prompts
    same = curves.difference("sink_mass", "sink_mass", n_bootstrap=50)
    assert bool((same == 0).all())
    delta = curves.difference("exact_effect", "sink_mass", n_bootstrap=200, seed=1)
    expected = curves.values["sink_mass"] - curves.values["exact_effect"]
    torch.testing.assert_close(delta[:, 0], expected)
    assert float(delta[0, 0]) == 0 and float(delta[-1, 0]) == 0  # k = 0 and k = all heads
    assert bool((delta[:, 1] <= delta[:, 0] + 1e-12).all())
    assert bool((delta[:, 2] >= delta[:, 0] - 1e-12).all())
    with pytest.raises(interv.IntervError, match="unknown order"):
        curves.difference("sink_mass", "loudness")


def test_bad_ks_raise_interv_errors_naming_the_range(zoo, evaluation):
    for ks in ([3, 1], [0, 9], [], [0, 0], "05"):
        with pytest.raises(interv.IntervError, match=r"ks must be .*\[0, 8\]"):
            pruning_curves(zoo, evaluation, orders={"given": ALL_HEADS}, ks=ks)


def test_exact_effect_order_sorts_single_head_effects_ascending(zoo, evaluation):
    order = rank_heads(zoo, evaluation, rankings=["exact_effect"])["exact_effect"]
    values = evaluation.values(zoo, [(), *((head,) for head in order)])
    effects = (values[1:] - values[0]).abs()
    assert sorted(order) == ALL_HEADS
    assert bool((effects[1:] >= effects[:-1]).all())


def test_sink_mass_order_is_descending_and_entropy_order_ascending(zoo, evaluation):
    orders = rank_heads(zoo, evaluation, rankings=["sink_mass", "entropy"])
    heads = interv.concentration(zoo, evaluation.task)
    sink = heads.per_head("sink_mass")
    entropy = heads.per_head("entropy")
    sink_in_order = torch.stack([sink[layer, head] for layer, head in orders["sink_mass"]])
    entropy_in_order = torch.stack([entropy[layer, head] for layer, head in orders["entropy"]])
    assert bool((sink_in_order[1:] <= sink_in_order[:-1]).all())
    assert bool((entropy_in_order[1:] >= entropy_in_order[:-1]).all())


def test_attribution_order_sorts_absolute_attribution_scores_ascending(zoo, evaluation):
    order = rank_heads(zoo, evaluation, rankings=["attribution"])["attribution"]
    scores = approximate_head_patching_scores(zoo, evaluation.task, "log_prob").abs()
    in_order = torch.stack([scores[layer, head] for layer, head in order])
    assert sorted(order) == ALL_HEADS
    assert bool((in_order[1:] >= in_order[:-1]).all())


def test_random_order_depends_only_on_the_seed(zoo, evaluation):
    first = rank_heads(zoo, evaluation, rankings=["random"], seed=3)
    again = rank_heads(zoo, evaluation, rankings=["random"], seed=3)
    other = rank_heads(zoo, evaluation, rankings=["random"], seed=4)
    assert first == again
    assert first != other
    assert sorted(first["random"]) == ALL_HEADS


@given(st.lists(st.one_of(st.floats(-5, 5), st.just(math.nan)), min_size=1, max_size=8))
def test_order_sorts_scores_and_puts_nan_last(scores):
    heads = tuple((0, h) for h in range(len(scores)))
    for descending in (False, True):
        order = _order(heads, torch.tensor(scores, dtype=torch.float64), descending)
        ranked = [scores[head] for _, head in order]
        finite = [s for s in ranked if not math.isnan(s)]
        assert ranked[len(finite) :] == [s for s in ranked if math.isnan(s)]
        assert finite == sorted(finite, reverse=descending)


def test_text_loss_with_pooled_mean_matches_the_engine_pooled_mean_ablation(zoo):
    # Chunks of 2 tokens predict one token each, at position 0: the mean text loss is the
    # engine's -log_prob at answer position 0, with a pooled MeanAblation on the same tokens.
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(1, zoo.cfg.d_vocab, (6, 2), generator=generator)
    text = TextEvaluation(tokens=tokens, source="random tokens")
    task = TokenizedPairs(
        clean_tokens=tokens,
        corrupted_tokens=tokens,
        attention_mask=torch.ones_like(tokens, dtype=torch.bool),
        answer_positions=torch.zeros(6, dtype=torch.long),
        target_ids=tokens[:, 1],
    )
    reference = ReferenceSet(tokens=tokens, name="random tokens")
    heads = [(0, 2), (1, 1)]
    engine = interv.run(
        zoo,
        task,
        [
            MeanAblation(0, 2, reference=reference, pooled=True),
            Combined(
                parts=tuple(MeanAblation(*h, reference=reference, pooled=True) for h in heads)
            ),
        ],
        metric="log_prob",
    )
    values = text.values(zoo, [(), heads[:1], heads])
    expected = torch.tensor(
        [-engine.clean.mean(), -engine.mean()[0], -engine.mean()[1]], dtype=torch.float64
    )
    torch.testing.assert_close(values, expected, atol=1e-5, rtol=0)
    assert text.unit == "nats/token"
    assert "pooled" in text.ablation


def test_records_and_plot_carry_unit_semantics_and_every_point(zoo, evaluation):
    curves = pruning_curves(zoo, evaluation, orders=["sink_mass", "random"], max_heads=2)
    records = curves.to_records()
    assert len(records) == 2 * 3
    assert {r["unit"] for r in records} == {"nats"}
    assert records[0]["removed"] is None and records[0]["heads_removed"] == []
    assert records[2]["heads_removed"] == [f"L{a}H{b}" for a, b in curves.orders["sink_mass"]]
    assert all("mean-ablated cumulatively" in r["semantics"] for r in records)
    assert "nats" in curves.describe("random")
    figure = plot_pruning_curves(curves)
    (ax,) = figure.axes
    assert len(ax.lines) == 2
    assert "nats" in ax.get_ylabel()
    assert [list(line.get_ydata()) for line in ax.lines] == [
        curves.values[name].tolist() for name in curves.orders
    ]


def test_bad_inputs_raise_interv_errors_naming_the_choices(zoo, evaluation):
    with pytest.raises(interv.IntervError, match="entropy"):
        rank_heads(zoo, evaluation, rankings=["loudness"])
    with pytest.raises(interv.IntervError, match=r"\[0, 2\]"):
        pruning_curves(zoo, evaluation, orders={"given": [(0, 0), (0, 1)]}, max_heads=3)
    with pytest.raises(interv.IntervError, match="loss"):
        TaskEvaluation(evaluation.task, metric="accuracy")
    text = TextEvaluation(tokens=torch.ones(1, 4, dtype=torch.long))
    with pytest.raises(interv.IntervError, match="attribution_task"):
        rank_heads(zoo, text, rankings=["attribution"])
    with pytest.raises(interv.IntervError, match="head"):
        pruning_curves(zoo, evaluation, orders={"given": [(0, 9)]})


def test_text_sample_ships_with_interv():
    assert len(text_sample().split()) > 1000
    assert set(RANKINGS) == {
        "entropy",
        "content_entropy",
        "sink_mass",
        "contribution",
        "exact_effect",
        "attribution",
        "random",
    }


@pytest.mark.real_model
def test_smollm2_text_pruning_curves_run_end_to_end(smollm2_bridge):
    text = TextEvaluation.from_text(smollm2_bridge, n_tokens=64, chunk_len=64)
    assert tuple(text.tokens.shape) == (1, 65)
    assert int(text.tokens[0, 0]) == smollm2_bridge.tokenizer.bos_token_id
    heads = [(layer, head) for layer in (0, 15) for head in range(2)]
    curves = pruning_curves(
        smollm2_bridge, text, orders=["sink_mass", "exact_effect", "random"], heads=heads
    )
    for name, values in curves.values.items():
        assert values.shape == (5,)
        assert bool(values.isfinite().all()), name
        assert sorted(curves.orders[name]) == heads
    baseline = float(curves.values["random"][0])
    assert 1.0 < baseline < 6.0  # nats/token of a small pretrained LM on plain prose
    assert all(float(v[0]) == baseline for v in curves.values.values())


@pytest.mark.real_model
def test_minilm_embedding_pruning_curves_run_end_to_end(minilm_bridge):
    sentences = [
        "The lighthouse keeper wrote down the weather every morning.",
        "A ship ran aground on the sandbar south of the cape.",
        "Birds circled the beam of the lamp on autumn nights.",
    ]
    evaluation = EmbeddingEvaluation.from_sentences(minilm_bridge, sentences)
    heads = [(layer, head) for layer in (0, 5) for head in range(3)]
    curves = pruning_curves(
        minilm_bridge,
        evaluation,
        orders=["entropy", "exact_effect", "random"],
        heads=heads,
        max_heads=6,
    )
    assert curves.unit == "cosine" and not curves.lower_is_better
    assert sorted(curves.orders["entropy"]) == heads
    for values in curves.values.values():
        assert float(values[0]) == pytest.approx(1.0, abs=1e-5)
        assert bool(values.isfinite().all()) and bool((values.abs() <= 1 + 1e-6).all())
        assert float(values[-1]) < 1 - 1e-4  # ablating six heads moves the embedding
    # interv.concentration covers encoders (every real key admitted): the value-aware
    # ranking too
    order = rank_heads(minilm_bridge, evaluation, rankings=["contribution"], heads=heads)
    assert sorted(order["contribution"]) == heads


def test_cli_prints_each_curve_with_its_unit_and_semantics_and_saves_the_plot(capsys, tmp_path):
    from interv.cli import main

    plot = tmp_path / "pruning.png"
    argv = ["pruning", "induction-2l", "--max-heads", "2", "--rankings", "sink_mass", "random"]
    assert main([*argv, "--n-pairs", "8", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "semantics: heads mean-ablated cumulatively" in out
    assert "sink_mass: answer-position loss on task 'induction' (nats) at k = 0..2" in out
    assert "random: answer-position loss" in out
    assert plot.stat().st_size > 0


def test_cli_evaluates_chosen_ks_and_random_seeds_with_intervals(capsys):
    from interv.cli import main

    argv = ["pruning", "induction-2l", "--ks", "0", "3", "--random-seeds", "0", "1"]
    assert main([*argv, "--rankings", "random", "--n-pairs", "6"]) == 0
    out = capsys.readouterr().out
    for seed in (0, 1):
        assert (
            f"random (seed {seed}): answer-position loss on task 'induction' (nats) at k = [0, 3]"
            in out
        )
    intervals = [line for line in out.splitlines() if "95% interval over the 6 prompts" in line]
    assert len(intervals) == 2 and all(line.count("[") == 2 for line in intervals)


def test_cli_rejects_an_unknown_ranking_with_the_choices(capsys):
    from interv.cli import main

    with pytest.raises(SystemExit) as exit_:  # argparse lists the allowed values itself
        main(["pruning", "induction-2l", "--rankings", "loudness"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("interv: error: pruning: argument --rankings: invalid choice")
    assert "contribution" in err
