"""The metric at the answer positions and its gradient run, written once (engine.answer_metric).

- ``answer_metric`` of stacked copies is each copy's own per-prompt metric, by hand.
- ``answer_gradients`` equals plain autograd through a torch forward hook on the model's own
  hook module (the engine not used), on a left-padded task.
"""

from __future__ import annotations

import pytest
import torch

import interv
from interv.engine.answer_metric import answer_gradients, answer_metric
from interv.engine.sites import Site
from interv.engine.targets import get_metric
from interv.errors import IntervError


@pytest.fixture(scope="module")
def zoo(induction_zoo):
    model = induction_zoo
    pairs = interv.load_task("induction", n_pairs=4, seed=2)
    return model, pairs.tokenize(model, padding_side="left")


def test_stacked_copies_get_each_prompts_own_metric(zoo):
    model, task = zoo
    n, d_vocab = task.n_pairs, model.cfg.d_vocab
    logits = torch.randn(3 * n, d_vocab, generator=torch.Generator().manual_seed(0))
    clean = torch.randn(n, d_vocab, generator=torch.Generator().manual_seed(1))
    values = answer_metric(get_metric("logit_diff"), task, clean, copies=3)(logits)
    rows = torch.arange(3 * n)
    expected = logits[rows, task.target_ids.repeat(3)] - logits[rows, task.foil_ids.repeat(3)]
    torch.testing.assert_close(values, expected)


def test_the_gradient_run_equals_plain_autograd(zoo):
    model, task = zoo
    metric = get_metric("logit_diff")
    with torch.no_grad():
        clean = model(task.clean_tokens, attention_mask=task.attention_mask)
    clean = clean[torch.arange(task.n_pairs), task.answer_positions]
    site = Site("resid_pre", 1)
    out = answer_gradients(model, task, "corrupted", [site], metric, clean)

    kept = {}

    def keep(module, args, output):
        output.retain_grad()
        kept["resid"] = output
        return output

    handle = model.hook_dict["blocks.1.hook_resid_pre"].register_forward_hook(keep)
    try:
        with torch.enable_grad():
            logits = model(task.corrupted_tokens, attention_mask=task.attention_mask)
            answer = logits[torch.arange(task.n_pairs), task.answer_positions]
            rows = torch.arange(task.n_pairs)
            (answer[rows, task.target_ids] - answer[rows, task.foil_ids]).sum().backward()
    finally:
        handle.remove()
        model.zero_grad(set_to_none=True)
    torch.testing.assert_close(out.gradients[site], kept["resid"].grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out.readout, answer.detach(), atol=1e-5, rtol=1e-5)


def test_an_unknown_run_is_refused(zoo):
    model, task = zoo
    with pytest.raises(IntervError, match=r"unknown run 'noisy'; choose one of \('clean', 'co"):
        answer_gradients(model, task, "noisy", [], get_metric("logit_diff"), torch.zeros(4, 1))
