"""The open intervention protocol: a kind defined here, outside interv, runs like a built-in.

``Interpolate`` below is written only against the public protocol. It goes through
``interv.run`` (with and without prefix reuse), through a TOML sweep that names it by
import path, and into a report; every value equals a computation with plain torch
forward hooks on the model's hook modules, to 1e-5 logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from _plain_hooks import forward_with_hooks, head_columns

import interv
from interv.engine.registry import get_kind, kinds
from interv.errors import IntervError
from interv.sweeps import run_sweep

N_PAIRS = 6


@dataclass(frozen=True)
class Interpolate(interv.Intervention):
    """A head's output moved a fraction ``alpha`` of the way to the clean run's, in the
    corrupted run."""

    layer: int
    head: int
    alpha: float = 0.5

    @property
    def base_run(self) -> str:
        return "corrupted"

    def edits(self):
        return (interv.Site("z", self.layer, self.head),)

    def reads(self):
        return (interv.Read("clean", interv.Site("z", self.layer, self.head)),)

    def edit(self, site, activation, context):
        clean = context.read("clean", site)  # [n, pos, d_head]
        return activation + self.alpha * (clean - activation)

    def describe(self, task=None):
        return (
            f"L{self.layer}H{self.head} output (z) moved {self.alpha:g} of the way from the "
            "corrupted run's value to the clean run's, in the corrupted run"
        )


@pytest.fixture(scope="module")
def zoo():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=N_PAIRS, seed=5).tokenize(model)
    return model, task


def interpolate_by_hand(model, task, layer, head, alpha) -> torch.Tensor:
    # The module behind the z hook sees the heads' outputs flattened, [batch, pos,
    # n_heads * d_head]; head h owns columns h * d_head .. (h + 1) * d_head - 1.
    name = f"blocks.{layer}.attn.hook_z"
    clean = forward_with_hooks(model, task.clean_tokens, task, keep=[name])[1][name]
    columns = head_columns(model, head)

    def mix(z):
        z = z.clone()
        z[..., columns] = z[..., columns] + alpha * (clean[..., columns] - z[..., columns])
        return z

    return forward_with_hooks(model, task.corrupted_tokens, task, {name: mix})[0]


def test_a_kind_defined_outside_interv_equals_plain_torch_hooks_with_and_without_prefix_reuse(
    zoo,
):
    model, task = zoo
    interventions = [Interpolate(layer, head, 0.3) for layer in range(2) for head in range(4)]
    fast = interv.run(model, task, interventions)
    reference = interv.run(model, task, interventions, reuse_prefix=False)
    for intervention, values, full in zip(
        interventions, fast.values, reference.values, strict=True
    ):
        expected = interpolate_by_hand(model, task, intervention.layer, intervention.head, 0.3)
        torch.testing.assert_close(values, expected, atol=1e-5, rtol=0)
        torch.testing.assert_close(full, expected, atol=1e-5, rtol=0)
    assert fast.sites[5] == interv.Site("z", 1, 1)
    assert fast.kinds[0] == "Interpolate" and fast.base_runs[0] == "corrupted"


def test_a_kind_named_by_import_path_runs_in_a_sweep_and_its_sentence_reaches_the_report(
    zoo, tmp_path
):
    model, task = zoo
    config = {
        "model": {"spec": "induction-2l"},
        "task": {"name": "induction", "n_pairs": N_PAIRS, "seed": 5},
        "sweep": {
            "unit_size": 3,
            "interventions": [
                {"kind": f"{__name__}:Interpolate", "sites": {"layers": [1]}, "alpha": 0.7}
            ],
        },
    }
    swept = run_sweep(config, tmp_path / "sweep", progress=False)
    direct = interv.run(model, task, [Interpolate(1, head, 0.7) for head in range(4)])
    torch.testing.assert_close(swept.values, direct.values, atol=1e-5, rtol=0)
    assert swept.sites == direct.sites
    expected = interpolate_by_hand(model, task, 1, 2, 0.7)
    torch.testing.assert_close(swept.values[2], expected, atol=1e-5, rtol=0)

    heads = interv.concentration(model, task, query_positions=[-1])
    report = interv.build_report(swept, heads, n_bootstrap=20)
    assert [row.semantics for row in report.rows] == list(direct.descriptions)
    assert "moved 0.7 of the way" in report.rows[0].semantics
    assert report.rows[3].label == "L1H3" and report.rows[3].concentration is not None


def test_registering_a_kind_makes_it_a_sweep_name_and_a_second_class_cannot_take_it():
    try:
        interv.register("test_interpolate")(Interpolate)
        assert kinds()["test_interpolate"].cls is Interpolate
        assert get_kind("test_interpolate").build(layer=0, head=1).alpha == 0.5

        @dataclass(frozen=True)
        class Other(Interpolate):
            pass

        with pytest.raises(IntervError, match="already registered"):
            interv.register("test_interpolate")(Other)
    finally:
        from interv.engine import protocol

        protocol._KINDS.pop("test_interpolate", None)


@dataclass(frozen=True)
class Silent(interv.Intervention):
    layer: int = 0

    def edits(self):
        return (interv.Site("resid_pre", self.layer),)

    def edit(self, site, activation, context):
        return activation


@dataclass(frozen=True)
class Mute(Silent):
    def describe(self, task=None):
        return "   "


@dataclass(frozen=True)
class WrongShape(Silent):
    def edit(self, site, activation, context):
        return activation[:, :1]

    def describe(self, task=None):
        return "returns the first position only"


@dataclass(frozen=True)
class Undeclared(Silent):
    def edit(self, site, activation, context):
        return context.read("clean", interv.Site("z", 0, 0))

    def describe(self, task=None):
        return "reads the clean run without saying so"


class NotADataclass(interv.Intervention):
    def edits(self):
        return ()

    def edit(self, site, activation, context):
        return activation

    def describe(self, task=None):
        return "a mutable object"


@pytest.mark.parametrize(
    ("intervention", "message"),
    [
        (Silent(), r"Silent has no semantics sentence .*every intervention must state"),
        (Mute(), r"Mute has no semantics sentence \(describe\(\) returned '   '\)"),
        (WrongShape(), r"WrongShape.edit at L0 resid_pre must return a tensor of shape \(6, "),
        (Undeclared(), r"L0H0 of the clean run was not captured; declare Read\(source, site\)"),
        ("zero the head", r"must be interv.Intervention values; got str"),
    ],
)
def test_protocol_violations_get_clear_errors(zoo, intervention, message):
    model, task = zoo
    with pytest.raises(IntervError, match=message):
        interv.run(model, task, [intervention])


def test_register_refuses_classes_without_a_sentence_or_not_frozen():
    with pytest.raises(IntervError, match="Silent does not define describe"):
        interv.register("silent")(Silent)
    with pytest.raises(IntervError, match="must be a frozen dataclass"):
        interv.register("mutable")(NotADataclass)
    assert "silent" not in kinds() and "mutable" not in kinds()


def test_hooks_never_outlive_a_failing_user_edit(zoo):
    model, task = zoo

    @dataclass(frozen=True)
    class Explodes(Silent):
        def edit(self, site, activation, context):
            raise RuntimeError("user edit failed")

        def describe(self, task=None):
            return "raises inside its edit"

    with pytest.raises(RuntimeError, match="user edit failed"):
        interv.run(model, task, [Explodes(1)])
    assert all(not point._forward_hooks for point in model.hook_dict.values())
    assert all(not block._forward_pre_hooks for block in model.blocks)
