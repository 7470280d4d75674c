"""What results show of themselves: a compact table with units and sentences, in text
(``repr``) and HTML (``_repr_html_``, what a notebook shows), never a dataclass dump."""

from __future__ import annotations

import pytest

import interv
from interv._display import Display


@pytest.fixture(scope="module")
def zoo():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=4, seed=0).tokenize(model)
    return model, task


def test_an_intervention_result_shows_its_largest_effects_with_units_and_sentences(zoo):
    model, task = zoo
    ablations = [interv.ZeroAblation(layer, head) for layer in range(2) for head in range(4)]
    result = interv.run(model, task, ablations, progress=False)
    text = repr(result)
    assert text.startswith("InterventionResult: 8 interventions")
    assert "values=tensor" not in text and "descriptions=" not in text  # no dataclass dump
    assert "mean effect (logits)" in text and "range over prompts (logits)" in text
    assert "clean" in text and "effect scale" in text and "induction-2l" in text
    assert "L0H2 output (z) set to zero at all positions" in text
    # the rows come largest |mean effect| first
    mean = result.effect.mean(-1).abs()
    first = int(mean.argmax())
    assert text.index(f"L{first // 4}H{first % 4} output") < min(
        text.index(f"L{j // 4}H{j % 4} output") for j in range(8) if j != first
    )
    short = result.display(max_rows=3)
    assert len(short.rows) == 3 and short.left_out == 5 and "5 more rows" in short.text()
    page = result._repr_html_()
    assert page.startswith("<div") and "<table>" in page and "&#x27;induction&#x27;" in page
    assert "<script" not in page


def test_head_concentration_shows_metrics_per_head_with_their_meaning(zoo):
    model, task = zoo
    heads = interv.concentration(model, task, query_positions=[-1], progress=False)
    text = repr(heads)
    assert text.startswith("HeadConcentration: 2 layers x 4 heads")
    assert "normalized entropy H(a)/log n" in text and "concentration only" in text
    assert "± " in text and "L0H0" in text and "entropy=tensor" not in text
    assert "<th style='text-align:left'>sink mass</th>" in heads._repr_html_()


def test_display_html_escapes_every_cell():
    shown = Display("t <b>", ["a & b"], ["h<"], [["<script>"]], notes=["n>"], left_out=0)
    page = shown.html()
    assert "<script>" not in page and "&lt;script&gt;" in page and "a &amp; b" in page
