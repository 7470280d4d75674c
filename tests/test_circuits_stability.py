"""Circuit stability (``discover(..., stability=n)``, ``circuit_stability``) on the zoo model.

- Oracle: each resample's circuit equals the circuit of a discovery rerun from scratch on
  the resampled prompts (screen rescored, top verified exactly), so each Jaccard equals
  the rerun's Jaccard with the full-sample circuit.
- Bookkeeping: inclusion frequencies agree with the Jaccards; the full-sample circuit is
  the result's own ``circuit(size)``; the edges patched for stability are those a resample
  verifies that the discovery had not checked.
- Serialization round trip; refusals with clear errors.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

import interv
from interv.audit import Screen
from interv.circuits import CircuitResult, CircuitStability, circuit_stability, discover
from interv.errors import IntervError
from interv.stats import bootstrap_indices

SCREEN = Screen(top_k=10, audit=0, alpha=None)
SIZES = (5, 10, 30)


@pytest.fixture(scope="module")
def zoo():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=8, seed=1).tokenize(model)
    result = discover(model, task, screen=SCREEN)
    return model, task, result


def _jaccard(a: list, b: list) -> float:
    a, b = set(a), set(b)
    return len(a & b) / len(a | b)


def test_each_resample_is_a_discovery_rerun_on_the_resampled_prompts(zoo):
    model, task, result = zoo
    stability = circuit_stability(model, task, result, n_resamples=4, sizes=SIZES, seed=3)
    draws = bootstrap_indices(task.n_pairs, 4, 3)
    for b in range(4):
        rerun = discover(model, task.resample(draws[b]), screen=SCREEN)
        for row, size in enumerate(SIZES):
            expected = _jaccard(rerun.circuit(size), result.circuit(size))
            assert stability.jaccard[row, b].item() == pytest.approx(expected)
    assert stability.circuits[1] == tuple(result.graph.index(e) for e in result.circuit(10))


def test_inclusion_frequencies_agree_with_the_jaccards(zoo):
    model, task, result = zoo
    stability = circuit_stability(model, task, result, n_resamples=30, sizes=SIZES)
    for row, size in enumerate(SIZES):
        assert stability.inclusion[row].sum().item() == pytest.approx(size)
        jaccard = stability.jaccard[row]
        shared = 2 * size * jaccard / (1 + jaccard)  # |C_b & C| from J = i / (2 size - i)
        circuit = list(stability.circuits[row])
        assert stability.inclusion[row, circuit].sum().item() == pytest.approx(shared.mean().item())
        stable = stability.stable(size)
        assert stable.tolist() == (stability.inclusion[row, circuit] >= 0.8).tolist()
        assert len(stability.stable_edges(size)) == int(stable.sum())
    low, high = stability.low[0], stability.high[0]
    assert low <= stability.mean[0] <= high


def test_discover_with_stability_reuses_its_exact_effects(zoo):
    model, task, result = zoo
    with_stability = discover(model, task, screen=SCREEN, stability=20)
    stability = with_stability.stability
    assert isinstance(stability, CircuitStability)
    # from scratch, the verified edges' per-prompt effects are patched again
    again = circuit_stability(model, task, result, n_resamples=20)
    assert again.n_exact_computed == stability.n_exact_computed + SCREEN.top_k
    assert torch.allclose(again.jaccard, stability.jaccard)
    assert "20 bootstrap resamples" in stability.sentence
    assert "not redone" in stability.sentence


def test_stability_survives_a_round_trip(zoo):
    model, task, result = zoo
    stability = circuit_stability(model, task, result, n_resamples=10, sizes=SIZES)
    loaded = CircuitResult.from_dict(
        json.loads(json.dumps(replace(result, stability=stability).to_dict()))
    ).stability
    assert loaded.sizes == stability.sizes and loaded.circuits == stability.circuits
    assert torch.equal(loaded.inclusion, stability.inclusion)
    assert torch.equal(loaded.jaccard, stability.jaccard)
    assert loaded.sentence == stability.sentence
    assert list(loaded.to_pandas()["stable_edges"]) == list(stability.to_pandas()["stable_edges"])


def test_bad_stability_input_gets_clear_errors(zoo):
    model, task, result = zoo
    no_prompts = replace(result, scores=replace(result.scores, per_prompt=None))
    with pytest.raises(IntervError, match="per-prompt estimates"):
        circuit_stability(model, task, no_prompts)
    with pytest.raises(IntervError, match="the model and prompts and the circuit come from"):
        circuit_stability(model, task.select(slice(0, 4)), result)
    with pytest.raises(IntervError, match="exceeds the graph"):
        circuit_stability(model, task, result, sizes=[10_000])
    with pytest.raises(IntervError, match="n_resamples"):
        circuit_stability(model, task, result, n_resamples=1)
    with pytest.raises(IntervError, match="stability"):
        discover(model, task, screen=SCREEN, stability=0)
    with pytest.raises(IntervError, match=r"is for node screens.*qk_fix=True, gim=True, hvp=True"):
        discover(model, task, screen=Screen(estimator="integrated"))
