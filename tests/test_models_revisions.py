"""load_model("org/name@revision"): a hub model at a branch, tag or commit (Pythia's training
checkpoints), offline, with a local Hugging Face cache standing in for the hub.

The cache is laid out as huggingface_hub lays it out (``models--org--name/refs/<revision>``
holding a commit, ``snapshots/<commit>/`` the files): two tiny random GPT-NeoX models, one on
``main`` and one on ``step3000``; HF_HOME / HF_HUB_CACHE point at it and HF_HUB_OFFLINE=1.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
import torch

from interv.errors import IntervError
from interv.models import load_model, model_revision
from interv.models.loading import check_model_spec

REPO = "interv-tests/pythia-tiny"
TOKENIZER = Path(__file__).resolve().parents[1] / "interv" / "zoo" / "data" / "induction-2l"
COMMITS = {"main": "a" * 40, "step3000": "b" * 40}


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    """(cache directory, {revision: the Hugging Face model saved there})."""
    import transformers

    home = tmp_path_factory.mktemp("hf_home")
    cache = home / "hub"
    repo = cache / ("models--" + REPO.replace("/", "--"))
    saved = {}
    for seed, (revision, commit) in enumerate(COMMITS.items()):
        config = transformers.GPTNeoXConfig(
            num_hidden_layers=2,
            num_attention_heads=4,
            hidden_size=32,
            intermediate_size=64,
            max_position_embeddings=64,
            vocab_size=64,
            bos_token_id=0,
            eos_token_id=0,
            pad_token_id=1,
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = transformers.GPTNeoXForCausalLM(config).eval()
        snapshot = repo / "snapshots" / commit
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.save_pretrained(snapshot)
        for file in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(TOKENIZER / file, snapshot / file)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / revision).write_text(commit)
        saved[revision] = model
    return home, saved


@pytest.fixture
def offline_hub(hub_cache, monkeypatch):
    """The cache as the only hub: environment and huggingface_hub's constants (read at import)."""
    from huggingface_hub import constants

    home, saved = hub_cache
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return saved


def test_a_revision_loads_that_checkpoint_and_the_model_names_it(offline_hub):
    tokens = torch.tensor([[0, 5, 9, 17, 3, 44, 2, 60]])
    with torch.no_grad():
        wanted = offline_hub["step3000"](tokens).logits
        other = offline_hub["main"](tokens).logits
    model = load_model(f"{REPO}@step3000")
    with torch.no_grad():
        logits = model(tokens)
    assert torch.allclose(logits, wanted, atol=1e-5)
    assert not torch.allclose(logits, other, atol=1e-2)  # the two checkpoints differ
    assert model.cfg.model_name == f"{REPO}@step3000"
    assert model_revision(model) == "step3000"
    default = load_model(REPO)
    with torch.no_grad():
        assert torch.allclose(default(tokens), other, atol=1e-5)
    assert default.cfg.model_name == REPO and model_revision(default) is None


def test_a_revision_missing_from_the_cache_is_refused_offline_naming_it(offline_hub):
    with pytest.raises(IntervError, match=r"at revision 'step9' is not in the local .* cache"):
        load_model(f"{REPO}@step9")


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("EleutherAI/pythia-70m@", r"names no revision after '@'"),
        ("@step3000", r"names no model before '@'"),
        ("EleutherAI/pythia-70m@step3000@main", r"has 2 '@'"),
        ("pythia-70m@step3000", r"'pythia-70m' is not a hub name 'org/name'"),
        ("smollm2-135m@main", r"is one of interv's own models, which have no revisions"),
        ("EleutherAI/pythia-70m@step 3", r"revision 'step 3' is not a branch, tag or commit"),
        ("EleutherAI/pythia-70m@../x", r"revision '../x' is not a branch, tag or commit"),
    ],
)
def test_a_bad_revision_spec_is_refused_before_any_load(spec, match, monkeypatch):
    from transformer_lens.model_bridge import TransformerBridge

    def no_load(*args, **kwargs):
        raise AssertionError("a bad spec must be refused before any load")

    monkeypatch.setattr(TransformerBridge, "boot_transformers", no_load)
    with pytest.raises(IntervError, match=match) as caught:
        load_model(spec)
    assert "EleutherAI/pythia-70m@step3000" in str(caught.value)  # the form, by example
    with pytest.raises(IntervError, match=match):
        check_model_spec(spec)


def test_a_revision_may_name_a_ref_with_slashes():
    assert check_model_spec("EleutherAI/pythia-70m@refs/pr/1") == "hub"
