"""The sink zoo model: the backcopy language follows its rules, the shipped model loads offline
with its checkpoints, its sink heads and accuracy are re-measured on fresh data, its sinks grow
along training, and the entropy-change split in its card is what interv computes today."""

from __future__ import annotations

import argparse
import os
from dataclasses import replace

import pytest
import torch

from interv import IntervError, load_model, zoo
from interv.cli.zoo import register
from interv.zoo import checkpoint_entropy_change
from interv.zoo._backcopy import (
    BOS_ID,
    COPY_TRIGGERS,
    FIRST_WORD_ID,
    RECALL_TRIGGER,
    vocabulary,
)
from interv.zoo._load import bridge_from_native
from interv.zoo._probes import RoleProbe, measure_probes
from interv.zoo._registry import data_dir, recipe
from interv.zoo._train import learning_rate, train_weights

os.environ.setdefault("HF_HUB_OFFLINE", "1")

NAME = "sink-lm-3l"
FRESH_SEED = 2024  # held-out data the card was not measured on
N_FRESH = 256
# absolute, mean attention weight (0..1), between the card's data and 256 fresh sequences:
# sink and previous-token scores average thousands of positions and move by < 0.02 between
# seeds; duplicate-token scores rest on ~450 repeated # and L2H2's moves between 0.57 and 0.64
SCORE_TOLERANCE = {"previous_token": 0.05, "duplicate_token": 0.1, "sink": 0.05}
ACCURACY_TOLERANCE = 0.03  # absolute, fraction of positions
LOSS_TOLERANCE = 0.03  # nats/token
SPLIT_TOLERANCE = 1e-5  # nats; the card keeps 6 decimals


@pytest.fixture(scope="module")
def card() -> zoo.ZooCard:
    return zoo.card(NAME)


@pytest.fixture(scope="module")
def model():
    return zoo.load(NAME)


@pytest.fixture(scope="module")
def fresh_batch() -> zoo.BackcopyBatch:
    return zoo.held_out_batch(NAME, n_sequences=N_FRESH, seed=FRESH_SEED)


@pytest.fixture(scope="module")
def language() -> zoo.BackcopyLanguage:
    return recipe(NAME).backcopy


def test_sink_model_is_listed_and_loads_offline_in_eval_mode(model, card, language):
    assert NAME in zoo.available()
    assert not model.training
    assert model.cfg.d_vocab == language.d_vocab == 53
    assert model.cfg.n_layers == 3 and not model.cfg.attn_only
    ids = vocabulary(language)
    words = ["ba", "ko", "~", "#"]
    assert model.to_tokens(" ".join(words)).tolist() == [[BOS_ID] + [ids[w] for w in words]]
    assert load_model(NAME).cfg.d_mlp == card.recipe.config["d_mlp"]


def test_vocabulary_is_bos_pad_words_then_triggers(language):
    ids = vocabulary(language)
    tokens = list(ids)
    assert tokens[:2] == ["<bos>", "<pad>"]
    assert tokens[-3:] == [*COPY_TRIGGERS, RECALL_TRIGGER]
    assert tokens[2:7] == ["a", "e", "i", "o", "u"]
    assert list(ids.values()) == list(range(language.d_vocab))


def test_language_follows_its_copy_and_recall_rules(language):
    batch = zoo.backcopy_batch(language, 256, 64, generator=torch.Generator().manual_seed(0))
    tokens = batch.tokens
    assert (tokens[:, 0] == BOS_ID).all() and batch.word_mask[:, 1].all()
    rows, positions = batch.copy_mask[:, :-1].nonzero(as_tuple=True)
    assert len(rows) > 500
    assert torch.equal(tokens[rows, positions + 1], tokens[rows, positions - 1])
    assert batch.word_mask[rows, positions - 1].all()  # a trigger always follows a word
    first_recall = batch.recall_trigger_mask.to(torch.int64).argmax(dim=1)
    bound = tokens[torch.arange(len(tokens)), first_recall - 1]
    rows, positions = batch.recall_mask[:, :-1].nonzero(as_tuple=True)
    assert len(rows) > 100
    assert torch.equal(tokens[rows, positions + 1], bound[rows])


def test_next_token_distribution_is_a_distribution_that_explains_the_sample(language):
    batch = zoo.backcopy_batch(language, 64, 40, generator=torch.Generator().manual_seed(1))
    distribution = batch.next_token_distribution()
    assert torch.allclose(distribution.sum(dim=-1), torch.ones(64, 40, dtype=torch.float64))
    sampled = distribution[:, :-1].gather(-1, batch.tokens[:, 1:, None])
    assert (sampled > 0).all()
    determined = batch.copy_mask | batch.recall_mask
    assert (distribution.max(dim=-1).values[determined] == 1).all()


def test_language_and_recipe_reject_invalid_values_with_the_allowed_ones(language):
    with pytest.raises(IntervError, match=r"n_words must be in 2\.\.75; got 80"):
        replace(language, n_words=80)
    with pytest.raises(IntervError, match=r"p_copy \+ p_recall < 1; got p_copy=0\.6"):
        replace(language, p_copy=0.6, p_recall=0.5)
    with pytest.raises(
        IntervError, match=r"exactly one data field of \['min_prefix', 'backcopy'\]"
    ):
        replace(recipe(NAME), min_prefix=6)
    with pytest.raises(IntervError, match=r"d_vocab must be the backcopy vocabulary size 53"):
        replace(recipe(NAME), config={**recipe(NAME).config, "d_vocab": 64})
    with pytest.raises(IntervError, match=r"cooldown_steps must be None or in 1\.\.steps"):
        replace(recipe(NAME), cooldown_steps=0)
    with pytest.raises(IntervError, match=r"no threshold for role 'induction'; thresholds: "):
        recipe(NAME).thresholds.of("induction")


@pytest.mark.parametrize("name", ["induction-2l", NAME])
def test_shipped_cards_round_trip_byte_for_byte(name):
    text = (data_dir(name) / "card.json").read_text()
    parsed = zoo.ZooCard.from_json(text)
    assert parsed.to_json() == text
    assert parsed.recipe == recipe(name)


def test_card_names_roles_measurements_and_at_least_eight_checkpoints(card):
    assert len(card.checkpoints) >= 8 and card.checkpoints[0] == 0
    assert card.checkpoints == card.recipe.checkpoint_steps
    for role in ("previous_token", "duplicate_token", "sink"):
        assert card.heads_with_role(role), f"no {role} head recorded"
    for recorded in card.roles:
        assert recorded.score >= recorded.threshold
        assert "mean attention weight" in recorded.measurement
        assert f"seed {card.recipe.eval_seed}" in recorded.measurement


def test_shipped_files_stay_small():
    total = sum(path.stat().st_size for path in data_dir(NAME).iterdir())
    assert total < 8 * 2**20


def test_final_model_reaches_recorded_accuracy_on_fresh_data(model, card, fresh_batch):
    accuracy = zoo.next_token_accuracy(model, fresh_batch, data="fresh")
    recorded = card.accuracy
    assert accuracy.loss == pytest.approx(recorded.loss, abs=LOSS_TOLERANCE)
    assert accuracy.loss - accuracy.optimal_loss < 0.05  # near the language's optimum
    for field in ("copy", "recall", "word"):
        measured = getattr(accuracy, field)
        assert measured == pytest.approx(getattr(recorded, field), abs=ACCURACY_TOLERANCE), field
    assert accuracy.copy > 0.95 and accuracy.recall > 0.95  # chance is 1/48


def test_recorded_sink_heads_are_re_measured_on_fresh_data(model, card, fresh_batch):
    scores = zoo.measure_roles(model, fresh_batch, data="fresh")
    for role in scores.roles:
        table = scores.score(role)
        passing = {
            tuple(ij) for ij in (table >= card.recipe.thresholds.of(role)).nonzero().tolist()
        }
        assert passing == set(card.heads_with_role(role)), role
    for recorded in card.roles:
        measured = float(scores.score(recorded.role)[recorded.layer, recorded.head])
        tolerance = SCORE_TOLERANCE[recorded.role]
        assert measured == pytest.approx(recorded.score, abs=tolerance), recorded.label
    assert int((scores.sink > 0.7).sum()) >= 4  # several strong sinks, not one


def test_heads_that_copy_at_triggers_are_the_heads_that_sink_elsewhere(model, card, fresh_batch):
    """Active-dormant heads: a head with both the previous-token and the sink role looks at
    the token before a copy trigger and puts almost nothing on <bos> there."""
    copying = set(card.heads_with_role("previous_token")) & set(card.heads_with_role("sink"))
    assert copying
    n_ctx = fresh_batch.tokens.shape[1]
    on_bos = RoleProbe(
        role="sink",
        queries=fresh_batch.copy_mask,
        keys=(torch.arange(n_ctx) == 0).expand(N_FRESH, n_ctx, n_ctx),
        measurement="weight on <bos> from copy triggers",
    )
    at_triggers = measure_probes(model, fresh_batch.tokens, [on_bos], data="fresh").sink
    for layer, head in copying:
        assert float(at_triggers[layer, head]) < 0.1, (layer, head)


def test_prediction_after_a_copy_trigger_follows_the_token_before_it(model, fresh_batch):
    """Causal check: replace the token before a copy trigger with another word; the
    prediction after the trigger must change to that word."""
    batch = fresh_batch
    rows, positions = batch.copy_mask[:, :-1].nonzero(as_tuple=True)
    rows, positions = rows[:256], positions[:256]
    tokens = batch.tokens[rows].clone()
    index = torch.arange(len(rows))
    original = tokens[index, positions - 1]
    shifted = (original - FIRST_WORD_ID + 7) % batch.language.n_words
    replacement = FIRST_WORD_ID + shifted  # another word
    tokens[index, positions - 1] = replacement
    with torch.no_grad():
        predicted = model(tokens, return_type="logits")[index, positions].argmax(dim=-1)
    assert float((predicted == replacement).float().mean()) > 0.9


def test_checkpoints_load_and_the_sink_grows_along_training(card, fresh_batch):
    batch = zoo.BackcopyBatch(tokens=fresh_batch.tokens[:32], language=fresh_batch.language)
    largest = []
    for step, recorded in card.checkpoint_sink_mass:
        scores = zoo.measure_roles(zoo.load(NAME, checkpoint=step), batch, data="fresh")
        largest.append(float(scores.sink.max()))
        assert largest[-1] == pytest.approx(recorded, abs=2 * SCORE_TOLERANCE["sink"]), step
    assert largest[0] < 0.2  # at initialization no head parks on <bos>
    assert largest[-1] > 0.9
    assert max(largest[:3]) < min(largest[-2:])  # grows between early and late checkpoints


def test_card_entropy_split_equals_a_fresh_computation(card):
    record = card.entropy_change
    assert record is not None
    fresh = checkpoint_entropy_change(
        NAME, before=card.checkpoints[0], after=None, n_sequences=record.n_sequences
    )
    for head in record.heads:
        for field in ("total", "sink_part", "content_part", "sink_mass_after"):
            measured = float(getattr(fresh, field)[head.layer, head.head])
            assert getattr(head, field) == pytest.approx(measured, abs=SPLIT_TOLERANCE), (
                head.label,
                field,
            )
    overall = record.overall
    assert overall.after == card.recipe.steps
    assert overall.total == pytest.approx(fresh.overall["total"], abs=SPLIT_TOLERANCE)
    assert overall.sink_share == pytest.approx(fresh.overall["sink_share"], abs=1e-4)


def test_entropy_collapse_is_mostly_sink_growth_and_the_split_is_exact(card):
    record = card.entropy_change
    assert [split.after for split in record.along] == [*card.checkpoints[1:], card.recipe.steps]
    for split in record.along:
        assert split.total == pytest.approx(split.sink_part + split.content_part, abs=2e-6)
    overall = record.overall
    assert overall.total < -1.0  # nats: a real collapse
    assert overall.sink_share > 0.5
    assert overall.sink_mass_after > overall.sink_mass_before + 0.3


def test_held_out_batch_rejects_a_bad_count():
    with pytest.raises(IntervError, match=r"n_sequences must be an int >= 1; got 0"):
        zoo.held_out_batch(NAME, n_sequences=0)


def test_cooldown_decays_the_learning_rate_linearly_to_the_last_step():
    training = recipe(NAME)
    cooldown_start = training.steps - training.cooldown_steps
    assert learning_rate(training, 0) == learning_rate(training, cooldown_start) == training.lr
    assert learning_rate(training, training.steps - 1) == pytest.approx(
        training.lr / training.cooldown_steps
    )
    assert learning_rate(recipe("induction-2l"), 1599) == recipe("induction-2l").lr


def test_training_the_backcopy_recipe_is_deterministic():
    short = replace(recipe(NAME), steps=3, batch_size=4, cooldown_steps=2)
    first = train_weights(short).state_dict()
    second = train_weights(short).state_dict()
    other = train_weights(replace(short, data_seed=short.data_seed + 1)).state_dict()
    assert all(torch.equal(first[key], second[key]) for key in first)
    assert not all(torch.equal(first[key], other[key]) for key in first)


def test_cli_info_prints_accuracy_roles_and_entropy_split_with_units(card, capsys):
    parser = argparse.ArgumentParser(prog="interv")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["zoo", "info", NAME])
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "nats/token" in out and "fraction of positions" in out
    assert "mean attention weight" in out
    for recorded in card.roles:
        assert f"{recorded.role} {recorded.label}" in out
    assert f"step 0 -> {card.recipe.steps}: total" in out and "sink share" in out


@pytest.mark.slow
def test_the_recipe_retrains_the_first_steps_to_the_shipped_checkpoint(fresh_batch):
    """The first 200 steps from the recipe behave like the shipped step-200 checkpoint.

    Behaviour, not bits: retrained weights match the shipped ones only to float rounding
    amplified by training, which depends on the CPU's kernels; the sink score and the
    held-out loss do not (the whole 1800-step run takes minutes; `interv zoo train` is it).
    """
    retrained = train_weights(replace(recipe(NAME), steps=200, cooldown_steps=None))
    shipped = zoo.load(NAME, checkpoint=200)
    bridge = bridge_from_native(
        retrained, tokenizer_dir=data_dir(NAME), name=NAME, device="cpu"
    ).eval()
    measured = [
        (
            zoo.measure_roles(model, fresh_batch, data="fresh").sink.max().item(),
            zoo.next_token_accuracy(model, fresh_batch, data="fresh").loss,
        )
        for model in (bridge, shipped)
    ]
    (sink_retrained, loss_retrained), (sink_shipped, loss_shipped) = measured
    assert sink_retrained == pytest.approx(sink_shipped, abs=SCORE_TOLERANCE["sink"])
    assert loss_retrained == pytest.approx(loss_shipped, abs=LOSS_TOLERANCE)
