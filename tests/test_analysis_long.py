"""The analyses at long context: the same numbers from rows recomputed without the pattern
(``attention="rows"``) as from each layer's pattern (``attention="pattern"``)."""

from __future__ import annotations

import pytest
import torch
from _families import family

from interv.analysis.sinks import sink_profile
from interv.analysis.token_flow import key_shares, token_attention


@pytest.mark.parametrize("name", ["llama", "mistral", "bert", "gemma2"])
def test_sink_profile_without_the_pattern_equals_the_pattern_path(name):
    fam = family(name)
    tokens, real = fam.left_padded()
    rows = sink_profile(fam.bridge, tokens, attention_mask=real, key=1, attention="rows")
    pattern = sink_profile(fam.bridge, tokens, attention_mask=real, key=1, attention="pattern")
    torch.testing.assert_close(rows.scores, pattern.scores, atol=1e-6, rtol=0, equal_nan=True)
    # later layers' inputs differ by the float32 rounding of the earlier layers' outputs
    torch.testing.assert_close(rows.key_norms, pattern.key_norms, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rows.value_norms, pattern.value_norms, atol=1e-5, rtol=1e-5)
    assert rows.rate == pattern.rate


@pytest.mark.parametrize("name", ["llama", "mistral", "bert"])
def test_key_shares_without_the_pattern_equal_token_attentions_shares(name):
    fam = family(name)
    tokens, real = fam.left_padded()
    keys = torch.zeros_like(real)
    first = real.to(torch.int64).argmax(dim=1)
    keys[torch.arange(2), first] = True  # each prompt's first token
    keys[torch.arange(2), first + 3] = True
    rows = key_shares(fam.bridge, tokens, keys, attention_mask=real, attention="rows")
    pattern = key_shares(fam.bridge, tokens, keys, attention_mask=real, attention="pattern")
    assert (rows.attention, pattern.attention)[1] == "pattern" != rows.attention
    torch.testing.assert_close(rows.weight, pattern.weight, atol=1e-6, rtol=0)
    torch.testing.assert_close(rows.norm, pattern.norm, atol=1e-5, rtol=0)
    flow = token_attention(fam.bridge, tokens, attention_mask=real)
    expected_weight, expected_norm = flow.shares_on(keys)
    torch.testing.assert_close(pattern.weight, expected_weight)
    torch.testing.assert_close(pattern.norm, expected_norm)
