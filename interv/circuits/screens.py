"""Edge attribution screens: EAP and EAP-IG, every edge of the graph at once (estimates).

Sign convention (direction ``"noise"``, the default): a score estimates the exact effect of
:func:`interv.circuits.patching.edge_effects`, the change of the metric when the edge's
sender output is moved from its clean to its corrupted value along that edge only::

    score(u -> v) = sum_{pos, d} (a_corr(u) - a_clean(u))[pos, d] * g_v[pos, d]

prompt-averaged, with ``g_v`` the gradient of the prompt's metric with respect to the
(pre-norm) input of reader ``v``: at the clean run for EAP (Syed et al. 2023); averaged over
``steps`` runs whose embeddings are interpolated ``e_corr + (k / steps)(e_clean - e_corr)``,
``k = 1..steps``, for EAP-IG (Hanna et al. 2024; ``steps=1`` is EAP). A reader's input
gradient is the head's query, key or value gradient pulled back through its projection and
its block's first norm (the MLP's through the MLP and the second norm; the logits' is the
final norm's input gradient), so one forward and one backward per run score every edge.

``direction="denoise"`` swaps the runs (gradients on the corrupted run, differences
``a_clean - a_corr``): the convention of transformer-lens 4.3's
``attribution_patch(..., EdgeAttributionConfig(granularity="edge"))``. Its edges are per
position (writer and reader at the same position); summed over positions they equal these
scores (the tests check it on a GPT-2-shaped model, the only kind its edge sweep accepts).

``qk_fix=True``: AtP*'s QK fix (Kramár et al. 2024). A first-order estimate through a
saturated softmax is badly wrong for query and key inputs, so an edge into a head's query
(key) input is scored from the attention pattern onward only: the receiver's query (key) is
recomputed exactly at every position, ``q + (ln1(x + delta) - ln1(x)) @ W_Q[h]``, the
attention logits and the exact softmax from it (causal and padding masks as the model's),
and the score is ``sum (pattern' - pattern) * g_pattern`` over query and key positions, with
``g_pattern`` the gradient of the metric with respect to the head's attention probabilities
(at the base run for EAP; averaged over the same interpolated runs for EAP-IG, the pattern
change staying the base run's). A key edge under grouped-query attention changes the key
of every query head of its group: their terms are summed. Where the moving side has no QK
norm the change of ``scale * q . k`` is linear in the sender's normalized change, so each
layer builds its query (key) directions once and a sender's changed logits are one product
with them (the same numbers, within float32; :func:`qk_fixed_scores`); under a QK norm, or
when the directions would not fit ``QK_DIRECTIONS_BYTES``, every sender's queries (keys) are
recomputed as written above. Where the block's first norm is an RMSNorm or a LayerNorm
(checked against the module's own output), its change is taken apart so the senders' changes
are multiplied without normalizing ``x + delta`` per sender (:class:`_NormChange`). The
score is read from the change ``D`` of the logits without a second softmax,
``sum_k G_k expm1(D_k) / (1 + sum_k p_k expm1(D_k))`` per row with ``G = p (g - p . g)``
(:class:`_PatternReading`; the float64 softmax where a change overflows ``expm1``). The
directions leave out what adds exactly 0: positions where no sender's change is nonzero
(before the prompts' first differing token) and query rows whose every ``G`` is 0 (rows
without a gradient, such as the last layer's rows other than the answer's), so the fix's
cost depends on where a task's prompt pairs first differ.

``kv="ungrouped"`` scores MIB's graph (:class:`~interv.circuits.graph.Graph`): each query
head has its own copy of its key/value head's key and value inputs, and the gradient of an
edge into one is taken with respect to that copy (the model runs with per-query-head copies,
:mod:`interv.circuits._kv`); with the QK fix a key edge changes that query head's pattern
alone. Value, MLP and logits edges are
scored as without the fix. In the linear limit (small changes) the fix equals plain EAP.
The pattern is recomputed as the model computes it (:class:`QKLayer`, the layer's
:class:`~interv.engine.architecture.AttentionRecipe`): the hooked queries and keys through the
layer's per-head QK norm (Qwen3, Gemma-3) and the rotary embedding with the tables the
model passes to the block (Llama, SmolLM2, Mistral, Gemma; partial rotary), the layer's
scale and attention soft cap (Gemma-2), and the keys its rule admits (causal, padding,
sliding windows). Before scoring, every layer's recomputed base pattern is checked against
the model's own and refused (IntervError) where they differ; refused up front, from each
layer's recipe: patterns hooked only after the heads' outputs (GPT-Neo, GPT-J, OPT: the
metric has no gradient there), ALiBi and relative positions, off-row sinks,
position-dependent scales, a QK norm over all heads (OLMo-2), adjacent-pair rotations,
linear-attention layers; refused at the base run: bridges that do not pass rotary tables to
their blocks (native ones).

``gim=GIM(...)`` (:mod:`interv.engine.backward`; Edin et al. 2025): every gradient run
backpropagates GIM's way, the forward and the differences unchanged: norm statistics
frozen, the attention softmax's gradient taken at temperature ``T`` (default 2), the
gradients into q, k and v scaled (default 1/4, 1/4, 1/2). It estimates the same effect by a
deliberately modified gradient, so it is no Taylor term of anything; not with ``qk_fix``.

``hvp=True`` (:mod:`interv.circuits.second_order`; Zhang & Wang 2026): EAP's score plus the
second-order Taylor term ``1/2 delta^T H delta`` of the metric along each edge's patch (``H``
the Hessian with respect to the reader's input, everything downstream live), by a
Hessian-vector product per edge; ``hvp_steps=S`` their multi-step variant; each estimate's
reliability score ``|second-order| / |first-order|`` beside it. Per edge, not one backward for
all: an edge's correction costs more than its exact patch (``hvp_top`` corrects the top only).

These are first-order estimates (second-order with ``hvp``), never exact (the QK fix
included: it is exact only up to the attention pattern): they rank,
:func:`interv.circuits.discover` verifies.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv._pandas import require_pandas
from interv._schema import parse
from interv.circuits._stored import StoredScores
from interv.circuits.graph import Edge, Graph
from interv.circuits.patching import (
    Run,
    capture_run,
    check_task,
    clean_run_logits,
    copies_of,
    reader_weights,
    runs_of,
    sender_deltas,
    tokens_of,
)
from interv.circuits.second_order import edge_derivatives
from interv.engine.answer_metric import answer_gradients
from interv.engine.architecture import AttentionRecipe, architecture_of, recipe_of
from interv.engine.backward import GIM, check_gim, gradient_scale, modified_backward
from interv.engine.forward import AUTO, PATTERN, Prompts, forward
from interv.engine.norms import norm_form
from interv.engine.second_order import check_second_order, copies_per_forward, hvp_estimates
from interv.engine.second_order import reliability as reliability_score
from interv.engine.sites import Site
from interv.engine.targets import TargetMetric
from interv.engine.writes import Writes, plain_module
from interv.errors import IntervError
from interv.provenance import Provenance, run_fingerprint

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = ["METHODS", "EdgeScores", "edge_scores"]

METHODS: tuple[str, ...] = ("eap", "eap-ig")
"""Screens: edge attribution patching, and EAP with integrated gradients over inputs."""


def screen_settings(
    method: str,
    steps: int,
    qk_fix: bool,
    kv: str = "grouped",
    gim: GIM | None = None,
    hvp: int = 0,
    hvp_top: int | None = None,
) -> dict[str, Any]:
    """The settings a screen's provenance names: method, gradient runs, QK fix, the graph's
    key/value edges where they are not the default (``kv="ungrouped"``), the GIM
    backward's settings where one is used and the HVP correction's segments (and how many
    edges it corrected) where it is used."""
    return (
        {"method": method, "steps": steps, "qk_fix": qk_fix}
        | ({"kv": kv} if kv != "grouped" else {})
        | ({} if gim is None else {"gim": gim.settings()})
        | ({} if not hvp else {"hvp": hvp, "hvp_top": hvp_top})
    )


def check_hvp(hvp: Any, hvp_steps: Any, hvp_top: Any, method: str, qk_fix: bool, gim: Any) -> int:
    """The HVP correction's segments (0: off), after checking its settings."""
    if not isinstance(hvp, bool):
        raise IntervError(f"hvp must be True or False; got {hvp!r}")
    if isinstance(hvp_steps, bool) or not isinstance(hvp_steps, int) or hvp_steps < 1:
        raise IntervError(
            f"hvp_steps (the multi-step HVP's segments; 1 = the single HVP correction) must be "
            f"an int >= 1; got {hvp_steps!r}"
        )
    if hvp_top is not None and (
        isinstance(hvp_top, bool) or not isinstance(hvp_top, int) or hvp_top < 1
    ):
        raise IntervError(
            f"hvp_top (correct only the top edges by first-order |score|) must be a positive "
            f"int or None (every edge); got {hvp_top!r}"
        )
    if not hvp:
        if hvp_steps != 1 or hvp_top is not None:
            raise IntervError("hvp_steps and hvp_top apply with hvp=True only")
        return 0
    others = [
        name
        for name, on in (
            ("method='eap-ig'", method != "eap"),
            ("qk_fix=True", qk_fix),
            ("gim", gim not in (None, False)),
        )
        if on
    ]
    if others:
        raise IntervError(
            f"hvp=True corrects plain EAP's first-order estimate (method='eap'); it does not "
            f"combine with {', '.join(others)}"
        )
    return hvp_steps


def check_method(method: str, steps: Any, qk_fix: bool) -> int:
    """The number of gradient runs, after checking the screen's settings."""
    if method not in METHODS:
        raise IntervError(f"unknown method {method!r}; choose one of {METHODS}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise IntervError(
            f"steps (m, the integrated-gradient interpolation steps) must be an int >= 1; "
            f"got {steps!r}"
        )
    if not isinstance(qk_fix, bool):
        raise IntervError(f"qk_fix must be True or False; got {qk_fix!r}")
    return 1 if method == "eap" else steps


@dataclass(frozen=True, eq=False)
class EdgeScores:
    """Every edge's first-order estimate (an estimate, not an intervention result).

    Attributes:
        graph: the graph scored.
        scores: ``[n_edges]`` float64 prompt-mean estimated change of the metric, in its
            unit (sign convention: module docstring).
        per_prompt: ``[n_edges, n_prompts]`` float64 per-prompt estimates (or None).
        method: ``"eap"`` or ``"eap-ig"``.
        steps: gradient runs averaged (1 for EAP).
        metric: the metric's name.
        fingerprint: the run's fingerprint (:func:`~interv.provenance.run_fingerprint` of
            the provenance: model and weights, prompts, pairs, metric, direction, settings).
        sentence: what the numbers are, in one sentence.
        direction: ``"noise"`` or ``"denoise"``.
        qk_fix: whether AtP*'s QK fix scored the query/key edges.
        provenance: model (name, weights, dtype), prompts and pairs, metric, direction and
            the screen's settings (:class:`~interv.provenance.Provenance`).
        unit: the metric's unit.
        hvp: the HVP correction's segments (0: none; 1: Zhang & Wang's single HVP
            correction; ``S > 1``: their multi-step variant), :mod:`interv.circuits.second_order`.
        reliability: with ``hvp``, ``[n_edges]`` float64 Zhang & Wang's reliability score of
            each prompt-mean estimate, ``|second-order term| / |first-order term|`` at the
            unpatched run (NaN for edges the correction skipped, ``hvp_top``); else None.
    """

    graph: Graph
    scores: torch.Tensor
    per_prompt: torch.Tensor | None
    method: str
    steps: int
    metric: str
    fingerprint: str
    sentence: str
    provenance: Provenance
    unit: str
    direction: str = "noise"
    qk_fix: bool = False
    hvp: int = 0
    reliability: torch.Tensor | None = None

    def top(self, k: int) -> list[Edge]:
        """The ``k`` edges with the largest ``|score|`` (ties by canonical order)."""
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.graph.n_edges:
            raise IntervError(
                f"k must be an int in 1..{self.graph.n_edges} (the graph's edges); got {k!r}"
            )
        order = torch.sort(-self.scores.abs(), stable=True).indices[:k]
        return [self.graph.edges[i] for i in order.tolist()]

    def to_pandas(self) -> Any:
        """One row per edge: edge, sender, receiver, input, score, rank (by |score|)."""
        pd = require_pandas()
        order = torch.sort(-self.scores.abs(), stable=True).indices
        rank = torch.empty_like(order)
        rank[order] = torch.arange(1, order.numel() + 1)
        edges = self.graph.edges
        return pd.DataFrame(
            {
                "edge": [e.label for e in edges],
                "sender": [e.sender.label for e in edges],
                "receiver": [e.receiver.label for e in edges],
                "input": [e.input for e in edges],
                "score": self.scores.tolist(),
                "rank": rank.tolist(),
            }
        )

    def to_dict(self, *, per_prompt: bool = True) -> dict[str, Any]:
        """Plain JSON-ready data; :meth:`from_dict` inverts it.

        ``per_prompt=False`` leaves the per-prompt estimates out (``None``): on SmolLM2-135M
        they are ``70,651 x n_prompts`` numbers, most of a file's size.
        """
        keep = per_prompt and self.per_prompt is not None
        return {
            "format": "interv.edge_scores/1",
            "graph": graph_dict(self.graph),
            "scores": self.scores.tolist(),
            "per_prompt": self.per_prompt.tolist() if keep else None,
            "method": self.method,
            "steps": self.steps,
            "metric": self.metric,
            "fingerprint": self.fingerprint,
            "sentence": self.sentence,
            "direction": self.direction,
            "qk_fix": self.qk_fix,
            "provenance": self.provenance.to_dict(),
            "unit": self.unit,
            "hvp": self.hvp,
            "reliability": None
            if self.reliability is None
            else [float(r) if torch.isfinite(r) else None for r in self.reliability],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EdgeScores:
        """The scores :meth:`to_dict` wrote, read through their schema
        (:class:`~interv.circuits._stored.StoredScores`: a damaged field is named)."""
        stored = parse(StoredScores, data, "edge scores")
        per_prompt = stored.per_prompt
        return cls(
            graph=stored.graph,
            scores=torch.tensor(stored.scores, dtype=torch.float64),
            per_prompt=None
            if per_prompt is None
            else torch.tensor(per_prompt, dtype=torch.float64).reshape(stored.graph.n_edges, -1),
            method=stored.method,
            steps=stored.steps,
            metric=stored.metric,
            fingerprint=stored.fingerprint,
            sentence=stored.sentence,
            provenance=stored.provenance,
            unit=stored.unit,
            direction=stored.direction,
            qk_fix=stored.qk_fix,
            hvp=stored.hvp,
            reliability=None
            if stored.reliability is None
            else torch.tensor(
                [float("nan") if r is None else r for r in stored.reliability],
                dtype=torch.float64,
            ),
        )

    def __repr__(self) -> str:
        return (
            f"EdgeScores({self.method}, steps={self.steps}, {self.graph.n_edges} edges of "
            f"{self.graph.model_name}, metric {self.metric}, estimates)"
        )


def graph_dict(graph: Graph) -> dict[str, Any]:
    """A graph's shape as plain data."""
    return {
        "n_layers": graph.n_layers,
        "n_heads": graph.n_heads,
        "n_kv_heads": graph.n_kv_heads,
        "has_mlp": graph.has_mlp,
        "model_name": graph.model_name,
        "parallel": graph.parallel,
        "kv": graph.kv,
    }


def _reader_gradients(
    model: Any,
    graph: Graph,
    task: TokenizedPairs,
    run: str,
    metric: TargetMetric,
    clean_logits: torch.Tensor,
    embed: torch.Tensor | None = None,
    pattern_grads: dict[int, torch.Tensor] | None = None,
    gim: GIM | None = None,
    inputs: str = "qkv",
) -> Iterator[torch.Tensor]:
    """One forward and backward of ``run`` (block 0's input replaced by ``embed`` if given),
    then, one at a time (so that only one is held), per receiver layer
    ``[n, pos, readers, d_model]`` gradients of each prompt's metric with respect to each
    reader's own pre-norm input (readers in graph order: query heads, key
    heads, value heads, then the MLP: the residual it reads, through its whole write,
    :mod:`interv.engine.writes`), and last the logits' ``[n, pos, 1, d_model]``.
    With ``pattern_grads`` (a dict) the gradients with respect to each layer's attention
    probabilities ``[n, n_heads, query_pos, key_pos]`` (float64) are stored in it under
    the layer, by the first step of the iteration. With ``gim`` the backward is GIM's
    (:mod:`interv.engine.backward`), the pull-backs through the norms included. ``inputs``:
    the heads' inputs whose readers are yielded (``"v"``: the value readers only, for the QK
    fix, which scores the query and key edges from the pattern)."""
    layers = range(graph.n_layers)
    components = list(inputs) + (["mlp_out"] if graph.has_mlp else [])
    writes = Writes.of(model)

    def replace(activation: torch.Tensor, hook: Any) -> torch.Tensor:
        return embed.to(activation)

    hooks: list[tuple[Site, Any]] = []
    if embed is not None:
        hooks.append((Site("resid_pre", 0), replace))
    hooks += [] if gim is None else gim.hooks(graph.n_layers)
    looked = [Site("resid_pre", layer) for layer in layers]
    if graph.has_mlp and writes.mlp_reads != "resid_pre":
        looked += [Site(writes.mlp_reads, layer) for layer in layers]
    sites = [Site(c, layer) for layer in layers for c in components]
    if pattern_grads is not None:
        sites += [Site("pattern", layer) for layer in layers]
    sites.append(Site("final_resid"))
    # ungrouped: the gradients at k and v are each query head's own copy's (made first)
    with modified_backward(model, gim), copies_of(model, graph) as kv_hooks:
        out = answer_gradients(
            model,
            task,
            run,
            sites,
            metric,
            clean_logits,
            hooks=[*kv_hooks, *hooks],
            capture=looked,
            attention=PATTERN if graph.ungrouped else AUTO,
        )
    seen, grads = out.captured, dict(out.gradients)
    if pattern_grads is not None:
        for layer in layers:
            pattern_grads[layer] = grads.pop(Site("pattern", layer)).double()
    with torch.enable_grad(), modified_backward(model, gim):
        for layer in layers:
            x = seen[Site("resid_pre", layer)]
            weights = torch.cat([reader_weights(model, graph, layer, c) for c in inputs]).to(x)
            cotangent = torch.cat(
                [grads[Site(c, layer)] * gradient_scale(gim, c) for c in inputs], dim=2
            )
            readers = weights.shape[0]
            x_rep = x.unsqueeze(2).expand(-1, -1, readers, -1).clone().requires_grad_(True)
            normed = writes.attention_input(layer, x_rep)
            projected = torch.einsum("bprd,rdk->bprk", normed, weights)
            (attn,) = torch.autograd.grad(projected, [x_rep], grad_outputs=cotangent.to(projected))
            parts = [attn]
            if graph.has_mlp:
                x_mid = seen[Site(writes.mlp_reads, layer)].clone().requires_grad_(True)
                mlp_out = writes.mlp_write(layer, x_mid)  # the MLP's whole write
                (mlp,) = torch.autograd.grad(
                    mlp_out, [x_mid], grad_outputs=grads[Site("mlp_out", layer)].to(mlp_out)
                )
                parts.append(mlp.unsqueeze(2))
            yield torch.cat(parts, dim=2).detach()
        yield grads[Site("final_resid")].detach().unsqueeze(2)


@dataclass(frozen=True, eq=False)
class QKLayer:
    """How one layer's attention pattern follows from its hooked queries and keys in one run
    (internal): the layer's :class:`~interv.engine.architecture.AttentionRecipe` (QK norm,
    rotary convention, scale, soft cap), the keys it admits and the run's rotary tables.

    Attributes:
        recipe: the layer's recipe.
        allowed: ``[n, 1, query_pos, key_pos]`` bool: the keys the layer admits.
        rotary: ``(cos, sin)`` ``[n or 1, pos, rotary_dim]`` float64 as the model passes them
            to the layer, or None without a rotary embedding.
    """

    recipe: AttentionRecipe
    allowed: torch.Tensor
    rotary: tuple[torch.Tensor, torch.Tensor] | None = None

    def queries(self, q: torch.Tensor) -> torch.Tensor:
        """Hooked queries ``[..., pos, heads, d_head]`` as the logits read them."""
        return self.recipe.prepare(q, "q", self.rotary)

    def keys(self, k: torch.Tensor) -> torch.Tensor:
        """Hooked keys ``[..., pos, kv_heads, d_head]`` as the logits read them."""
        return self.recipe.prepare(k, "k", self.rotary)

    def products(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """The scaled products ``scale * q . k`` ``[..., heads, query_pos, key_pos]`` of
        prepared ``q [..., qpos, heads, d]`` and ``k [..., kpos, heads, d]``."""
        return self.recipe.products(q.transpose(-2, -3), k.transpose(-2, -3))

    def pattern(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Softmax attention ``[..., heads, query_pos, key_pos]`` from prepared ``q [...,
        qpos, heads, d]`` and ``k [..., kpos, heads, d]`` (excluded keys 0, empty rows 0)."""
        extra = q.ndim - 4  # axes between the prompt and the positions
        allowed = self.allowed.view(self.allowed.shape[0], *([1] * extra), *self.allowed.shape[1:])
        logits = self.recipe.logits(q.transpose(-2, -3), k.transpose(-2, -3), allowed)
        return self.recipe.rows(logits)


@dataclass(frozen=True, eq=False)
class QKBase:
    """The base run's queries and keys, as the QK fix reads them (internal).

    Attributes:
        q: per layer ``[n, pos, n_heads, d_head]`` float64 hooked queries (before any QK
            norm and rotary embedding).
        k: per layer ``[n, pos, n_key_value_heads, d_head]`` float64 hooked keys.
        pattern: per layer ``[n, n_heads, query_pos, key_pos]`` float64, recomputed.
        layers: per layer, how its pattern follows from ``q`` and ``k``.
    """

    q: list[torch.Tensor]
    k: list[torch.Tensor]
    pattern: list[torch.Tensor]
    layers: list[QKLayer]


def check_qk_fix(model: Any) -> None:
    """Refuse, before any work, the QK fix for models whose attention logits it cannot
    recompute from the hooked queries and keys, or whose pattern the metric does not depend on
    through the pattern hook (one line naming the reason, from the layer's recipe)."""
    arch = architecture_of(model)
    hint = "use qk_fix=False (plain EAP/EAP-IG), or verify the query/key edges with discover()"
    arch.require("attention_rows", hint=hint)
    for layer in range(arch.n_layers):
        reason = recipe_of(model, layer).qk_fix_refusal()
        if reason is not None:
            arch.refuse(
                f"qk_fix=True recomputes each attention pattern from the hooked queries and keys "
                f"and scores it through the pattern's gradient, and {reason}",
                hint=hint,
            )


def qk_sites(graph: Graph) -> list[Site]:
    """The sites :func:`qk_base` reads from a run: every layer's queries, keys and pattern."""
    return [Site(c, layer) for layer in range(graph.n_layers) for c in ("q", "k", "pattern")]


def qk_base(
    model: Any, graph: Graph, task: TokenizedPairs, run: str, captured: Run | None = None
) -> QKBase:
    """Queries, keys and the recomputed patterns of ``run``, each layer checked against the
    model's own pattern (refused where they differ): read from ``captured`` (a
    :func:`~interv.circuits.patching.capture_run` of ``run`` with :func:`qk_sites` and its
    prefix recorded), or from a forward of their own."""
    check_qk_fix(model)
    arch = architecture_of(model)
    layers = range(graph.n_layers)
    sites = qk_sites(graph)
    if captured is not None and captured.prefix is not None and set(sites) <= set(captured.extra):
        got, prefix = captured.extra, captured.prefix
    else:
        out = forward(
            model,
            Prompts.of(tokens_of(task, run), task.attention_mask),
            capture=sites,
            readout=None,
            record_prefix=True,
        )
        got, prefix = out.captured, out.prefix
    mask = task.attention_mask.to(got[sites[0]].device).bool()
    qs, ks, patterns, profiles = [], [], [], []
    rows = mask[:, None, :, None]
    for layer in layers:
        recipe = recipe_of(model, layer)
        rotary = None
        if recipe.rotation is not None:
            tables = None if prefix is None else prefix.kwargs[layer].get("position_embeddings")
            if not isinstance(tables, tuple | list) or len(tables) != 2:
                arch.refuse(
                    f"qk_fix=True: block {layer} is rotary but receives no rotary tables "
                    "(position_embeddings) interv can read",
                    hint="use qk_fix=False",
                )
            rotary = (tables[0].double(), tables[1].double())
        profile = QKLayer(recipe, recipe.admitted(mask).unsqueeze(1), rotary)
        q = got[Site("q", layer)].double()
        k = got[Site("k", layer)].double()
        pattern = profile.pattern(profile.queries(q), _groups(profile.keys(k), graph.n_heads))
        model_pattern = got[Site("pattern", layer)].double()
        gap = ((pattern - model_pattern) * rows).abs().max().item()
        tolerance = (
            1e-4 if got[Site("pattern", layer)].dtype in (torch.float32, torch.float64) else 2e-2
        )
        if not gap <= tolerance:
            raise IntervError(
                f"qk_fix=True: the attention pattern of layer {layer} recomputed from its hooked "
                f"queries and keys ({recipe.describe()}) differs from the model's by {gap:.3g} "
                f"(tolerance {tolerance:g}), so this model computes its attention logits some "
                "other way; use qk_fix=False"
            )
        qs.append(q)
        ks.append(k)
        patterns.append(pattern)
        profiles.append(profile)
    return QKBase(q=qs, k=ks, pattern=patterns, layers=profiles)


def _groups(heads: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Key/value heads ``[..., kv, d]`` repeated to the query heads ``[..., n_heads, d]``."""
    return heads.repeat_interleave(n_heads // heads.shape[-2], dim=-2)


EDGE_BATCH_BYTES = 128 << 20
"""The sender outputs (``[prompts, positions, senders, d_model]`` float32) one gradient run of
:func:`edge_scores` holds by default (its ``batch_size=None``): 10 IOI prompts of SmolLM2-135M,
16 prompts of 16 tokens on GPT-2 small (about 1.8 GB of working memory there). Batching
prompts is several times faster than one prompt per run (SmolLM2 IOI, 8 pairs: 2.4 s at 8 per
run against 6.9 s at 1)."""

QK_CHUNK_BYTES = 128 << 20
"""About the working memory of one chunk of senders where the QK fix calls the norm module
for each sender (their block inputs and changed patterns). Where the norm is taken apart
every sender of a batch is multiplied at once (memory grows with the batch's senders times
its positions; :data:`EDGE_BATCH_BYTES` bounds the batch)."""

QK_DIRECTIONS_BYTES = 256 << 20
"""The most memory one layer's query (key) directions may take (:func:`_qk_directions`);
beyond it that layer's queries (keys) are recomputed sender by sender."""


@dataclass(frozen=True, eq=False)
class _NormChange:
    """A block's first norm, identified as one of the two forms the QK fix can take apart
    (internal): ``gain * (x - mean) * r`` (LayerNorm, ``centered``, plus a bias) or ``gain * x
    * r`` (RMSNorm; Gemma's ``gain = 1 + weight``), ``r = (mean of the squares + eps) ** -0.5``.
    Then the change of the normed input a sender's ``delta`` makes is::

        norm(x + delta) - norm(x) = r' * gain * delta~ + (r' - r) * gain * x~

    (``~``: centered under LayerNorm), so a direction ``U`` dotted with it is ``r' * (U *
    gain) . delta~ + (r' - r) * (U * gain) . x~``: the directions take the gain (and the
    centering) once, the senders' ``delta`` is multiplied without the norm, and ``r' - r``
    comes from two sums per sender, computed without cancellation. Identified numerically
    (:func:`interv.engine.norms.norm_form`, on the run's input): where neither form
    reproduces the module's own output, the module is called for every sender as before.

    Attributes:
        gain: ``[d_model]`` float64.
        centered: LayerNorm (True) or RMSNorm (False).
        x: ``[n, pos, d_model]`` the block's input (centered under LayerNorm), float32.
        scale: ``[n, pos]`` float64: ``r`` at ``x``.
        base: ``[n, pos]`` float64: the mean of the squares of ``x`` plus ``eps``.
    """

    gain: torch.Tensor
    centered: bool
    x: torch.Tensor
    scale: torch.Tensor
    base: torch.Tensor

    @classmethod
    def of(cls, module: Any, x: torch.Tensor) -> _NormChange | None:
        """The form of ``module`` (a plain torch module) at the block input ``x`` ``[n, pos,
        d_model]`` (:func:`interv.engine.norms.norm_form`, identified on ``x``), or None
        where neither form reproduces the module's output."""
        form = norm_form(module, x)
        if form is None:
            return None
        x64 = x.double()
        if form.centered:
            x64 = x64 - x64.mean(-1, keepdim=True)
        base = x64.square().mean(-1) + form.eps
        return cls(form.gain(module), form.centered, x64.float(), base.rsqrt(), base)

    def fold(self, weight: torch.Tensor) -> torch.Tensor:
        """A projection ``[..., d_model, d_head]`` with the gain folded in (and, under
        LayerNorm, centered over ``d_model``), so its product with ``delta`` is the product of
        the original with ``gain * delta~``."""
        folded = weight * self.gain.to(weight).unsqueeze(-1)
        if self.centered:
            folded = folded - folded.mean(-2, keepdim=True)
        return folded

    def square(self, senders: _Senders) -> torch.Tensor:
        """Each change's squared norm ``[pos, n, senders]`` float64 (of the centered change
        under LayerNorm)."""
        if not self.centered:
            return senders.square
        return senders.square - senders.total.square() / self.x.shape[-1]

    def scales(
        self, cross: torch.Tensor, square: torch.Tensor, moving: slice | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``r'`` and ``r' - r`` ``[pos, n, senders]`` (``cross``'s dtype) of each sender's
        change at the positions ``moving`` (None: all), from its dot ``cross [pos, n,
        senders]`` with ``x`` and its squared norm ``square`` (:meth:`square`), without
        cancellation."""
        moving = slice(None) if moving is None else moving
        base = self.base.T[moving].unsqueeze(-1)  # [pos, n, 1]
        scale = self.scale.T[moving].unsqueeze(-1)
        grown = (2 * cross.double() + square) / (self.x.shape[-1] * base)
        ratio = torch.expm1(-0.5 * torch.log1p(grown))  # r' / r - 1
        return (scale * (1 + ratio)).to(cross.dtype), (scale * ratio).to(cross.dtype)


QK_POSITION_BLOCKS = 8
"""Into how many blocks of moving positions :func:`_qk_directions` splits a layer, each with
the span of partners its positions admit (under a causal mask, 8 blocks multiply 9/16 of the
full ``pos x pos`` square instead of all of it)."""


def _qk_directions(
    profile: QKLayer,
    component: str,
    partner: torch.Tensor,
    weight: torch.Tensor,
    dtype: torch.dtype = torch.float64,
    live: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> list[tuple[slice, slice, torch.Tensor]]:
    """How a change ``c [d_model]`` of the block's normed input at a moving position ``p`` (a
    query for ``component="q"``, a key for ``"k"``) changes the scaled products ``scale * q
    . k`` of each query head ``h`` with each partner position ``j`` (a key of query ``p``, or
    a query of key ``p``), per block of moving positions: ``(moving, partners, U)``
    with ``U [block, n, heads, span, d_model]``, the change ``U[i, :, h, j] @ c`` for the
    block's ``i``-th position and the span's ``j``-th partner; zero where no prompt admits
    the pair. Exact wherever the moving side is prepared linearly (no QK norm: ``R_p``, the
    rotation at ``p``, or the identity)::

        scale * (R_p W_h^T c) . partner_h = c . (scale * W_h R_p^T partner_h)

    ``R_p`` is read from the recipe's own :meth:`~AttentionRecipe.prepare` of a basis. The
    blocks (:data:`QK_POSITION_BLOCKS`) are contiguous; each keeps the partners from the
    first to the last any of its positions admits (a prefix of the keys under a causal mask),
    so a chunk of senders moves a block with one batched product.

    Args:
        profile: the layer.
        component: ``"q"`` or ``"k"``.
        partner: ``[n, pos, heads, d_head]`` float64, prepared: the keys repeated to the
            query heads (``"q"``) or the queries (``"k"``).
        weight: ``[heads, d_model, d_head]`` float64: each query head's projection of the
            moving side (its key/value head's for ``"k"``).
        dtype: the directions' dtype (the rotation back and the projection).
        live: ``(moving, rows)`` ``[pos]`` bool, or None (every position): the positions
            where some change is not 0 and the query rows whose every reading weight is not
            0; a pair whose moving position or query row is not live is left out (zero
            directions: its terms are exactly 0 either way), and the blocks divide the span
            from the first to the last live moving position.
    """
    n, n_pos, heads, d_head = partner.shape
    eye = torch.eye(d_head, dtype=torch.float64, device=partner.device)
    basis = eye.view(1, d_head, 1, 1, d_head).expand(1, d_head, n_pos, 1, d_head)
    rotation = profile.recipe.prepare(basis, component, profile.rotary)[:, :, :, 0].to(dtype)
    allowed = profile.allowed[:, 0]  # [n, query, key]
    pairs = (allowed if component == "q" else allowed.transpose(-1, -2)).any(0)  # [p, j]
    start, stop = 0, n_pos
    if live is not None:
        moving_live, rows_live = live
        rows = rows_live.view(-1, 1) if component == "q" else rows_live.view(1, -1)
        pairs = pairs & moving_live.view(-1, 1) & rows
        at = moving_live.nonzero().squeeze(-1)
        if at.numel() == 0:
            return []
        start, stop = int(at[0]), int(at[-1]) + 1
    partner = partner.to(dtype) * profile.recipe.scale
    weight = weight.transpose(1, 2).to(dtype)  # [heads, d_head, d_model]
    size = -(-(stop - start) // QK_POSITION_BLOCKS)
    plan: list[tuple[slice, slice, torch.Tensor]] = []
    # R_p per position, or per prompt and position where the tables are the prompts' own
    shared = rotation.shape[0] == 1
    for first in range(start, stop, size):
        moving = slice(first, min(first + size, stop))
        at = pairs[moving].any(0).nonzero().squeeze(-1)
        if at.numel() == 0:
            continue
        span = slice(int(at[0]), int(at[-1]) + 1)
        block, width = moving.stop - moving.start, span.stop - span.start
        # the block's partners turned back by R_p: [heads, p, n, partner, a], 0 off the mask
        if shared:
            turned = torch.einsum("apc,bjhc->hpbja", rotation[0, :, moving], partner[:, span])
        else:
            turned = torch.einsum("bapc,bjhc->hpbja", rotation[:, :, moving], partner[:, span])
        turned = turned * pairs[moving, span].view(1, block, 1, width, 1)
        u = torch.matmul(turned.reshape(heads, -1, d_head), weight)  # [heads, p*n*j, d_model]
        u = u.view(heads, block, n, width, -1).permute(1, 2, 0, 3, 4)  # a view, laid out later
        plan.append((moving, span, u))
    return plan


def qk_fixed_scores(
    model: Any,
    graph: Graph,
    base: QKBase,
    x: torch.Tensor,
    layer: int,
    component: str,
    delta: torch.Tensor,
    g_pattern: torch.Tensor,
) -> torch.Tensor:
    """AtP*'s QK-fix scores ``[n, readers, senders]`` (float64) of the edges of ``delta``'s
    senders into layer ``layer``'s query (``component="q"``, readers: query heads) or key
    (``"k"``, readers: key/value heads; query heads' own copies in an ungrouped graph)
    inputs.

    Each sender's change ``delta [n, pos, senders, d_model]`` is added to the block input
    ``x`` at every position, the receiver's query (key) recomputed exactly through the norm
    and projection, the pattern by the exact softmax, and the change of the pattern dotted
    with ``g_pattern [n, n_heads, qpos, kpos]`` (summed over a key/value head's group)."""
    return _qk_layer_scores(model, graph, base, x, layer, (component,), delta, g_pattern)[component]


def _qk_layer_scores(
    model: Any,
    graph: Graph,
    base: QKBase,
    x: torch.Tensor,
    layer: int,
    components: tuple[str, ...],
    delta: torch.Tensor | _Senders,
    g_pattern: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """:func:`qk_fixed_scores` of one layer's ``components``, each sender's change of the
    block's normed input computed once for all of them.

    Two exact ways to the change ``D`` of the scaled products ``scale * q . k``, chosen per
    component: where the moving side has no QK norm, the directions fit
    :data:`QK_DIRECTIONS_BYTES` and they take fewer multiplications (short prompts: on
    average fewer admitted partners than ``d_head``), the normed change dotted with
    precomputed directions in float32 (:func:`_qk_directions`: no per-sender projection,
    rotation or ``q . k``); otherwise the receiver's queries (keys) projected in float64,
    prepared and multiplied again for every sender. The score then follows from ``D`` without
    a second softmax (:class:`_PatternReading`; on the directions' way read per block,
    :func:`_block_terms`). ``delta``: the senders' changes ``[n, pos, senders, d_model]``, or
    already laid out (:class:`_Senders`, once per batch for every layer)."""
    # the change's dot with the directions, and what follows it, in the block's float width
    # (at least float32)
    contract = torch.promote_types(x.dtype, torch.float32)
    senders = delta if isinstance(delta, _Senders) else _Senders.of(delta.to(x.dtype), contract)
    n_pos, n, n_senders = senders.square.shape
    d_model = x.shape[-1]
    heads = graph.n_heads
    q, k, pattern = base.q[layer], base.k[layer], base.pattern[layer]
    profile = base.layers[layer]
    recipe = profile.recipe
    d_head = q.shape[-1]
    queries = profile.queries(q)  # [n, pos, heads, d], prepared once
    keys = _groups(profile.keys(k), heads)
    products = profile.products(queries, keys)  # [n, heads, query, key]
    reading = _PatternReading.of(recipe, products, pattern, g_pattern, profile.allowed)
    # left out of the directions: positions no sender changes (before the prompts' first
    # difference) and query rows without a reading weight (no gradient: the last layer's
    # rows but the answer's); their terms are exactly 0
    live = (
        (senders.square > 0).flatten(1).any(1),
        (reading.weights[..., 0] != 0).any(-1).flatten(0, 1).any(0),
    )
    module = plain_module(model.blocks[layer].ln1)  # the model's own norm, without the hooks
    folding = _NormChange.of(module, x)
    plans: dict[str, tuple[torch.Tensor, Any]] = {}
    for component in components:
        weight = reader_weights(model, graph, layer, component).double().to(q.device)
        readers = weight.shape[0]
        linear = (recipe.q_norm if component == "q" else recipe.k_norm) is None
        # multiplications per sender and prompt: the change dotted with every direction
        # (float32), against its projection per position and the products q . k again
        # (float64, about twice the time per multiplication)
        fast_work = d_model * heads * n_pos**2
        slow_work = 2 * (n_pos * d_model * readers * d_head + heads * n_pos**2 * d_head)
        cheaper = fast_work < slow_work
        # the directions of every (position, partner) pair and their float64 making
        small = n * heads * n_pos**2 * (d_model * 8 + d_head * 16) <= QK_DIRECTIONS_BYTES
        directions = None
        if linear and cheaper and small:
            per_head = weight[torch.arange(heads, device=weight.device) // (heads // readers)]
            if folding is not None:
                per_head = folding.fold(per_head)
            partner = keys if component == "q" else queries
            directions = _qk_directions(profile, component, partner, per_head, contract, live)
        plans[component] = (weight, directions)
    out = {
        c: torch.zeros(n, plans[c][0].shape[0], n_senders, dtype=torch.float64, device=q.device)
        for c in components
    }

    def write(component: str, terms: torch.Tensor, first: int) -> None:
        if component == "k" and not graph.ungrouped:  # a key/value head's group summed
            terms = terms.view(n, plans["k"][0].shape[0], -1, terms.shape[-1]).sum(2)
        out[component][:, :, first : first + terms.shape[-1]] = terms

    fast = {c: plan[1] for c, plan in plans.items() if plan[1] is not None}
    slow = [c for c in components if plans[c][1] is None]
    with torch.no_grad():
        if fast and folding is not None:  # every sender at once, no normed input formed
            blocks = _joint_blocks(fast, reading, folding.x.to(contract))
            senders.rows[:, :, 0] = folding.x.transpose(0, 1)  # the free row: x~
            norm = (folding, folding.square(senders))
            for component, terms in _block_terms(blocks, reading, senders.rows, norm).items():
                if not bool(torch.isfinite(terms).all()):  # too large for expm1
                    moved = _block_changes(blocks, component, senders.rows, norm, heads)
                    terms = reading.softmax_terms(moved)
                write(component, terms, 0)
            fast = {}
        if not fast and not slow:
            return out
        blocks = _joint_blocks(fast, reading, None) if fast else []
        per_sender = n * n_pos * d_model * 12 + n * heads * n_pos * n_pos * 4 * 4
        if slow:
            per_sender += n * n_pos * heads * d_head * 8 * 4 + n * heads * n_pos * n_pos * 8 * 2
        chunk = max(1, min(n_senders, QK_CHUNK_BYTES // max(per_sender, 1)))
        normed = module(x).unsqueeze(2)
        for first in range(0, n_senders, chunk):
            part = senders.rows[:, :, 1 + first : 1 + first + chunk].transpose(0, 1).to(x)
            change = module(x.unsqueeze(2) + part) - normed  # [n, pos, c, d_model]
            if blocks:  # the normed change laid out position-major
                rows = change.transpose(0, 1).to(contract).contiguous()
                for component, terms in _block_terms(blocks, reading, rows, None).items():
                    if not bool(torch.isfinite(terms).all()):  # too large for expm1
                        moved = _block_changes(blocks, component, rows, None, heads)
                        terms = reading.softmax_terms(moved)
                    write(component, terms, first)
            for component in slow:
                weight = plans[component][0]
                moved = _qk_recomputed(
                    profile, graph, q, k, queries, change.double(), weight, component
                )  # [n, senders, heads, query, key]
                moved = (moved - products.unsqueeze(1)).permute(0, 2, 3, 1, 4)
                moved = moved.masked_fill_(~reading.admitted, 0.0)  # float64
                terms = reading.terms(moved)  # [n, heads, senders]
                if not bool(torch.isfinite(terms).all()):  # a change too large for expm1
                    terms = reading.softmax_terms(moved)
                write(component, terms, first)
    return out


@dataclass(frozen=True, eq=False)
class _Senders:
    """The senders' changes as the QK fix's blocks read them (internal): position-major, so
    that a block of positions is a view, and behind one free row per position and prompt
    (:func:`_qk_layer_scores` writes its layer's norm input there: one product per block
    then also gives the directions' product with it and its product with every change).

    Attributes:
        rows: ``[pos, n, 1 + senders, d_model]``: row 0 free, then each sender's change.
        square: ``[pos, n, senders]`` float64: each change's squared norm.
        total: ``[pos, n, senders]`` float64: each change summed over ``d_model``.
    """

    rows: torch.Tensor
    square: torch.Tensor
    total: torch.Tensor

    @classmethod
    def of(cls, delta: torch.Tensor, dtype: torch.dtype) -> _Senders:
        """The layout of ``delta [n, pos, senders, d_model]`` in ``dtype``."""
        n, n_pos, count, d_model = delta.shape
        rows = torch.empty(n_pos, n, count + 1, d_model, dtype=dtype, device=delta.device)
        rows[:, :, 0] = 0.0
        changes = rows[:, :, 1:]
        changes.copy_(delta.transpose(0, 1))
        square = torch.linalg.vector_norm(changes, dim=-1).double().square()
        return cls(rows, square, changes.sum(-1).double())

    def changes(self) -> torch.Tensor:
        """The changes ``[n, pos, senders, d_model]`` as laid out before (a view)."""
        return self.rows[:, :, 1:].transpose(0, 1)

    def first(self, count: int) -> _Senders:
        """The first ``count`` senders (views)."""
        return _Senders(
            self.rows[:, :, : count + 1], self.square[..., :count], self.total[..., :count]
        )


@dataclass(frozen=True, eq=False)
class _BlockPart:
    """One component's share of a block's product (internal).

    Attributes:
        component: ``"q"`` (the block's positions are queries, the span's keys) or ``"k"``
            (the block's positions are keys, the span's queries).
        span: the partner positions.
        columns: the product's columns ``(head, partner)`` that are this component's.
        weights: how :func:`_block_terms` reads them (:class:`_PatternReading`'s ``G`` and
            pattern at the columns): ``"q"``: ``[block * n, heads * span, heads * 2]``, block
            diagonal (one product sums each row over its keys); ``"k"``: ``[block, n, heads *
            span, 2]`` (each query's row summed over the blocks' keys).
    """

    component: str
    span: slice
    columns: slice
    weights: torch.Tensor


@dataclass(frozen=True, eq=False)
class _Block:
    """One block of moving positions of a layer, its query and key directions side by side
    (internal): one product per block (and chunk of senders).

    Attributes:
        moving: the block's positions.
        u: ``[block * n, columns (+ 1), d_model]`` the directions, position-major rows; where
            the norm is taken apart, its input ``x~`` as one more (last) direction.
        products: ``[block * n, 1, columns]`` float64: the base run's scaled products at the
            columns, under a soft cap only (None without one).
        parts: each component's columns.
        columns: how many directions the components have (``x~``'s column follows them).
    """

    moving: slice
    u: torch.Tensor
    products: torch.Tensor | None
    parts: tuple[_BlockPart, ...]
    columns: int


def _joint_blocks(
    directions: Mapping[str, list[Any]], reading: _PatternReading, x: torch.Tensor | None
) -> list[_Block]:
    """The :class:`_Block` of each block of moving positions of the components'
    :func:`_qk_directions` (the same blocks for both, a block absent where the component
    admits no partner), with the reading's weights laid out for them and, with ``x [n, pos,
    d_model]`` (the norm's centered input), ``x`` as the last direction."""
    by_block: dict[tuple[int, int], list[tuple[str, slice, torch.Tensor]]] = {}
    for component, plan in directions.items():
        for moving, span, u in plan:
            by_block.setdefault((moving.start, moving.stop), []).append((component, span, u))
    blocks = []
    capped = reading.recipe.softcap is not None
    for (start, stop), members in by_block.items():
        moving, size = slice(start, stop), stop - start
        first = members[0][2]  # [block, n, heads, span, d_model]
        n, heads, d_model = first.shape[1], first.shape[2], first.shape[4]
        dtype = first.dtype
        total = sum(heads * (span.stop - span.start) for _, span, _ in members)
        u = first.new_empty(size, n, total + (x is not None), d_model)
        parts, bases, column = [], [], 0
        for component, span, member in members:
            width = span.stop - span.start
            columns = slice(column, column + heads * width)
            column = columns.stop
            u[:, :, columns].unflatten(2, (heads, width)).copy_(member)
            if component == "q":  # [block, n, heads, keys]
                base = reading.products[:, :, moving, span].permute(2, 0, 1, 3)
                weights = reading.weights[:, :, moving, span].permute(2, 0, 1, 3, 4).to(dtype)
                diagonal = weights.new_zeros(size, n, heads, width, heads, 2)
                diagonal.diagonal(dim1=2, dim2=4).copy_(weights.permute(0, 1, 3, 4, 2))
                weights = diagonal.view(size * n, heads * width, heads * 2)
            else:  # [block, n, heads, queries]
                base = reading.products[:, :, span, moving].permute(3, 0, 1, 2)
                weights = reading.weights[:, :, span, moving].permute(3, 0, 1, 2, 4)
                weights = weights.reshape(size, n, heads * width, 2).to(dtype)
            bases.append(base.reshape(size * n, 1, heads * width))
            parts.append(_BlockPart(component, span, columns, weights))
        if x is not None:
            u[:, :, total] = x[:, moving].transpose(0, 1)
        products = torch.cat(bases, dim=2) if capped else None
        u = u.view(size * n, -1, d_model)
        blocks.append(_Block(moving, u, products, tuple(parts), total))
    return blocks


def _block_step(
    block: _Block,
    rows: torch.Tensor,
    norm: tuple[_NormChange, torch.Tensor] | None,
) -> torch.Tensor:
    """The changes ``D [block * n, senders, columns]`` of a block's scaled products.

    Args:
        block: the block.
        rows: ``[pos, n, rows, d_model]`` position-major: with ``norm``, the norm's input
            ``x~`` then the senders' changes (:class:`_Senders`), else the normed changes.
        norm: the norm taken apart and each change's squared norm ``[pos, n, senders]``
            (:meth:`_NormChange.square`), or None.
    """
    size = block.moving.stop - block.moving.start
    _, n, count, d_model = rows.shape
    step = torch.bmm(rows[block.moving].reshape(size * n, count, d_model), block.u.mT)
    if norm is None:
        return step
    # row 0: x~ . U; the last column: x~ . delta; r' U.delta~ + (r' - r) U.x~ (_NormChange)
    folding, square = norm
    columns = block.columns
    cross = step[:, 1:, columns].view(size, n, count - 1)
    scales = folding.scales(cross, square[block.moving], block.moving)
    moved_scale, grown_scale = (s.reshape(size * n, count - 1, 1) for s in scales)
    changes, at_x = step[:, 1:, :columns], step[:, :1, :columns]
    return changes.mul_(moved_scale).addcmul_(grown_scale, at_x)


def _block_terms(
    blocks: list[_Block],
    reading: _PatternReading,
    rows: torch.Tensor,
    norm: tuple[_NormChange, torch.Tensor] | None,
) -> dict[str, torch.Tensor]:
    """:meth:`_PatternReading.terms` ``[n, heads, senders]`` (float64) of each component of
    ``blocks`` (``rows`` and ``norm`` as :func:`_block_step` reads them), read from each
    block's product where it is made (``expm1`` of the admitted spans only, no ``[query,
    key]`` square laid out): a query block's rows are whole (its keys are its columns); a
    key block adds each query row's sums over its keys, the rows read after the last block.
    Inf or nan where a change is too large for ``expm1``."""
    n_pos, n = rows.shape[:2]
    width = rows.shape[2] - (norm is not None)
    heads = reading.pattern.shape[1]
    dtype = rows.dtype
    total = reading.total[..., 0].to(dtype)  # [n, heads, query]
    components = {part.component for block in blocks for part in block.parts}
    terms_q = rows.new_zeros(n, width, heads) if "q" in components else None
    sums_k = rows.new_zeros(n, width, heads, n_pos, 2) if "k" in components else None
    for block in blocks:
        size = block.moving.stop - block.moving.start
        step = _block_step(block, rows, norm)
        if block.products is not None:
            step = reading.recipe.change_of_logits(block.products, step)
        e = step.expm1_()
        for part in block.parts:
            piece = e[:, :, part.columns]
            if part.component == "q":
                sums = torch.bmm(piece, part.weights).view(size, n, width, heads, 2)
                row_total = total[:, :, block.moving].permute(2, 0, 1).unsqueeze(2)
                rows_q = (sums[..., 0] - sums[..., 1] * row_total) / (1 + sums[..., 1])
                terms_q += rows_q.sum(0)
            else:
                span = part.span
                sums = torch.einsum("pncx,pnxt->ncxt", piece.view(size, n, width, -1), part.weights)
                sums_k[:, :, :, span] += sums.view(n, width, heads, span.stop - span.start, 2)
    out = {}
    if terms_q is not None:
        out["q"] = terms_q.permute(0, 2, 1).double()
    if sums_k is not None:
        row_total = total.unsqueeze(1)  # [n, 1, heads, query]
        rows_k = (sums_k[..., 0] - sums_k[..., 1] * row_total) / (1 + sums_k[..., 1])
        out["k"] = rows_k.sum(-1).permute(0, 2, 1).double()
    return out


def _block_changes(
    blocks: list[_Block],
    component: str,
    rows: torch.Tensor,
    norm: tuple[_NormChange, torch.Tensor] | None,
    heads: int,
) -> torch.Tensor:
    """``component``'s changes ``D [n, heads, query, senders, key]`` of the scaled products
    laid out as :meth:`_PatternReading.softmax_terms` reads them (0 where no block has the
    pair): for senders whose :func:`_block_terms` overflowed."""
    n_pos, n = rows.shape[:2]
    width = rows.shape[2] - (norm is not None)
    moved = rows.new_zeros(n, heads, n_pos, width, n_pos)
    for block in blocks:
        size = block.moving.stop - block.moving.start
        step = _block_step(block, rows, norm)
        for part in block.parts:
            if part.component != component:
                continue
            span = part.span
            piece = step[:, :, part.columns].reshape(size, n, width, heads, span.stop - span.start)
            if component == "q":  # the block's queries p, the keys of the span
                moved[:, :, block.moving, :, span] = piece.permute(1, 3, 0, 2, 4)
            else:  # the block's keys p, the queries of the span
                moved[:, :, span, :, block.moving] = piece.permute(1, 3, 4, 2, 0)
    return moved


def _qk_recomputed(
    profile: QKLayer,
    graph: Graph,
    q: torch.Tensor,
    k: torch.Tensor,
    queries: torch.Tensor,
    change: torch.Tensor,
    weight: torch.Tensor,
    component: str,
) -> torch.Tensor:
    """The scaled products ``scale * q . k`` ``[n, senders, heads, query, key]`` with each
    sender's normed change ``change [n, pos, senders, d_model]`` projected by ``weight
    [readers, d_model, d_head]`` into the hooked queries (keys), prepared again."""
    heads = graph.n_heads
    moved = torch.einsum("bpcd,rdk->bcprk", change, weight)
    if component == "q":
        return profile.products(
            profile.queries(q.unsqueeze(1) + moved), _groups(profile.keys(k), heads).unsqueeze(1)
        )
    if graph.ungrouped:  # each query head's own key copy moves
        return profile.products(
            queries.unsqueeze(1), profile.keys(_groups(k, heads).unsqueeze(1) + moved)
        )
    return profile.products(
        queries.unsqueeze(1), _groups(profile.keys(k.unsqueeze(1) + moved), heads)
    )


@dataclass(frozen=True, eq=False)
class _PatternReading:
    """How one layer's score follows from a change ``D`` of its scaled products ``scale * q .
    k`` (internal): ``sum over query and key of (pattern' - pattern) * g``, with ``pattern'``
    the rows of ``products + D``.

    Without a second softmax: a row's new weights are ``p_k exp(D_k) / sum_j p_j exp(D_j)``,
    so with ``e = expm1(D)`` (accurate for small ``D``) and ``s = sum_k p_k e_k``::

        sum_k g_k (p'_k - p_k) = (sum_k G_k e_k - s * sum_k G_k) / (1 + s),  G = p * (g - c)

    for any constant ``c`` per row (the change of a row sums to 0); ``c = sum_k p_k g_k``
    leaves no large term to cancel, so the row's term is computed in float32 without the
    float64 softmax and difference of patterns. Under a soft cap, ``D`` is the capped logits'
    change (:meth:`~interv.engine.architecture.AttentionRecipe.change_of_logits`)."""

    recipe: AttentionRecipe
    products: torch.Tensor  # [n, heads, query, key] float64, the base run's
    pattern: torch.Tensor  # [n, heads, query, key] float64
    g: torch.Tensor  # [n, heads, query, key] float64
    admitted: torch.Tensor  # [n, 1, query, 1, key] bool
    weights: torch.Tensor  # [n, heads, query, key, 2]: G and the pattern
    total: torch.Tensor  # [n, heads, query, 1]: sum_k G_k

    @classmethod
    def of(
        cls,
        recipe: AttentionRecipe,
        products: torch.Tensor,
        pattern: torch.Tensor,
        g_pattern: torch.Tensor,
        allowed: torch.Tensor,
    ) -> _PatternReading:
        g = g_pattern.to(pattern)
        centered = pattern * (g - (pattern * g).sum(-1, keepdim=True))
        weights = torch.stack([centered, pattern], dim=-1)
        return cls(
            recipe=recipe,
            products=products,
            pattern=pattern,
            g=g,
            admitted=allowed.unsqueeze(3),
            weights=weights,
            total=centered.sum(-1).unsqueeze(-1),
        )

    def terms(self, moved: torch.Tensor) -> torch.Tensor:
        """The terms ``[n, heads, senders]`` (float64) of the changes ``moved [n, heads, query,
        senders, key]`` (0 where a key is not admitted anywhere), computed in ``moved``'s
        dtype; inf or nan where a change is too large for its ``expm1`` (then
        :meth:`softmax_terms`)."""
        dtype = moved.dtype
        logits = self.recipe.change_of_logits(self.products.unsqueeze(3), moved)
        e = torch.special.expm1(logits)
        sums = torch.matmul(e, self.weights.to(dtype))  # [n, heads, query, senders, 2]
        row = (sums[..., 0] - sums[..., 1] * self.total.to(dtype)) / (1 + sums[..., 1])
        return row.sum(2).double()

    def softmax_terms(self, moved: torch.Tensor) -> torch.Tensor:
        """:meth:`terms` the long way (float64 softmax of the changed logits minus the
        pattern, dotted with ``g``), for changes too large for ``expm1``."""
        products = self.products.unsqueeze(3) + moved.double()
        new = self.recipe.rows(self.recipe.finish(products, self.admitted))
        change = new - self.pattern.unsqueeze(3)
        return (change * self.g.unsqueeze(3)).sum((2, 4))


@dataclass(frozen=True, eq=False)
class _Batch:
    """One batch of prompt pairs with its two runs captured (internal).

    Attributes:
        rows: the pairs' indices in the whole task (consecutive).
        task: those pairs.
        base, other: the base run (where gradients are taken) and the other run.
        clean_logits: the clean run's answer logits (whichever run it is).
    """

    rows: list[int]
    task: TokenizedPairs
    base: Run
    other: Run
    clean_logits: torch.Tensor

    @property
    def span(self) -> slice:
        """``rows`` as a slice of the prompt axis."""
        return slice(self.rows[0], self.rows[-1] + 1)


def _batches(
    model: Any,
    task: TokenizedPairs,
    base_name: str,
    other_name: str,
    batch_size: int,
    qk: Graph | None = None,
) -> Iterator[_Batch]:
    """The task's pairs in consecutive batches of at most ``batch_size``, each with its base
    and other runs captured (one no-grad forward each): what EAP's gradient runs and the HVP
    correction both start from. With ``qk`` (the graph), the base run also captures what
    :func:`qk_base` reads (no forward of its own)."""
    n = task.n_pairs
    extra = () if qk is None else qk_sites(qk)
    for first in range(0, n, batch_size):
        rows = list(range(first, min(n, first + batch_size)))
        part = task.select(rows)
        base = capture_run(model, part, base_name, record_prefix=bool(extra), extra=extra)
        other = capture_run(model, part, other_name)
        yield _Batch(rows, part, base, other, clean_run_logits(base, other, base_name))


def edge_scores(
    model: Any,
    task: TokenizedPairs,
    *,
    method: str = "eap",
    steps: int = 5,
    qk_fix: bool = False,
    metric: str | TargetMetric = "logit_diff",
    direction: str = "noise",
    batch_size: int | None = None,
    progress: Callable[[str], None] | None = None,
    kv: str = "grouped",
    gim: GIM | bool = False,
    hvp: bool = False,
    hvp_steps: int = 1,
    hvp_top: int | None = None,
) -> EdgeScores:
    """Score every edge of the model's graph with EAP or EAP-IG (estimates).

    Args:
        model: a transformer-lens bridge in eval mode.
        task: clean/corrupted prompt pairs of equal token lengths (batched: all at once).
        method: ``"eap"`` or ``"eap-ig"``.
        steps: EAP-IG's interpolation steps ``m >= 1`` (ignored by EAP).
        qk_fix: AtP*'s QK fix for the query/key edges (module docstring); refused
            wherever the recomputed pattern is not the model's.
        metric: a metric name or :class:`~interv.engine.targets.TargetMetric`.
        direction: ``"noise"`` (default) or ``"denoise"`` (transformer-lens's convention).
        batch_size: prompts per gradient run (memory grows with it, about 110 MiB per
            16-token prompt on a GPT-2-small-shaped model); None: about
            :data:`EDGE_BATCH_BYTES` of sender outputs per run.
        progress: called with a short message after each gradient run.
        kv: ``"grouped"`` (default: key and value edges per key/value head) or
            ``"ungrouped"`` (MIB's graph: per query head, :class:`~interv.circuits.Graph`).
        gim: GIM's backward (:class:`~interv.engine.backward.GIM`; ``True``: its defaults)
            for every gradient run: norm statistics frozen, the attention softmax's gradient
            at a higher temperature, the gradients into q, k and v rescaled; the forward
            and the differences stay the model's. Not with ``qk_fix``.
        hvp: Zhang & Wang's HVP correction of EAP (:mod:`interv.circuits.second_order`):
            each edge's estimate plus the second-order Taylor term of the metric along its
            patch, ``1/2 delta^T H delta``, and its reliability score
            (:attr:`EdgeScores.reliability`); one forward and two backwards per edge.
            ``method="eap"`` only, not with ``qk_fix`` or ``gim``.
        hvp_steps: with ``hvp``, the multi-step variant's segments (1: the single HVP
            correction).
        hvp_top: with ``hvp``, correct only the ``hvp_top`` edges of largest first-order
            ``|score|`` (screen, then fix), the others keeping EAP's; None: every edge.

    Returns:
        :class:`EdgeScores`.
    """
    target = check_task(model, task, metric)
    runs = check_method(method, steps, qk_fix)
    segments = check_hvp(hvp, hvp_steps, hvp_top, method, qk_fix, gim)
    if segments:
        check_second_order(model)
    gim = check_gim(model, gim)
    if gim is not None and qk_fix:
        raise IntervError(
            "gim and qk_fix=True cannot be combined (the QK fix recomputes the exact pattern, "
            "GIM modifies its gradient); choose one"
        )
    if gim is not None and kv != "grouped":
        raise IntervError(
            f"gim with kv={kv!r} is not built (GIM's q/k/v scaling is written for the model's "
            "own key/value heads, not MIB's per-query-head copies); use kv='grouped' or no gim"
        )
    graph = Graph.from_model(model, kv=kv)
    if hvp_top is not None and hvp_top > graph.n_edges:
        raise IntervError(
            f"hvp_top must be at most the graph's {graph.n_edges} edges; got {hvp_top}"
        )
    if qk_fix:
        check_qk_fix(model)
    base_name, other_name = runs_of(direction)
    if target.name == "kl_from_clean" and base_name == "clean" and method == "eap":
        raise IntervError(
            "metric 'kl_from_clean' is minimal (zero gradient) at the clean run, so EAP on the "
            "clean run scores every edge 0; use method='eap-ig', direction='denoise' or another "
            "metric"
        )
    n = task.n_pairs
    if batch_size is None:
        per_prompt_bytes = task.n_positions * len(graph.senders) * model.cfg.d_model * 4
        batch_size = max(1, min(n, EDGE_BATCH_BYTES // max(per_prompt_bytes, 1)))
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise IntervError(f"batch_size must be a positive int or None; got {batch_size!r}")
    per_prompt = torch.zeros(graph.n_edges, n, dtype=torch.float64)
    # under the QK fix the query and key edges are scored from the pattern (below), so the
    # gradient runs pull back only the value heads' and MLPs' inputs
    receivers = [r for r in graph.receivers if not (qk_fix and r.input in ("q", "k"))]
    batches = _batches(model, task, base_name, other_name, batch_size, graph if qk_fix else None)
    for batch in batches:
        rows, part, base, other = batch.rows, batch.task, batch.base, batch.other
        with torch.no_grad():
            delta = sender_deltas(model, graph, other, base)  # [n, pos, senders, d_model]
            # laid out once for every layer's products: [n, senders, pos * d_model]
            flat_delta = delta.transpose(1, 2).flatten(2)
        qk = qk_base(model, graph, part, base_name, captured=base) if qk_fix else None
        pattern_sum: dict[int, torch.Tensor] = {}
        for step in range(1, runs + 1):
            embed = None
            if runs > 1:
                alpha = step / runs
                embed = other.resid_pre[0] + alpha * (base.resid_pre[0] - other.resid_pre[0])
            position = 0
            pattern_grads: dict[int, torch.Tensor] | None = {} if qk_fix else None
            layers = _reader_gradients(
                model,
                graph,
                part,
                base_name,
                target,
                batch.clean_logits,
                embed,
                pattern_grads,
                gim,
                "v" if qk_fix else "qkv",
            )
            for layer_grads in layers:
                width = layer_grads.shape[2]
                group = receivers[position : position + width]
                position += width
                n_senders = max(r.n_senders for r in group)
                with torch.no_grad():
                    # sum over positions and d_model: [n, readers, pos * d] @ [n, pos * d, senders]
                    readers = layer_grads.to(delta).transpose(1, 2).flatten(2)
                    products = torch.bmm(readers, flat_delta[:, :n_senders].mT).double() / runs
                for j, receiver in enumerate(group):
                    block = products[:, j, : receiver.n_senders].T.cpu()
                    per_prompt[receiver.start : receiver.start + receiver.n_senders, rows] += block
            for layer, grad in (pattern_grads or {}).items():
                pattern_sum[layer] = pattern_sum.get(layer, 0) + grad / runs
            if progress is not None:
                progress(f"{method}: gradient run {step} of {runs} (prompts {rows[0]}..{rows[-1]})")
        if qk is not None:
            _add_qk_scores(model, graph, qk, base, delta, pattern_sum, per_prompt, rows)
    reliability = None
    if segments:
        reliability = _correct(
            model,
            graph,
            task,
            target,
            base_name,
            other_name,
            per_prompt,
            segments,
            hvp_top,
            batch_size,
            progress,
        )
    scores = per_prompt.mean(-1)
    name = "EAP" if method == "eap" else f"EAP-IG ({runs} input-interpolation steps)"
    kind = "first-order" if gim is None else "gradient-based, GIM's modified backward"
    if segments:
        kind = "second-order Taylor" if segments == 1 else "multi-step second-order Taylor"
    runs_text = (
        f"the gradient at the {base_name} run"
        if runs == 1
        else f"the gradient averaged over {runs} runs with block 0's input interpolated from the "
        f"{other_name} to the {base_name} prompts"
    )
    sentence = (
        f"{name} estimates ({kind}, not intervened) of each of the {graph.n_edges} edges' "
        f"effect on the prompt-mean {target.definition}, over {task.n_pairs} prompt pairs: the "
        f"sender's output moved from the {base_name} to the {other_name} run along that edge "
        f"only ({direction}), {runs_text}"
    )
    if graph.ungrouped:
        sentence += (
            "; MIB's ungrouped graph: key and value edges into each query head's own copy of "
            "its key/value head's input"
        )
    if qk_fix:
        sentence += (
            "; query/key edges with AtP*'s QK fix (the receiver head's attention pattern "
            "recomputed exactly, first order from the pattern on)"
        )
    if gim is not None:
        sentence += f"; gradients by a {gim.describe()}, not the model's own gradient"
    if segments:
        which = (
            "every edge" if hvp_top is None else f"the top {hvp_top} edges by first-order |score|"
        )
        how = (
            "plus the second-order term 1/2 delta^T H delta of the metric along the edge's patch "
            "(Zhang & Wang's HVP correction)"
            if segments == 1
            else f"replaced by Zhang & Wang's multi-step HVP estimate over {segments} segments"
        )
        sentence += f"; {which}: the first-order estimate {how}, with its reliability score"
    provenance = Provenance.of(
        model,
        task,
        metric=target.name,
        direction=direction,
        settings=screen_settings(method, runs, qk_fix, graph.kv, gim, segments, hvp_top),
    )
    return EdgeScores(
        graph=graph,
        scores=scores,
        per_prompt=per_prompt,
        method=method,
        steps=runs,
        metric=target.name,
        fingerprint=run_fingerprint(provenance),
        sentence=sentence,
        provenance=provenance,
        unit=target.unit,
        direction=direction,
        qk_fix=qk_fix,
        hvp=segments,
        reliability=reliability,
    )


def _correct(
    model: Any,
    graph: Graph,
    task: TokenizedPairs,
    target: TargetMetric,
    base_name: str,
    other_name: str,
    per_prompt: torch.Tensor,
    segments: int,
    hvp_top: int | None,
    batch_size: int,
    progress: Callable[[str], None] | None,
) -> torch.Tensor:
    """Apply the HVP correction to ``per_prompt`` (EAP's first-order estimates, in place) for
    every edge or the ``hvp_top`` largest by first-order ``|score|``; the reliability score
    of each prompt-mean estimate (NaN where not corrected)."""
    if hvp_top is None:
        chosen = list(range(graph.n_edges))
    else:
        order = torch.sort(-per_prompt.mean(-1).abs(), stable=True).indices
        chosen = sorted(order[:hvp_top].tolist())
    n = task.n_pairs
    d1 = torch.zeros(len(chosen), n, dtype=torch.float64)
    d2 = torch.zeros(len(chosen), n, dtype=torch.float64)
    copies = copies_per_forward(model, n, task.n_positions)
    for batch in _batches(model, task, base_name, other_name, batch_size):
        at = functools.partial(
            edge_derivatives,
            model,
            batch.task,
            graph,
            batch.base,
            batch.other,
            chosen,
            base_name,
            target,
            batch.clean_logits,
            batch_size=copies,
            progress=progress,
        )
        estimate, a, b = hvp_estimates(at, segments)
        d1[:, batch.span], d2[:, batch.span] = a, b
        if segments == 1:  # EAP's own first-order term, the second-order term added
            per_prompt[chosen, batch.span] += b / 2
        else:
            per_prompt[chosen, batch.span] = estimate
    out = torch.full((graph.n_edges,), float("nan"), dtype=torch.float64)
    out[chosen] = reliability_score(d1.mean(-1), d2.mean(-1))
    return out


def _add_qk_scores(
    model: Any,
    graph: Graph,
    qk: QKBase,
    base: Any,
    delta: torch.Tensor,
    pattern_grads: Mapping[int, torch.Tensor],
    per_prompt: torch.Tensor,
    rows: list[int],
) -> None:
    """Write the QK-fix scores of every query/key edge of one batch into ``per_prompt``."""
    # the senders' changes laid out once (every layer's blocks read views of them)
    contract = torch.promote_types(base.resid_pre[0].dtype, torch.float32)
    senders = _Senders.of(delta.to(base.resid_pre[0].dtype), contract)
    for layer in range(graph.n_layers):
        groups = {
            component: [
                r for r in graph.receivers if r.input == component and r.node.layer == layer
            ]
            for component in ("q", "k")
        }
        groups = {component: group for component, group in groups.items() if group}
        if not groups:
            continue
        n_senders = max(r.n_senders for group in groups.values() for r in group)
        scores = _qk_layer_scores(
            model,
            graph,
            qk,
            base.resid_pre[layer],
            layer,
            tuple(groups),
            senders.first(n_senders),
            pattern_grads[layer].to(qk.q[layer].device),
        )
        for component, group in groups.items():
            got = scores[component].cpu()
            for receiver in group:
                block = got[:, receiver.node.head, : receiver.n_senders].T
                per_prompt[receiver.start : receiver.start + receiver.n_senders, rows] = block
