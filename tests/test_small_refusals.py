"""Small refusals of issue 30: each mistake is one clear line, never a traceback or a
silently empty result."""

from __future__ import annotations

import pytest
import transformers

import interv
from interv.errors import IntervError


@pytest.mark.parametrize(
    "make",
    [
        lambda: interv.ActivationPatch("z", 1, 2, positions=()),
        lambda: interv.ZeroAblation(0, 1, positions=[]),
    ],
)
def test_an_intervention_at_no_position_is_refused(make):
    """``positions=()`` ran and reported zero effects, as if measured."""
    with pytest.raises(IntervError, match=r"at least one position, or be None for every"):
        make()


def test_running_on_no_model_says_what_a_model_is():
    """``interv.run(None, ...)`` raised AttributeError."""
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=3).tokenize(model)
    for wrong in (None, "induction-2l"):
        with pytest.raises(IntervError, match=r"model must be a transformer-lens bridge"):
            interv.run(wrong, task, [interv.ZeroAblation(0, 0)], progress=False)


def test_an_unloadable_pickle_is_one_line_naming_the_directory(tmp_path):
    """A damaged ``pytorch_model.bin`` gave torch's traceback."""
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50, n_positions=16)
    config.save_pretrained(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"garbage, not a pickle")
    with pytest.raises(
        IntervError, match=r"the weights in model directory .* cannot be loaded"
    ) as error:
        interv.load_model(tmp_path)
    assert "\n" not in str(error.value)
