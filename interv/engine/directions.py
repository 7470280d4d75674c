"""Interventions along directions: steering vectors, projections, subspace patches.

These three kinds are written only against the public intervention protocol
(:mod:`interv.engine.protocol`, :class:`~interv.engine.sites.Site`), the way a user
would write their own:

- :class:`AddVector` [``add_vector``]: a vector added to a residual-stream site at chosen
  positions (activation steering), ``x <- x + scale * v``.
- :class:`ProjectOut` [``project_out``]: the component of a head's output ``z`` or of a
  residual-stream site along a set of directions removed, ``x <- x - P x``.
- :class:`SubspacePatch` [``subspace_patch``]: only the component of a site inside a
  subspace taken from the other run, ``x <- x + P (x_source - x)``; the orthogonal
  complement keeps the base run's value.

``P = Q Q^T`` is the orthogonal projector onto the span of the given directions (``Q``
an orthonormal basis of their span, from a QR decomposition); the directions must be
linearly independent. Vectors and directions are stored as tuples of floats, so the
interventions stay frozen, comparable values; their sentences name them by ``name`` and
state their norm or dimension.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv._checks import as_finite, as_positions
from interv._fields import convert, converted
from interv.engine.protocol import (
    EditContext,
    Intervention,
    Patching,
    Read,
    patch_runs,
    register,
)
from interv.engine.sites import RESIDUAL_COMPONENTS, Site, at_positions
from interv.errors import IntervError

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = ["AddVector", "ProjectOut", "SubspacePatch"]

_DIRECTION_COMPONENTS = ("z", *RESIDUAL_COMPONENTS)


def _vector(values: Any, what: str) -> tuple[float, ...]:
    """A non-empty finite 1-D vector as a tuple of floats."""
    tensor = torch.as_tensor(values, dtype=torch.float64)
    if tensor.ndim != 1 or tensor.numel() == 0:
        raise IntervError(f"{what} must be a non-empty 1-D vector; got shape {tuple(tensor.shape)}")
    if not bool(tensor.isfinite().all()):
        raise IntervError(f"{what} must be finite; got NaN or infinite entries")
    return tuple(tensor.tolist())


def _basis(values: Any, what: str) -> tuple[tuple[float, ...], ...]:
    """One direction ``[d]`` or several ``[k, d]``, as a tuple of k finite rows."""
    tensor = torch.as_tensor(values, dtype=torch.float64)
    rows = tensor[None] if tensor.ndim == 1 else tensor
    if rows.ndim != 2 or rows.numel() == 0:
        raise IntervError(
            f"{what} must be one direction [d] or several [k, d]; got shape {tuple(tensor.shape)}"
        )
    return tuple(_vector(row, f"{what} row {i}") for i, row in enumerate(rows))


def _orthonormal(basis: tuple[tuple[float, ...], ...], what: str) -> torch.Tensor:
    """``Q`` ``[d, k]``: an orthonormal basis of the span of the rows of ``basis``."""
    matrix = torch.tensor(basis, dtype=torch.float64).T  # [d, k]
    if matrix.shape[1] > matrix.shape[0]:
        raise IntervError(
            f"{what} has {matrix.shape[1]} directions of dimension {matrix.shape[0]}; at most "
            f"{matrix.shape[0]} can be independent"
        )
    q, r = torch.linalg.qr(matrix)
    diagonal = r.diagonal().abs()
    if bool((diagonal <= 1e-10 * max(float(diagonal.max()), 1e-300)).any()):
        raise IntervError(f"{what}: the directions must be linearly independent (and nonzero)")
    return q


def _check_site_choice(component: str, head: int | None, kind: str) -> None:
    if component not in _DIRECTION_COMPONENTS:
        raise IntervError(
            f"{kind}: unknown component {component!r}; choose one of {_DIRECTION_COMPONENTS}"
        )
    if (component == "z") != (head is not None):
        raise IntervError(
            f"{kind}: component 'z' needs a head, the residual-stream components take none; "
            f"got component {component!r} with head={head!r}"
        )


def _named(noun: str, name: str) -> str:
    """``noun`` followed by the user's name for it in quotes, when there is one."""
    return f"{noun} {name!r}" if name else noun


def _check_width(site: Site, width: int, cfg: Any, what: str) -> None:
    expected = cfg.d_head if site.component == "z" else cfg.d_model
    if width != expected:
        unit = "d_head" if site.component == "z" else "d_model"
        raise IntervError(f"{what} has {width} entries, but {site.phrase} has {unit} = {expected}")


class _AlongBasis:
    """What :class:`ProjectOut` and :class:`SubspacePatch` share: a site and a basis.

    The kind has the fields ``component``, ``layer``, ``basis``, ``head`` and
    ``positions``.
    """

    def _normalize(self, kind: str) -> None:
        _check_site_choice(self.component, self.head, kind)
        convert(self)
        _orthonormal(self.basis, "basis")
        Site(self.component, self.layer, self.head)

    def edits(self) -> tuple[Site, ...]:
        return (Site(self.component, self.layer, self.head, self.positions),)

    def check(self, cfg: Any, n_positions: int) -> None:
        super().check(cfg, n_positions)
        _check_width(self.edits()[0], len(self.basis[0]), cfg, "each basis direction")

    def _frame(self, activation: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """(position index, ``Q`` ``[d, k]`` float32, the selected rows in float32)."""
        q = _orthonormal(self.basis, "basis").to(activation.device, torch.float32)
        index = slice(None) if self.positions is None else list(self.positions)
        return index, q, activation[:, index].float()

    def _span(self) -> str:
        k = len(self.basis)
        return "a direction" if k == 1 else f"a {k}-dimensional subspace"

    def _site_phrase(self) -> str:
        return Site(self.component, self.layer, self.head).phrase


@register("add_vector")
@dataclass(frozen=True)
class AddVector(Intervention):
    """A vector added to the residual stream at chosen positions (steering), in the clean run.

    ``x <- x + scale * vector`` at ``positions`` of ``component`` in block ``layer``.

    Attributes:
        layer: the block.
        vector: ``[d_model]`` the direction added (residual-stream units).
        component: a residual-stream component (default ``"resid_pre"``).
        scale: the multiplier of ``vector`` (finite).
        positions: positions it is added at; None = all positions.
        name: how the sentence names the vector (optional).
    """

    layer: int
    vector: tuple[float, ...] = converted(_vector)
    component: str = "resid_pre"
    scale: float = converted(as_finite, default=1.0)
    positions: tuple[int, ...] | None = converted(as_positions, default=None)
    name: str = ""
    family = "steering"

    def __post_init__(self) -> None:
        if self.component not in RESIDUAL_COMPONENTS:
            raise IntervError(
                f"AddVector: unknown component {self.component!r}; choose one of "
                f"{RESIDUAL_COMPONENTS}"
            )
        convert(self)
        Site(self.component, self.layer)

    def edits(self) -> tuple[Site, ...]:
        return (Site(self.component, self.layer, positions=self.positions),)

    def check(self, cfg: Any, n_positions: int) -> None:
        super().check(cfg, n_positions)
        _check_width(self.edits()[0], len(self.vector), cfg, "vector")

    def edit(self, site: Site, activation: torch.Tensor, context: EditContext) -> torch.Tensor:
        added = self.scale * torch.tensor(self.vector, device=activation.device)
        index = slice(None) if self.positions is None else list(self.positions)
        activation[:, index] += added.to(activation.dtype)
        return activation

    def describe(self, task: TokenizedPairs | None = None) -> str:
        norm = math.sqrt(sum(x * x for x in self.vector))
        return (
            f"steering: {_named('a vector', self.name)} (norm {norm:.4g}) times "
            f"{self.scale:g} added to the "
            f"{Site(self.component, self.layer).phrase} {at_positions(self.positions)} "
            "of the clean run"
        )


@register("project_out")
@dataclass(frozen=True)
class ProjectOut(_AlongBasis, Intervention):
    """The component along chosen directions removed from a site, in the clean run.

    ``x <- x - P x`` with ``P`` the orthogonal projector onto the span of ``basis``, at
    ``positions`` of a head's output ``z`` (``[d_head]`` directions) or of a
    residual-stream component (``[d_model]`` directions).

    Attributes:
        component: ``"z"`` or a residual-stream component.
        layer: the block.
        basis: one direction ``[d]`` or several ``[k, d]`` (linearly independent).
        head: the query head, for ``"z"`` only.
        positions: positions it acts at; None = all positions.
        name: how the sentence names the direction(s) (optional).
    """

    component: str
    layer: int
    basis: tuple[tuple[float, ...], ...] = converted(_basis)
    head: int | None = None
    positions: tuple[int, ...] | None = converted(as_positions, default=None)
    name: str = ""
    family = "projection"

    def __post_init__(self) -> None:
        self._normalize("ProjectOut")

    def edit(self, site: Site, activation: torch.Tensor, context: EditContext) -> torch.Tensor:
        index, q, x = self._frame(activation)
        activation[:, index] = (x - (x @ q) @ q.T).to(activation.dtype)
        return activation

    def describe(self, task: TokenizedPairs | None = None) -> str:
        return (
            f"{self._site_phrase()} with its component along {_named(self._span(), self.name)} "
            f"projected out {at_positions(self.positions)} of the clean run"
        )


@register("subspace_patch")
@dataclass(frozen=True)
class SubspacePatch(_AlongBasis, Patching, Intervention):
    """Only a subspace of a site copied from the other run of each pair.

    ``x <- x + P (x_source - x)``: inside the span of ``basis`` the site takes the source
    run's value, outside it keeps the base run's. ``"denoise"``: clean into corrupted
    (is the subspace sufficient?); ``"noise"``: corrupted into clean (is it necessary?).
    A basis spanning the whole space equals the full :class:`ActivationPatch`.

    Attributes:
        component: ``"z"`` or a residual-stream component.
        layer: the block.
        basis: one direction ``[d]`` or several ``[k, d]`` (linearly independent).
        head: the query head, for ``"z"`` only.
        direction: ``"denoise"`` or ``"noise"``.
        positions: positions patched; None = all positions.
        name: how the sentence names the subspace (optional).
    """

    component: str
    layer: int
    basis: tuple[tuple[float, ...], ...] = converted(_basis)
    head: int | None = None
    direction: str = "denoise"
    positions: tuple[int, ...] | None = converted(as_positions, default=None)
    name: str = ""
    family = "patch"
    reports_recovery = True

    def __post_init__(self) -> None:
        patch_runs(self.direction)
        self._normalize("SubspacePatch")

    def reads(self) -> tuple[Read, ...]:
        return (Read(self.source_run, Site(self.component, self.layer, self.head)),)

    def edit(self, site: Site, activation: torch.Tensor, context: EditContext) -> torch.Tensor:
        index, q, x = self._frame(activation)
        source = context.read(self.source_run, site)[:, index].float()
        activation[:, index] = (x + ((source - x) @ q) @ q.T).to(activation.dtype)
        return activation

    def describe(self, task: TokenizedPairs | None = None) -> str:
        k = len(self.basis)
        return (
            f"{self.direction_noun}: {_named(f'a {k}-dimensional subspace', self.name)} of "
            f"{self._site_phrase()} from the {self.source_run} run patched into the "
            f"{self.base_run} run {at_positions(self.positions)}, its orthogonal complement "
            f"kept ({self.question()})"
        )
