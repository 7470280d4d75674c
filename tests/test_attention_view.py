"""interv.view_attention: patterns and per-row numbers, the page's data, files, bad input.

The row numbers are checked against a hand computation from the captured pattern and
against :func:`interv.concentration` (reduced in hooks, another implementation); the
captured pattern against transformer-lens's own cache; padding against each prompt run
alone; the page's data against the view it encodes. Browser checks are in
``test_attention_viewer_browser.py``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import re
import xml.etree.ElementTree as ElementTree
import zlib
from html import escape as html_escape
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformer_lens.config import TransformerBridgeConfig
from transformer_lens.model_bridge import TransformerBridge

import interv
from interv._outputs import MARKER
from interv.analysis import attention_view as attention_module
from interv.analysis.attention_view import ROW_METRICS, attention_view, parse_heads
from interv.engine.sites import Site, hook_name
from interv.errors import IntervError
from interv.report.table import build_report
from interv.report.viewer import AttentionViewer, _script_json
from interv.report.viewer_export import (
    MASKED_RGB,
    PADDING_RGB,
    WEIGHT_FLOOR,
    head_effects,
    pattern_rgb,
    png_rgb,
    quantize,
    ramp_rgb,
)


@pytest.fixture(scope="module")
def zoo():
    return interv.load_model("induction-2l")


@pytest.fixture(scope="module")
def task(zoo):
    return interv.load_task("induction", n_pairs=6, seed=0).tokenize(zoo)


@pytest.fixture(scope="module")
def result(zoo, task):
    kinds = [interv.ZeroAblation(1, 0), interv.MeanAblation(1, 0), interv.ZeroAblation(0, 2)]
    return interv.run(zoo, task, kinds, metric="logit_diff")


@pytest.fixture(scope="module")
def view(zoo, task):
    return attention_view(zoo, task, heads=None)


@pytest.fixture(scope="module")
def gqa():
    """A native model with grouped-query attention: 4 query heads read 2 key/value heads."""
    config = TransformerBridgeConfig(
        d_model=32, d_head=8, n_layers=1, n_ctx=16, n_heads=4, n_key_value_heads=2,
        d_vocab=20, normalization_type="LN", positional_embedding_type="rotary", seed=1,
    )  # fmt: skip
    return TransformerBridge.boot_native(config).eval()


def _hand_row(row: torch.Tensor, n: int) -> dict[str, float]:
    """The row metrics of a causal row over keys 0..n-1 with sink {0}, by hand (float64;
    the row closed to sum 1 over its available keys first, as interv.metrics does)."""
    a = row[:n].to(torch.float64)
    a = a / a.sum()
    h = float(-(a[a > 0] * a[a > 0].log()).sum())
    s = float(a[0])
    q = a[1:] / (1 - s)
    hq = float(-(q[q > 0] * q[q > 0].log()).sum()) if n > 1 else math.nan
    return {
        "sink_mass": s,
        "entropy": h,
        "normalized_entropy": h / math.log(n) if n > 1 else math.nan,
        "content_entropy": hq,
        "content_normalized_entropy": hq / math.log(n - 1) if n > 2 else math.nan,
    }


def test_row_numbers_equal_a_hand_computation_from_the_pattern(view, task):
    assert view.pattern.shape[:2] == (task.n_pairs, 8)
    for p, k, t in [(0, 4, 10), (1, 2, 5), (3, 7, 20), (2, 0, 1), (5, 5, 0)]:
        hand = _hand_row(view.pattern[p, k, t], t + 1)
        assert int(view.n_available[p, k, t]) == t + 1
        for name, value in hand.items():
            got = float(view.metric(name)[p, k, t])
            if math.isnan(value):
                assert math.isnan(got), (name, p, k, t)
            else:
                assert got == pytest.approx(value, abs=1e-9), (name, p, k, t)


def test_pattern_is_the_models_own_and_numbers_agree_with_concentration(zoo, task, view):
    _, cache = zoo.run_with_cache(task.clean_tokens, attention_mask=task.attention_mask)
    real = task.attention_mask
    for k, (layer, head) in enumerate(view.heads):
        cached = cache[hook_name(Site("pattern", layer))][:, head]
        assert torch.allclose(view.pattern[:, k][real], cached[real], atol=1e-6)
    heads = interv.concentration(zoo, task)  # every query, reduced inside the hooks
    for name in ROW_METRICS:
        ours = view.metric(name).reshape(task.n_pairs, 2, 4, -1)
        theirs = heads.metric(name)
        width = min(ours.shape[-1], theirs.shape[-1])
        both = ~ours[..., :width].isnan() & ~theirs[..., :width].isnan()
        assert torch.equal(ours[..., :width].isnan(), theirs[..., :width].isnan()), name
        assert torch.allclose(ours[..., :width][both], theirs[..., :width][both], atol=1e-6), name


def test_padding_is_visible_excluded_from_every_number_and_changes_nothing(gqa):
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(1, 20, (2, 9), generator=generator)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[0, :3] = False  # left padding: prompt 0 has 6 real tokens at 3..8
    batch = attention_view(gqa, tokens, heads=0, attention_mask=mask)
    alone = attention_view(gqa, tokens[0, 3:], heads=0)
    assert batch.real[0].tolist() == [False] * 3 + [True] * 6
    assert batch.n_available[0, 0, :3].tolist() == [0, 0, 0]
    assert batch.n_available[0, 0, 3:].tolist() == list(range(1, 7))
    assert not bool(batch.key_mask[0, :, :, :3].any())  # a padding key is no candidate
    assert bool(batch.sink_mask[0, 3]) and int(batch.sink_mask[0].sum()) == 1  # BOS moves
    for name in ROW_METRICS:
        values = batch.metric(name)[0]
        assert bool(values[:, :3].isnan().all()), name  # padding queries: no numbers
        expected = alone.metric(name)[0]
        both = ~expected.isnan()
        assert torch.allclose(values[:, 3:][both], expected[both], atol=1e-5), name
    # on the page: padding cells in their own colour, causally masked ones grey
    picture = pattern_rgb(batch, 0, 0)
    assert tuple(picture[1, 5]) == PADDING_RGB and tuple(picture[5, 1]) == PADDING_RGB
    assert tuple(picture[4, 6]) == MASKED_RGB


def test_grouped_query_heads_name_their_key_value_group(gqa):
    view = attention_view(gqa, torch.arange(1, 8), heads=[(0, 0), "L0H3"])
    assert view.kv_heads == (0, 1)
    assert view.kv_label(1) == "kv head 1 of 2, shared by L0H2, L0H3"
    html = AttentionViewer(view).fragment()
    assert "kv head 1 of 2, shared by L0H2, L0H3" in html


@pytest.mark.parametrize(
    ("heads", "message"),
    [
        ([(2, 0)], "layer 2 is out of range; the model has 2 layers (valid layers 0..1)"),
        ([(1, 4)], "head 4 is out of range; layer 1 has 4 heads (valid heads 0..3)"),
        (["L1H9"], "head 9 is out of range"),
        (5, "layer 5 is out of range"),
        (["1.2"], "a head is written 'L1H3' or (1, 3)"),
        ([(1, 0), "L1H0"], "must not repeat a head; got L1H0 twice"),
        ("L1H0", "a non-empty sequence"),
    ],
)
def test_heads_out_of_range_or_malformed_are_named(zoo, heads, message, monkeypatch):
    monkeypatch.setattr(attention_module, "forward", _no_forward)
    with pytest.raises(IntervError, match=re.escape(message)):
        interv.view_attention(zoo, "A B C", heads=heads)


def _no_forward(*args, **kwargs):
    raise AssertionError("bad input must be refused before the forward")


def test_every_head_by_default_only_for_small_models():
    cfg = SimpleNamespace(n_layers=30, n_heads=9, model_name="SmolLM2")
    with pytest.raises(IntervError, match=r"270 \(30 layers x 9 heads\): choose heads"):
        parse_heads(None, cfg)
    assert parse_heads(17, cfg) == tuple((17, h) for h in range(9))


def test_prompts_out_of_range_or_too_long_are_refused_before_the_forward(zoo, task, monkeypatch):
    monkeypatch.setattr(attention_module, "forward", _no_forward)
    with pytest.raises(IntervError, match=r"prompt 6 is out of range; there are 6 prompts"):
        interv.view_attention(zoo, task, heads=[(0, 0)], prompt_indices=[0, 6])
    too_long = " ".join(["A"] * 60)  # 61 tokens with BOS; the zoo model's n_ctx is 48
    with pytest.raises(IntervError, match=r"prompt 0 has 61 tokens; model .* n_ctx=48"):
        interv.view_attention(zoo, too_long, heads=[(0, 0)])


def test_a_result_from_another_model_or_task_is_refused_naming_both(zoo, task, result, monkeypatch):
    monkeypatch.setattr(attention_module, "forward", _no_forward)
    other_model = dataclasses.replace(
        result, provenance=result.provenance.replace(model="SmolLM2-135M-Instruct")
    )
    with pytest.raises(IntervError, match=r"different models .*'SmolLM2-135M-Instruct'"):
        interv.view_attention(zoo, task, heads=[(1, 0)], result=other_model)
    other_task = interv.load_task("induction", n_pairs=4, seed=1).tokenize(zoo)
    with pytest.raises(IntervError, match=r"different numbers of prompts \(4 and 6\)"):
        interv.view_attention(zoo, other_task, heads=[(1, 0)], result=result)
    shifted = dataclasses.replace(result, provenance=result.provenance.replace(pairs="0" * 16))
    with pytest.raises(IntervError, match="different prompt pairs"):
        interv.view_attention(zoo, task, heads=[(1, 0)], result=shifted)
    with pytest.raises(IntervError, match="pass as prompts the TokenizedPairs the effects"):
        interv.view_attention(zoo, ["A B"], heads=[(1, 0)], result=result)
    with pytest.raises(IntervError, match="result must be an InterventionResult"):
        interv.view_attention(zoo, task, heads=[(1, 0)], result={"effect": 1})


def test_a_view_of_a_bigger_model_than_a_page_can_hold_is_refused(zoo, monkeypatch):
    monkeypatch.setattr(attention_module, "forward", _no_forward)
    monkeypatch.setattr(attention_module, "MAX_CELLS", 90)
    with pytest.raises(
        IntervError, match=r"1 prompts x 2 heads x 7 query rows x 7 keys .* at most 90"
    ):
        interv.view_attention(zoo, "A B C D E F", heads=[(0, 0), (0, 1)])


def test_effects_beside_each_head_are_the_reports_rows(zoo, task, result):
    viewer = interv.view_attention(zoo, task, heads=["L1H0", "L0H2", "L0H1"], result=result)
    concentration = interv.concentration(zoo, task, query_positions=[-1])
    report = build_report(result, concentration)
    assert [r.flags for r in viewer.report.rows] == [r.flags for r in report.rows]
    rows = head_effects(viewer.report, 1, 0)
    assert [r.kind for r in rows] == sorted(
        ["ZeroAblation", "MeanAblation"],
        key=lambda kind: -abs(next(r.effect_mean for r in report.rows if r.kind == kind
                                   and r.label == "L1H0")),
    )  # fmt: skip
    html = viewer.fragment()
    for row in report.rows:
        assert html_escape(row.semantics, quote=True) in html
    assert "No intervention on this head in the result." in html  # L0H1
    # a report works too, and joins only the prompts it was measured on
    assert AttentionViewer(viewer.view, report).report is report
    strings = attention_view(zoo, ["A B C"], heads=[(1, 0)])
    with pytest.raises(IntervError, match="build the view from the task's TokenizedPairs"):
        AttentionViewer(strings, report)
    assert report.provenance.n_prompts == task.n_pairs


def _decode(cell: dict, n: int, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    codes = base64.b64decode(cell["codes"])
    codes = np.frombuffer(zlib.decompress(codes) if cell["z"] else codes, dtype=np.uint8)
    full = np.zeros((n, n), dtype=np.uint8)
    if causal:
        full[np.tril_indices(n)] = codes
    else:
        full[:] = codes.reshape(n, n)
    metrics = np.frombuffer(base64.b64decode(cell["metrics"]), dtype="<f8").reshape(-1, n)
    return full, metrics


def test_page_data_holds_exact_row_numbers_and_codes_within_one_step(view):
    viewer = AttentionViewer(view)
    data = viewer.payload()
    n = view.n_positions
    for p, k in [(0, 0), (2, 5)]:
        codes, metrics = _decode(data["cells"][p][k], n, view.causal)
        for m, name in enumerate(data["metrics"]):
            assert np.array_equal(metrics[m], view.metric(name)[p, k].numpy(), equal_nan=True)
        weights = torch.where(view.key_mask[p, k], view.pattern[p, k], 0.0).numpy()
        decoded = np.where(codes > 0, 10.0 ** ((codes.astype(float) - 1) * 5 / 254 - 5), 0.0)
        kept = weights >= WEIGHT_FLOOR
        assert np.all(codes[~kept] == 0)
        ratio = decoded[kept] / weights[kept]
        assert np.all(np.abs(np.log10(ratio)) <= 2.5 / 254 + 1e-9)  # half a step of 4.6%
        top_w = np.frombuffer(base64.b64decode(data["cells"][p][k]["topWeight"]), "<f4")
        top_i = np.frombuffer(base64.b64decode(data["cells"][p][k]["topIndex"]), "<i4")
        t = int(view.prompt_lengths[p]) - 1
        assert top_w[t * 3] == weights[t].max() and top_i[t * 3] == weights[t].argmax()
    assert data["heads"][4] == {
        "label": "L1H0",
        "layer": 1,
        "head": 0,
        "kv": 0,
        "rule": "causal AND padding",
        "window": None,
        "chunk": None,
    }
    edges = torch.tensor([0.0, 9e-6, 1e-5, 1.0], dtype=torch.float64)
    assert quantize(edges).tolist() == [0, 0, 1, 255]


def test_page_is_self_contained_and_escapes_token_text(view):
    hostile = ("</script><img src=x onerror=alert(1)>", *view.tokens[0][1:])
    tricky = dataclasses.replace(view, tokens=(hostile, *view.tokens[1:]))
    page = AttentionViewer(tricky).html()
    assert "<img src=x" not in page and page.count("</script>") == 2  # data + script
    assert not re.search(r"(src|href)=['\"]?https?:", page)  # no CDN, no network
    assert json.loads(_script_json({"t": "</script>\u2028"})) == {"t": "</script>\u2028"}
    assert "</" not in _script_json({"t": "</script>"})


def test_files_never_overwrite_a_users_file(view, tmp_path):
    viewer = AttentionViewer(view)
    page = viewer.save(tmp_path / "view.html")
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert (tmp_path / MARKER).exists()
    viewer.save(tmp_path / "view.html")  # interv's own, unchanged: may be rewritten
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"user data")
    with pytest.raises(IntervError, match="interv did not write it"):
        viewer.to_png(mine)
    assert mine.read_bytes() == b"user data"
    viewer.to_png(mine, heads=[4], overwrite=True)
    assert mine.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and mine.stat().st_size > 10_000
    with pytest.raises(IntervError, match="head 8 is out of range; the viewer shows 8 heads"):
        viewer.to_svg(tmp_path / "x.svg", heads=[8])


def test_svg_is_valid_xml_with_the_exact_colours(view, tmp_path):
    path = AttentionViewer(view).to_svg(tmp_path / "view.svg", prompt=1, heads=[4, 2])
    root = ElementTree.parse(path).getroot()
    texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "L1H0 · own key/value head" in texts and "normalized entropy" in texts
    weights = torch.where(view.key_mask[1, 4], view.pattern[1, 4], 0.0).numpy()
    colour = "#{:02x}{:02x}{:02x}".format(*ramp_rgb(weights[10, 0]))
    assert colour in path.read_text(encoding="utf-8")


def test_png_encoder_writes_the_pixels_it_is_given(tmp_path):
    from PIL import Image

    rgb = np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3)
    path = tmp_path / "x.png"
    path.write_bytes(png_rgb(rgb))
    assert np.array_equal(np.asarray(Image.open(path).convert("RGB")), rgb)


def test_view_attention_is_a_top_level_name_and_the_viewer_shows_itself(zoo):
    viewer = interv.view_attention(zoo, ["A B C A B"], heads=[(1, 0)])
    assert isinstance(viewer, AttentionViewer)
    assert viewer._repr_html_().startswith("<div class='interv-attention'>")
    assert "L1H0 on 1 prompt" in repr(viewer)


@pytest.mark.real_model
def test_smollm2_view_labels_its_key_value_groups_and_matches_concentration(smollm2_bridge):
    model = smollm2_bridge
    prompts = ["When Mary and John went to the store, John gave a drink to", "The capital of"]
    viewer = interv.view_attention(model, prompts, heads=["L17H4", "L20H1"])
    view = viewer.view
    assert view.kv_label(0) == "kv head 1 of 3, shared by L17H3, L17H4, L17H5"
    assert view.kv_label(1) == "kv head 0 of 3, shared by L20H0, L20H1, L20H2"
    heads = interv.concentration(model, prompts)
    for k, (layer, head) in enumerate(view.heads):
        ours = view.sink_mass[:, k]
        theirs = heads.sink_mass[:, layer, head][:, : ours.shape[-1]]
        both = ~ours.isnan()
        assert torch.allclose(ours[both], theirs[both], atol=1e-5)
    assert bool(view.sink_mass[1, :, 4:].isnan().all())  # prompt 1 is padded after 4 tokens
