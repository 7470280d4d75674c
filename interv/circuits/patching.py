"""Exact edge effects by path patching, and the runs every circuit computation shares.

The exact effect of one edge ``u -> v`` (direction ``"noise"``, the default): the clean
prompts run with *only* the input of ``v`` changed, by the sender's change
``a_corrupted(u) - a_clean(u)``; every other reader reads the clean residual stream at the
receiver's layer, and everything downstream of the receiver runs live (the change
propagates). In the metric's unit, per prompt::

    effect(u -> v) = m(clean, input of v + a_corr(u) - a_clean(u)) - m(clean)

Writers' outputs are their writes into the residual stream as the block defines them
(:mod:`interv.engine.writes`, docs/circuits-writes.md): embed = the residual stream entering
block 0 (token and positional embeddings, scaled as the model scales them); a head = the
change of its block's attention write when only its ``z`` changes, the other heads at the
base run (``z @ W_O`` where the write is additive: the output bias cancels; through the
post-attention norm of Gemma-2/3 and OLMo-2/3 and Granite's residual multiplier); an MLP =
its write (post-feedforward norm, multiplier; a mixture of experts' output). Readers' inputs
are pre-norm: a head's query, key or value projection is recomputed from its block's first
norm of the changed residual stream (none in OLMo-2/3; the query/key norms, rotary and the
softmax run live after it), an MLP's write from the residual it reads (between attention and
MLP; the block's input in a parallel block), the logits from the final norm and the model's
own logit scale or soft cap (none is frozen).
Under grouped-query attention an edge into a key or value input changes the key (value)
of its key/value head, which every query head of the group reads; in the ungrouped graph
(``kv="ungrouped"``, MIB's) it changes one query head's own copy of it, the other query
heads of the group reading the base run's (:mod:`interv.circuits._kv`).

How it runs: one clean forward records every block's input (prefix reuse); each edge is a
*copy* of the prompts that joins a stacked forward at its receiver's block (an edge into
layer ``L``'s attention runs blocks ``L..``, into MLP ``L`` blocks ``L+1..``, into the
logits only the final norm), its receiver's change added there; up to ``batch_size`` copies
share one forward.

``direction="denoise"`` swaps the runs: the corrupted prompts with the sender's clean
output along the edge.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from interv.circuits._kv import check_kv_copies, kv_copies
from interv.circuits.executor import RayExecutor, check_executor, run_jobs
from interv.circuits.graph import Edge, Graph
from interv.engine.answer_metric import answer_metric
from interv.engine.forward import AUTO, PATTERN, Prefix, Prompts, Suffix, forward
from interv.engine.sites import Site
from interv.engine.targets import TargetMetric, get_metric
from interv.engine.writes import Writes
from interv.errors import IntervError

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = ["DIRECTIONS", "edge_effects"]

DIRECTIONS: tuple[str, ...] = ("noise", "denoise")
"""``"noise"``: the clean run with senders from the corrupted run (is the edge necessary?);
``"denoise"``: the corrupted run with senders from the clean run."""


def runs_of(direction: str) -> tuple[str, str]:
    """``(base run, other run)`` of a direction."""
    if direction not in DIRECTIONS:
        raise IntervError(f"unknown direction {direction!r}; choose one of {DIRECTIONS}")
    return ("clean", "corrupted") if direction == "noise" else ("corrupted", "clean")


def check_task(model: Any, task: TokenizedPairs, metric: str | TargetMetric) -> TargetMetric:
    """The metric, after checking the task suits it and the model (clear errors)."""
    from interv.tasks.tokenized import TokenizedPairs

    if not isinstance(task, TokenizedPairs):
        raise IntervError(
            f"task must be TokenizedPairs (PromptPairs.tokenize(model)); got {type(task).__name__}"
        )
    if task.clean_tokens.shape != task.corrupted_tokens.shape:
        raise IntervError(
            f"clean and corrupted prompts must have equal token lengths; got "
            f"{tuple(task.clean_tokens.shape)} and {tuple(task.corrupted_tokens.shape)}"
        )
    target = get_metric(metric)
    target.check_foil(task.foil_ids)
    Graph.from_model(model)  # refuses unsupported architectures
    return target


def tokens_of(task: TokenizedPairs, run: str) -> torch.Tensor:
    """The token ids of a run (``"clean"`` or ``"corrupted"``)."""
    return task.clean_tokens if run == "clean" else task.corrupted_tokens


@dataclass(frozen=True, eq=False)
class Run:
    """One forward of the prompts: what the circuit code reads from it (internal).

    Attributes:
        resid_pre: per block, the residual stream entering it ``[n, pos, d_model]``.
        mlp_in: per block, the residual stream its MLP reads (MLP models only): between
            attention and MLP in a sequential block, the block's input in a parallel one.
        z: per block, the heads' outputs before ``W_O`` ``[n, pos, n_heads, d_head]``.
        mlp_out: per block, the MLP's write (MLP models only).
        final: the residual stream entering the final norm.
        logits: ``[n, d_vocab]`` at the answer positions (the model's own logits).
        prefix: the recorded block inputs (for suffix forwards), when recorded.
        extra: the other sites the caller asked :func:`capture_run` for.
    """

    resid_pre: list[torch.Tensor]
    mlp_in: list[torch.Tensor]
    z: list[torch.Tensor]
    mlp_out: list[torch.Tensor]
    final: torch.Tensor
    logits: torch.Tensor
    prefix: Prefix | None
    extra: Mapping[Site, torch.Tensor] = field(default_factory=dict)


_CHECKED: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def capture_run(
    model: Any,
    task: TokenizedPairs,
    run: str,
    *,
    record_prefix: bool = False,
    hooks: Sequence[tuple[Site, Any]] = (),
    extra: Sequence[Site] = (),
) -> Run:
    """One no-grad forward of ``run``'s prompts, capturing what :class:`Run` holds (and the
    ``extra`` sites, in :attr:`Run.extra`).

    The first capture of a model also checks interv's write paths against the model's own
    (:func:`check_writes`)."""
    graph = Graph.from_model(model)
    writes = Writes.of(model)
    layers = range(graph.n_layers)
    mlp_in = writes.mlp_reads
    sites = [Site("resid_pre", layer) for layer in layers] + [Site("z", layer) for layer in layers]
    if graph.has_mlp:
        if mlp_in != "resid_pre":
            sites += [Site(mlp_in, layer) for layer in layers]
        sites += [Site("mlp_out", layer) for layer in layers]
    sites.append(Site("final_resid"))
    sites += [site for site in extra if site not in sites]
    checking = not hooks and not _CHECKED.get(model, False)
    if checking:
        sites += [Site("attn_out", layer) for layer in layers]
    out = forward(
        model,
        Prompts.of(tokens_of(task, run), task.attention_mask),
        hooks=hooks,
        capture=sites,
        readout="position_logits",
        positions=task.answer_positions,
        record_prefix=record_prefix,
    )
    got = out.captured
    captured = Run(
        resid_pre=[got[Site("resid_pre", layer)] for layer in layers],
        mlp_in=[got[Site(mlp_in, layer)] for layer in layers] if graph.has_mlp else [],
        z=[got[Site("z", layer)] for layer in layers],
        mlp_out=[got[Site("mlp_out", layer)] for layer in layers] if graph.has_mlp else [],
        final=got[Site("final_resid")],
        logits=out.readout,
        prefix=out.prefix,
        extra={site: got[site] for site in extra},
    )
    if checking:
        check_writes(model, captured, [got[Site("attn_out", layer)] for layer in layers])
        with contextlib.suppress(TypeError):  # not weak-referenceable: checked every time
            _CHECKED[model] = True
    return captured


def check_writes(model: Any, run: Run, attn_out: list[torch.Tensor]) -> None:
    """Refuse (one line) a model whose blocks interv's write paths do not reproduce: each
    attention write recomputed from the heads' ``z``, each MLP write from the residual it
    reads, and the residual stream as the sum of the writes, against the model's own values
    (``attn_out``: the captured attention writes)."""
    writes = Writes.of(model)
    checks: list[tuple[str, torch.Tensor, torch.Tensor]] = []
    with torch.no_grad():
        for layer, z in enumerate(run.z):
            checks.append(
                (
                    f"block {layer}'s attention write",
                    writes.attention_write(layer, z),
                    attn_out[layer],
                )
            )
            total = run.resid_pre[layer] + attn_out[layer]
            if run.mlp_out:
                mlp = writes.mlp_write(layer, run.mlp_in[layer])
                checks.append((f"block {layer}'s MLP write", mlp, run.mlp_out[layer]))
                if not writes.parallel:
                    checks.append((f"block {layer}'s MLP input", total, run.mlp_in[layer]))
                total = total + run.mlp_out[layer]
            after = run.resid_pre[layer + 1] if layer + 1 < len(run.z) else run.final
            checks.append((f"the residual stream after block {layer}", total, after))
    for what, mine, own in checks:
        eps = torch.finfo(own.dtype).eps if own.is_floating_point() else 1e-6
        tolerance = max(1e-4, 64 * eps) * (1 + float(own.detach().abs().max()))
        gap = float((mine.to(own) - own).detach().abs().max())
        if not gap <= tolerance:
            writes.arch.refuse(
                f"{what} as interv computes it differs from the model's by {gap:.3g} "
                f"(tolerance {tolerance:.3g}), so its write paths are not modelled"
            )


def sender_deltas(model: Any, graph: Graph, other: Run, base: Run) -> torch.Tensor:
    """``[n, pos, n_senders, d_model]``: every writer's write in ``other`` minus in ``base``
    (a head's: the change of its block's attention write when only its ``z`` takes the
    ``other`` run's value, :meth:`~interv.engine.writes.Writes.head_write_changes`), in
    :attr:`Graph.senders` order."""
    writes = Writes.of(model)
    parts = [(other.resid_pre[0] - base.resid_pre[0]).unsqueeze(2)]
    for layer in range(graph.n_layers):
        parts.append(writes.head_write_changes(layer, base.z[layer], other.z[layer]))
        if graph.has_mlp:
            parts.append((other.mlp_out[layer] - base.mlp_out[layer]).unsqueeze(2))
    return torch.cat(parts, dim=2)


def sender_delta(model: Any, graph: Graph, other: Run, base: Run, index: int) -> torch.Tensor:
    """``[n, pos, d_model]``: writer ``index``'s write in ``other`` minus in ``base``."""
    node = graph.senders[index]
    if node.kind == "embed":
        return other.resid_pre[0] - base.resid_pre[0]
    if node.kind == "mlp":
        return other.mlp_out[node.layer] - base.mlp_out[node.layer]
    z_other = other.z[node.layer][:, :, node.head]
    return Writes.of(model).head_write_change(node.layer, node.head, base.z[node.layer], z_other)


def qkv_weights(model: Any, layer: int, component: str) -> torch.Tensor:
    """``[heads, d_model, d_head]``: ``W_Q`` (query heads), ``W_K`` or ``W_V`` (key/value
    heads) of block ``layer``."""
    attn = model.blocks[layer].attn
    return {"q": attn.W_Q, "k": attn.W_K, "v": attn.W_V}[component]


def reader_weights(model: Any, graph: Graph, layer: int, component: str) -> torch.Tensor:
    """``[readers, d_model, d_head]``: the projection of each of ``graph``'s query, key or
    value readers of block ``layer`` (:func:`qkv_weights`; in an ungrouped graph each query
    head's own copy of its key/value head's ``W_K`` or ``W_V``)."""
    weight = qkv_weights(model, layer, component)
    if graph.ungrouped and component in ("k", "v"):
        weight = weight.repeat_interleave(graph.group_size, dim=0)
    return weight


def copies_of(model: Any, graph: Graph) -> contextlib.AbstractContextManager:
    """:func:`interv.circuits._kv.kv_copies` for ``graph``: per-query-head keys and values
    while open (yields the hooks that make them; none unless the graph is ungrouped)."""
    if not graph.ungrouped:
        return contextlib.nullcontext([])
    return kv_copies(model, graph.n_heads, graph.n_kv_heads)


def receiver_change(
    model: Any, graph: Graph, base: Run, receiver: Any, delta: torch.Tensor
) -> torch.Tensor:
    """What a receiver's patched input changes, from the base run's input plus ``delta``.

    q/k/v: ``(pre1(x + delta) - pre1(x)) @ W[r]`` ``[n, pos, d_head]`` (added to that
    head's query, key or value projection: a query/key norm, rotary and the softmax run
    after it); mlp: ``write(x + delta) - write(x)``, the MLP's whole write (its norms,
    experts and multiplier) from the residual it reads (added to the block's output);
    logits: ``delta`` itself (added to the final norm's input).
    """
    node = receiver.node
    if receiver.input == "logits":
        return delta
    writes = Writes.of(model)
    if receiver.input == "mlp":
        x = base.mlp_in[node.layer]
        return writes.mlp_write(node.layer, x + delta) - writes.mlp_write(node.layer, x)
    x = base.resid_pre[node.layer]
    weight = reader_weights(model, graph, node.layer, receiver.input)[node.head]
    change = writes.attention_input(node.layer, x + delta) - writes.attention_input(node.layer, x)
    return change @ weight.to(x)


def per_prompt_metric(
    metric: TargetMetric, task: TokenizedPairs, logits: torch.Tensor, clean_logits: torch.Tensor
) -> torch.Tensor:
    """``[copies, n]`` metric of stacked copies' answer logits ``[copies * n, d_vocab]``."""
    n = task.n_pairs
    copies = logits.shape[0] // n
    values = answer_metric(metric, task, clean_logits, copies=copies)(logits)
    return values.view(copies, n)


def _default_batch_size(n_prompts: int, n_positions: int, d_model: int) -> int:
    """Copies per stacked forward: about 64 MiB of residual stream per block."""
    per_copy = n_prompts * n_positions * d_model * 4
    return max(1, min(256, (64 << 20) // max(per_copy, 1)))


def edge_effects(
    model: Any,
    task: TokenizedPairs,
    graph: Graph | None,
    edges: Sequence[int | Edge | str],
    *,
    metric: str | TargetMetric = "logit_diff",
    direction: str = "noise",
    batch_size: int | None = None,
    per_prompt: bool = False,
    on_batch: Callable[[list[int], torch.Tensor], None] | None = None,
    executor: RayExecutor | None = None,
) -> torch.Tensor:
    """The exact path-patching effect of each edge alone (see the module docstring).

    Args:
        model: a transformer-lens bridge in eval mode.
        task: clean/corrupted prompt pairs of equal token lengths.
        graph: the model's :class:`Graph` (None: built from the model).
        edges: edges as indices, :class:`Edge` objects or labels.
        metric: a metric name or :class:`~interv.engine.targets.TargetMetric`.
        direction: ``"noise"`` (default: corrupted sender into the clean run) or
            ``"denoise"``.
        batch_size: edges (copies of the prompts) per stacked forward; None: about 64 MiB
            of residual stream per block.
        per_prompt: return ``[len(edges), n_prompts]`` instead of the prompt mean.
        on_batch: called with ``(positions in edges, [k, n_prompts] effects)`` after each
            stacked forward (a caller can store them as they come).
        executor: None (this process) or a :class:`~interv.circuits.executor.RayExecutor`:
            the stacked forwards spread over its workers, each ``min(batch_size, ceil(k /
            n_workers))`` edges so every worker has one (the same forwards as a local call
            with that ``batch_size``: equal numbers), ``on_batch`` called as they finish.

    Returns:
        ``[len(edges)]`` float64 prompt-mean change of the metric (in its unit), exact; or
        ``[len(edges), n_prompts]`` with ``per_prompt``.
    """
    target = check_task(model, task, metric)
    graph = Graph.from_model(model) if graph is None else graph
    if graph.ungrouped:
        check_kv_copies(model, graph.n_heads, graph.n_kv_heads)
    indices = graph.indices(edges)
    runs_of(direction)  # checked before any forward
    n = task.n_pairs
    out = torch.zeros(len(indices), n, dtype=torch.float64)
    executor = check_executor(executor)
    if batch_size is None:
        batch_size = _default_batch_size(n, task.n_positions, model.cfg.d_model)
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise IntervError(f"batch_size must be a positive int or None; got {batch_size!r}")
    if not indices:
        return out if per_prompt else out.mean(-1)

    start_of = functools.partial(_start_of, graph)
    order = sorted(range(len(indices)), key=lambda j: (start_of(indices[j]), indices[j]))
    if executor is not None:  # each worker a share of the batches (module executor)
        batch_size = min(batch_size, -(-len(order) // executor.n_workers))
    chunks = [order[first : first + batch_size] for first in range(0, len(order), batch_size)]
    jobs = [[indices[j] for j in chunk] for chunk in chunks]
    shared = (task, graph, target, direction)
    for position, effects in run_jobs(executor, model, _edge_job, shared, jobs):
        out[chunks[position]] = effects
        if on_batch is not None:
            on_batch(list(chunks[position]), effects)
    return out if per_prompt else out.mean(-1)


def _start_of(graph: Graph, index: int) -> int:
    """The block at whose input edge ``index`` joins (``n_layers``: the logits)."""
    receiver = graph.receiver_of(index)
    if receiver.input == "logits":
        return graph.n_layers
    return receiver.node.layer + (1 if receiver.input == "mlp" else 0)


def _edge_job(model: Any, shared: tuple, edges: list[int], cache: dict) -> torch.Tensor:
    """One stacked forward of :func:`edge_effects`: the per-prompt effects of ``edges``
    (sorted by the block they join at); the base and other runs computed on the first job
    of a call (in this process, or on each worker) and kept in ``cache``."""
    task, graph, target, direction = shared
    base_name, other_name = runs_of(direction)
    if "runs" not in cache:
        base = capture_run(model, task, base_name, record_prefix=True)
        other = capture_run(model, task, other_name)
        clean_logits = clean_run_logits(base, other, base_name)
        base_values = per_prompt_metric(target, task, base.logits, clean_logits)
        cache["runs"] = (base, other, clean_logits, base_values.double().cpu())
    base, other, clean_logits, base_values = cache["runs"]
    with torch.no_grad():
        values = _patched_forward(
            model, task, graph, base, other, edges, functools.partial(_start_of, graph), base_name
        )
        effects = per_prompt_metric(target, task, values, clean_logits).double().cpu()
    return effects - base_values


def clean_run_logits(base: Run, other: Run, base_name: str) -> torch.Tensor:
    """The clean run's logits, whichever of ``base`` and ``other`` it is."""
    return base.logits if base_name == "clean" else other.logits


def _patched_forward(
    model: Any,
    task: TokenizedPairs,
    graph: Graph,
    base: Run,
    other: Run,
    indices: list[int],
    start_of: Callable[[int], int],
    base_name: str,
) -> torch.Tensor:
    """Answer logits ``[len(indices) * n, d_vocab]`` of one stacked forward, one copy per
    edge (sorted by the block they join at). Without a recorded prefix (a backend whose
    blocks take extra positional inputs) every copy runs the whole model, the MLP and
    logits changes added at the MLP output and the final norm's input."""
    suffix = base.prefix is not None
    n = task.n_pairs
    starts, entries = [], []
    edits: dict[tuple[str, int], list[tuple[int, int, torch.Tensor]]] = {}
    for copy, index in enumerate(indices):
        receiver = graph.receiver_of(index)
        sender = index - receiver.start
        delta = sender_delta(model, graph, other, base, sender)
        change = receiver_change(model, graph, base, receiver, delta)
        start = start_of(index)
        starts.append(start)
        if receiver.input in ("mlp", "logits") and suffix:
            entries.append(base.prefix.residuals[start] + change)
        elif receiver.input in ("mlp", "logits"):
            key = ("mlp_out", receiver.node.layer) if receiver.input == "mlp" else ("final", -1)
            edits.setdefault(key, []).append((copy, -1, change))
        else:
            entries.append(None)
            key = (receiver.input, receiver.node.layer)
            edits.setdefault(key, []).append((copy, receiver.node.head, change))

    def editor(changes: list[tuple[int, int, torch.Tensor]]) -> Any:
        def edit(activation: torch.Tensor, hook: Any) -> torch.Tensor:
            activation = activation.clone()
            for copy, head, change in changes:
                rows = slice(copy * n, (copy + 1) * n)
                if head < 0:  # an MLP output or the final norm's input
                    activation[rows] += change.to(activation)
                else:
                    activation[rows, :, head] += change.to(activation)
            return activation

        return edit

    def site(component: str, layer: int) -> Site:
        return Site("final_resid") if component == "final" else Site(component, layer)

    hooks = [(site(*key), editor(changes)) for key, changes in edits.items()]
    positions = task.answer_positions.repeat(len(indices))
    # ungrouped: the edits reach one query head's copy of a key or value (copies made first)
    attention = PATTERN if graph.ungrouped else AUTO
    with copies_of(model, graph) as kv_hooks:
        if not suffix:
            prompts = Prompts.of(tokens_of(task, base_name), task.attention_mask)
            out = forward(
                model,
                prompts.repeat(len(indices)),
                hooks=[*kv_hooks, *hooks],
                readout="position_logits",
                positions=positions,
                attention=attention,
            )
            return out.readout
        stacked = Suffix(
            prefixes=(base.prefix,) * len(indices),
            start_layer=starts[0],
            starts=tuple(starts),
            entries=tuple(entries),
        )
        out = forward(
            model,
            stacked,
            hooks=[*kv_hooks, *hooks],
            readout="position_logits",
            positions=positions,
            attention=attention,
        )
    return out.readout
