"""attention_view on long prompts: a stated subsample of query rows, computed without the pattern.

A subsampled view's rows and numbers must equal the full view's rows at the same positions
(within 1e-6): on the pattern-free path against the model's own pattern, on a rotary family
(Llama) and a sliding-window family (Mistral) from the family harness, right- and left-padded,
and on the pattern path on interv's zoo model (whose attention has no pattern-free path). The
default subsample is checked against its stated rule; consumers that need the square refuse a
subsampled view in one line, and the PNG/SVG export draws it with its rows' true positions.
"""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch
from _families import family

import interv
from interv.analysis import attention_view as attention_module
from interv.analysis.attention_view import ROW_METRICS, attention_view
from interv.engine import forward as forward_module
from interv.errors import IntervError
from interv.report.viewer import AttentionViewer
from interv.report.viewer_export import pattern_rgb

TOLERANCE = 1e-6


def _all_heads(model) -> list[tuple[int, int]]:
    return [
        (layer, head) for layer in range(model.cfg.n_layers) for head in range(model.cfg.n_heads)
    ]


def _assert_rows_equal(sub, full) -> None:
    """``sub``'s rows equal ``full``'s rows at ``sub.query_positions`` (weights at available
    keys, masks, n and every row metric)."""
    rows = list(sub.query_positions)
    assert sub.pattern.shape == (*full.pattern.shape[:2], len(rows), full.n_positions)
    assert torch.equal(sub.key_mask, full.key_mask[:, :, rows])
    assert torch.equal(sub.n_available, full.n_available[:, :, rows])
    ours = torch.where(sub.key_mask, sub.pattern, 0.0)
    theirs = torch.where(full.key_mask[:, :, rows], full.pattern[:, :, rows], 0.0)
    assert (ours - theirs).abs().max().item() < TOLERANCE
    for name in ROW_METRICS:
        torch.testing.assert_close(
            sub.metric(name),
            full.metric(name)[:, :, rows],
            atol=TOLERANCE,
            rtol=0,
            equal_nan=True,
        )


@pytest.mark.parametrize("name", ["llama", "mistral"])
@pytest.mark.parametrize("padding", ["right", "left"])
def test_rows_without_the_pattern_equal_the_full_views_rows(name, padding):
    fam = family(name)
    tokens, real = (fam.tokens, fam.real) if padding == "right" else fam.left_padded()
    heads = _all_heads(fam.bridge)
    full = attention_view(fam.bridge, tokens, heads=heads, attention_mask=real, attention="pattern")
    positions = [0, 3, 7, 8, 12]  # 8: the right-padded prompt's last real token; 12: padding
    sub = attention_view(
        fam.bridge,
        tokens,
        heads=heads,
        attention_mask=real,
        query_positions=positions,
        attention="rows",
    )
    assert sub.attention == "rows" and full.attention == "pattern"
    assert sub.query_positions == tuple(positions) and sub.subsampled
    assert "5 chosen query rows of 13 (positions 0, 3, 7, 8, 12)" in sub.scope
    assert "rows computed without the pattern" in sub.scope
    _assert_rows_equal(sub, full)
    # and the full square without the pattern equals the pattern's
    _assert_rows_equal(
        attention_view(fam.bridge, tokens, heads=heads, attention_mask=real, attention="rows"),
        full,
    )


@pytest.fixture(scope="module")
def zoo():
    return interv.load_model("induction-2l")


PROMPTS = ["A B C D E F G H A B C D E F G H", "A B C"]  # the second right-padded


@pytest.fixture(scope="module")
def full(zoo):
    return attention_view(zoo, PROMPTS)


def test_a_subsample_on_the_pattern_path_equals_the_full_views_rows(zoo, full):
    last = int(full.real[1].nonzero()[-1, 0])
    sub = attention_view(zoo, PROMPTS, query_positions=[2, last, 9, 1])
    assert sub.attention == "pattern"  # the zoo's attention has no pattern-free path
    assert sub.query_positions == tuple(sorted({1, 2, last, 9}))
    _assert_rows_equal(sub, full)
    assert sub.row_of(9) == sub.query_positions.index(9)
    assert not full.subsampled and "every query row" in full.scope


def test_rows_are_refused_on_a_model_without_the_pattern_free_path(zoo):
    with pytest.raises(IntervError) as error:
        attention_view(zoo, PROMPTS, query_positions=[1], attention="rows")
    assert "\n" not in str(error.value)


def test_long_prompts_keep_the_stated_evenly_spaced_rows_plus_each_last(zoo, full, monkeypatch):
    real, n = full.real, full.n_positions
    monkeypatch.setattr(attention_module, "ALL_ROWS_UP_TO", 8)
    monkeypatch.setattr(attention_module, "DEFAULT_ROWS", 4)
    view = attention_view(zoo, PROMPTS, heads=[(1, 0)])
    step = math.ceil(n / 4)
    lasts = {int(row.nonzero()[-1, 0]) for row in real}
    spaced = set(range(0, n, step))
    assert view.query_positions == tuple(sorted(spaced | lasts))
    assert n - 1 in view.query_positions and int(real[1].sum()) - 1 in view.query_positions
    ordinal = {2: "2nd", 3: "3rd"}.get(step, f"{step}th")
    assert (
        f"every {ordinal} query row of {n} ({len(spaced)} rows) plus the last real position of "
        f"each prompt ({len(lasts - spaced)} more)" in view.scope
    )
    assert view.pattern.shape == (2, 1, len(view.query_positions), n)
    whole = attention_view(zoo, PROMPTS, heads=[(1, 0)], query_positions="all")
    assert not whole.subsampled
    _assert_rows_equal(view, whole)


def test_auto_computes_long_prompts_without_the_pattern(monkeypatch):
    fam = family("llama")
    monkeypatch.setattr(forward_module, "LONG_CONTEXT", 8)
    view = attention_view(fam.bridge, fam.tokens, heads=[(0, 1)], attention_mask=fam.real)
    assert view.attention == "rows"
    full = attention_view(
        fam.bridge, fam.tokens, heads=[(0, 1)], attention_mask=fam.real, attention="pattern"
    )
    _assert_rows_equal(view, full)


def test_max_cells_counts_rows_times_keys(zoo, full, monkeypatch):
    n = full.n_positions
    monkeypatch.setattr(attention_module, "MAX_CELLS", 2 * 1 * 3 * n)
    view = attention_view(zoo, PROMPTS, heads=[(0, 0)], query_positions=[0, 1, 2])
    assert view.pattern.numel() == 2 * 3 * n
    with pytest.raises(IntervError, match=rf"2 prompts x 1 heads x 4 query rows x {n} keys"):
        attention_view(zoo, PROMPTS, heads=[(0, 0)], query_positions=[0, 1, 2, 3])


@pytest.mark.parametrize(
    ("positions", "message"),
    [
        ([0, 99], "query position 99"),
        ([1, 1], "must not repeat"),
        ("some", "query_positions must be None"),
        ([], "query_positions"),
    ],
)
def test_bad_query_positions_are_refused_in_one_line(zoo, positions, message):
    with pytest.raises(IntervError, match=re.escape(message)) as error:
        attention_view(zoo, PROMPTS, heads=[(0, 0)], query_positions=positions)
    assert "\n" not in str(error.value)


def test_the_view_refuses_rows_that_do_not_match_its_positions(zoo):
    view = attention_view(zoo, PROMPTS, heads=[(0, 0)], query_positions=[1, 4])
    for positions in ((4, 1), (1,), (1, 99)):
        with pytest.raises(IntervError, match="query_positions must be increasing"):
            dataclasses.replace(view, query_positions=positions)
    with pytest.raises(IntervError, match="keeps no query row at position 2"):
        view.row_of(2)
    with pytest.raises(IntervError, match="a test needs every query row; this view keeps 2 chosen"):
        view.require_square("a test")


def test_the_page_refuses_a_subsampled_view_and_the_export_draws_it(zoo, tmp_path):
    view = attention_view(zoo, PROMPTS, heads=[(1, 0), (0, 2)], query_positions=[0, 5, 9])
    viewer = AttentionViewer(view)
    page = tmp_path / "page.html"
    for call in (viewer.payload, viewer.html, lambda: viewer.save(page)):
        with pytest.raises(IntervError, match="draws full query x key squares") as error:
            call()
        assert "\n" not in str(error.value) and "to_png or to_svg" in str(error.value)
    assert not page.exists()
    assert viewer._repr_html_() is None and "no HTML page" in repr(viewer)
    assert pattern_rgb(view, 0, 0).shape == (3, view.n_positions, 3)
    png = viewer.to_png(tmp_path / "rows.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    svg = viewer.to_svg(tmp_path / "rows.svg").read_text()
    assert "3 chosen query rows of" in svg  # the subsampling stated
    labels = re.findall(r"text-anchor='end'>(\d+)</text>", svg)
    assert set(labels) == {"0", "5", "9"}  # rows labelled by their true positions
    # a full view still has its page
    whole = AttentionViewer(attention_view(zoo, PROMPTS, heads=[(1, 0)]))
    assert "interv-attention" in whole.fragment()
