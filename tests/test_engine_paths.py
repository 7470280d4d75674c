"""Direct effects and path patching against hand computations with plain torch hooks.

- Direct effect: the residual stream, the final norm's scale and ``W_U`` taken from a
  plain forward, the head's contribution removed by hand; equals minus the head's direct
  logit attribution for zero ablation (the norm frozen makes it linear).
- Path patching: the textbook two forwards written with plain torch forward hooks on the
  model's hook modules (forward A: the sender patched, every other head's output and
  every MLP output frozen at the base run, the receivers' inputs captured; forward B: the
  base run with the receivers' inputs patched in).
- The known circuit of the zoo model: the previous-token head L0H2 acts through the
  induction heads' keys.
"""

from __future__ import annotations

import pytest
import torch
from _plain_hooks import forward_with_hooks, head_columns

import interv
from interv.errors import IntervError
from interv.sweeps import run_sweep

INDUCTION_HEADS = ((1, 0), (1, 1), (1, 2), (1, 3))


@pytest.fixture(scope="module")
def zoo():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=8, seed=1).tokenize(model)
    return model, task


def direct_effect_by_hand(model, task, layer, head):
    """Zero-ablation direct effect from the clean run's cached residual, scale and W_U."""
    names = [f"blocks.{layer}.attn.hook_z", "ln_final.hook_in", "ln_final.hook_scale"]
    clean, kept = forward_with_hooks(model, task.clean_tokens, task, keep=names)
    rows = torch.arange(task.n_pairs)
    z = kept[names[0]][rows, task.answer_positions][:, head_columns(model, head)].double()
    resid = kept[names[1]][rows, task.answer_positions].double()
    scale = kept[names[2]][rows, task.answer_positions].double()
    norm = model.ln_final._original_component
    delta = -(z @ model.blocks[layer].attn.W_O[head].double())
    x = resid + delta
    if model.cfg.normalization_type == "LN":
        x = x - x.mean(-1, keepdim=True)
    normalized = x / scale * norm.weight.double()
    if getattr(norm, "bias", None) is not None:
        normalized = normalized + norm.bias.double()
    logits = normalized @ model.W_U.double() + model.b_U.double()
    ablated = logits[rows, task.target_ids] - logits[rows, task.foil_ids]
    # direct logit attribution of the head, through the frozen norm
    contribution = z @ model.blocks[layer].attn.W_O[head].double()
    if model.cfg.normalization_type == "LN":
        contribution = contribution - contribution.mean(-1, keepdim=True)
    direction = model.W_U[:, task.target_ids].T.double() - model.W_U[:, task.foil_ids].T.double()
    dla = ((contribution / scale * norm.weight.double()) * direction).sum(-1)
    return ablated.float() - clean, dla.float()


def path_patch_by_hand(model, task, sender, receivers, component, direction="noise"):
    """Two plain-hook forwards: the frozen run that gives the receivers' inputs, then the
    base run with them patched in (heads sharing a key/value head held at the base run)."""
    cfg = model.cfg
    base, source = (
        (task.clean_tokens, task.corrupted_tokens)
        if direction == "noise"
        else (task.corrupted_tokens, task.clean_tokens)
    )
    mlp = not getattr(cfg, "attn_only", False)
    base_names = [f"blocks.{layer}.attn.hook_z" for layer in range(cfg.n_layers)]
    base_names += [f"blocks.{layer}.hook_mlp_out" for layer in range(cfg.n_layers) if mlp]
    _, base_acts = forward_with_hooks(model, base, task, keep=base_names)
    sender_name = f"blocks.{sender[0]}.attn.hook_z"
    _, source_acts = forward_with_hooks(model, source, task, keep=[sender_name])
    sender_cols = head_columns(model, sender[1])

    def patch_sender(out):
        out = out.clone()
        out[..., sender_cols] = source_acts[sender_name][..., sender_cols]
        return out

    def frozen(name):
        return lambda out: base_acts[name].clone()

    frozen_hooks = {sender_name: patch_sender}
    for layer in range(sender[0] + 1, cfg.n_layers):
        frozen_hooks[f"blocks.{layer}.attn.hook_z"] = frozen(f"blocks.{layer}.attn.hook_z")
    if mlp:
        for layer in range(sender[0], cfg.n_layers):
            frozen_hooks[f"blocks.{layer}.hook_mlp_out"] = frozen(f"blocks.{layer}.hook_mlp_out")
    input_names = {f"blocks.{layer}.attn.hook_{component}" for layer, _ in receivers}
    _, path_inputs = forward_with_hooks(model, base, task, frozen_hooks, keep=input_names)

    group = cfg.n_heads // (cfg.n_key_value_heads or cfg.n_heads)
    patch_hooks = {}
    for layer in {layer for layer, _ in receivers}:
        heads = [head for receiver_layer, head in receivers if receiver_layer == layer]
        name = f"blocks.{layer}.attn.hook_{component}"
        cols = [head_columns(model, h if component == "q" else h // group) for h in heads]
        held = sorted(
            {g for h in heads for g in range((h // group) * group, (h // group + 1) * group)}
            - set(heads)
        )
        if component == "q":
            held = []

        def patch_input(out, name=name, cols=cols):
            out = out.clone()
            for c in cols:
                out[..., c] = path_inputs[name][..., c]
            return out

        def hold(out, layer=layer, held=held):
            out = out.clone()
            for g in held:
                out[..., head_columns(model, g)] = base_acts[f"blocks.{layer}.attn.hook_z"][
                    ..., head_columns(model, g)
                ]
            return out

        patch_hooks[name] = patch_input
        if held:
            patch_hooks[f"blocks.{layer}.attn.hook_z"] = hold
    values, _ = forward_with_hooks(model, base, task, patch_hooks)
    return values


@pytest.mark.parametrize("component", ["q", "k", "v"])
def test_path_patching_equals_two_plain_hook_forwards_on_the_zoo_model(zoo, component):
    model, task = zoo
    for sender, receivers in [((0, 2), INDUCTION_HEADS), ((0, 1), ((1, 2),))]:
        intervention = interv.PathPatch(*sender, receivers, component)
        expected = path_patch_by_hand(model, task, sender, receivers, component)
        for reuse_prefix in (True, False):
            result = interv.run(model, task, [intervention], reuse_prefix=reuse_prefix)
            torch.testing.assert_close(result.values[0], expected, atol=1e-5, rtol=0)


def test_denoising_path_patch_equals_plain_hooks(zoo):
    model, task = zoo
    intervention = interv.PathPatch(0, 2, INDUCTION_HEADS, "k", direction="denoise")
    expected = path_patch_by_hand(model, task, (0, 2), INDUCTION_HEADS, "k", "denoise")
    torch.testing.assert_close(
        interv.run(model, task, intervention).values[0], expected, atol=1e-5, rtol=0
    )


def test_the_previous_token_head_acts_through_the_induction_heads_keys(zoo):
    """The zoo's known circuit: most of L0H2's effect travels into the induction heads' key
    input; through their queries it carries nothing (the corruption leaves the positions
    the queries read unchanged)."""
    model, task = zoo
    total, key, query, _value, direct = (
        interv.run(
            model,
            task,
            [
                interv.ActivationPatch("z", 0, 2, direction="noise"),
                interv.PathPatch(0, 2, INDUCTION_HEADS, "k"),
                interv.PathPatch(0, 2, INDUCTION_HEADS, "q"),
                interv.PathPatch(0, 2, INDUCTION_HEADS, "v"),
                interv.PathPatch(0, 2, (), "logits"),
            ],
        ).values
        - interv.run(model, task, [interv.ZeroAblation(0, 0)]).clean
    )
    assert float(total.mean()) < -3
    assert float(key.mean()) / float(total.mean()) > 0.8
    assert abs(float(query.mean())) < 0.05 * abs(float(total.mean()))
    assert abs(float(direct.mean())) < 0.1 * abs(float(total.mean()))


@pytest.mark.parametrize("head", [(0, 2), (1, 1)])
def test_direct_effect_equals_the_hand_computation_and_minus_the_direct_logit_attribution(
    zoo, head
):
    model, task = zoo
    result = interv.run(model, task, [interv.DirectEffect(*head), interv.ZeroAblation(*head)])
    effect, dla = direct_effect_by_hand(model, task, *head)
    torch.testing.assert_close(result.values[0] - result.clean, effect, atol=1e-5, rtol=0)
    torch.testing.assert_close(result.values[0] - result.clean, -dla, atol=1e-5, rtol=0)


@pytest.mark.real_model
def test_direct_effect_and_a_gqa_path_patch_equal_plain_hooks_on_smollm2(smollm2_bridge):
    model = smollm2_bridge
    task = interv.load_task("ioi", n_pairs=4, seed=2).tokenize(model)
    result = interv.run(
        model,
        task,
        [
            interv.DirectEffect(23, 3),
            interv.PathPatch(17, 4, ((21, 4),), "k"),
            interv.PathPatch(17, 4, ((21, 4),), "v"),
            interv.PathPatch(17, 4, ((21, 4), (21, 7)), "q"),
        ],
    )
    effect, dla = direct_effect_by_hand(model, task, 23, 3)
    torch.testing.assert_close(result.values[0] - result.clean, effect, atol=1e-4, rtol=0)
    torch.testing.assert_close(result.values[0] - result.clean, -dla, atol=1e-4, rtol=0)
    for values, component, receivers in zip(
        result.values[1:],
        ["k", "v", "q"],
        [((21, 4),), ((21, 4),), ((21, 4), (21, 7))],
        strict=True,
    ):
        expected = path_patch_by_hand(model, task, (17, 4), receivers, component)
        torch.testing.assert_close(values, expected, atol=1e-4, rtol=0)


def test_a_sweep_expands_one_sender_against_every_later_head(zoo, tmp_path):
    model, task = zoo
    config = {
        "model": {"spec": "induction-2l"},
        "task": {"name": "induction", "n_pairs": 8, "seed": 1},
        "sweep": {
            "unit_size": 8,
            "interventions": [
                {
                    "kind": "path_patch",
                    "sites": {"layers": [0], "heads": [2]},
                    "receivers": "each_later_head",
                    "receiver_input": "k",
                },
                {"kind": "direct_effect", "sites": {"layers": [1]}},
            ],
        },
    }
    swept = run_sweep(config, tmp_path / "sweep", progress=False)
    cells = [interv.PathPatch(0, 2, (receiver,), "k") for receiver in INDUCTION_HEADS]
    direct = [interv.DirectEffect(1, head) for head in range(4)]
    expected = interv.run(model, task, cells + direct)
    assert swept.descriptions == expected.descriptions
    torch.testing.assert_close(swept.values, expected.values, atol=1e-5, rtol=1e-5)
    assert swept.params[0]["receivers"] == [[1, 0]]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: interv.PathPatch(1, 0, ((1, 2),)), r"receivers must lie in layers after"),
        (lambda: interv.PathPatch(0, 0, (), "k"), r"'q', 'k' and 'v' need at least one"),
        (lambda: interv.PathPatch(0, 0, ((1, 0),), "logits"), r"'logits' takes no receivers"),
        (lambda: interv.PathPatch(0, 0, ((1, 0),), "o"), r"unknown receiver_input 'o'"),
        (lambda: interv.PathPatch(0, 0, ((1, 0), (1, 0))), r"receivers must not repeat"),
        (lambda: interv.DirectEffect(0, 0, "median"), r"unknown baseline 'median'"),
        (lambda: interv.PairAblation(0, 1, 0, 1), r"two different heads; got L0H1 twice"),
    ],
)
def test_bad_paths_are_refused_with_the_choices(build, message):
    with pytest.raises(IntervError, match=message):
        build()


def test_receivers_beyond_the_model_are_refused_before_any_forward(zoo):
    model, task = zoo
    with pytest.raises(IntervError, match=r"layer 5 is out of range"):
        interv.run(model, task, [interv.PathPatch(0, 2, ((5, 0),), "k")])
