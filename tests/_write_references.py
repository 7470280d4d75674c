"""Plain Hugging Face references for the write-path columns of the family matrix.

Every number here comes from the Hugging Face model of a family (eager attention), torch
forward hooks on its own modules and autograd; no interv code runs in them. :class:`Plumbing`
names, per family, the modules a reference needs (the attention's projections and output
projection, the norms, the MLP, the final norm) and where each sublayer's *write* into the
residual stream can be read:

- attention write of layer ``L``: the post-attention norm's output where the family has one
  (Gemma-2/3, OLMo-2/3), else the attention module's output (BLOOM's minus the residual it
  adds inside), times the residual multiplier (Granite);
- MLP write: the post-feedforward norm's output where there is one, else the MLP's output (a
  mixture of experts' first element; OPT's ``fc2``; BLOOM's minus its residual), times the
  multiplier.

The references (all return the per-prompt logit difference, target minus foil, at each
prompt's answer position):

- :func:`metric`: a forward with hooks on named modules;
- :func:`head_write_change`: the change of a layer's attention write when only one head's
  ``z`` (its slice of the output projection's input) is replaced;
- :func:`edge_metric`: the base run with one reader's input moved by ``t`` times a sender's
  change (``t`` may require grad: d/dt at 0 is the EAP score, t = 1 the exact effect);
- :func:`circuit_metric`: the clean run with every reader's input rebuilt from the corrupted
  run plus the kept edges' changes (faithfulness);
- :func:`frozen_norm`: a norm applied with its scale frozen at a base input (direct effects).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from _families import Family, _attention_modules

# Families whose attention and MLP read the same block input.
PARALLEL = {"gptj", "phi", "cohere", "cohere2", "gpt_neox"}
# Parallel families whose MLP reads the attention's input norm (no norm of its own).
SHARED_NORM = {"gptj", "phi", "cohere", "cohere2"}
# Families whose sublayer outputs pass a norm before the residual add, and their norm names.
POST_NORMS = {
    "gemma2": (
        "post_attention_layernorm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
    ),
    "gemma3": (
        "post_attention_layernorm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
    ),
    "olmo2": ("post_attention_layernorm", None, "post_feedforward_layernorm"),
    "olmo3": ("post_attention_layernorm", None, "post_feedforward_layernorm"),
    "exaone4": ("post_attention_layernorm", None, "post_feedforward_layernorm"),
}
# Fused q/k/v projections: module name -> layout.
FUSED = {"c_attn": "split", "query_key_value": "per_head", "qkv_proj": "split"}


@dataclass
class Layer:
    """The modules of one decoder layer a reference hooks or calls."""

    index: int
    module: Any
    attn: Any
    o_proj: Any
    projections: dict[str, Any]  # "q"/"k"/"v" -> module (the same one when fused)
    layout: str | None  # None: separate projections; "split" or "per_head" when fused
    in_norm: Any
    post_attn_norm: Any
    mlp: Any  # None: OPT's MLP runs inline in the layer (fc1, activation, fc2)
    mlp_norm: Any  # the MLP's own input norm (sequential: reads resid_mid; NeoX: the input)
    post_mlp_norm: Any
    fc2: Any = None


@dataclass
class Plumbing:
    """The modules of one family's Hugging Face model (see the module docstring)."""

    name: str
    hf: Any
    layers: list[Layer | None]
    final_norm: Any
    multiplier: float
    n_heads: int
    n_kv: int
    d_head: int
    parallel: bool
    bloom: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def columns(self, component: str, head: int) -> slice | torch.Tensor:
        """Columns of head ``head``'s query (``"q"``), key or value (key/value head) in the
        output of its projection (a fused projection's layout included)."""
        layer = next(layer for layer in self.layers if layer is not None)
        d, H, KV = self.d_head, self.n_heads, self.n_kv
        if layer.layout is None:
            return slice(head * d, (head + 1) * d)
        if layer.layout == "per_head":
            offset = {"q": 0, "k": d, "v": 2 * d}[component]
            start = head * 3 * d + offset
            return slice(start, start + d)
        base = {"q": 0, "k": H * d, "v": H * d + KV * d}[component]
        return slice(base + head * d, base + (head + 1) * d)


def _child(module: Any, names: tuple[str, ...]) -> Any:
    for name in names:
        found = getattr(module, name, None)
        if isinstance(found, torch.nn.Module):
            return found
    return None


def plumbing(fam: Family) -> Plumbing:
    """The :class:`Plumbing` of ``fam``'s Hugging Face model."""
    hf = fam.hf
    names = {module: name for name, module in hf.named_modules()}
    attentions = dict(_attention_modules(hf))
    some = next(iter(attentions.values()))
    layer_list_name = names[some].rsplit(".", 2)[0]
    all_layers = hf.get_submodule(layer_list_name)
    cfg = hf.config
    layers: list[Layer | None] = []
    for index, module in enumerate(all_layers):
        attn = attentions.get(index)
        if attn is None:
            layers.append(None)
            continue
        inner = getattr(attn, "attention", attn)  # GPT-Neo wraps its attention
        o_proj = _child(inner, ("o_proj", "out_proj", "dense", "c_proj"))
        fused = next((name for name in FUSED if hasattr(inner, name)), None)
        if fused is None:
            projections = {c: getattr(inner, f"{c}_proj") for c in "qkv"}
        else:
            projections = dict.fromkeys("qkv", getattr(inner, fused))
        post = POST_NORMS.get(fam.name)
        in_norm = _child(module, ("input_layernorm", "ln_1", "self_attn_layer_norm"))
        if post is not None:
            post_attn = getattr(module, post[0])
            mlp_norm = None if post[1] is None else getattr(module, post[1])
            post_mlp = getattr(module, post[2])
        else:
            post_attn = post_mlp = None
            mlp_norm = None
            if fam.name not in SHARED_NORM:
                mlp_norm = _child(module, ("post_attention_layernorm", "ln_2", "final_layer_norm"))
        mlp = _child(module, ("mlp", "feed_forward"))
        layers.append(
            Layer(
                index=index,
                module=module,
                attn=attn,
                o_proj=o_proj,
                projections=projections,
                layout=None if fused is None else FUSED[fused],
                in_norm=in_norm,
                post_attn_norm=post_attn,
                mlp=mlp,
                mlp_norm=mlp_norm,
                post_mlp_norm=post_mlp,
                fc2=getattr(module, "fc2", None) if mlp is None else None,
            )
        )
    final = None
    for name in ("norm", "ln_f", "final_layer_norm", "final_layernorm"):
        for prefix in ("model.", "transformer.", "gpt_neox.", "model.decoder."):
            with contextlib.suppress(AttributeError):
                final = hf.get_submodule(prefix + name)
                break
        if final is not None:
            break
    n_heads = fam.bridge.cfg.n_heads
    n_kv = getattr(fam.bridge.cfg, "n_key_value_heads", None) or n_heads
    parallel = fam.name in PARALLEL and bool(getattr(cfg, "use_parallel_residual", True))
    return Plumbing(
        name=fam.name,
        hf=hf,
        layers=layers,
        final_norm=final,
        multiplier=float(getattr(cfg, "residual_multiplier", 1.0) or 1.0),
        n_heads=n_heads,
        n_kv=int(n_kv),
        d_head=fam.bridge.cfg.d_head,
        parallel=parallel,
        bloom=fam.name == "bloom",
    )


# ----------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Prompts:
    """Clean and corrupted prompts of a family with answer positions, target and foil."""

    clean: torch.Tensor
    corrupted: torch.Tensor
    real: torch.Tensor
    answer: torch.Tensor
    target: torch.Tensor
    foil: torch.Tensor


Hook = tuple[Any, str, Callable[..., Any]]
"""``(module, "pre" or "post", fn)``: a forward pre-hook ``fn(module, args, kwargs)`` or a
forward hook ``fn(module, args, kwargs, output)`` (both with kwargs)."""


@contextlib.contextmanager
def hooked(hooks: list[Hook]) -> Iterator[None]:
    handles = []
    try:
        for module, kind, fn in hooks:
            if kind == "pre":
                handles.append(module.register_forward_pre_hook(fn, with_kwargs=True))
            else:
                handles.append(module.register_forward_hook(fn, with_kwargs=True))
        yield
    finally:
        for handle in handles:
            handle.remove()


def metric(
    plumb: Plumbing, prompts: Prompts, tokens: torch.Tensor, hooks: list[Hook] = ()
) -> torch.Tensor:
    """Per-prompt logit difference of ``tokens`` under ``hooks`` (Hugging Face forward)."""
    with hooked(list(hooks)):
        logits = plumb.hf(input_ids=tokens, attention_mask=prompts.real.long()).logits
    rows = torch.arange(tokens.shape[0])
    at = logits[rows, prompts.answer]
    return at[rows, prompts.target] - at[rows, prompts.foil]


def _first(value: Any) -> torch.Tensor:
    return value[0] if isinstance(value, tuple) else value


def _hidden(args: tuple, kwargs: dict) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


def _with_hidden(args: tuple, kwargs: dict, new: torch.Tensor) -> tuple[tuple, dict]:
    if args:
        return (new, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": new}


def _residual_arg(args: tuple, kwargs: dict) -> torch.Tensor:
    return args[1] if len(args) > 1 else kwargs["residual"]


def write_hooks(plumb: Plumbing, store: dict[tuple[str, int], torch.Tensor]) -> list[Hook]:
    """Forward hooks that store each layer's attention write (``("attn", L)``), MLP write
    (``("mlp", L)``), layer input (``("pre", L)``), MLP-branch input residual
    (``("mlp_in", L)``), head outputs ``z`` (``("z", L)``, flattened) and the final norm's
    input (``("final", -1)``)."""
    hooks: list[Hook] = []
    m = plumb.multiplier
    for layer in plumb.layers:
        if layer is None:
            continue
        L = layer.index

        def pre(module, args, kwargs, L=L):
            store[("pre", L)] = _hidden(args, kwargs)

        def z(module, args, kwargs, L=L):
            store[("z", L)] = args[0]

        hooks += [(layer.module, "pre", pre), (layer.o_proj, "pre", z)]
        if layer.post_attn_norm is not None:

            def attn_write(module, args, kwargs, out, L=L):
                store[("attn", L)] = out * m

            hooks.append((layer.post_attn_norm, "post", attn_write))
        else:

            def attn_write(module, args, kwargs, out, L=L):
                value = _first(out)
                if plumb.bloom:
                    value = value - _residual_arg(args, kwargs)
                store[("attn", L)] = value * m

            hooks.append((layer.attn, "post", attn_write))
        if layer.post_mlp_norm is not None:

            def mlp_write(module, args, kwargs, out, L=L):
                store[("mlp", L)] = out * m

            hooks.append((layer.post_mlp_norm, "post", mlp_write))
        elif layer.mlp is not None:

            def mlp_write(module, args, kwargs, out, L=L):
                value = _first(out)
                if plumb.bloom:
                    value = value - _residual_arg(args, kwargs)
                x = _hidden(args, kwargs)
                store[("mlp", L)] = value.reshape(x.shape) * m

            hooks.append((layer.mlp, "post", mlp_write))
        else:

            def mlp_write(module, args, kwargs, out, L=L):
                store[("mlp", L)] = out.reshape(store[("pre", L)].shape) * m

            hooks.append((layer.fc2, "post", mlp_write))
    hooks.append((plumb.final_norm, "pre", _store_input(store, ("final", -1))))
    return hooks


def _store_input(store: dict, key: Any) -> Callable[..., None]:
    def keep(module, args, kwargs):
        store[key] = _hidden(args, kwargs)

    return keep


def capture(plumb: Plumbing, prompts: Prompts, tokens: torch.Tensor, hooks=()) -> dict:
    """Every write and input of :func:`write_hooks` in one forward of ``tokens`` (also
    ``("metric", -1)``); ``("mlp_in", L)``: the residual the MLP branch reads."""
    store: dict[tuple[str, int], torch.Tensor] = {}
    with torch.no_grad():
        store[("metric", -1)] = metric(plumb, prompts, tokens, [*write_hooks(plumb, store), *hooks])
    for layer in plumb.layers:
        if layer is not None:
            L = layer.index
            pre = store[("pre", L)]
            store[("mlp_in", L)] = pre if plumb.parallel else pre + store[("attn", L)]
    return store


def replace_head(layer: Layer, plumb: Plumbing, head: int, value: torch.Tensor | None) -> Hook:
    """A pre-hook on ``layer``'s output projection that sets head ``head``'s ``z`` columns
    to ``value`` (``[batch, pos, d_head]``; None: zero)."""
    cols = slice(head * plumb.d_head, (head + 1) * plumb.d_head)

    def hook(module, args, kwargs):
        z = args[0].clone()
        z[..., cols] = 0 if value is None else value
        return (z, *args[1:]), kwargs

    return (layer.o_proj, "pre", hook)


def head_write_change(
    plumb: Plumbing, prompts: Prompts, tokens: torch.Tensor, layer: int, head: int, value
) -> torch.Tensor:
    """The change of layer ``layer``'s attention write when only head ``head``'s ``z`` is set
    to ``value`` (None: zero), everything before it as in the run of ``tokens``."""
    base = capture(plumb, prompts, tokens)
    hook = replace_head(plumb.layers[layer], plumb, head, value)
    changed = capture(plumb, prompts, tokens, [hook])
    return changed[("attn", layer)] - base[("attn", layer)]


def head_z(store: dict, plumb: Plumbing, layer: int, head: int) -> torch.Tensor:
    """Head ``head``'s ``z`` in a :func:`capture` store, ``[batch, pos, d_head]``."""
    return store[("z", layer)][..., head * plumb.d_head : (head + 1) * plumb.d_head]


# ----------------------------------------------------------------------------- norms


def frozen_norm(module: Any, x: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """``module`` (a LayerNorm or RMSNorm of a Hugging Face model) applied to ``x`` with its
    scale (RMS or standard deviation per position) frozen at ``base``'s; checked to give the
    module's own output at ``x = base``."""
    kind = type(module).__name__
    eps = next(
        (
            float(getattr(module, name))
            for name in ("eps", "variance_epsilon", "variance_eps")
            if getattr(module, name, None) is not None
        ),
        1e-5,  # OLMo's parameter-free LayerNorm: F.layer_norm(..., eps=1e-5)
    )
    centred = kind == "LayerNorm" or kind in (
        "CohereLayerNorm",
        "Cohere2LayerNorm",
        "OlmoLayerNorm",
    )
    weight = getattr(module, "weight", None)
    bias = getattr(module, "bias", None)

    def centre(t: torch.Tensor) -> torch.Tensor:
        t = t.double()
        return t - t.mean(-1, keepdim=True) if centred else t

    scale = (centre(base).pow(2).mean(-1, keepdim=True) + eps).sqrt()
    if weight is None:
        gains = [torch.ones(x.shape[-1], dtype=torch.float64)]
    else:  # the weight itself, or an offset from 1 (Gemma's, Qwen3-Next's RMSNorm)
        gains = [weight.double(), 1.0 + weight.double()]

    def apply(t: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
        out = centre(t) / scale * gain
        return out if bias is None else out + bias.double()

    with torch.no_grad():
        own = module(base).double()
    for gain in gains:
        if (apply(base, gain) - own).abs().max().item() <= 1e-4:
            return apply(x, gain).to(x.dtype)
    raise AssertionError(f"frozen_norm does not reproduce {kind}")


# ----------------------------------------------------------------------------- edges


@dataclass(frozen=True)
class Reader:
    """A reader input: ``kind`` ``"q"``, ``"k"``, ``"v"`` (head ``head`` of ``layer``; a
    key/value head for k and v), ``"mlp"`` (``layer``'s MLP) or ``"logits"``."""

    kind: str
    layer: int = -1
    head: int = -1


def _projection_hook(
    plumb: Plumbing,
    reader: Reader,
    compute: Callable[[torch.Tensor], torch.Tensor],
    busy: list[bool],
) -> list[Hook]:
    """Hooks that give ``reader``'s query/key/value columns the projection of
    ``compute(x)`` (``x``: the layer's input in this forward): its rebuilt input. ``busy``
    is set while the hook calls the norm and projection itself (the hooks of every reader
    sharing them skip those calls)."""
    layer = plumb.layers[reader.layer]
    seen: dict[str, torch.Tensor] = {}
    proj = layer.projections[reader.kind]
    cols = plumb.columns(reader.kind, reader.head)

    def pre(module, args, kwargs):
        seen["x"] = _hidden(args, kwargs)

    def post(module, args, kwargs, out):
        if busy:
            return None
        new_input = compute(seen["x"])
        busy.append(True)
        try:
            normed = new_input if layer.in_norm is None else layer.in_norm(new_input)
            projected = proj(normed)
        finally:
            busy.pop()
        out = out.clone()
        out[..., cols] = projected[..., cols]
        return out

    return [(layer.module, "pre", pre), (proj, "post", post)]


def _mlp_hook(
    plumb: Plumbing, layer_index: int, compute: Callable[[torch.Tensor], torch.Tensor]
) -> list[Hook]:
    """Hooks that give layer ``layer_index``'s MLP branch the input ``compute(x)``, ``x``
    the residual it reads in this forward (resid_mid, or the layer input when parallel)."""
    layer = plumb.layers[layer_index]
    seen: dict[str, torch.Tensor] = {}
    if plumb.name in SHARED_NORM:  # the MLP reads ln1(x): recompute it from the input

        def pre_layer(module, args, kwargs):
            seen["x"] = _hidden(args, kwargs)

        def pre_mlp(module, args, kwargs):
            return _with_hidden(args, kwargs, layer.in_norm(compute(seen["x"])))

        return [(layer.module, "pre", pre_layer), (layer.mlp, "pre", pre_mlp)]
    entry = layer.mlp_norm if layer.mlp_norm is not None else layer.mlp

    def pre_entry(module, args, kwargs):
        x = _hidden(args, kwargs)  # OPT flattens the tokens: [batch * pos, d_model]
        return _with_hidden(args, kwargs, compute(x.reshape(shape)).reshape(x.shape))

    shape = (*plumb.extra["batch_pos"], -1)

    return [(entry, "pre", pre_entry)]


def _final_hook(plumb: Plumbing, compute: Callable[[torch.Tensor], torch.Tensor]) -> list[Hook]:
    def pre(module, args, kwargs):
        return _with_hidden(args, kwargs, compute(_hidden(args, kwargs)))

    return [(plumb.final_norm, "pre", pre)]


def reader_hooks(
    plumb: Plumbing, reader: Reader, compute: Callable[[torch.Tensor], torch.Tensor]
) -> list[Hook]:
    """Hooks that make ``reader`` read ``compute(x)`` instead of the residual ``x`` it reads."""
    if reader.kind in ("q", "k", "v"):
        return _projection_hook(plumb, reader, compute, [])
    if reader.kind == "mlp":
        return _mlp_hook(plumb, reader.layer, compute)
    return _final_hook(plumb, compute)


def edge_metric(
    plumb: Plumbing,
    prompts: Prompts,
    tokens: torch.Tensor,
    reader: Reader,
    delta: torch.Tensor,
    t: torch.Tensor,
) -> torch.Tensor:
    """The metric of ``tokens`` with only ``reader``'s input moved by ``t * delta``."""
    plumb.extra["batch_pos"] = tuple(tokens.shape)
    hooks = reader_hooks(plumb, reader, lambda x: x + t * delta.to(x))
    return metric(plumb, prompts, tokens, hooks)


# ----------------------------------------------------------------------------- senders


def sender_change(
    plumb: Plumbing, prompts: Prompts, tokens: torch.Tensor, base: dict, other: dict, sender
) -> torch.Tensor:
    """A writer's change from the ``base`` run (of ``tokens``) to the ``other``
    (:func:`capture` stores): ``"embed"``; ``("head", L, h)``: the attention write's change
    when only head ``h``'s z takes the other run's value, the others at the base run's;
    ``("mlp", L)``."""
    if sender == "embed":
        first = next(layer.index for layer in plumb.layers if layer is not None)
        return other[("pre", first)] - base[("pre", first)]
    if sender[0] == "mlp":
        return other[("mlp", sender[1])] - base[("mlp", sender[1])]
    _, L, h = sender
    value = head_z(other, plumb, L, h)
    changed = capture(plumb, prompts, tokens, [replace_head(plumb.layers[L], plumb, h, value)])
    return changed[("attn", L)] - base[("attn", L)]


# ----------------------------------------------------------------------------- circuits


def circuit_metric(
    plumb: Plumbing,
    prompts: Prompts,
    clean: dict,
    corrupted: dict,
    kept: dict[Reader, set[Any]],
) -> torch.Tensor:
    """The clean run with every reader's input rebuilt: the corrupted run's residual at the
    reader plus, for each kept edge ``u -> reader``, the sender's live change from its
    corrupted output (``kept[reader]``: senders ``"embed"``, ``("head", L, h)``,
    ``("mlp", L)``). A layer's heads reach a reader through the layer's attention write
    computed from the mixed ``z`` (the kept heads live, the others the corrupted run's)."""
    live: dict[tuple[str, int], torch.Tensor] = {}
    plumb.extra["batch_pos"] = tuple(prompts.clean.shape)
    hooks = write_hooks(plumb, live)
    busy: list[bool] = []
    m = plumb.multiplier
    H, d = plumb.n_heads, plumb.d_head

    def attention_write(layer: Layer, z: torch.Tensor) -> torch.Tensor:
        busy.append(True)
        try:
            out = layer.o_proj(z)
            if layer.post_attn_norm is not None:
                out = layer.post_attn_norm(out)
        finally:
            busy.pop()
        return out * m

    def rebuilt(reader: Reader, start: torch.Tensor) -> torch.Tensor:
        senders = kept.get(reader, set())
        total = start.clone()
        if "embed" in senders:
            first = next(layer.index for layer in plumb.layers if layer is not None)
            total = total + live[("pre", first)] - corrupted[("pre", first)]
        last = reader.layer if reader.kind != "logits" else len(plumb.layers)
        for layer in plumb.layers:
            if layer is None:
                continue
            L = layer.index
            heads_visible = last > L or (
                reader.kind == "mlp" and reader.layer == L and not plumb.parallel
            )
            if heads_visible:
                heads = [h for h in range(H) if ("head", L, h) in senders]
                if heads:
                    z = corrupted[("z", L)].clone()
                    for h in heads:
                        z[..., h * d : (h + 1) * d] = live[("z", L)][..., h * d : (h + 1) * d]
                    total = total + attention_write(layer, z) - corrupted[("attn", L)]
            if last > L and ("mlp", L) in senders:
                total = total + live[("mlp", L)] - corrupted[("mlp", L)]
        return total

    for layer in plumb.layers:
        if layer is None:
            continue
        L = layer.index
        for kind, count in (("q", H), ("k", plumb.n_kv), ("v", plumb.n_kv)):
            for head in range(count):
                reader = Reader(kind, L, head)
                hooks += _projection_hook(
                    plumb,
                    reader,
                    lambda x, reader=reader, L=L: rebuilt(reader, corrupted[("pre", L)]),
                    busy,
                )
        reader = Reader("mlp", L)
        hooks += _mlp_hook(
            plumb, L, lambda x, reader=reader, L=L: rebuilt(reader, corrupted[("mlp_in", L)])
        )
    reader = Reader("logits")
    hooks += _final_hook(plumb, lambda x: rebuilt(reader, corrupted[("final", -1)]))
    # the write captures must not see the attention writes computed for the readers
    hooks = [_guard(hook, busy) for hook in hooks]
    with torch.no_grad():
        return metric(plumb, prompts, prompts.clean, hooks)


def _guard(hook: Hook, busy: list[bool]) -> Hook:
    module, kind, fn = hook

    def guarded(*args):
        if busy:
            return None
        return fn(*args)

    return (module, kind, guarded)
