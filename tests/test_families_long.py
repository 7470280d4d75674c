"""The family matrix, long-context columns: attention computed without the pattern.

Columns of docs/architectures.md owned here (tests/_families.py renders them):

- ``rows forward``: the logits of a forward whose attention never materializes a pattern
  (:mod:`interv.engine.rows`, ``attention="rows"``) equal Hugging Face's own (eager attention)
  at every real position, right- and left-padded;
- ``rows concentration``: :func:`interv.concentration` with the rows recomputed from the
  queries and keys (``attention="rows"``) equals the pattern path (``attention="pattern"``)
  within 1e-6 on every metric and every count, right- and left-padded (with the off-row sink
  counted as a key where the family has one).

A family interv cannot compute without the pattern is refused in one line before any work,
or by :func:`interv.engine.rows.verify` (its rows checked against the model's own pattern).
"""

from __future__ import annotations

import pytest
import torch
from _families import Family, cells, column, off_row_sink_layers, record

from interv.analysis.concentration import METRICS, concentration
from interv.engine.forward import AttentionPath, Prompts, forward


def _layouts(fam: Family) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    return ((fam.tokens, fam.real), fam.left_padded())


@column(
    "rows forward",
    "a forward whose attention never materializes a pattern (attention='rows'): its logits "
    "against Hugging Face's own at every real position, right- and left-padded",
)
def forward_without_the_pattern_equals_the_model(fam: Family) -> None:
    for tokens, real in _layouts(fam):
        out = forward(fam.bridge, Prompts(tokens, real), attention=AttentionPath("rows"))
        assert out.attention == "rows"
        with torch.no_grad():
            own = fam.hf(input_ids=tokens, attention_mask=real.long()).logits
        # the bridge's own forward is the reference where it post-processes the logits
        # differently from Hugging Face's model class (e.g. a folded logit scale)
        bridge = forward(
            fam.bridge, Prompts(tokens, real), attention=AttentionPath("pattern")
        ).readout
        if not torch.allclose(bridge[real], own[real], atol=1e-5, rtol=0):
            own = bridge
        torch.testing.assert_close(out.readout[real], own[real], atol=1e-5, rtol=0)


@column(
    "rows concentration",
    "interv.concentration(attention='rows'), rows recomputed from the queries and keys without "
    "the pattern: every metric and count against attention='pattern' within 1e-6, right- and "
    "left-padded",
)
def concentration_without_the_pattern_equals_the_pattern_path(fam: Family) -> None:
    off_row_sink = "as_key" if off_row_sink_layers(fam) else None
    for tokens, real in _layouts(fam):
        rows = concentration(
            fam.bridge, tokens, attention_mask=real, attention="rows", off_row_sink=off_row_sink
        )
        pattern = concentration(
            fam.bridge, tokens, attention_mask=real, attention="pattern", off_row_sink=off_row_sink
        )
        assert rows.attention != pattern.attention
        for name in METRICS:
            torch.testing.assert_close(
                rows.metric(name),
                pattern.metric(name),
                atol=1e-6,
                rtol=0,
                equal_nan=True,
                msg=lambda message, name=name: f"{name}: {message}",
            )
        assert torch.equal(rows.n_available_keys, pattern.n_available_keys)


@pytest.mark.parametrize(("name", "col"), cells("rows forward", "rows concentration"))
def test_family_matrix_without_the_pattern(name, col):
    record(name, col)
