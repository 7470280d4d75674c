"""Renderers and plots: HTML parses and embeds its images; every format carries the numbers.

The plots draw on ``matplotlib.figure.Figure`` (no pyplot), so no backend is selected.
"""

from __future__ import annotations

import base64
import csv
import io
import subprocess
import sys
from html.parser import HTMLParser

import pytest
import torch
from _report_fixtures import make_concentration, make_result
from matplotlib.figure import Figure

from interv.analysis.concentration import METRICS
from interv.engine.interventions import (
    ActivationPatch,
    MeanAblation,
    ResampleAblation,
    ZeroAblation,
)
from interv.errors import IntervError
from interv.report import plots
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
