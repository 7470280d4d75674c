"""Renderers and plots: the page is self-contained and carries every number; the figures
draw only swept layers, with integer ticks, labels that do not overlap and text inside.

The plots draw on ``matplotlib.figure.Figure`` (no pyplot), so no backend is selected.
What the page does in a browser is tested in ``test_report_browser.py``.
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
from interv.report.page import page_fragment
from interv.report.render import save_report, to_csv, to_html, to_json, to_markdown
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
    """The shape of the full SmolLM2 demo: 270 heads x 5 kinds, 540 residual patches."""
    return synthetic_report(n_layers=30, n_heads=9, n_bootstrap=10)


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []
        self.parts: list[str] = []
        self.views: list[str] = []
        self.external: list[str] = []
        self.long_rows = 0
        self._in_long = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.sources.append(attrs["src"])
        if "data-part" in attrs:
            self.parts.append(attrs["data-part"])
        if tag == "table" and "data-view" in attrs:
            self.views.append(attrs["data-view"])
            self._in_long = attrs["data-view"] == "long"
        if tag == "tr" and self._in_long and "data-k" in attrs:
            self.long_rows += 1
        for name in ("src", "href"):
            if name in attrs and not attrs[name].startswith("data:"):
                self.external.append(attrs[name])
        if tag in {"script", "link"} and ("src" in attrs or "href" in attrs):
            self.external.append(tag)

    def handle_endtag(self, tag):
        if tag == "table":
            self._in_long = False


def _parse(text: str) -> _Page:
    parser = _Page()
    parser.feed(text)
    parser.close()
    return parser


def test_html_page_is_self_contained_and_embeds_every_figure_as_png(report):
    page = _parse(to_html(report))
    assert page.external == []  # no CDN, no server: script and style are inline
    assert len(page.sources) == 4  # heatmaps, scatter, baselines, recovery
    for source in page.sources:
        prefix = "data:image/png;base64,"
        assert source.startswith(prefix)
        assert base64.b64decode(source[len(prefix) :])[:8] == b"\x89PNG\r\n\x1a\n"


def test_page_has_headline_heatmaps_scatter_and_both_table_views(report):
    page = _parse(to_html(report, figures=False))
    assert page.parts[:5] == ["headline", "heatmaps", "scatter", "grid", "table"]
    assert page.views == ["long", "wide"]
    assert page.long_rows == len(report.rows)  # every row is in the HTML, not built by script


def test_headline_names_scope_agreement_interval_and_three_heads_with_sentences(zoo_like):
    text = page_fragment(zoo_like)
    headline = text[text.index("data-part='headline'") : text.index("data-part='heatmaps'")]
    assert "test-model on toy · 5 prompt pairs · 8 heads in all 2 layers" in headline
    (entry,) = [
        a for a in zoo_like.agreement if a.layer is None and a.metric == "normalized_entropy"
    ]
    assert f"Spearman ρ = {entry.rho:.2g}" in headline
    assert f"{entry.ci_low:.2g} … {entry.ci_high:.2g}" in headline
    instructive = headline[headline.index("class='iv-instructive'") :]
    assert instructive.count("<li") == 3
    for row in zoo_like.rows:
        if f"<b>{row.label}</b>" in instructive:
            assert row.semantics in headline


def test_page_prints_every_number_with_its_unit(zoo_like):
    text = page_fragment(zoo_like)
    assert "effect (logits), mean [95% CI]" in text
    assert "H/log n (fraction of log(n))" in text
    assert "H (nats)" in text and "contrib. norm (residual-stream norm)" in text
    row = zoo_like.rows[2]
    assert f"{row.effect_mean:.4g} [{row.effect_ci_low:.4g}, {row.effect_ci_high:.4g}]" in text


def test_heatmap_cells_cover_only_the_swept_layers(three_layers):
    text = page_fragment(three_layers)
    grids = text[text.index("data-part='heatmaps'") : text.index("data-part='scatter'")]
    assert "<th>L17</th>" in grids and "<th>L23</th>" in grids
    assert "<th>L0</th>" not in grids and "<th>L18</th>" not in grids


@pytest.mark.slow  # zoo-sized but among the quick loop's slowest (issue 32)
def test_full_smollm2_sized_page_stays_under_three_megabytes(all_layers):
    size = len(to_html(all_layers).encode("utf-8"))
    assert size < 3_000_000, f"{size / 1e6:.2f} MB"


@pytest.mark.slow
def test_jupyter_displays_the_page(report, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    (tmp_path / "report.json").write_text(to_json(report), encoding="utf-8")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(
            "import json\nfrom interv.report.report import Report\n"
            "Report.from_dict(json.load(open('report.json')))"
        )
    ]
    client = nbclient.NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    (output,) = notebook.cells[0].outputs
    shown = output["data"]["text/html"]
    assert shown.startswith("<div class='interv-report'>") and "<script>" in shown
    assert shown == page_fragment(report)
    assert output["data"]["text/markdown"].startswith("# interv report")


def test_page_of_a_report_without_whole_head_rows_is_its_grid_and_table():
    interventions = [ActivationPatch("resid_pre", 0, positions=(p,)) for p in range(3)]
    interventions.append(ZeroAblation(1, 0, positions=(2,)))
    result = make_result(
        torch.randn(len(interventions), N_PROMPTS, generator=torch.Generator().manual_seed(2)),
        torch.full((N_PROMPTS,), 2.0),
        torch.zeros(N_PROMPTS),
        [type(iv).__name__ for iv in interventions],
        [iv.describe() for iv in interventions],
        sites=[iv.site for iv in interventions],
    )
    conc = make_concentration({"entropy": torch.rand(N_PROMPTS, 2, 3)})
    page = _parse(page_fragment(build_report(result, conc, interventions=interventions)))
    assert page.parts == ["headline", "grid", "table", "agreement", "scope"]
    assert page.views == ["long"] and page.long_rows == 4


def test_notebook_display_is_the_page(report):
    assert report._repr_html_() == page_fragment(report)
    assert '<table class="iv-table" data-view="long">' in report._repr_html_()
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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
