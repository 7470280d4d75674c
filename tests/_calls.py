"""Counting module calls: the evidence that a refusal came before any forward."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


@contextlib.contextmanager
def counting_calls(model: Any = None) -> Iterator[list[str]]:
    """Every call of a torch module (of one of ``model``'s modules, where given), counted by
    its class name (a forward of any kind calls some)."""
    ours = None if model is None else {id(module) for module in model.modules()}
    calls: list[str] = []

    def count(module: Any, args: Any) -> None:
        if ours is None or id(module) in ours:
            calls.append(type(module).__name__)

    handle = torch.nn.modules.module.register_module_forward_pre_hook(count)
    try:
        yield calls
    finally:
        handle.remove()
