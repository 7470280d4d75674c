"""Steering, projection and subspace patching against plain-torch-hook references.

Each kind is run through ``interv.run`` (prefix reuse on and off) and compared with the
same edit written by hand as a plain torch forward hook on the model's hook module, on
the zoo model (1e-5 logits) and on SmolLM2 with grouped-query attention (1e-4 logits).
"""

from __future__ import annotations

import pytest
import torch
from _plain_hooks import forward_with_hooks, head_columns

import interv
from interv.errors import IntervError


def logit_diff_with_hooks(model, tokens, task, hooks) -> torch.Tensor:
    return forward_with_hooks(model, tokens, task, hooks)[0]


def captured(model, tokens, task, name) -> torch.Tensor:
    return forward_with_hooks(model, tokens, task, keep=[name])[1][name]


def projector(basis: torch.Tensor) -> torch.Tensor:
    """``Q Q^T`` for the span of the rows of ``basis``, float64."""
    q = torch.linalg.qr(basis.double().T).Q
    return q @ q.T


def add_vector_by_hand(model, task, layer, vector, scale, positions):
    def add(x):
        x = x.clone()
        x[:, list(positions)] += scale * vector.to(x)
        return x

    return logit_diff_with_hooks(
        model, task.clean_tokens, task, {f"blocks.{layer}.hook_resid_pre": add}
    )


def project_out_z_by_hand(model, task, layer, head, basis):
    p = projector(basis)
    columns = head_columns(model, head)

    def project(z):
        z = z.clone()
        x = z[..., columns].double()
        z[..., columns] = (x - x @ p).to(z.dtype)
        return z

    return logit_diff_with_hooks(
        model, task.clean_tokens, task, {f"blocks.{layer}.attn.hook_z": project}
    )


def project_out_residual_by_hand(model, task, layer, component, basis, positions):
    p = projector(basis)

    def project(x):
        x = x.clone()
        selected = x[:, list(positions)].double()
        x[:, list(positions)] = (selected - selected @ p).to(x.dtype)
        return x

    name = f"blocks.{layer}.hook_{component}"
    return logit_diff_with_hooks(model, task.clean_tokens, task, {name: project})


def subspace_patch_z_by_hand(model, task, layer, head, basis):
    """Denoising: the subspace of the head's z from the clean run into the corrupted run."""
    name = f"blocks.{layer}.attn.hook_z"
    clean = captured(model, task.clean_tokens, task, name)
    p = projector(basis)
    columns = head_columns(model, head)

    def patch(z):
        z = z.clone()
        x = z[..., columns].double()
        source = clean[..., columns].double()
        z[..., columns] = (x + (source - x) @ p).to(z.dtype)
        return z

    return logit_diff_with_hooks(model, task.corrupted_tokens, task, {name: patch})


def check_kinds_against_hand(model, task, atol: float, generator: torch.Generator) -> None:
    cfg = model.cfg
    last = cfg.n_layers - 1
    vector = torch.randn(cfg.d_model, generator=generator)
    z_basis = torch.randn(2, cfg.d_head, generator=generator)
    resid_basis = torch.randn(16, cfg.d_model, generator=generator)
    head = 4 if cfg.n_heads > 4 else 1  # on SmolLM2 heads 3, 4, 5 share a key/value head
    cases = [
        (
            interv.AddVector(last, vector, scale=2.5, positions=(1, 3), name="random"),
            add_vector_by_hand(model, task, last, vector, 2.5, (1, 3)),
        ),
        (
            interv.ProjectOut("z", last, z_basis, head=head),
            project_out_z_by_hand(model, task, last, head, z_basis),
        ),
        (
            interv.ProjectOut("resid_post", 0, resid_basis, positions=(1, 2, 3)),
            project_out_residual_by_hand(model, task, 0, "resid_post", resid_basis, (1, 2, 3)),
        ),
        (
            interv.SubspacePatch("z", last, z_basis, head=head),
            subspace_patch_z_by_hand(model, task, last, head, z_basis),
        ),
    ]
    interventions = [intervention for intervention, _ in cases]
    for reuse_prefix in (True, False):
        result = interv.run(model, task, interventions, reuse_prefix=reuse_prefix)
        for (intervention, expected), values in zip(cases, result.values, strict=True):
            torch.testing.assert_close(
                values, expected, atol=atol, rtol=0, msg=lambda m, s=intervention.site: f"{s}: {m}"
            )
            base = result.clean if intervention.base_run == "clean" else result.corrupted
            assert (values - base).abs().max() > 1e-3, f"{intervention.site} changed nothing"


def test_steering_projection_and_subspace_patch_equal_hand_hooks_on_the_zoo_model():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=5, seed=2).tokenize(model)
    check_kinds_against_hand(model, task, 1e-5, torch.Generator().manual_seed(0))


@pytest.mark.real_model
def test_steering_projection_and_subspace_patch_equal_hand_hooks_on_smollm2(smollm2_bridge):
    task = interv.load_task("ioi", n_pairs=3, seed=1).tokenize(smollm2_bridge)
    check_kinds_against_hand(smollm2_bridge, task, 1e-4, torch.Generator().manual_seed(1))


def test_a_full_basis_subspace_patch_is_the_activation_patch_and_an_empty_effect_is_zero():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=4, seed=3).tokenize(model)
    d_head, d_model = model.cfg.d_head, model.cfg.d_model
    result = interv.run(
        model,
        task,
        [
            interv.SubspacePatch("z", 1, torch.eye(d_head), head=2),
            interv.ActivationPatch("z", 1, 2),
            interv.SubspacePatch("resid_pre", 1, torch.eye(d_model), direction="noise"),
            interv.ActivationPatch("resid_pre", 1, direction="noise"),
            interv.AddVector(1, torch.zeros(d_model)),
        ],
    )
    torch.testing.assert_close(result.values[0], result.values[1], atol=1e-5, rtol=0)
    torch.testing.assert_close(result.values[2], result.values[3], atol=1e-5, rtol=0)
    torch.testing.assert_close(result.values[4], result.clean, atol=1e-6, rtol=0)


def test_sentences_name_the_site_the_vector_and_the_subspace():
    assert interv.AddVector(3, [3.0, 4.0], positions=(2,), name="love").describe() == (
        "steering: a vector 'love' (norm 5) times 1 added to the residual stream before "
        "block 3 (resid_pre) at position 2 of the clean run"
    )
    assert interv.ProjectOut("z", 1, [[1.0, 0.0], [0.0, 1.0]], head=2).describe() == (
        "L1H2 output (z) with its component along a 2-dimensional subspace projected out at "
        "all positions of the clean run"
    )
    patch = interv.SubspacePatch("resid_post", 0, [1.0, 1.0], direction="noise", name="gender")
    assert patch.describe().startswith(
        "noising: a 1-dimensional subspace 'gender' of residual stream after block 0 "
        "(resid_post) from the corrupted run patched into the clean run"
    )
    assert patch.base_run == "clean" and patch.site == interv.Site("resid_post", 0)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: interv.AddVector(0, [1.0, float("nan")]), "vector must be finite"),
        (lambda: interv.AddVector(0, [[1.0]]), r"vector must be a non-empty 1-D vector"),
        (lambda: interv.AddVector(0, [1.0], component="z"), r"unknown component 'z'"),
        (lambda: interv.ProjectOut("z", 0, [1.0, 0.0]), r"component 'z' needs a head"),
        (
            lambda: interv.ProjectOut("resid_pre", 0, [[1.0, 0.0], [2.0, 0.0]]),
            r"linearly independent",
        ),
        (
            lambda: interv.SubspacePatch("mlp_out", 0, [1.0], direction="both"),
            r"unknown direction 'both'",
        ),
    ],
)
def test_bad_vectors_and_bases_are_refused(build, message):
    with pytest.raises(IntervError, match=message):
        build()


def test_a_vector_of_the_wrong_width_is_refused_before_any_forward():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=2, seed=0).tokenize(model)
    with pytest.raises(IntervError, match=r"vector has 3 entries, but .* has d_model = 64"):
        interv.run(model, task, [interv.AddVector(0, [1.0, 2.0, 3.0])])
    with pytest.raises(IntervError, match=r"has 5 entries, but L0H1 output \(z\) has d_head = 16"):
        interv.run(model, task, [interv.ProjectOut("z", 0, torch.ones(5), head=1)])
