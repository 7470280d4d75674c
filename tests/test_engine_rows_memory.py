"""Attention without the pattern in memory linear in the prompt length, on windowed layers too.

A random Gemma-3-shaped model (:mod:`_families`: 4 layers, 3 with a sliding window, 4 query
heads sharing 2 key/value heads), the window widened to 16 keys and the context to 2,048
positions. Reference for the memory: the live bytes of every tensor the forward allocates,
counted op by op (a dispatch mode; the CPU's peak resident set is too noisy in a test). Before
a windowed layer's query chunks were bounded by their keys, a chunk of the fused path held a
``[1, 1, T, T]`` mask (52 MiB at 2,048 tokens, 3.4x the peak at 1,024). Reference for the
numbers: the same forward with every layer's rows in one chunk of queries (the unchunked
computation), within 1e-6 (nats, or of the value: float32 rows summed over other key ranges).
"""

from __future__ import annotations

import weakref

import pytest
import torch
from _families import build
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import interv.engine.rows as rows_module
from interv.engine.forward import AttentionPath, Prompts, forward
from interv.engine.rows import RowRequest

WINDOW = 16


class _LiveBytes(TorchDispatchMode):
    """The most bytes held at once by the storages that ops created inside the mode."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.now = 0
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if key in self.live or storage.nbytes() == 0:  # a view of a counted storage
                continue
            self.live[key] = storage.nbytes()
            self.now += storage.nbytes()
            self.peak = max(self.peak, self.now)
            weakref.finalize(storage, self._free, key)
        return out

    def _free(self, key: int) -> None:
        self.now -= self.live.pop(key, 0)


@pytest.fixture(scope="module")
def windowed():
    def configure(config):
        config.max_position_embeddings = 2048
        config.sliding_window = WINDOW

    return build("gemma3", configure=configure, tag="-memory")


def _tokens(length: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(3)
    tokens = torch.randint(2, 64, (1, length), generator=generator)
    tokens[0, 0] = 0
    return tokens


def _row_numbers(fam, tokens: torch.Tensor, **request) -> dict[int, dict[str, torch.Tensor]]:
    kept: dict[int, dict[str, torch.Tensor]] = {}

    def keep(layer, stats):
        kept[layer] = {
            "entropy": stats.entropy,
            "at_keys": stats.at_keys,
            "rest_entropy": stats.rest_entropy,
            "n": stats.n,
            "path": stats.path,
        }

    rows = RowRequest(keys=torch.zeros(1, 1, dtype=torch.int64), on_layer=keep, **request)
    with torch.no_grad():
        forward(fam.bridge, Prompts.of(tokens), readout=None, attention=AttentionPath("rows", rows))
    return kept


def _peak(fam, length: int) -> int:
    with torch.no_grad(), _LiveBytes() as live:
        _row_numbers(fam, _tokens(length))
    return live.peak


@pytest.mark.slow
def test_peak_memory_grows_linearly_with_the_prompt_on_windowed_layers(windowed):
    _row_numbers(windowed, _tokens(64))  # the one-time check of the rows, outside the count
    short, long = _peak(windowed, 512), _peak(windowed, 1024)
    # linear: 2x (measured 1.97x); a [T, T] object anywhere: towards 4x (measured 3.1x)
    assert long / short < 2.4, (short, long)


@pytest.mark.parametrize("exact", [False, True], ids=["fused", "chunks"])
def test_windowed_chunks_give_the_numbers_of_one_chunk(windowed, exact):
    tokens = _tokens(700)  # chunks of 256 queries, each reading 271 keys at most
    chunked = _row_numbers(windowed, tokens, exact=exact)
    whole = _row_numbers(windowed, tokens, exact=exact, chunk=700)
    windowed_layers = [
        layer
        for layer in chunked
        if rows_module.architecture_of(windowed.bridge).key_rule(layer).window
    ]
    assert windowed_layers == [0, 1, 2]
    for layer, numbers in chunked.items():
        assert numbers["path"] == ("chunks" if exact else "fused")
        assert torch.equal(numbers["n"], whole[layer]["n"])
        for name in ("entropy", "at_keys", "rest_entropy"):
            # float32 rows summed over other key ranges: 1e-6 nats, or 1e-6 of the value
            torch.testing.assert_close(numbers[name], whole[layer][name], atol=1e-6, rtol=1e-6)
