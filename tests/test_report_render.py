"""Renderers and plots: HTML parses and embeds its images; every format carries the numbers;
the figures draw only swept layers, with integer ticks, labels that do not overlap and text
inside.

The plots draw on ``matplotlib.figure.Figure`` (no pyplot), so no backend is selected.
"""

from __future__ import annotations

import base64
import csv
import io
import itertools
import subprocess
import sys
from html.parser import HTMLParser

import pytest
import torch
from _report_fixtures import make_concentration, make_result
from _synthetic_reports import synthetic_report
from matplotlib.figure import Figure
from matplotlib.text import Text

from interv.analysis.concentration import METRICS
from interv.engine.interventions import (
    ActivationPatch,
    MeanAblation,
    ResampleAblation,
    ZeroAblation,
)
from interv.errors import IntervError
from interv.report import plots
from interv.report.labels import Box, place_labels
from interv.report.render import save_report, to_csv, to_html, to_markdown
from interv.report.table import build_report

N_PROMPTS = 5


@pytest.fixture(scope="module")
def report():
    generator = torch.Generator().manual_seed(0)
    interventions = [
        kind(layer, head)
        for layer in range(2)
        for head in range(3)
        for kind in (ZeroAblation, MeanAblation, ResampleAblation)
    ]
    interventions += [
        ActivationPatch("resid_pre", layer, positions=(p,)) for layer in range(2) for p in range(5)
    ]
    result = make_result(
        torch.randn(len(interventions), N_PROMPTS, generator=generator),
        torch.full((N_PROMPTS,), 2.0),
        torch.zeros(N_PROMPTS),
        [type(iv).__name__ for iv in interventions],
        [iv.describe() for iv in interventions],
        [iv.base_run for iv in interventions],
        sites=[iv.site for iv in interventions],
    )
    conc = make_concentration(
        {name: torch.rand(N_PROMPTS, 2, 3, generator=generator) for name in METRICS}
    )
    return build_report(result, conc, interventions=interventions, n_bootstrap=50)


@pytest.fixture(scope="module")
def zoo_like():
    """8 heads in 2 layers: the four layer-1 heads sit close together, as on the zoo model
    (normalized entropy about 0.09, zero-ablation effect about -1.4 logits)."""
    interventions = [ZeroAblation(layer, head) for layer in range(2) for head in range(4)]
    effects = torch.tensor([-0.7, -0.6, -10.0, -0.4, -1.40, -1.33, -1.47, -1.43])
    values = (
        2.0
        + effects[:, None]
        + 0.1 * torch.randn(8, N_PROMPTS, generator=torch.Generator().manual_seed(1))
    )
    result = make_result(
        values,
        torch.full((N_PROMPTS,), 2.0),
        torch.zeros(N_PROMPTS),
        [type(iv).__name__ for iv in interventions],
        [iv.describe() for iv in interventions],
        sites=[iv.site for iv in interventions],
    )
    entropy = torch.tensor([[0.65, 0.51, 0.12, 0.84], [0.095, 0.108, 0.083, 0.087]])
    conc = make_concentration({"normalized_entropy": entropy.expand(N_PROMPTS, 2, 4).clone()})
    return build_report(result, conc, interventions=interventions, n_bootstrap=20)


@pytest.fixture(scope="module")
def three_layers():
    """The shape of ``interv demo --model smollm2-135m --layers 17 20 23`` (30 layers)."""
    return synthetic_report(n_layers=30, n_heads=9, layers=(17, 20, 23), n_bootstrap=10)


@pytest.fixture(scope="module")
def all_layers():
    """The shape of the full SmolLM2 demo: 270 heads x 5 kinds, 510 residual patches."""
    return synthetic_report(n_layers=30, n_heads=9, n_bootstrap=10)


class _Images(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []
        self.tables = 0

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs)["src"])
        if tag == "table":
            self.tables += 1


def test_html_parses_and_embeds_every_image_as_a_png_data_uri(report):
    parser = _Images()
    parser.feed(to_html(report))
    parser.close()
    assert parser.tables == 2  # rows, agreement
    assert len(parser.sources) == 4  # heatmaps, scatter, baselines, recovery
    for source in parser.sources:
        prefix = "data:image/png;base64,"
        assert source.startswith(prefix)
        assert base64.b64decode(source[len(prefix) :])[:8] == b"\x89PNG\r\n\x1a\n"


def test_notebook_display_gives_html_and_markdown(report):
    assert "<table>" in report._repr_html_()
    assert report._repr_markdown_().startswith("# interv report")


def test_markdown_states_scope_rules_caveat_and_units(report):
    text = to_markdown(report)
    for needle in (
        "sink",
        "mask rule",
        "interv version",
        "50 resamples",
        "baseline-sensitive",
        "does not show",
        "(nats)",
        "fraction of log(n)",
    ):
        assert needle in text
    assert text.count("\n| L") == len(report.rows)


def test_csv_has_one_line_per_row_with_the_report_numbers(report):
    lines = list(csv.DictReader(io.StringIO(to_csv(report))))
    assert len(lines) == len(report.rows)
    for line, row in zip(lines, report.rows, strict=True):
        assert float(line["effect_mean_logits"]) == pytest.approx(row.effect_mean)
        assert line["semantics"] == row.semantics
    assert "entropy_mean (nats)" in lines[0]


def test_save_report_writes_every_format(report, tmp_path):
    paths = save_report(report, tmp_path / "out")
    for key in ("markdown", "html", "json", "csv", "figure:heatmaps"):
        assert paths[key].is_file()


def test_each_plot_returns_a_figure_and_draws_into_given_axes(report):
    figure = Figure()
    axes = figure.subplots(1, 4)
    assert plots.head_heatmaps(report, axes=axes) is figure
    for draw in (plots.concentration_vs_effect, plots.baseline_comparison):
        fig = Figure()
        ax = fig.subplots()
        assert draw(report, ax=ax) is fig
        assert ax.get_ylabel().endswith("mean over prompts") and "(logits)" in ax.get_ylabel()
    assert isinstance(plots.recovery_by_layer_position(report), Figure)


def test_attention_row_separates_the_sink_from_the_content():
    weights = torch.tensor([0.6, 0.1, 0.3])
    figure = Figure()
    ax = figure.subplots()
    plots.attention_row(weights, sink=(0,), ax=ax, title="L0H0")
    heights = [patch.get_height() for patch in ax.patches]
    assert heights == pytest.approx([0.6, 0.1, 0.3])
    colors = {tuple(patch.get_facecolor()) for patch in ax.patches}
    assert len(colors) == 2
    assert "sink mass 0.600" in ax.get_title()
    with pytest.raises(IntervError, match=r"sink positions \[5\].*3 keys"):
        plots.attention_row(weights, sink=(5,))


def test_heatmaps_need_four_axes(report):
    with pytest.raises(IntervError, match="needs 4 axes; got 2"):
        plots.head_heatmaps(report, axes=Figure().subplots(1, 2))


def test_importing_interv_and_its_report_does_not_import_matplotlib():
    code = (
        "import sys, interv, interv.report.table, interv.report.render, interv.report.plots; "
        "print('matplotlib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- the figures: defects found on fresh runs, pinned ---------------------------------------


def _drawn(figure: Figure) -> Figure:
    figure.draw_without_rendering()
    return figure


def _overlapping(texts) -> list[tuple[str, str]]:
    """Pairs of visible, non-empty texts whose boxes overlap by more than half a pixel
    (the text itself: an annotation's leader line is not part of its box)."""
    boxes = [
        (t.get_text(), Text.get_window_extent(t))
        for t in texts
        if t.get_visible() and t.get_text().strip()
    ]
    return [
        (a, b)
        for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2)
        if min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0) > 0.5
        and min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0) > 0.5
    ]


def _drawn_ticklabels(axis) -> list:
    """The tick labels an axis draws (those of ticks inside its view interval)."""
    low, high = sorted(axis.get_view_interval())
    return [
        label
        for loc, label in zip(axis.get_majorticklocs(), axis.get_majorticklabels(), strict=True)
        if low - 1e-9 <= loc <= high + 1e-9
    ]


def _image_rows(ax) -> int:
    (image,) = ax.get_images()
    return image.get_array().shape[0]


def test_heatmaps_draw_only_the_swept_layers_with_their_numbers(three_layers):
    figure = plots.head_heatmaps(three_layers)
    for ax in figure.axes[:4]:  # the four panels (then their colour bars)
        assert _image_rows(ax) == 3
        assert [t.get_text() for t in ax.get_yticklabels()] == ["17", "20", "23"]
        assert list(ax.get_yticks()) == [0, 1, 2]


def test_recovery_grid_has_integer_layer_ticks_and_only_the_patched_layers(report, three_layers):
    ax = plots.recovery_by_layer_position(report).axes[0]
    assert _image_rows(ax) == 2
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "1"]
    assert all(float(tick).is_integer() for tick in ax.get_yticks())
    ax = plots.recovery_by_layer_position(three_layers).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["17", "20", "23"]


def test_scatter_labels_every_head_of_a_tight_cluster_without_overlap(zoo_like):
    figure = _drawn(plots.concentration_vs_effect(zoo_like))
    labels = figure.axes[0].texts
    assert sorted(t.get_text() for t in labels) == sorted(r.label for r in zoo_like.rows)
    assert _overlapping(labels) == []


def test_scatter_thins_labels_of_270_heads_and_says_so(all_layers):
    figure = _drawn(plots.concentration_vs_effect(all_layers))
    ax = figure.axes[0]
    assert 0 < len(ax.texts) < 270
    assert f"({len(ax.texts)} of 270 heads labelled)" in ax.get_title()
    assert _overlapping(ax.texts) == []


def test_place_labels_never_overlaps_and_leaves_out_what_does_not_fit():
    points = [(50.0, 50.0)] * 30  # thirty labels for one point: most cannot fit
    boxes = place_labels(points, [(30.0, 10.0)] * 30, Box(0, 0, 120, 100))
    placed = [box for box in boxes if box is not None]
    assert 4 <= len(placed) < 30
    assert not any(a.overlaps(b) for a, b in itertools.combinations(placed, 2))
    assert all(box.inside(Box(0, 0, 120, 100)) for box in placed)
    with pytest.raises(IntervError, match="one size per point; got 2 points and 1 sizes"):
        place_labels([(0, 0), (1, 1)], [(1, 1)], Box(0, 0, 9, 9))


@pytest.mark.parametrize("name", ["report", "zoo_like", "three_layers", "all_layers"])
def test_every_figure_keeps_its_text_inside_readable_and_apart(name, request):
    report = request.getfixturevalue(name)
    for stem, figure in plots.standard_figures(report).items():
        _drawn(figure)
        width = figure.get_size_inches()[0]
        assert width <= 10, f"{stem} is {width} inches wide"
        frame = figure.bbox
        for ax in figure.axes:
            texts = [
                *ax.texts,
                ax.xaxis.label,
                ax.yaxis.label,
                ax.title,
                *_drawn_ticklabels(ax.xaxis),
                *_drawn_ticklabels(ax.yaxis),
            ]
            for text in texts:
                if not (text.get_visible() and text.get_text().strip()):
                    continue
                box = Text.get_window_extent(text)
                assert text.get_fontsize() >= 7, (stem, text.get_text())
                inside = box.x0 >= frame.x0 - 1 and box.x1 <= frame.x1 + 1
                inside = inside and box.y0 >= frame.y0 - 1 and box.y1 <= frame.y1 + 1
                assert inside, (stem, text.get_text(), box, frame)
            for axis in (ax.xaxis, ax.yaxis):
                assert _overlapping(_drawn_ticklabels(axis)) == [], stem
