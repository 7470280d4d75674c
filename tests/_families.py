"""The family harness: a tiny random model of every family transformer-lens 4.3's bridge loads
from a small config offline, plain Hugging Face references, and the architecture table.

Each family is a tiny random Hugging Face model (a few layers so that local and global layer
types both occur, 4 query heads, grouped-query attention where the family has it, a window or
chunk of :data:`WINDOW` keys, d_model 32), saved once per test session with the zoo's tokenizer
and booted with ``TransformerBridge.boot_transformers(dir)`` offline; the in-memory Hugging Face
model (eager attention) is kept beside the bridge as the reference (the bridge loads its own
copy from disk, so the two share no module).

>>> fam = family("mistral")
>>> fam.bridge, fam.hf                         # TransformerBridge, Hugging Face model (eager)
>>> fam.tokens, fam.real                       # [2, 13] prompts, the second right-padded
>>> attentions, masks = reference_rows(fam)    # per layer [batch, head, query, key], [b, q, k]

References use Hugging Face only (eager attention, ``output_attentions=True``, forward
pre-hooks capturing each attention module's own ``attention_mask`` argument, autograd): no
interv code runs inside them.

The architecture table (docs/architectures.md): a *column* is a check ``fn(fam)`` that returns
when interv's numbers equal the reference ("exact") and raises :class:`~interv.IntervError`
when interv refuses the family (the refusal's one line is the cell's reason); any other
failure fails the test. Each test module registers its columns with :func:`column` and
parametrizes its tests with :func:`cells`; :func:`record` compares a cell's outcome with the
committed table and fails on a difference, or, with ``INTERV_WRITE_ARCHITECTURES=1``, writes
the outcome into the table. Another module (``tests/test_families_writes.py``) adds columns
without editing this one.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from interv.errors import IntervError

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "architectures.md"
TOKENIZER = ROOT / "interv" / "zoo" / "data" / "induction-2l"
REWRITE = os.environ.get("INTERV_WRITE_ARCHITECTURES") == "1"
WINDOW = 4
"""Sliding-window and chunk size of every family that has one (keys, query included)."""
N_POS = 13
VOCAB = 64
BOS, PAD = 0, 1

_COMMON = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "num_attention_heads": 4,
    "num_hidden_layers": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
    "pad_token_id": PAD,
    "bos_token_id": BOS,
    "eos_token_id": BOS,
}
_GQA = {**_COMMON, "num_key_value_heads": 2}


def _configs() -> dict[str, Callable[[], Any]]:
    import transformers as hf

    two = {"vocab_size": VOCAB, "pad_token_id": PAD, "bos_token_id": BOS, "eos_token_id": BOS}
    return {
        "gpt2": lambda: hf.GPT2Config(n_layer=2, n_head=4, n_embd=32, n_positions=64, **two),
        "gpt_neo": lambda: hf.GPTNeoConfig(
            num_layers=2,
            attention_types=[[["global", "local"], 1]],
            window_size=WINDOW,
            num_heads=4,
            hidden_size=32,
            max_position_embeddings=64,
            **two,
        ),
        "gpt_neox": lambda: hf.GPTNeoXConfig(
            num_hidden_layers=2,
            num_attention_heads=4,
            hidden_size=32,
            intermediate_size=64,
            max_position_embeddings=64,
            **two,
        ),
        "gptj": lambda: hf.GPTJConfig(
            n_layer=2, n_head=4, n_embd=32, n_positions=64, rotary_dim=4, **two
        ),
        "opt": lambda: hf.OPTConfig(
            num_hidden_layers=2,
            num_attention_heads=4,
            hidden_size=32,
            ffn_dim=64,
            max_position_embeddings=64,
            word_embed_proj_dim=32,
            **two,
        ),
        "bloom": lambda: hf.BloomConfig(n_layer=2, n_head=4, hidden_size=32, **two),
        "llama": lambda: hf.LlamaConfig(**_GQA),
        "mistral": lambda: hf.MistralConfig(**_GQA, sliding_window=WINDOW),
        "mixtral": lambda: hf.MixtralConfig(
            **_GQA, sliding_window=WINDOW, num_local_experts=4, num_experts_per_tok=2
        ),
        "qwen2": lambda: hf.Qwen2Config(
            **_GQA, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=2
        ),
        "qwen3": lambda: hf.Qwen3Config(**_GQA, head_dim=8),
        "qwen3_next": lambda: hf.Qwen3NextConfig(
            **{**_GQA, "num_hidden_layers": 2},
            head_dim=8,
            layer_types=["linear_attention", "full_attention"],
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=16,
        ),
        "gemma": lambda: hf.GemmaConfig(**_GQA, head_dim=8),
        "gemma2": lambda: hf.Gemma2Config(**_GQA, head_dim=8, sliding_window=WINDOW),
        "gemma3": lambda: hf.Gemma3TextConfig(
            **_GQA,
            head_dim=8,
            sliding_window=WINDOW,
            layer_types=["sliding_attention"] * 3 + ["full_attention"],
        ),
        "olmo": lambda: hf.OlmoConfig(**_COMMON),
        "olmo2": lambda: hf.Olmo2Config(**_COMMON),
        "olmo3": lambda: hf.Olmo3Config(**_COMMON, sliding_window=WINDOW),
        "phi": lambda: hf.PhiConfig(**_COMMON),
        "phi3": lambda: hf.Phi3Config(**_GQA, sliding_window=WINDOW),
        "cohere": lambda: hf.CohereConfig(**_GQA),
        "cohere2": lambda: hf.Cohere2Config(**_GQA, sliding_window=WINDOW),
        "granite": lambda: hf.GraniteConfig(
            **_GQA,
            residual_multiplier=0.5,
            logits_scaling=4.0,
            embedding_multiplier=2.0,
            attention_multiplier=0.25,
        ),
        "stablelm": lambda: hf.StableLmConfig(**_GQA),
        "starcoder2": lambda: hf.Starcoder2Config(**_GQA, sliding_window=WINDOW),
        "smollm3": lambda: hf.SmolLM3Config(**_GQA),
        "exaone4": lambda: hf.Exaone4Config(
            **_GQA,
            head_dim=8,
            sliding_window=WINDOW,
            layer_types=["sliding_attention"] * 3 + ["full_attention"],
        ),
        "gpt_oss": lambda: hf.GptOssConfig(
            **_GQA, head_dim=8, sliding_window=WINDOW, num_local_experts=4, num_experts_per_tok=2
        ),
        "llama4": lambda: hf.Llama4TextConfig(
            **_GQA,
            head_dim=8,
            attention_chunk_size=WINDOW,
            intermediate_size_mlp=64,
            num_local_experts=2,
        ),
        "bert": lambda: hf.BertConfig(**_COMMON),
        "roberta": lambda: hf.RobertaConfig(**_COMMON),
    }


ENCODERS = ("bert", "roberta")
FAMILIES: tuple[str, ...] = (
    "gpt2",
    "gpt_neo",
    "gpt_neox",
    "gptj",
    "opt",
    "bloom",
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "qwen3_next",
    "gemma",
    "gemma2",
    "gemma3",
    "olmo",
    "olmo2",
    "olmo3",
    "phi",
    "phi3",
    "cohere",
    "cohere2",
    "granite",
    "stablelm",
    "starcoder2",
    "smollm3",
    "exaone4",
    "gpt_oss",
    "llama4",
    "bert",
    "roberta",
)
"""Every family of the matrix, in the table's order."""


# ----------------------------------------------------------------------------- building


@dataclass(frozen=True, eq=False)
class Family:
    """One family's tiny model, booted, with its reference and prompts.

    Attributes:
        name: the family (a key of :data:`FAMILIES`).
        bridge: the ``TransformerBridge`` booted offline from ``directory`` (eval mode).
        hf: the Hugging Face model the directory was saved from (eager attention, eval).
        directory: the saved model directory (with the zoo's tokenizer).
        tokens: ``[2, 13]`` int64 prompts: BOS then 12 random tokens; the second prompt has
            9 real tokens and 4 right-padding tokens.
        real: ``[2, 13]`` bool, True at real tokens.
    """

    name: str
    bridge: Any
    hf: Any
    directory: Path
    tokens: torch.Tensor
    real: torch.Tensor

    @property
    def encoder(self) -> bool:
        return self.name in ENCODERS

    def left_padded(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The same two prompts with the second one left-padded instead."""
        tokens, real = self.tokens.clone(), self.real.clone()
        n = int(real[1].sum())
        tokens[1] = torch.cat([torch.full((N_POS - n,), PAD), self.tokens[1, :n]])
        real[1] = torch.arange(N_POS) >= N_POS - n
        return tokens, real


_BUILT: dict[str, Family] = {}
_ROOT_DIR: list[Path] = []


def _tmp_root() -> Path:
    if not _ROOT_DIR:
        path = Path(tempfile.mkdtemp(prefix="interv-families-"))
        atexit.register(shutil.rmtree, path, ignore_errors=True)
        _ROOT_DIR.append(path)
    return _ROOT_DIR[0]


def save_model(hf: Any, name: str) -> Path:
    """Save the Hugging Face model ``hf`` with the zoo's tokenizer into this session's
    temporary directory ``<tmp>/<name>`` (for ``TransformerBridge.boot_transformers``)."""
    import transformers

    directory = _tmp_root() / name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        hf.save_pretrained(directory)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / file, directory / file)
    return directory


def prompts() -> tuple[torch.Tensor, torch.Tensor]:
    """``[2, 13]`` tokens (BOS first, ids 2..63) and their real mask (second prompt: 9 real)."""
    generator = torch.Generator().manual_seed(29)
    tokens = torch.randint(2, VOCAB, (2, N_POS), generator=generator)
    tokens[:, 0] = BOS
    real = torch.ones(2, N_POS, dtype=torch.bool)
    real[1, 9:] = False
    tokens[1, 9:] = PAD
    return tokens, real


def family(name: str) -> Family:
    """The tiny model of family ``name``, built and booted once per test session."""
    if name not in _BUILT:
        _BUILT[name] = build(name)
    return _BUILT[name]


def build(
    name: str,
    edit: Callable[[Any], None] | None = None,
    tag: str = "",
    configure: Callable[[Any], None] | None = None,
) -> Family:
    """A fresh tiny model of family ``name`` (not cached): ``configure(config)`` runs on its
    Hugging Face config (e.g. a longer ``max_position_embeddings``), ``edit(hf_model)`` on the
    random Hugging Face model before it is saved and booted (e.g. to zero the queries);
    ``tag`` names its directory apart from the shared one."""
    import transformers
    from transformer_lens.model_bridge import TransformerBridge

    config = _configs()[name]()
    if configure is not None:
        configure(config)
    auto = (
        transformers.AutoModelForMaskedLM if name in ENCODERS else transformers.AutoModelForCausalLM
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        hf = auto.from_config(config, attn_implementation="eager").eval()
    if edit is not None:
        with torch.no_grad():
            edit(hf)
    directory = save_model(hf, name + tag)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bridge = TransformerBridge.boot_transformers(str(directory), device="cpu").eval()
    tokens, real = prompts()
    return Family(name, bridge, hf, directory, tokens, real)


# ----------------------------------------------------------------------------- references


def _attention_modules(hf: Any) -> list[tuple[int, Any]]:
    """``(layer, module)`` of every self-attention module of ``hf``, in layer order."""
    found = []
    for name, module in hf.named_modules():
        match = re.search(r"\.(\d+)\.(self_attn|self_attention|attention|attn)$", name)
        if match and not name.endswith(".attention.self"):
            found.append((int(match.group(1)), module))
    found.sort(key=lambda pair: pair[0])
    return found


def _mask_kwarg(args: tuple, kwargs: dict) -> Any:
    if "attention_mask" in kwargs:
        return kwargs["attention_mask"]
    return args[1] if len(args) > 1 and isinstance(args[1], torch.Tensor) else None


def reference_rows(
    fam: Family, tokens: torch.Tensor | None = None, real: torch.Tensor | None = None
) -> tuple[list[torch.Tensor | None], list[torch.Tensor | None]]:
    """Hugging Face's own attention rows and masks, per layer.

    Returns ``(attentions, masks)``: per layer ``[batch, head, query, key]`` float32 weights
    (``output_attentions=True``, eager) and the ``[batch, query, key]`` bool mask the layer's
    module itself applied (its ``attention_mask`` argument, finite entries admitted, AND
    GPT-Neo's local-attention buffer, which GPT-Neo applies inside the module); None for a
    layer without softmax attention (a hybrid's linear layers).
    """
    tokens = fam.tokens if tokens is None else tokens
    real = fam.real if real is None else real
    modules = _attention_modules(fam.hf)
    n_layers = fam.bridge.cfg.n_layers
    n_pos = tokens.shape[1]
    captured: dict[int, Any] = {}
    handles = []
    for layer, module in modules:

        def grab(module: Any, args: tuple, kwargs: dict, layer: int = layer) -> None:
            captured[layer] = _mask_kwarg(args, kwargs)

        handles.append(module.register_forward_pre_hook(grab, with_kwargs=True))
    try:
        with torch.no_grad():
            out = fam.hf(input_ids=tokens, attention_mask=real.long(), output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    by_layer = dict(modules)
    attentions: list[torch.Tensor | None] = [None] * n_layers
    masks: list[torch.Tensor | None] = [None] * n_layers
    weights = [a for a in out.attentions if a is not None]
    for index, layer in enumerate(sorted(by_layer)):
        attentions[layer] = weights[index].float()
        mask = captured.get(layer)
        if mask is None:
            admitted = torch.ones(tokens.shape[0], n_pos, n_pos, dtype=torch.bool)
        elif mask.dtype == torch.bool:
            admitted = mask[:, 0].expand(tokens.shape[0], n_pos, n_pos).clone()
        else:
            admitted = (
                (mask[:, 0] > torch.finfo(mask.dtype).min / 2)
                .expand(tokens.shape[0], n_pos, n_pos)
                .clone()
            )
        inner = getattr(by_layer[layer], "attention", by_layer[layer])  # GPT-Neo's wrapper
        bias = getattr(inner, "bias", None)
        if fam.name == "gpt_neo" and isinstance(bias, torch.Tensor):
            admitted &= bias[0, 0, :n_pos, :n_pos].bool()
        masks[layer] = admitted
    return attentions, masks


def off_row_sink_layers(fam: Family) -> set[int]:
    """Layers whose Hugging Face attention module has a learned ``sinks`` logit (gpt-oss)."""
    return {
        layer
        for layer, module in _attention_modules(fam.hf)
        if isinstance(getattr(module, "sinks", None), torch.Tensor)
    }


def reference_concentration(
    attentions: list[torch.Tensor | None],
    masks: list[torch.Tensor | None],
    real: torch.Tensor,
    sink: int = 0,
    deficit_as_key: set[int] = frozenset(),
) -> dict[str, torch.Tensor]:
    """Concentration numbers from Hugging Face's rows and masks in plain torch, float64.

    Returns ``[batch, layer, head, query]`` tensors ``entropy``, ``normalized_entropy``,
    ``sink_mass``, ``content_entropy``, ``content_normalized_entropy`` and ``[batch, layer,
    query]`` ``n_available_keys``; NaN at padding queries and where a number is undefined.
    Sink: key ``sink`` of each prompt (prompts start at position 0 here). At the layers in
    ``deficit_as_key`` the row's deficit ``1 - sum(a)`` is appended as one more key, admitted
    and in the sink set.
    """
    layers = [i for i, a in enumerate(attentions) if a is not None]
    out: dict[str, list[torch.Tensor]] = {
        key: []
        for key in (
            "entropy",
            "normalized_entropy",
            "sink_mass",
            "content_entropy",
            "content_normalized_entropy",
            "n_available_keys",
        )
    }
    for layer in layers:
        a = attentions[layer].double()
        m = masks[layer][:, None].expand(a.shape)  # [b, h, q, k]
        a = torch.where(m, a, 0.0)
        in_sink = torch.zeros_like(m)
        in_sink[..., sink] = m[..., sink]
        if layer in deficit_as_key:
            deficit = (1 - a.sum(-1, keepdim=True)).clamp(min=0)
            a = torch.cat([a, deficit], dim=-1)
            m = torch.cat([m, torch.ones_like(m[..., :1])], dim=-1)
            in_sink = torch.cat([in_sink, torch.ones_like(in_sink[..., :1])], dim=-1)
        n = m.sum(-1).double()  # [b, h, q]
        plogp = torch.where(a > 0, a * a.log(), 0.0)
        h = -plogp.sum(-1)
        s = torch.where(in_sink, a, 0.0).sum(-1)
        c = torch.where(in_sink, 0.0, a)
        c_mass = c.sum(-1, keepdim=True)
        q = c / torch.where(c_mass > 0, c_mass, 1.0)
        hq = -torch.where(q > 0, q * q.log(), 0.0).sum(-1)
        hq = torch.where(c_mass[..., 0] > 0, hq, torch.nan)
        n_content = n - in_sink.sum(-1)
        out["entropy"].append(h)
        out["normalized_entropy"].append(torch.where(n > 1, h / n.log(), torch.nan))
        out["sink_mass"].append(s)
        out["content_entropy"].append(hq)
        out["content_normalized_entropy"].append(
            torch.where(n_content > 1, hq / n_content.clamp(min=2).log(), torch.nan)
        )
        out["n_available_keys"].append(n[:, 0])
    query_real = real[:, None, None, :]
    result = {}
    for key, values in out.items():
        stacked = torch.stack(values, dim=1)  # [b, layer, (head,) q]
        if key == "n_available_keys":
            result[key] = torch.where(real[:, None, :], stacked, 0.0).long()
        else:
            result[key] = torch.where(query_real, stacked, torch.nan)
    return result


# ----------------------------------------------------------------------------- the table

_COLUMNS: dict[str, Callable[[Family], None]] = {}
_WHAT: dict[str, str] = {}


def column(name: str, what: str) -> Callable[[Callable[[Family], None]], Callable[[Family], None]]:
    """Register ``fn(fam)`` as the check behind column ``name`` of the architecture table;
    ``what`` says in one line what it compares (printed under the table).

    ``fn`` returns when interv's numbers equal the reference (cell "exact"), raises
    :class:`~interv.IntervError` when interv refuses the family (cell "refused", with the
    error's one line as the reason), and fails the test on any other error.
    """

    def register(fn: Callable[[Family], None]) -> Callable[[Family], None]:
        _COLUMNS[name] = fn
        _WHAT[name] = what
        return fn

    return register


def cells(*names: str) -> list[Any]:
    """``pytest.param(family, column)`` for every family and each of the columns ``names``."""
    import pytest

    return [pytest.param(fam, name, id=f"{fam}-{name}") for name in names for fam in FAMILIES]


def outcome(fam: Family, name: str) -> str:
    """Run column ``name``'s check on ``fam``: ``"exact"`` or ``"refused: <one line>"``."""
    try:
        _COLUMNS[name](fam)
    except IntervError as error:
        message = str(error)
        if "\n" in message:
            raise AssertionError(f"a refusal must be one line; got {message!r}") from error
        return f"refused: {message}"
    return "exact"


def record(family_name: str, name: str) -> str:
    """Run the cell (``family_name`` x column ``name``) and check it against the committed
    table: fails when the outcome differs from docs/architectures.md (with
    ``INTERV_WRITE_ARCHITECTURES=1`` the table is rewritten with the outcome instead)."""
    found = outcome(family(family_name), name)
    table, what = read_table()
    if REWRITE:
        table.setdefault(name, {})[family_name] = found
        what[name] = _WHAT[name]
        write_table(table, what)
        return found
    if what.get(name) != _WHAT[name]:
        raise AssertionError(
            f"docs/architectures.md describes column {name!r} as {what.get(name)!r}, the check "
            f"as {_WHAT[name]!r}; rerun with INTERV_WRITE_ARCHITECTURES=1"
        )
    committed = table.get(name, {}).get(family_name)
    if committed != found:
        raise AssertionError(
            f"docs/architectures.md says {family_name} x {name} is {committed!r}, the check "
            f"finds {found!r}; rerun with INTERV_WRITE_ARCHITECTURES=1 to regenerate the table"
        )
    return found


_HEADER = """# Architectures: what interv computes exactly, family by family

Generated by the family matrix (tests/test_families.py and the tests/test_families_*.py
modules; `INTERV_WRITE_ARCHITECTURES=1 python -m pytest tests/test_families*.py` rewrites it):
never edit it by hand. Each family is a tiny random Hugging Face model (4 query heads,
grouped-query attention where the family has it, a sliding window or chunk of 4 keys, 13-token
prompts and a padded batch) booted through transformer-lens's bridge. **exact**: interv's
numbers equal the plain Hugging Face reference (eager attention, hooks, autograd; no interv
code in it); **refused**: interv refuses the family in one line, before any work, quoted
below.
"""


def read_table() -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """The committed table as ``{column: {family: outcome}}`` (the grid's "exact" cells and
    the listed refusals) and ``{column: what it compares}``."""
    table: dict[str, dict[str, str]] = {}
    what: dict[str, str] = {}
    if not TABLE.exists():
        return table, what
    names: list[str] = []
    for line in TABLE.read_text().splitlines():
        described = re.match(r"^- \*\*([^*]+)\*\*: (.*)$", line)
        if described:
            what[described.group(1)] = described.group(2)
            continue
        refusal = re.match(r"^- `([^`]+)` x `([^`]+)`: (refused: .*)$", line)
        if refusal:
            fam, name, found = refusal.groups()
            table.setdefault(name, {})[fam] = found
            continue
        cells_ = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| family |"):
            names = cells_[1:]
            for name in names:
                table.setdefault(name, {})
        elif line.startswith("| ") and names and cells_[0] in FAMILIES:
            for name, cell in zip(names, cells_[1:], strict=True):
                if cell == "exact":
                    table[name][cells_[0]] = "exact"
    return table, what


def write_table(table: dict[str, dict[str, str]], what: dict[str, str]) -> None:
    """Render ``table`` to docs/architectures.md: the grid, what each column compares, then
    every refusal's one line."""
    names = list(table)
    families = [fam for fam in FAMILIES if any(fam in table[name] for name in names)]
    lines = [_HEADER, "| family | " + " | ".join(names) + " |"]
    lines.append("|---" * (len(names) + 1) + "|")
    for fam in families:
        row = []
        for name in names:
            found = table[name].get(fam, "")
            row.append("exact" if found == "exact" else "refused" if found else "")
        lines.append(f"| {fam} | " + " | ".join(row) + " |")
    lines += ["", "## What each column compares", ""]
    lines += [f"- **{name}**: {what.get(name, '')}" for name in names]
    lines += ["", "## Refusals", ""]
    for name in names:
        for fam in families:
            if table[name].get(fam, "exact") != "exact":
                lines.append(f"- `{fam}` x `{name}`: {table[name][fam]}")
    TABLE.write_text("\n".join(lines) + "\n")
