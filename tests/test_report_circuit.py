"""The circuit section: the mission link's numbers, the Markdown, the page, and bad input."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from html.parser import HTMLParser

import pytest
from _circuit_fixtures import make_circuit, make_concentration, make_curve

from interv.circuits import Graph
from interv.circuits.mission import MissionLink, mission_link
from interv.errors import IntervError
from interv.report.circuit import circuit_markdown, edge_rows
from interv.report.circuit_page import circuit_fragment, circuit_page, curve_svg, graph_svg


@pytest.fixture(scope="module")
def link():
    return mission_link(make_circuit(), make_concentration(), n_bootstrap=200)


def test_every_circuit_head_carries_its_concentration_beside_its_edges(link):
    heads = {h.label: h for h in link.circuit_heads}
    # the circuit: L1H2->logits, L0H1->L1H2.k, L1H0->logits, embed->L1H2.q
    assert list(heads) == ["L1H2", "L0H1", "L1H0"]
    assert heads["L1H2"].strength == pytest.approx(3.0 + 2.0 + 0.8)
    assert [e.label for e in heads["L1H2"].edges] == [
        "L1H2->logits",
        "L0H1->L1H2.k",
        "embed->L1H2.q",
    ]
    assert all(e.status == "exact (verified)" for h in heads.values() for e in h.edges)
    assert heads["L0H1"].concentration["normalized_entropy"] == pytest.approx(0.1, abs=0.02)
    assert set(heads["L0H1"].concentration) == {
        "normalized_entropy",
        "sink_mass",
        "contribution_norm",
    }
    assert link.n_exact == link.circuit_size == 4


def test_the_sink_parked_head_outside_the_circuit_is_listed(link):
    assert link.parked_outside == ("L0H3",)
    assert "normalized entropy <= 0.3 and mean sink mass > 0.5" in link.sentences["parked"]


def test_rank_agreements_have_intervals_or_say_why_not(link):
    by = {(a.metric, a.against): a for a in link.agreements}
    membership = by["normalized_entropy", "membership"]
    assert membership.n_heads == 8 and membership.rho < 0  # concentrated heads are members
    assert membership.low <= membership.rho <= membership.high
    strength = by["normalized_entropy", "strength"]
    assert strength.n_heads == 3 and not math.isnan(strength.rho)  # the minimum is 3 items
    one_edge = mission_link(make_circuit(), make_concentration(), n=1, n_bootstrap=50)
    alone = {(a.metric, a.against): a for a in one_edge.agreements}["sink_mass", "strength"]
    assert math.isnan(alone.rho) and "fewer than 3 (no rank correlation)" in alone.reason
    circuit = make_circuit(provenance=make_circuit().provenance.replace(n_prompts=2))
    few = mission_link(circuit, make_concentration(n_prompts=2), n_bootstrap=50)
    row = {(a.metric, a.against): a for a in few.agreements}["sink_mass", "membership"]
    assert (
        not math.isnan(row.rho)
        and math.isnan(row.low)
        and "2 prompts, fewer than 3 (no interval)" in row.reason
    )


def test_every_number_has_its_semantics_sentence(link):
    assert "patched exactly from the corrupted run" in link.sentences["circuit"]
    assert "clean run" in link.sentences["concentration"]
    assert "query positions [-1]" in link.sentences["concentration"]
    assert "bootstrap over prompts" in link.sentences["agreement"]
    markdown = circuit_markdown(make_circuit(), link=link)
    for key in ("agreement", "parked"):
        assert link.sentences[key].split(";")[0][:40].replace("|", "\\|")[:30] in markdown


def test_a_key_value_edge_counts_for_every_query_head_of_its_group():
    circuit = make_circuit(n_kv=2, strong={"L0H1->L1KV1.k": 2.0, "L1H3->logits": 1.0})
    link = mission_link(circuit, make_concentration(), n=2, n_bootstrap=50)
    assert {h.label for h in link.circuit_heads} == {"L0H1", "L1H2", "L1H3"}


def test_the_link_survives_json(link):
    again = MissionLink.from_dict(json.loads(json.dumps(link.to_dict())))
    assert again.parked_outside == link.parked_outside
    assert [h.label for h in again.heads] == [h.label for h in link.heads]
    assert again == link


def test_the_circuit_ranks_exact_values_first():
    circuit = make_circuit()
    order = edge_rows(circuit, 12)
    exact = [not math.isnan(float(circuit.exact[i])) for i in order]
    assert exact == sorted(exact, reverse=True)  # every exact edge before any estimate
    assert circuit.graph.edges[order[0]].label == "L1H2->logits"


def test_the_markdown_section_has_the_audit_the_curve_and_the_link(link):
    text = circuit_markdown(make_circuit(), make_curve(), link, top=6)
    assert text.startswith("# Circuit: toy-2l on toy-task")
    assert "4 exact (verified), 6 exact (audit), 71 estimated" in text
    assert "## Faithfulness" in text and "CPR" in text and "CMD" in text
    assert "circuits by signed value (CPR's)" in text
    assert "## Circuit heads beside their concentration" in text
    assert "| 1 | L1H2-&gt;logits |" in text
    assert "not intervened" in text  # an estimated edge in the top 6 says so


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.sources: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        for name in ("src", "href"):
            if dict(attrs).get(name):
                self.sources.append(dict(attrs)[name])


def test_the_page_draws_edges_by_status_with_their_numbers_offline(link):
    page = circuit_page(make_circuit(), make_curve(), link, n_draw=20)
    parser = _Collect()
    parser.feed(page)
    assert parser.sources == []  # nothing is fetched: no CDN, no link
    edges = [a for t, a in parser.tags if t == "path" and "data-edge" in a]
    assert len(edges) == 20
    for attrs in edges:
        exact = attrs["data-status"] != "estimated"
        assert ("ivc-exact" in attrs["class"]) == exact
        assert ("ivc-est" in attrs["class"]) == (not exact)
        assert "score (screen estimate" in attrs["data-info"]
        assert f"status: {attrs['data-status']}" in attrs["data-info"]
    widths = {a["data-edge"]: float(a["stroke-width"]) for a in edges}
    assert widths["L1H2->logits"] == max(widths.values())
    assert widths["L1H2->logits"] > widths["L1H0->logits"]
    nodes = {a["data-node"]: a["class"] for t, a in parser.tags if t == "g" and "data-node" in a}
    assert "ivc-in" in nodes["L1H2"] and "ivc-in" not in nodes.get("L0H0", "")
    assert page.count("<script>") == 1 and "interv-circuit" in page


def test_the_layers_run_left_to_right():
    svg = graph_svg(make_circuit(), n_draw=81)
    x = {
        node: float(found)
        for node, found in re.findall(r"data-node='([^']+)'><rect x='([\d.]+)'", svg)
    }
    assert x["embed"] < x["L0H0"] < x["L1H0"] < x["logits"]
    assert x["L0H0"] == x["L0H3"]


def test_the_curve_has_its_band_points_and_cpr_cmd(link):
    svg = curve_svg(make_curve())
    assert "ivc-band" in svg and svg.count("class='ivc-pt'") == 10
    assert "class='ivc-signed'" in svg  # CPR's curve, circuits by signed value
    assert "95% interval" in svg
    fragment = circuit_fragment(make_circuit(), make_curve(), link)
    assert "CPR" in fragment and "CMD" in fragment and "complement: corrupted" in fragment


def test_text_from_the_data_is_escaped():
    circuit = make_circuit(
        model_name="<script>alert(1)</script>", sentence="[link](http://x) <img src=x>"
    )
    page = circuit_page(circuit)
    assert "<script>alert" not in page and "<img src=x>" not in page
    text = circuit_markdown(circuit)
    assert "<script>" not in text and "[link](http" not in text


def test_a_curve_or_link_of_another_circuit_is_refused_naming_the_field(link):
    circuit = make_circuit()
    other = make_circuit(provenance=circuit.provenance.replace(prompts="other-prompts"))
    for render in (circuit_markdown, circuit_page, circuit_fragment):
        with pytest.raises(
            IntervError, match="faithfulness curve's ranking come from different prompts"
        ):
            render(circuit, make_curve(other))
        with pytest.raises(IntervError, match="the mission link come from different prompts"):
            render(other, None, link)
    given_order = dataclasses.replace(make_curve(circuit), ranking=None)
    with pytest.raises(IntervError, match="made from a given edge order"):
        circuit_markdown(circuit, given_order)


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda: edge_rows(make_circuit(), 0), r"n must be >= 1; got 0"),
        (lambda: graph_svg(make_circuit(), n_draw=0), r"n_draw must be >= 1"),
        (
            lambda: mission_link(make_circuit(), make_concentration(n_prompts=6)),
            r"different numbers of prompts \(8 and 6\)",
        ),
        (
            lambda: mission_link(
                make_circuit(),
                make_concentration(provenance=make_circuit().provenance.replace(model="other")),
            ),
            r"circuit and the concentration come from different models \('toy-2l' and 'other'\)",
        ),
        (lambda: mission_link(make_circuit().to_dict(), make_concentration()), "CircuitResult"),
        (lambda: circuit_markdown(make_circuit(), make_curve().to_dict()), "FaithfulnessCurve"),
        (lambda: circuit_fragment(make_circuit(), link={"x": 1}), r"link must be a MissionLink"),
    ],
)
def test_bad_values_for_the_section_fail_with_a_clear_message(call, pattern):
    with pytest.raises(IntervError, match=pattern):
        call()


def test_only_the_columns_that_hold_a_drawn_node_take_room():
    strong = {"embed->L0H0.q": 0.1, "L0H0->L29KV1.k": -2.0, "L29H4->MLP29": 0.5}
    circuit = make_circuit(
        graph=Graph(30, 6, 2, model_name="toy-30l"),
        strong={**strong, "MLP29->logits": 1.0},
        top_k=1,
        audit=0,
    )
    svg = graph_svg(circuit, n_draw=4, circuit_size=1)
    width = int(re.search(r"<svg class='ivc-graph'[^>]* width='(\d+)'", svg)[1])
    assert width <= 40 + 5 * 150  # embed, layer 0, layer 29, MLP 29, logits: not 62 columns
    names = re.findall(r"class='ivc-col'[^>]*>([^<]+)<", svg)
    assert names == ["embed", "layer 0", "layer 29", "MLP 29", "logits"]
