"""The report's headline points at the heads that carry the behaviour (issue 24).

A synthetic SmolLM2-sized result (30 layers x 9 heads, no model): 90 pure sink heads
(sink mass ~0.99, normalized entropy ~0.01) whose ablation changes the logit difference by
~1e-7 logits, two mid-entropy heads (L26H0, L27H8) that carry the effect, and small noise
everywhere else. Zero ablation also damages 20 more heads (off-distribution), mean
ablation only the two carriers.
"""

from __future__ import annotations

import re

import pytest
import torch
from _report_fixtures import make_concentration, make_result

from interv.engine.interventions import MeanAblation, ZeroAblation
from interv.report.page import page_fragment
from interv.report.plots import concentration_vs_effect
from interv.report.render import headline_lines, to_markdown
from interv.report.table import build_report

N_LAYERS, N_HEADS, N_PROMPTS = 30, 9, 6
CARRIERS = {(26, 0): -1.6, (27, 8): -1.1}
SINKS = [(layer, head) for layer in range(10) for head in range(N_HEADS)]
ZERO_DAMAGE = [(layer, 4) for layer in range(10, 30)]


def _report(tiny_everywhere: bool = False):
    generator = torch.Generator().manual_seed(0)
    heads = [(layer, head) for layer in range(N_LAYERS) for head in range(N_HEADS)]
    entropy = torch.rand(N_PROMPTS, N_LAYERS, N_HEADS, generator=generator) * 0.5 + 0.45
    sink = torch.rand(N_PROMPTS, N_LAYERS, N_HEADS, generator=generator) * 0.3
    for layer, head in SINKS:
        entropy[:, layer, head] = 0.01
        sink[:, layer, head] = 0.99
    for layer, head in CARRIERS:
        entropy[:, layer, head] = 0.5  # mid-entropy: 140th or so of 270
        sink[:, layer, head] = 0.2
    clean = torch.full((N_PROMPTS,), 3.0, dtype=torch.float64)
    corrupted = torch.zeros(N_PROMPTS, dtype=torch.float64)
    interventions, values = [], []
    for kind in (ZeroAblation, MeanAblation):
        for layer, head in heads:
            if tiny_everywhere or (layer, head) in SINKS:
                mean = 1e-7
            elif (layer, head) in CARRIERS:
                mean = CARRIERS[(layer, head)]
            elif kind is ZeroAblation and (layer, head) in ZERO_DAMAGE:
                mean = -0.9
            else:
                mean = 0.02
            spread = 1e-8 if abs(mean) < 1e-6 else 0.05
            noise = spread * torch.randn(N_PROMPTS, generator=generator, dtype=torch.float64)
            interventions.append(kind(layer, head))
            values.append(clean + mean + noise)
    result = make_result(
        torch.stack(values),
        clean,
        corrupted,
        [type(iv).__name__ for iv in interventions],
        [iv.describe() for iv in interventions],
        sites=[iv.site for iv in interventions],
    )
    concentration = make_concentration({"normalized_entropy": entropy, "sink_mass": sink})
    return build_report(result, concentration, n_bootstrap=100)


@pytest.fixture(scope="module")
def report():
    return _report()


def test_the_headline_lists_the_two_carriers_first_with_their_concentration_ranks(report):
    assert report.headline_kind == "MeanAblation"
    first, second = report.largest_effects(2)
    assert (first.head, second.head) == ("L26H0", "L27H8")
    assert first.effect.ci_low < first.effect.mean < first.effect.ci_high < 0
    # mid-entropy: neither near the top nor the bottom of the 270 by concentration
    assert 90 < first.concentration_rank < 200 and first.n_heads == 270
    assert first.concentration_text.startswith(f"{first.concentration_rank}")
    assert "of 270 by normalized entropy (0.5)" in first.concentration_text
    assert dict(first.other_effects)["ZeroAblation"] == pytest.approx(-1.6, abs=0.1)


def test_the_most_concentrated_heads_are_the_sinks_beside_their_tiny_effects(report):
    heads = report.most_concentrated(5)
    assert all(h.normalized_entropy == pytest.approx(0.01) for h in heads)
    assert all(abs(h.effect.mean) < 1e-6 and h.effect_rank > 100 for h in heads)


def test_sink_heads_with_tiny_effects_are_never_instructive(report):
    instructive = report.instructive(len(report.rows))
    assert instructive, "the carriers' disagreement should be found"
    floor = report.instructive_floor()
    assert floor == pytest.approx(0.1 * 3.0)
    assert all(abs(row.effect_mean) > floor for row, _ in instructive)
    assert not {row.head for row, _ in instructive} & set(SINKS)


def test_the_page_headline_names_the_carriers_and_their_ranks(report):
    page = page_fragment(report)
    headline = page[page.index("data-part='headline'") : page.index("data-part='heatmaps'")]
    largest = headline[headline.index("class='iv-largest'") : headline.index("</ol>")]
    items = re.findall(r"<li data-h='(L\d+H\d+)'", largest)
    assert items[:2] == ["L26H0", "L27H8"]
    (first,) = report.largest_effects(1)
    assert f"{first.concentration_text}" in largest
    assert "mostly off-distribution damage" in headline
    assert "MeanAblation: 2 of 270 heads" in headline and "ZeroAblation: 22 of 270" in headline


def test_scatter_labels_go_to_the_carriers_before_the_flagged_sinks(report):
    page = page_fragment(report)
    for figure in re.findall(r'<figure class="iv-sc".*?</figure>', page, flags=re.DOTALL):
        labels = re.findall(r'class="iv-lab" data-h="(L\d+H\d+)"', figure)
        assert {"L26H0", "L27H8"} <= set(labels), labels[:10]
    figure = concentration_vs_effect(report, kind="MeanAblation")
    texts = {text.get_text() for text in figure.axes[0].texts}
    assert {"L26H0", "L27H8"} <= texts


def test_tiny_effects_everywhere_make_nothing_instructive():
    report = _report(tiny_everywhere=True)
    assert report.instructive(10) == ()
    page = page_fragment(report)
    assert "iv-none-instructive" in page and "class='iv-instructive'" not in page
    assert report.baseline_note() is None
    lines = headline_lines(report)
    assert lines[-1].startswith("instructive disagreements") and lines[-1].endswith(": none")
    assert "## Headline" in to_markdown(report)
