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


# Gemma-3-270M here is its Q4_K_M GGUF dequantized: a close relative of the hub's float
# model, so the numbers below are this relative's.

IOI_PROMPT = "When Mary and John went to the store, John gave a drink to"


def test_gemma3_answers_mary_to_the_ioi_prompt(gemma3_bridge):
    tokens = gemma3_bridge.to_tokens(IOI_PROMPT)
    with torch.no_grad():
        logits = gemma3_bridge(tokens)
    assert gemma3_bridge.tokenizer.decode(int(logits[0, -1].argmax())) == " Mary"


def test_gemma3_architecture_reads_its_windows_norms_and_scale(gemma3_bridge):
    from interv.engine.architecture import architecture_of

    arch = architecture_of(gemma3_bridge)
    assert arch.family == "gemma3_text"
    assert arch.n_layers == 18 and gemma3_bridge.cfg.n_heads == 4
    for layer in range(18):
        attention = arch.layer(layer)
        assert attention.keys.window == (None if layer in (5, 11, 17) else 512), layer
        assert attention.keys.causal and attention.qk_norm
        assert attention.scale == 256**-0.5  # query_pre_attn_scalar 256
    assert arch.pre_attention_norm and arch.post_attention_norm
    assert arch.pre_mlp_norm and arch.post_mlp_norm


@pytest.mark.slow
def test_gemma3_concentration_is_exact_against_the_eager_pattern_past_the_window(gemma3_bridge):
    """520 tokens: the local layers' 512-key window bites on the last 8 queries; normalized
    entropy with n = the keys each layer's mask admits, from the model's own eager pattern."""
    from transformers import AutoModelForCausalLM

    from interv import concentration
    from interv.analysis.pruning.evaluations import text_sample
    from interv.models.gemma3 import converted_dir

    reference = AutoModelForCausalLM.from_pretrained(
        converted_dir(), attn_implementation="eager", dtype=torch.float32
    ).eval()
    tokens = gemma3_bridge.to_tokens(text_sample())[:, :520]
    assert tokens.shape == (1, 520)
    with torch.no_grad():
        attentions = reference(tokens, output_attentions=True).attentions
    heads = concentration(gemma3_bridge, tokens, attention="pattern", progress=False)
    query, key = torch.arange(520)[:, None], torch.arange(520)[None, :]
    for layer, rows in enumerate(attentions):
        admitted = key <= query
        if layer not in (5, 11, 17):
            admitted &= key > query - 512
        rows = rows[0].double()  # [head, query, key]
        assert rows.masked_select(~admitted.expand_as(rows)).abs().max() == 0
        n = admitted.sum(-1)
        assert torch.equal(heads.n_available_keys[0, layer], n)
        plogp = torch.where(rows > 0, rows * rows.log(), torch.zeros_like(rows))
        expected = -plogp.sum(-1)[:, 1:] / n[1:].double().log()
        got = heads.normalized_entropy[0, layer][:, 1:].double()
        assert (got - expected).abs().max().item() < 1e-5, layer
    assert heads.n_available_keys[0, :, -1].tolist() == [
        520 if layer in (5, 11, 17) else 512 for layer in range(18)
    ]
