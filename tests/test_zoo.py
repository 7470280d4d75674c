"""The zoo: shipped model loads fast, reaches its recorded accuracy, and its recorded head
roles are re-measured on fresh data; training is deterministic and reproduces the roles."""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import time
from dataclasses import replace

import _background
import pytest
import torch
from _timing import budget_ms

from interv import IntervError, zoo
from interv.cli.zoo import register
from interv.zoo._data import BOS_ID, SYMBOLS, VOCAB, build_tokenizer
from interv.zoo._registry import recipe
from interv.zoo._roles import ROLES
from interv.zoo._train import train_weights

os.environ.setdefault("HF_HUB_OFFLINE", "1")

NAME = "induction-2l"
ACCURACY_TOLERANCE = 0.03  # absolute, fraction of positions; ~6 standard errors here
SCORE_TOLERANCE = 0.05  # absolute, mean attention weight
FRESH_SEED = 2024  # held-out data the card was not measured on


@pytest.fixture(scope="module")
def card() -> zoo.ZooCard:
    return zoo.card(NAME)


@pytest.fixture(scope="module")
def model():
    return zoo.load(NAME)


@pytest.fixture(scope="module")
def fresh_batch(card):
    training = card.recipe
    return zoo.eval_batch(
        training.config["n_ctx"], training.min_prefix, n_sequences=1024, seed=FRESH_SEED
    )


def role_heads(roles, role):
    return {(r.layer, r.head) for r in roles if r.role == role}


def test_importing_zoo_imports_neither_torch_nor_transformer_lens():
    code = (
        "import sys, interv.zoo as z; z.available(); "
        "print('torch' in sys.modules, 'transformer_lens' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["False", "False"]


def test_available_lists_the_induction_model():
    assert NAME in zoo.available()


def test_load_is_fast_once_transformer_lens_is_imported(model):
    started = time.perf_counter()
    zoo.load(NAME)
    assert (time.perf_counter() - started) * 1000 < budget_ms(5000)


def test_loaded_model_is_in_eval_mode_with_zoo_vocabulary(model, card):
    assert not model.training
    assert model.cfg.d_vocab == 64
    assert model.cfg.n_ctx == card.recipe.config["n_ctx"]
    symbols = ["Q", "x", "7", "k", "Q", "x"]
    tokens = model.to_tokens(" ".join(symbols))
    assert tokens.tolist() == [[BOS_ID] + [VOCAB[s] for s in symbols]]


def test_vocabulary_is_bos_pad_then_62_symbols_in_order():
    assert list(VOCAB)[:2] == ["<bos>", "<pad>"]
    assert list(VOCAB)[2:] == list("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
    assert list(VOCAB.values()) == list(range(64))
    tokenizer = build_tokenizer()
    assert tokenizer.convert_tokens_to_ids(list(SYMBOLS)) == list(range(2, 64))
    assert (tokenizer.bos_token_id, tokenizer.pad_token_id) == (0, 1)


def test_induction_batch_repeats_its_prefix_periodically_after_bos():
    generator = torch.Generator().manual_seed(0)
    batch = zoo.induction_batch(64, 20, min_prefix=3, generator=generator)
    assert (batch.tokens[:, 0] == BOS_ID).all()
    assert ((batch.tokens[:, 1:] >= 2) & (batch.tokens[:, 1:] < 64)).all()
    for row in range(64):
        m = int(batch.prefix_length[row])
        assert 3 <= m <= 9
        sequence = batch.tokens[row, 1:].tolist()
        assert sequence == [sequence[i % m] for i in range(19)]


def test_repeat_offsets_spread_over_the_allowed_range():
    batch = zoo.induction_batch(2000, 48, min_prefix=6, generator=torch.Generator().manual_seed(0))
    assert set(batch.prefix_length.tolist()) == set(range(6, 24))


def test_determined_positions_are_followed_by_the_token_after_the_earlier_occurrence():
    batch = zoo.induction_batch(64, 30, min_prefix=8, generator=torch.Generator().manual_seed(1))
    rows, positions = batch.determined_mask.nonzero(as_tuple=True)
    assert len(rows) > 0
    keys = batch.induction_key[rows, positions]
    assert torch.equal(batch.tokens[rows, positions + 1], batch.tokens[rows, keys])
    assert torch.equal(batch.tokens[rows, positions], batch.tokens[rows, keys - 1])


def test_induction_batch_rejects_a_prefix_that_cannot_repeat():
    with pytest.raises(IntervError, match=r"min_prefix must be in 1\.\.23 .* got 24"):
        zoo.induction_batch(4, 48, min_prefix=24, generator=torch.Generator())


def test_final_model_reaches_recorded_accuracy_on_fresh_data(model, card, fresh_batch):
    accuracy = zoo.task_accuracy(model, fresh_batch, data="fresh")
    assert accuracy.repeated == pytest.approx(card.accuracy.repeated, abs=ACCURACY_TOLERANCE)
    assert accuracy.repeated > 0.75  # chance is 1/62
    assert accuracy.fresh < 0.05  # chance is 1/62


def test_recorded_roles_are_re_measured_on_fresh_data(model, card, fresh_batch):
    scores = zoo.measure_roles(model, fresh_batch, data="fresh")
    thresholds = card.recipe.thresholds
    for role in ROLES:
        table = scores.score(role)
        passing = {tuple(ij) for ij in (table >= getattr(thresholds, role)).nonzero().tolist()}
        assert passing == role_heads(card.roles, role), role
    for recorded in card.roles:
        measured = float(scores.score(recorded.role)[recorded.layer, recorded.head])
        assert measured == pytest.approx(recorded.score, abs=SCORE_TOLERANCE), recorded.label


def test_card_names_each_role_and_its_measurement(card):
    for role in ROLES:
        assert card.heads_with_role(role), f"no {role} head recorded"
    for recorded in card.roles:
        assert recorded.score >= recorded.threshold
        assert "mean attention weight" in recorded.measurement
        assert f"seed {card.recipe.eval_seed}" in recorded.measurement


@pytest.mark.slow  # zoo-sized but among the quick loop's slowest (issue 32)
def test_prediction_follows_the_token_after_the_earlier_occurrence(model, fresh_batch):
    """Causal check of induction: overwrite the token after the earlier occurrence with a
    symbol absent from the sequence; the prediction at the repeat must follow it. Only the
    first repeat (positions m+1..2m-1) is used: later repeats have more than one earlier
    occurrence, and the model may read any of them."""
    batch = fresh_batch
    first_repeat = batch.positions < 2 * batch.prefix_length[:, None]
    rows, positions = (batch.determined_mask & first_repeat).nonzero(as_tuple=True)
    keys = batch.induction_key[rows, positions]
    replacement = torch.full_like(keys, -1)
    for i, row in enumerate(rows.tolist()):
        present = set(batch.tokens[row].tolist())
        replacement[i] = next(t for t in range(2, 64) if t not in present)
    follows = []
    for i in range(0, len(rows), 256):
        chunk = slice(i, i + 256)
        tokens = batch.tokens[rows[chunk]].clone()
        tokens[torch.arange(len(tokens)), keys[chunk]] = replacement[chunk]
        with torch.no_grad():
            logits = model(tokens, return_type="logits")
        predicted = logits[torch.arange(len(tokens)), positions[chunk]].argmax(dim=-1)
        follows.append(predicted == replacement[chunk])
    assert float(torch.cat(follows).float().mean()) > 0.7


def test_checkpoints_load_and_compute_different_functions(card, fresh_batch):
    steps = zoo.checkpoints(NAME)
    assert steps == card.recipe.checkpoint_steps
    tokens = fresh_batch.tokens[:8]
    logits = []
    with torch.no_grad():
        for step in steps:
            logits.append(zoo.load(NAME, checkpoint=step)(tokens, return_type="logits"))
    for earlier, later in itertools.pairwise(logits):
        assert not torch.allclose(earlier, later, atol=1e-3)


@pytest.mark.slow  # zoo-sized but among the quick loop's slowest (issue 32)
def test_checkpoint_sink_scores_are_re_measured_and_a_sink_forms(card, fresh_batch):
    measured = []
    for step, recorded in card.checkpoint_sink_mass:
        scores = zoo.measure_roles(zoo.load(NAME, checkpoint=step), fresh_batch, data="fresh")
        measured.append(float(scores.sink.max()))
        assert measured[-1] == pytest.approx(recorded, abs=SCORE_TOLERANCE), step
    final = float(zoo.measure_roles(zoo.load(NAME), fresh_batch, data="fresh").sink.max())
    assert final > measured[0] + 0.2  # a sink forms during training


def test_unknown_name_lists_available_models():
    with pytest.raises(IntervError, match=r"unknown zoo model 'nope'; available: induction-2l"):
        zoo.load("nope")
    with pytest.raises(IntervError, match="available: induction-2l"):
        zoo.card("nope")


def test_missing_checkpoint_lists_shipped_steps(card):
    shipped = ", ".join(str(step) for step in card.checkpoints)
    with pytest.raises(IntervError, match=f"no checkpoint at step 7; shipped steps: {shipped}"):
        zoo.load(NAME, checkpoint=7)


def test_training_with_the_same_seeds_gives_identical_weights():
    short = replace(recipe(NAME), steps=3, batch_size=8)
    first = train_weights(short).state_dict()
    second = train_weights(short).state_dict()
    other = train_weights(replace(short, data_seed=short.data_seed + 1)).state_dict()
    assert all(torch.equal(first[key], second[key]) for key in first)
    assert not all(torch.equal(first[key], other[key]) for key in first)


def test_training_leaves_global_torch_settings_alone():
    threads = torch.get_num_threads()
    rng_state = torch.get_rng_state()
    train_weights(replace(recipe(NAME), steps=1, batch_size=2))
    assert torch.get_num_threads() == threads
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.equal(torch.get_rng_state(), rng_state)


def test_cli_info_prints_accuracy_and_roles_with_units(card, capsys):
    parser = argparse.ArgumentParser(prog="interv")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["zoo", "info", NAME])
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "fraction of positions" in out
    assert "mean attention weight" in out
    for recorded in card.roles:
        assert f"{recorded.role} {recorded.label}" in out


@pytest.mark.slow
def test_training_from_scratch_reproduces_shipped_roles_and_accuracy(card):
    # zoo.train(NAME, out) in a subprocess started when the session began (one thread)
    tmp_path = _background.trained(NAME)
    trained = zoo.ZooCard.from_json((tmp_path / "card.json").read_text())
    for role in ROLES:
        assert role_heads(trained.roles, role) == role_heads(card.roles, role), role
    assert trained.accuracy.repeated == pytest.approx(
        card.accuracy.repeated, abs=ACCURACY_TOLERANCE
    )
    assert (tmp_path / "model.safetensors").is_file()
