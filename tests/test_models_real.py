"""Real pretrained models load offline and behave like their Hugging Face originals."""

from __future__ import annotations

import pytest
import torch

from interv.models import output_head_is_trained, sentence_embedding

pytestmark = pytest.mark.real_model


def test_smollm2_puts_paris_first_after_the_capital_of_france_is(smollm2_bridge):
    tokens = smollm2_bridge.to_tokens("The capital of France is")
    with torch.no_grad():
        logits = smollm2_bridge(tokens)
    assert smollm2_bridge.tokenizer.decode(int(logits[0, -1].argmax())) == " Paris"
    assert output_head_is_trained(smollm2_bridge)
    assert not smollm2_bridge.training


def test_smollm2_bridge_logits_match_the_hugging_face_model(smollm2_bridge):
    from transformers import AutoModelForCausalLM

    from interv.models.smollm2 import converted_dir

    reference = AutoModelForCausalLM.from_pretrained(
        converted_dir(), attn_implementation="eager", dtype=torch.float32
    ).eval()
    # to_tokens prepends BOS; feed the very same ids to both models.
    tokens = smollm2_bridge.to_tokens(["The capital of France is", "One, two, three, four,"])
    with torch.no_grad():
        bridge_logits = smollm2_bridge(tokens)
        reference_logits = reference(tokens).logits
    assert bridge_logits.shape == reference_logits.shape == (2, tokens.shape[1], 49152)
    assert (bridge_logits - reference_logits).abs().max().item() < 1e-4


def test_smollm2_has_grouped_query_heads(smollm2_bridge):
    tokens = smollm2_bridge.to_tokens("Hello there")
    names = ["blocks.0.attn.hook_q", "blocks.0.attn.hook_k", "blocks.0.attn.hook_v"]
    with torch.no_grad():
        _, cache = smollm2_bridge.run_with_cache(tokens, names_filter=names)
    pos = tokens.shape[1]
    assert smollm2_bridge.cfg.n_layers == 30
    assert cache["blocks.0.attn.hook_q"].shape == (1, pos, 9, 64)
    assert cache["blocks.0.attn.hook_k"].shape == (1, pos, 3, 64)
    assert cache["blocks.0.attn.hook_v"].shape == (1, pos, 3, 64)


SENTENCES = [
    "A cat sleeps.",
    "The kitten is sleeping on the warm sofa in the living room.",
    "Stock markets fell sharply today.",
]


def test_minilm_puts_zero_attention_on_padding_keys(minilm_bridge):
    batch = minilm_bridge.tokenizer(SENTENCES, padding=True, return_tensors="pt")
    mask = batch["attention_mask"].bool()
    assert not bool(mask.all()), "the batch must contain padding for this test to bite"
    with torch.no_grad():
        _, cache = minilm_bridge.run_with_cache(
            batch["input_ids"],
            attention_mask=batch["attention_mask"],
            names_filter=lambda name: name.endswith("hook_pattern"),
        )
    n_layers = minilm_bridge.cfg.n_layers
    assert n_layers == 6
    padding_keys = (~mask)[:, None, None, :]  # [batch, head_index, query_pos, key_pos]
    for layer in range(n_layers):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]  # [batch, head, query, key]
        assert pattern.masked_select(padding_keys.expand_as(pattern)).abs().max().item() == 0.0
        row_sums = pattern.sum(dim=-1)
        assert torch.allclose(row_sums, torch.ones_like(row_sums), atol=1e-5)


def test_minilm_sentence_embedding_follows_the_sentence_transformers_recipe(minilm_bridge):
    from transformers import AutoModel

    from interv.models.minilm import model_dir

    batch = minilm_bridge.tokenizer(SENTENCES, padding=True, return_tensors="pt")
    embedding = sentence_embedding(minilm_bridge, batch["input_ids"], batch["attention_mask"])
    encoder = AutoModel.from_pretrained(model_dir()).eval()
    with torch.no_grad():
        hidden = encoder(**batch).last_hidden_state
    weights = batch["attention_mask"].unsqueeze(-1).float()
    expected = torch.nn.functional.normalize((hidden * weights).sum(1) / weights.sum(1), dim=-1)
    assert embedding.shape == (3, 384)
    assert torch.allclose(embedding, expected, atol=1e-5)
    cosine = embedding @ embedding.T
    assert cosine[0, 1] > cosine[0, 2] + 0.2  # cat/kitten closer than cat/stocks
    assert not output_head_is_trained(minilm_bridge)
