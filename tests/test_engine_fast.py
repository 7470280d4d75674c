"""The prefix-reusing runner equals the full-forward reference path.

``run(..., reuse_prefix=True)`` (the default) starts each intervened forward at the
earliest block it edits and scores only the answer positions; ``reuse_prefix=False``
runs every forward from the embedding. Both must give the same values for every
intervention kind, on native models with MLPs and grouped-query attention, on the zoo
model, on padded tasks (right and left padding), and on SmolLM2 (rotary, 4-D mask).
"""

from __future__ import annotations

import pytest
import torch
from transformer_lens.config import TransformerBridgeConfig
from transformer_lens.model_bridge import TransformerBridge

from interv.engine import stacking as engine_stacking
from interv.engine.forward import Gradient, OwnGradient, Prompts, Suffix, forward
from interv.engine.interventions import (
    PATCH_COMPONENTS,
    ActivationPatch,
    AttentionKnockout,
    Combined,
    MeanAblation,
    PatternPatch,
    ResampleAblation,
    ValuePatch,
    ValueReplace,
    ValueScale,
    ZeroAblation,
)
from interv.engine.runner import run
from interv.engine.sites import Site
from interv.errors import IntervError
from interv.tasks.tokenized import TokenizedPairs

N_PROMPTS, N_POS, D_VOCAB = 3, 7, 40


def native(n_layers: int = 3, n_key_value_heads: int | None = None) -> TransformerBridge:
    extra = {} if n_key_value_heads is None else {"n_key_value_heads": n_key_value_heads}
    config = TransformerBridgeConfig(
        d_model=32,
        d_head=8,
        n_layers=n_layers,
        n_ctx=16,
        n_heads=4,
        d_vocab=D_VOCAB,
        attn_only=False,
        act_fn="gelu",
        d_mlp=64,
        normalization_type="LN",
        seed=1,
        **extra,
    )
    return TransformerBridge.boot_native(config).eval()


@pytest.fixture(scope="module")
def gqa_model() -> TransformerBridge:
    """3 blocks with MLPs; 4 query heads on 2 key/value heads."""
    return native(n_key_value_heads=2)


def make_task(
    d_vocab: int = D_VOCAB,
    lengths: tuple[int, ...] = (N_POS,) * N_PROMPTS,
    padding_side: str = "right",
    seed: int = 0,
) -> TokenizedPairs:
    generator = torch.Generator().manual_seed(seed)
    clean = torch.randint(1, d_vocab, (len(lengths), N_POS), generator=generator)
    corrupted = torch.randint(1, d_vocab, (len(lengths), N_POS), generator=generator)
    real = torch.arange(N_POS).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    mask = real if padding_side == "right" else real.flip(1)
    answers = (
        torch.tensor(lengths) - 1
        if padding_side == "right"
        else torch.full_like(torch.tensor(lengths), N_POS - 1)
    )
    return TokenizedPairs(
        clean_tokens=clean,
        corrupted_tokens=corrupted,
        attention_mask=mask,
        answer_positions=answers,
        target_ids=torch.randint(0, d_vocab, (len(lengths),), generator=generator),
        foil_ids=torch.randint(0, d_vocab, (len(lengths),), generator=generator),
        padding_side=padding_side,
        name="random pairs",
    )


def every_kind(n_layers: int, n_heads: int, mlp: bool, shift: int = 0) -> list:
    """One intervention of each kind at each layer, plus combinations across layers.

    Positions are ``shift`` later (at most the last one, 6), so that they can be real
    tokens of every left-padded prompt (a position that is padding in a prompt is refused).
    """

    def at(*positions: int) -> tuple[int, ...]:
        return tuple(min(p + shift, N_POS - 1) for p in positions)

    components = [c for c in PATCH_COMPONENTS if mlp or c not in ("resid_mid", "mlp_out")]
    interventions = []
    for layer in range(n_layers):
        head = (layer + 1) % n_heads
        interventions += [
            ZeroAblation(layer, head),
            ZeroAblation(layer, head, positions=at(2)),
            MeanAblation(layer, head, reference="corrupted"),
            MeanAblation(layer, head, pooled=True),
            ResampleAblation(layer, head, seed=3),
            ValueScale(layer, head, at(0, 1), 0.5),
            ValueReplace(layer, head, at(0), source="corrupted"),
            AttentionKnockout(layer, head, at(0)),
            PatternPatch(layer, head, direction="noise"),
            ValuePatch(layer, head),
        ]
        interventions += [ActivationPatch("z", layer, head, direction="noise")]
        interventions += [
            ActivationPatch(c, layer, direction=d, positions=p)
            for c in components
            if c != "z"
            for d, p in (("denoise", None), ("noise", at(1, 4)))
        ]
    interventions.append(
        Combined((ActivationPatch("resid_post", 0), ActivationPatch("z", n_layers - 1, 0)))
    )
    interventions.append(Combined((ValueScale(n_layers - 1, 1, at(0)), ZeroAblation(0, 2))))
    return interventions


def assert_paths_agree(model, task, interventions, metric: str, max_batch_size: int = 64):
    fast = run(model, task, interventions, metric, max_batch_size=max_batch_size)
    reference = run(
        model, task, interventions, metric, max_batch_size=max_batch_size, reuse_prefix=False
    )
    torch.testing.assert_close(fast.values, reference.values, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast.clean, reference.clean, atol=0, rtol=0)
    assert fast.descriptions == reference.descriptions


@pytest.mark.parametrize("metric", ["logit_diff", "kl_from_clean"])
@pytest.mark.parametrize(
    ("lengths", "padding_side"),
    [((N_POS,) * N_PROMPTS, "right"), ((7, 5, 6), "right"), ((7, 4, 6), "left")],
)
def test_prefix_reuse_equals_full_forwards_for_every_kind_on_a_native_gqa_model(
    gqa_model, metric, lengths, padding_side
):
    task = make_task(lengths=lengths, padding_side=padding_side)
    interventions = every_kind(3, 4, mlp=True, shift=3 if padding_side == "left" else 0)
    assert_paths_agree(gqa_model, task, interventions, metric)


def test_prefix_reuse_equals_full_forwards_one_intervention_per_forward(gqa_model):
    task = make_task(lengths=(7, 5, 6))
    assert_paths_agree(gqa_model, task, every_kind(3, 4, mlp=True), "log_prob", N_PROMPTS)


def test_prefix_reuse_equals_full_forwards_on_the_zoo_model():
    from interv import zoo

    try:
        zoo.card("induction-2l")
    except IntervError as error:  # the zoo model is trained and shipped separately
        pytest.skip(f"zoo model not shipped yet: {error}")
    model = zoo.load("induction-2l").eval()
    task = make_task(d_vocab=model.cfg.d_vocab, lengths=(7, 6, 7))
    interventions = every_kind(model.cfg.n_layers, model.cfg.n_heads, mlp=False)
    assert_paths_agree(model, task, interventions, "logit_diff")


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_suffix_from_every_block_reproduces_the_full_forward(gqa_model, padding_side):
    """No hooks: blocks L.. on the recorded residual give the full forward's answer logits."""
    task = make_task(lengths=(7, 4, 6), padding_side=padding_side)
    prompts = Prompts.of(task.clean_tokens, task.attention_mask)
    base = forward(gqa_model, prompts, record_prefix=True)
    expected = base.readout[torch.arange(N_PROMPTS), task.answer_positions]
    for layer in range(gqa_model.cfg.n_layers):
        stacked = forward(
            gqa_model,
            Suffix((base.prefix, base.prefix), layer),
            readout="position_logits",
            positions=task.answer_positions.repeat(2),
        ).readout
        torch.testing.assert_close(stacked, expected.repeat(2, 1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("readout", ["position_logits", "logits", "final_residual"])
def test_a_staggered_suffix_equals_each_copys_own_suffix(gqa_model, readout):
    """Copies joining at blocks 0, 1, 1, 2 and after the last block (n_layers) give what a
    suffix from each copy's block gives, with an edit hooked on a copy that joined late."""
    task = make_task(lengths=(7, 4, 6))
    prompts = Prompts.of(task.clean_tokens, task.attention_mask)
    base = forward(gqa_model, prompts, record_prefix=True)
    n_layers = gqa_model.cfg.n_layers
    starts = (0, 1, 1, n_layers - 1, n_layers)

    def double_copy_2(activation, hook):  # copy 2 holds rows 2n..3n-1 from block 1 on
        activation = activation.clone()
        activation[2 * N_PROMPTS : 3 * N_PROMPTS] *= 2
        return activation

    def double_alone(activation, hook):
        return activation * 2

    positions = {"positions": task.answer_positions} if readout == "position_logits" else {}
    repeat = {"positions": task.answer_positions.repeat(5)} if positions else {}
    staggered = forward(
        gqa_model,
        Suffix((base.prefix,) * 5, 0, starts=starts),
        hooks=[(Site("z", 1), double_copy_2)],
        readout=readout,
        **repeat,
    ).readout
    for k, start in enumerate(starts):
        hooks = [(Site("z", 1), double_alone)] if k == 2 else []
        alone = forward(
            gqa_model, Suffix((base.prefix,), start), hooks=hooks, readout=readout, **positions
        ).readout
        rows = slice(k * N_PROMPTS, (k + 1) * N_PROMPTS)
        torch.testing.assert_close(staggered[rows], alone, atol=1e-5, rtol=1e-5)


def test_bad_staggered_suffixes_are_refused(gqa_model):
    prefix = forward(gqa_model, Prompts.of(make_task().clean_tokens), record_prefix=True).prefix
    with pytest.raises(IntervError, match="must not decrease"):
        Suffix((prefix, prefix), 1, starts=(1, 0))
    with pytest.raises(IntervError, match="the first equal to start_layer"):
        Suffix((prefix, prefix), 0, starts=(1, 1))
    with pytest.raises(IntervError, match="entries need starts"):
        Suffix((prefix,), 0, entries=(None,))


def test_block_recording_hooks_are_removed_when_the_forward_raises(gqa_model):
    def n_block_pre_hooks():
        return sum(len(block._forward_pre_hooks) for block in gqa_model.blocks)

    def explode(activation, hook):
        raise RuntimeError("raised inside the recording forward")

    before = n_block_pre_hooks()
    prompts = Prompts.of(make_task().clean_tokens)
    with pytest.raises(RuntimeError, match="recording forward"):
        forward(gqa_model, prompts, hooks=[(Site("z", 1), explode)], record_prefix=True)
    assert n_block_pre_hooks() == before


def test_intervention_hooks_are_removed_when_a_hook_raises_in_the_suffix(gqa_model, monkeypatch):
    def raising_hooks(*args, **kwargs):
        def hook(activation, hook):
            raise RuntimeError("hook failed")

        return [(Site("z", 2), hook)]

    monkeypatch.setattr(engine_stacking, "edit_hooks", raising_hooks)
    with pytest.raises(RuntimeError, match="hook failed"):
        run(gqa_model, make_task(), [ZeroAblation(2, 0)], "logit_diff")
    attached = [name for name, point in gqa_model.hook_dict.items() if point._forward_hooks]
    assert attached == []
    assert sum(len(block._forward_pre_hooks) for block in gqa_model.blocks) == 0


def test_reuse_prefix_must_be_a_bool(gqa_model):
    with pytest.raises(IntervError, match="reuse_prefix must be True or False; got 'yes'"):
        run(gqa_model, make_task(), [ZeroAblation(0, 0)], reuse_prefix="yes")


@pytest.mark.real_model
def test_prefix_reuse_equals_full_forwards_on_smollm2(smollm2_bridge):
    """Rotary tables, a 4-D attention mask, right padding, several interventions stacked."""
    model = smollm2_bridge
    task = make_task(d_vocab=model.cfg.d_vocab, lengths=(7, 5, 6))
    interventions = [
        ActivationPatch("z", 29, 4),
        ActivationPatch("z", 29, 5),
        ZeroAblation(29, 0, positions=(2,)),
        ActivationPatch("resid_pre", 20, positions=(3,)),
        ValueScale(15, 4, (0,), 0.0),
        PatternPatch(15, 1, direction="noise"),
        Combined((ActivationPatch("resid_post", 27, direction="noise"), ZeroAblation(29, 8))),
    ]
    assert_paths_agree(model, task, interventions, "kl_from_clean")


def test_forward_gradients_at_a_site_are_the_metrics_derivative():
    """``forward(grad_at=..., grad_of=...)`` against central differences of plain forwards
    (float64): the directional derivative along a random change of layer 1's z."""
    model = native(n_key_value_heads=2).double()
    task = make_task()
    prompts = Prompts.of(task.clean_tokens)
    site = Site("z", 1)
    rows = torch.arange(N_PROMPTS)

    def metric(logits):
        return logits[rows, task.target_ids] - logits[rows, task.foil_ids]

    out = forward(
        model,
        prompts,
        readout="position_logits",
        positions=task.answer_positions,
        gradient=Gradient([site], metric),
    )
    direction = torch.randn(out.captured[site].shape, generator=torch.Generator().manual_seed(3))
    direction = direction.double()

    def moved(eps):
        def shift(activation, hook):
            return activation + eps * direction

        readout = forward(
            model,
            prompts,
            hooks=[(site, shift)],
            readout="position_logits",
            positions=task.answer_positions,
        ).readout
        return metric(readout).sum()

    eps = 1e-4
    numeric = (moved(eps) - moved(-eps)) / (2 * eps)
    analytic = (out.gradients[site] * direction).sum()
    assert float(analytic) == pytest.approx(float(numeric), rel=1e-6)
    assert not out.readout.requires_grad and not out.captured[site].requires_grad
    assert all(p.grad is None for p in model.parameters())
    assert not [name for name, point in model.hook_dict.items() if point._forward_hooks]
    with pytest.raises(IntervError, match="a gradient needs a readout"):
        forward(model, prompts, readout=None, gradient=Gradient([site], metric))
    with pytest.raises(IntervError, match="at least one Site"):
        Gradient([], metric)


def test_own_gradient_hands_the_live_readout_and_takes_no_gradient_itself():
    """``OwnGradient``: the caller differentiates with respect to a scale its hook reads (the
    same derivative a ``Gradient`` at the site gives along that direction); the forward
    returns no gradient, a detached readout, no parameter ``.grad`` and no hook left."""
    model = native(n_key_value_heads=2).double()
    task = make_task()
    prompts = Prompts.of(task.clean_tokens)
    site = Site("z", 1)
    rows = torch.arange(N_PROMPTS)

    def metric(logits):
        return logits[rows, task.target_ids] - logits[rows, task.foil_ids]

    out = forward(
        model,
        prompts,
        readout="position_logits",
        positions=task.answer_positions,
        gradient=Gradient([site], metric),
    )
    direction = torch.randn(out.captured[site].shape, generator=torch.Generator().manual_seed(3))
    direction = direction.double()
    t = torch.zeros((), dtype=torch.float64, requires_grad=True)
    found = {}

    def shift(activation, hook):
        return activation + t * direction

    def of(logits):
        assert logits.requires_grad
        (found["d"],) = torch.autograd.grad(metric(logits).sum(), [t])

    own = forward(
        model,
        prompts,
        hooks=[(site, shift)],
        readout="position_logits",
        positions=task.answer_positions,
        gradient=OwnGradient(of),
    )
    analytic = (out.gradients[site] * direction).sum()
    assert float(found["d"]) == pytest.approx(float(analytic), rel=1e-10)
    assert own.gradients == {} and not own.readout.requires_grad
    torch.testing.assert_close(own.readout, out.readout)
    assert all(p.grad is None for p in model.parameters())
    assert not [name for name, point in model.hook_dict.items() if point._forward_hooks]
    with pytest.raises(IntervError, match="OwnGradient's of must be callable"):
        OwnGradient(3)
