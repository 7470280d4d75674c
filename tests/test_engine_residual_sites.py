"""Every writable site against a plain-torch reference, and the full-patch identity.

The identity: patching a residual-stream site (``resid_pre``, ``resid_mid``,
``resid_post``) at every position from the other run of each pair reproduces the other
run, exactly up to float rounding; the reference is the other run's own unhooked forward.
Below that, a patch at one position of every writable component is compared with the
same write done by a plain torch forward hook (:mod:`tests._plain_hooks`). A write to
``resid_mid`` is the residual stream between attention and MLP: its plain reference adds
the change to the attention output (``resid_mid = resid_pre + attn_out``), a hook point
independent of the one the engine writes at. Both on the zoo model with MLPs
(``sink-lm-3l``) and on SmolLM2.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

import interv
from interv.engine.forward import Prompts, forward
from interv.engine.interventions import PATCH_COMPONENTS, ActivationPatch
from interv.engine.runner import _base_runs
from interv.engine.screening import first_order_estimates
from interv.engine.sites import Site, hook_name
from interv.engine.targets import get_metric
from interv.errors import IntervError
from interv.tasks.tokenized import TokenizedPairs
from tests._plain_hooks import forward_with_hooks, head_columns

RESIDUAL_STREAM = ("resid_pre", "resid_mid", "resid_post")


@pytest.fixture(scope="module")
def zoo_model():
    return interv.load_model("sink-lm-3l")


def zoo_task(model, n: int = 4, length: int = 12) -> TokenizedPairs:
    """Clean and corrupted prompts that differ everywhere (two disjoint held-out sets)."""
    tokens = interv.zoo.held_out_batch("sink-lm-3l", n_sequences=2 * n).tokens[:, :length]
    return TokenizedPairs(
        clean_tokens=tokens[:n],
        corrupted_tokens=tokens[n:],
        attention_mask=torch.ones(n, length, dtype=torch.bool),
        answer_positions=torch.full((n,), length - 1),
        target_ids=torch.full((n,), 5),
        foil_ids=torch.full((n,), 7),
        name="held-out pairs",
    )


def assert_full_patches_reproduce_the_other_run(model, task, atol: float, layers=None) -> None:
    layers = range(model.cfg.n_layers) if layers is None else layers
    for direction in ("noise", "denoise"):
        patches = [
            ActivationPatch(c, layer, direction=direction)
            for c in RESIDUAL_STREAM
            for layer in layers
        ]
        for reuse_prefix in (True, False):
            result = interv.run(model, task, patches, reuse_prefix=reuse_prefix)
            tokens = task.corrupted_tokens if direction == "noise" else task.clean_tokens
            other, _ = forward_with_hooks(model, tokens, task)  # no hooks: the other run
            for patch, values in zip(patches, result.values, strict=True):
                torch.testing.assert_close(
                    values,
                    other,
                    atol=atol,
                    rtol=0,
                    msg=lambda m, p=patch: f"{p.describe()}: {m}",
                )


def test_full_residual_patches_reproduce_the_other_run_on_the_zoo(zoo_model):
    assert_full_patches_reproduce_the_other_run(zoo_model, zoo_task(zoo_model), 1e-5)


@pytest.mark.real_model
def test_full_residual_patches_reproduce_the_other_run_on_smollm2(smollm2_bridge):
    task = interv.load_task("ioi", n_pairs=3, seed=1).tokenize(smollm2_bridge)
    # the first, a middle and the last layers (every layer on the zoo): 30 layers x 3 sites
    # x 2 directions x 2 prefix modes took half a minute of the suite
    last = smollm2_bridge.cfg.n_layers - 1
    layers = (0, 1, last // 2, last - 1, last)
    assert_full_patches_reproduce_the_other_run(smollm2_bridge, task, 1e-4, layers=layers)


def kept(model, tokens, task, name: str) -> torch.Tensor:
    return forward_with_hooks(model, tokens, task, keep=[name])[1][name]


def patch_by_hand(model, task, component: str, layer: int, head, positions) -> torch.Tensor:
    """Denoising at ``positions`` by plain hooks; resid_mid through the attention output."""
    at = list(positions)
    if component == "resid_mid":
        mid = hook_name("resid_mid", layer)
        change = kept(model, task.clean_tokens, task, mid) - kept(
            model, task.corrupted_tokens, task, mid
        )

        def add(out):
            out = out.clone()
            out[:, at] += change[:, at]
            return out

        hooks = {hook_name("attn_out", layer): add}
    else:
        name = hook_name(component, layer)
        clean = kept(model, task.clean_tokens, task, name)
        columns = slice(None) if head is None else head_columns(model, head)

        def put(out):
            out = out.clone()
            out[:, at, columns] = clean[:, at, columns]
            return out

        hooks = {name: put}
    return forward_with_hooks(model, task.corrupted_tokens, task, hooks)[0]


def assert_position_patches_match_plain_hooks(model, task, atol: float) -> None:
    layer, head, positions = model.cfg.n_layers - 2, 1, (task.shared_positions[-1],)
    patches = [
        ActivationPatch(c, layer, head if c == "z" else None, positions=positions)
        for c in PATCH_COMPONENTS
    ]
    for reuse_prefix in (True, False):
        result = interv.run(model, task, patches, reuse_prefix=reuse_prefix)
        for patch, values in zip(patches, result.values, strict=True):
            expected = patch_by_hand(model, task, patch.component, layer, patch.head, positions)
            torch.testing.assert_close(
                values, expected, atol=atol, rtol=0, msg=lambda m, p=patch: f"{p.site}: {m}"
            )
            assert (values - result.corrupted).abs().max() > 1e-3, f"{patch.site} did nothing"


def test_every_writable_site_matches_plain_hooks_on_the_zoo(zoo_model):
    assert_position_patches_match_plain_hooks(zoo_model, zoo_task(zoo_model), 1e-5)


@pytest.mark.real_model
def test_every_writable_site_matches_plain_hooks_on_smollm2(smollm2_bridge):
    task = interv.load_task("ioi", n_pairs=3, seed=1).tokenize(smollm2_bridge)
    assert_position_patches_match_plain_hooks(smollm2_bridge, task, 1e-4)


@dataclass(frozen=True)
class AddToMid(interv.Intervention):
    """A user kind: ``vector`` added to ``resid_mid`` of ``layer`` at every position."""

    layer: int
    vector: tuple[float, ...]

    def edits(self):
        return (Site("resid_mid", self.layer),)

    def edit(self, site, activation, context):
        return activation + torch.tensor(self.vector).to(activation)

    def describe(self, task=None):
        return f"a vector added to the residual stream between attention and MLP of {self.layer}"


def test_user_kinds_and_steering_write_resid_mid_as_the_residual_stream(zoo_model):
    task = zoo_task(zoo_model)
    layer = 1
    vector = torch.randn(zoo_model.cfg.d_model, generator=torch.Generator().manual_seed(0))
    steered = [
        AddToMid(layer, tuple(vector.tolist())),
        interv.AddVector(layer, vector, component="resid_mid"),
    ]

    def add(out):
        return out + vector

    expected, _ = forward_with_hooks(
        zoo_model, task.clean_tokens, task, {hook_name("attn_out", layer): add}
    )
    result = interv.run(zoo_model, task, steered)
    for values in result.values:
        torch.testing.assert_close(values, expected, atol=1e-5, rtol=0)


def test_a_resid_mid_estimate_is_the_derivative_along_the_residual_stream():
    """The screen's gradient at resid_mid takes the residual path as well as the MLP's."""
    model = interv.load_model("sink-lm-3l").to(torch.float64)
    task = zoo_task(model)
    layer, eps = 1, 1e-4
    patch = ActivationPatch("resid_mid", layer, direction="noise")
    mid = hook_name("resid_mid", layer)
    change = kept(model, task.corrupted_tokens, task, mid) - kept(
        model, task.clean_tokens, task, mid
    )

    def along(t: float) -> torch.Tensor:
        hooks = {hook_name("attn_out", layer): lambda out: out + t * change}
        return forward_with_hooks(model, task.clean_tokens, task, hooks)[0]

    derivative = (along(eps) - along(-eps)) / (2 * eps)
    base = _base_runs(model, task, [patch], True, None)
    estimate = first_order_estimates(model, task, [patch], get_metric("logit_diff"), base)
    torch.testing.assert_close(estimate[0].double(), derivative, atol=1e-6, rtol=1e-5)


@pytest.mark.real_model
def test_a_post_norm_model_refuses_resid_mid_writes_and_ignores_reads(minilm_bridge):
    """MiniLM's BERT blocks normalize after the residual add (resid_post is not resid_mid +
    mlp_out): a write to resid_mid is refused, a hook that only reads changes nothing."""
    tokens = minilm_bridge.to_tokens("the cat sat on the mat")
    prompts = Prompts.of(tokens.cpu())
    plain = forward(minilm_bridge, prompts, readout="final_residual").readout
    read = forward(
        minilm_bridge,
        prompts,
        hooks=[(Site("resid_mid", 1), lambda activation, hook: None)],
        readout="final_residual",
    ).readout
    assert torch.equal(plain, read)
    with pytest.raises(IntervError, match=r"block 1's output is not its resid_mid plus its"):
        forward(
            minilm_bridge,
            prompts,
            hooks=[(Site("resid_mid", 1), lambda activation, hook: activation * 1.5)],
            readout="final_residual",
        )
