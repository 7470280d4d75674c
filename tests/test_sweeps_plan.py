"""Planning: sites expand in a fixed order, units have stable ids, shards partition the units."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from interv.engine.interventions import ActivationPatch, ResampleAblation, ValueScale, ZeroAblation
from interv.errors import IntervError
from interv.sweeps.config import parse_config
from interv.sweeps.plan import Shard, expand_interventions, plan_units, unit_id

CFG = SimpleNamespace(n_layers=2, n_heads=3, attn_only=True)


def config(*entries: dict, seed: int = 0):
    return parse_config(
        {
            "model": {"spec": "induction-2l"},
            "task": {"name": "induction"},
            "sweep": {"interventions": list(entries), "seed": seed},
        }
    )


def test_all_heads_expand_layer_major_then_head():
    expanded = expand_interventions(config({"kind": "zero_ablation"}), CFG, n_positions=5)
    assert expanded == tuple(ZeroAblation(layer, head) for layer in (0, 1) for head in (0, 1, 2))


def test_chosen_sites_and_each_position_expand_to_their_product():
    entry = {"kind": "resample_ablation", "sites": {"heads": [2]}, "positions": "each"}
    expanded = expand_interventions(config(entry, seed=5), CFG, n_positions=3)
    assert expanded == tuple(
        ResampleAblation(layer, 2, "corrupted", 5, (p,)) for layer in (0, 1) for p in range(3)
    )


def test_residual_patches_and_value_edits_build_their_engine_values():
    entries = (
        {"kind": "noise", "component": "resid_pre", "sites": {"layers": [1]}, "positions": [0, 2]},
        {"kind": "value_scale", "sites": {"layers": [0], "heads": [1]}, "factor": 0.5},
    )
    assert expand_interventions(config(*entries), CFG, n_positions=4) == (
        ActivationPatch("resid_pre", 1, None, "noise", (0, 2)),
        ValueScale(0, 1, (0,), 0.5),
    )


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            {"kind": "zero_ablation", "sites": {"layers": [2]}},
            "sweep.interventions[0] (kind 'zero_ablation'): layer 2 is out of range; the model "
            "has 2 layers (valid layers 0..1)",
        ),
        (
            {"kind": "knockout", "sites": {"heads": [3]}},
            "head 3 is out of range; layer 0 has 3 heads (valid heads 0..2)",
        ),
        (
            {"kind": "denoise", "component": "resid_pre", "positions": [4]},
            "position 4 is beyond the prompt; the task's prompts have 4 positions",
        ),
        (
            {"kind": "denoise", "component": "mlp_out"},
            "component 'mlp_out' needs an MLP, but the model is attention-only",
        ),
    ],
)
def test_sites_outside_the_model_or_task_name_the_entry_and_the_range(entry, expected):
    with pytest.raises(IntervError) as error:
        expand_interventions(config(entry), CFG, n_positions=4)
    assert expected in str(error.value)


@given(n=st.integers(0, 40), size=st.integers(1, 9))
def test_units_cut_the_list_in_order_with_stable_ids(n, size):
    items = tuple(ZeroAblation(0, h) for h in range(n))
    units = plan_units(items, size)
    assert tuple(iv for unit in units for iv in unit.interventions) == items
    assert [unit.id for unit in units] == [f"u{k:05d}" for k in range(len(units))]
    assert all(len(unit.interventions) == size for unit in units[:-1])
    assert [unit.start for unit in units] == list(range(0, n, size))


@given(n_units=st.integers(0, 50), count=st.integers(1, 7))
def test_shards_are_disjoint_and_cover_every_unit(n_units, count):
    owners = [[k for k in range(n_units) if Shard(i, count).owns(k)] for i in range(count)]
    assert sorted(k for share in owners for k in share) == list(range(n_units))


def test_shard_text_round_trips_and_bad_shards_are_refused():
    assert Shard.parse("2/5") == Shard(2, 5)
    assert str(Shard(2, 5)) == "2/5"
    assert unit_id(17) == "u00017"
    with pytest.raises(IntervError, match=r"shard 5/5 does not exist; .* shards 0/n\.\.\(n-1\)/n"):
        Shard.parse("5/5")
    with pytest.raises(IntervError, match=r"shard must be written i/n .*; got 'a/2'"):
        Shard.parse("a/2")
    with pytest.raises(IntervError, match="unit_size must be an integer >= 1; got 0"):
        plan_units((), 0)
