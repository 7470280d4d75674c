"""A circuit discovery interrupted and rerun loses nothing and recomputes no exact work.

The store is tested with a stand-in discovery built on the real audit
(:func:`interv.audit.verify_screen`), which is what ``interv.circuits.discover`` uses: its
exact evaluations come in batches, each handed to ``on_exact`` as it is done.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pytest
import torch

from interv._journal import MANIFEST
from interv.audit import Screen, verify_screen
from interv.circuits.store import EXACT, SCORES, CircuitStore, discover_resumable
from interv.errors import IntervError

N_EDGES = 40
TRUE = torch.linspace(-2, 2, N_EDGES) ** 3
IDENTITY = {"model": "toy", "task_fingerprint": "abc", "method": "eap", "steps": 1}


@dataclass
class FakeScores:
    scores: torch.Tensor

    def to_dict(self):
        return {"format": "fake", "scores": self.scores.tolist()}

    @classmethod
    def from_dict(cls, data):
        return cls(torch.tensor(data["scores"], dtype=torch.float64))


class Discovery:
    """Exact work in batches of 3; ``stop_after`` batches, then a KeyboardInterrupt."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.stop_after = stop_after
        self.evaluated: list[int] = []
        self.score_calls = 0

    def scores(self) -> FakeScores:
        self.score_calls += 1
        return FakeScores(TRUE + 0.3 * torch.sin(torch.arange(N_EDGES, dtype=torch.float64)))

    def __call__(self, *, scores, known, exact_per_prompt, on_exact, kept):  # no per-prompt rows
        batches = 0

        def evaluate(indices: torch.Tensor) -> torch.Tensor:
            nonlocal batches
            out = []
            for start in range(0, len(indices), 3):
                if self.stop_after is not None and batches == self.stop_after:
                    raise KeyboardInterrupt
                chunk = indices[start : start + 3]
                self.evaluated += chunk.tolist()
                on_exact(chunk, TRUE[chunk])
                out.append(TRUE[chunk])
                batches += 1
            return torch.cat(out)

        prior = torch.full((N_EDGES,), torch.nan, dtype=torch.float64)
        for index, value in (known or {}).items():
            prior[index] = value
        return verify_screen(
            Screen(top_k=6, audit=8, alpha=None), scores.scores, evaluate, known=prior
        )


def _run(out, discovery):
    with CircuitStore.open(out, IDENTITY) as store:
        return discover_resumable(
            store, scores=discovery.scores, discover=discovery, from_dict=FakeScores.from_dict
        )


def test_an_interrupted_discovery_resumes_without_recomputing_exact_work(tmp_path):
    out = tmp_path / "run"
    first = Discovery(stop_after=2)
    with pytest.raises(KeyboardInterrupt):
        _run(out, first)
    assert len(first.evaluated) == 6  # two batches stored before the interruption
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["status"] == "interrupted"
    assert (out / SCORES).is_file()

    second = Discovery()
    audit, ran = _run(out, second)
    assert second.score_calls == 0  # the stored scores, not recomputed
    assert not set(second.evaluated) & set(first.evaluated)
    assert ran == len(second.evaluated) == 14 - 6
    reference = Discovery()
    expected, _ = _run(tmp_path / "fresh", reference)
    assert torch.equal(audit.exact.nan_to_num(99), expected.exact.nan_to_num(99))
    assert audit.status == expected.status
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["status"] == "complete" and manifest["computed_in_last_run"] == 8
    assert manifest["stored_before"] == 6 and len(manifest["resumed"]) == 1


def test_a_torn_last_line_is_dropped_and_its_edges_recomputed(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        _run(out, Discovery(stop_after=2))
    with open(out / EXACT, "ab") as log:
        log.write(b'{"indices": [39], "val')  # a kill in the middle of an append
    second = Discovery()
    _run(out, second)
    assert len(second.evaluated) == 8
    lines = (out / EXACT).read_bytes().splitlines()
    assert all(json.loads(line) for line in lines)


def test_another_discovery_into_the_same_directory_is_refused_in_one_line_naming_the_keys(
    tmp_path,
):
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        _run(out, Discovery(stop_after=1))
    with pytest.raises(
        IntervError, match=r"holds another discovery.*method: 'eap' -> 'eap-ig'"
    ) as error:
        CircuitStore.open(out, {**IDENTITY, "method": "eap-ig", "steps": 5})
    assert "\n" not in str(error.value)
    assert "steps: 1 -> 5" in str(error.value)


def test_a_damaged_log_line_is_named(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        _run(out, Discovery(stop_after=1))
    with open(out / EXACT, "ab") as log:
        log.write(b'{"indices": [1], "values": ["x"]}\n')
    with pytest.raises(
        IntervError, match=r"line 2 is damaged: exact effects.values\[0\] must be a number"
    ):
        _run(out, Discovery())


def test_a_directory_with_other_files_or_a_link_is_refused(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(IntervError, match=r"neither empty nor a circuit directory"):
        CircuitStore.open(other, IDENTITY)
    assert sorted(os.listdir(other)) == ["notes.txt"]
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / EXACT).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(IntervError, match=r"is a symbolic link"):
        CircuitStore.open(linked, IDENTITY)


def test_a_run_that_fails_before_storing_anything_leaves_no_directory(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError), CircuitStore.open(out, IDENTITY):
        raise RuntimeError("the model failed to load")
    assert not out.exists()


def test_the_python_form_resumes_a_zoo_discovery_without_recomputing(tmp_path, monkeypatch):
    import interv
    import interv.circuits.discovery as discovery
    from interv.circuits.store import discover_in

    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=4, seed=0).tokenize(model)
    real = discovery.edge_effects
    asked: list[list[int]] = []

    def edge_effects(model, task, graph, edges, *, on_batch=None, **kwargs):
        edges = list(edges)
        asked.append(edges)
        if len(asked) == 1:  # the first call stores 2 edges, then Ctrl-C
            values = real(model, task, graph, edges[:2], **{**kwargs, "per_prompt": True})
            on_batch([0, 1], values)
            raise KeyboardInterrupt
        return real(model, task, graph, edges, on_batch=on_batch, **kwargs)

    monkeypatch.setattr(discovery, "edge_effects", edge_effects)
    screen = Screen(top_k=4, audit=6, alpha=None)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        discover_in(out, model, task, screen=screen)
    result = discover_in(out, model, task, screen=screen)
    assert not set(asked[1]) & set(asked[0][:2]) and len(asked[1]) == 10 - 2
    assert sum(s != "estimated" for s in result.status) == 10
    with pytest.raises(IntervError, match=r"(?s)holds another discovery.*method"):
        discover_in(out, model, task, screen=screen, method="eap-ig")
